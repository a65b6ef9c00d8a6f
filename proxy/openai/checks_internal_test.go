package openai

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// FuzzShortFloat compares shortFloat with strconv.ParseFloat on every JSON number it takes.
func FuzzShortFloat(f *testing.F) {
	for _, s := range []string{"0", "-0", "0.7", "0.95", "-0.1", "1.5", "1234567", "123456789012345", "999999999999999",
		"0.000000000000001", "3.14159265358979", "1e3", "1234567890123456", "0.1234567890123456"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || !json.Valid([]byte(s)) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
			return
		}
		got, ok := shortFloat([]byte(s))
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("shortFloat(%q) = %v, ParseFloat = %v, %v", s, got, want, err)
		}
	})
}
