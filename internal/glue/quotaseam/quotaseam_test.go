package quotaseam

import (
	"reflect"
	"testing"
	"time"
)

func TestHeaders(t *testing.T) {
	arrival := time.Date(2026, 12, 7, 5, 50, 0, 300e6, time.UTC)
	g := Grant{Requests: Cap{Limit: 10, Remaining: 9, Reset: 6 * time.Minute}, Tokens: Cap{Limit: 1000, Remaining: 0, Reset: 20 * time.Millisecond},
		Output: Cap{Limit: 50, Remaining: 40, Reset: 1500 * time.Millisecond}}
	for _, tc := range []struct {
		name      string
		g         Grant
		anthropic bool
		want      map[string]string
	}{
		{"none", Grant{}, false, map[string]string{}},
		{"openai", g, false, map[string]string{
			"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "9", "x-ratelimit-reset-requests": "6m0s",
			"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20ms",
		}},
		{"anthropic", g, true, map[string]string{
			"anthropic-ratelimit-requests-limit": "10", "anthropic-ratelimit-requests-remaining": "9",
			"anthropic-ratelimit-requests-reset": "2026-12-07T05:56:01Z",
			"anthropic-ratelimit-tokens-limit":   "1000", "anthropic-ratelimit-tokens-remaining": "0",
			"anthropic-ratelimit-tokens-reset":        "2026-12-07T05:50:01Z",
			"anthropic-ratelimit-output-tokens-limit": "50", "anthropic-ratelimit-output-tokens-remaining": "40",
			"anthropic-ratelimit-output-tokens-reset": "2026-12-07T05:50:02Z",
		}},
	} {
		got := map[string]string{}
		Headers(&tc.g, tc.anthropic, arrival, func(k, v string) { got[k] = v })
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
