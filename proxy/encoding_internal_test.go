package proxy

import (
	"net/http"
	"testing"
)

func TestContentCoding(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		status int // of the refusal; 0 for none
	}{
		{nil, "", 0},
		{[]string{""}, "", 0},
		{[]string{"identity"}, "", 0},
		{[]string{"gzip"}, "gzip", 0},
		{[]string{"x-gzip"}, "gzip", 0},
		{[]string{" GZip "}, "gzip", 0},
		{[]string{"deflate"}, "deflate", 0},
		{[]string{"identity, gzip"}, "gzip", 0},
		{[]string{"gzip", "identity"}, "gzip", 0},
		{[]string{"br"}, "", 415},
		{[]string{"zstd"}, "", 415},
		{[]string{"compress"}, "", 415},
		{[]string{"gzip, br"}, "", 415},
		{[]string{"gzip, deflate"}, "", 415},
		{[]string{"gzip", "gzip"}, "", 415},
	} {
		hd := http.Header{}
		for _, v := range tc.values {
			hd.Add("Content-Encoding", v)
		}
		got, err := contentCoding(hd)
		status := 0
		if err != nil {
			status = err.Status
		}
		if got != tc.want || status != tc.status {
			t.Errorf("contentCoding(%q) = %q, %d; want %q, %d", tc.values, got, status, tc.want, tc.status)
		}
	}
}
