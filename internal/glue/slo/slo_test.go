package slo

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
)

var errInvalid = errors.New("invalid")

// A trusted header only loosens its band's target and sets nothing where the band has none;
// an untrusted one is ignored whatever it holds.
func TestTargets(t *testing.T) {
	c, err := New(map[int]routing.Latency{1: {TTFT: 500 * time.Millisecond}}, true, 0, 4, errInvalid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		band        int
		ttft, tpot  string
		want        routing.Latency
		wantInvalid bool
	}{
		{1, "", "", routing.Latency{TTFT: 500 * time.Millisecond}, false},
		{1, "100", "", routing.Latency{TTFT: 500 * time.Millisecond}, false}, // tighter: ignored
		{1, "2000", "", routing.Latency{TTFT: 2 * time.Second}, false},       // looser: taken
		{1, "", "30", routing.Latency{TTFT: 500 * time.Millisecond}, false},  // no TPOT target to loosen
		{0, "2000", "", routing.Latency{}, false},                            // no target in band 0
		{1, "x", "", routing.Latency{}, true},
		{1, "3600001", "", routing.Latency{}, true},
	} {
		hd := http.Header{}
		if tc.ttft != "" {
			hd.Set(TTFTHeader, tc.ttft)
		}
		if tc.tpot != "" {
			hd.Set(TPOTHeader, tc.tpot)
		}
		got, e := c.Targets(hd, tc.band)
		if (e != nil) != tc.wantInvalid || (e == nil && got != tc.want) {
			t.Errorf("band %d, headers %q/%q: %+v, %v; want %+v (invalid %v)", tc.band, tc.ttft, tc.tpot, got, e, tc.want, tc.wantInvalid)
		}
		if e != nil && e.Param != TTFTHeader {
			t.Errorf("error names %q, want %q", e.Param, TTFTHeader)
		}
	}
	untrusted := c
	untrusted.Trusted = false
	hd := http.Header{}
	hd.Set(TTFTHeader, "not a number")
	if got, e := untrusted.Targets(hd, 1); e != nil || got.TTFT != 500*time.Millisecond {
		t.Errorf("untrusted: %+v, %v; want the band's target", got, e)
	}
}

func TestNewAndParseFlag(t *testing.T) {
	for _, bad := range []struct {
		by    map[int]routing.Latency
		shed  float64
		bands int
	}{{map[int]routing.Latency{4: {}}, 0, 4}, {map[int]routing.Latency{0: {TTFT: -1}}, 0, 4}, {nil, 0.5, 4}, {nil, 1001, 4}} {
		if _, err := New(bad.by, false, bad.shed, bad.bands, errInvalid); !errors.Is(err, errInvalid) {
			t.Errorf("New(%v, shed %v): %v, want invalid", bad.by, bad.shed, err)
		}
	}
	band, lat, err := ParseFlag("2,ttft=500ms,tpot=40ms", 4, errInvalid)
	if err != nil || band != 2 || lat != (routing.Latency{TTFT: 500 * time.Millisecond, TPOT: 40 * time.Millisecond}) {
		t.Errorf("ParseFlag: %d %+v %v", band, lat, err)
	}
	for _, bad := range []string{"4,ttft=1s", "x,ttft=1s", "1,ttft=-1s", "1,ttft=fast", "1,color=red"} {
		if _, _, err := ParseFlag(bad, 4, errInvalid); !errors.Is(err, errInvalid) {
			t.Errorf("ParseFlag(%q): %v, want invalid", bad, err)
		}
	}
}
