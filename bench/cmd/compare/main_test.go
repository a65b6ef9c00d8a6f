package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/usher-llm/usher/bench"
)

// TestParseSlowdowns checks -slow's syntax.
func TestParseSlowdowns(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []bench.Slowdown
		ok   bool
	}{
		{"", nil, true},
		{"1:3@300s", []bench.Slowdown{{Server: 1, Factor: 3, At: 300 * time.Second}}, true},
		{"1:3@300s, 1:1@10m", []bench.Slowdown{{Server: 1, Factor: 3, At: 300 * time.Second}, {Server: 1, Factor: 1, At: 10 * time.Minute}}, true},
		{"1:3", nil, false},
		{"1@300s", nil, false},
		{"x:3@300s", nil, false},
		{"1:0@300s", nil, false},
		{"1:3@-1s", nil, false},
	} {
		got, err := parseSlowdowns(tc.in)
		if (err == nil) != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseSlowdowns(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
