package simfleet

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
)

// TestSlowdown times, in real time at the client, the first token of requests alike (each its
// own 200-odd-token prompt and one output token, prefilled in one step of ~20 ms) before and after SetSlowdown(3):
// the slowed TTFT is ~3× the modelled one, and SetSlowdown(1) restores it. The minimum of a
// few requests is compared, since timer overshoot and scheduling only ever add time.
func TestSlowdown(t *testing.T) {
	p := engine.Demo
	p.StepBase = 10 * time.Millisecond
	p.PrefillPerToken = 50 * time.Microsecond
	p.DecodePerSeq = time.Millisecond
	s, err := New(Options{Engine: engine.Options{Profile: p}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()

	filler := strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)
	n := 0
	ttft := func() time.Duration { // the fastest of three requests' TTFT
		var ds []time.Duration
		for range 3 {
			n++
			// A prompt of its own (its first block differs, so no block is a cache hit), of
			// the same length as the others.
			prompt := fmt.Sprintf("request %03d: %s", n, filler)
			start := time.Now()
			// One token: the request ends with its prefill step, so no step of it is left
			// running when the next one comes.
			resp := post(t, hs.URL+"/v1/chat/completions", chatBody(s.Model(), 1, true, prompt))
			var first time.Duration
			for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
				if line := sc.Text(); first == 0 && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
					first = time.Since(start)
				}
			}
			if first == 0 {
				t.Fatal("no token in the stream")
			}
			ds = append(ds, first)
			resp.Body.Close()
		}
		return slices.Min(ds)
	}

	if got := s.Slowdown(); got != 1 {
		t.Fatalf("Slowdown() = %v before SetSlowdown, want 1", got)
	}
	base := ttft()
	if err := s.SetSlowdown(3); err != nil {
		t.Fatal(err)
	}
	slowed := ttft()
	if err := s.SetSlowdown(1); err != nil {
		t.Fatal(err)
	}
	restored := ttft()
	t.Logf("TTFT %v, slowed 3× %v, restored %v", base, slowed, restored)
	if r := float64(slowed) / float64(base); r < 2.4 || r > 3.6 {
		t.Errorf("slowed TTFT %v is %.2f× the modelled %v, want ~3×", slowed, r, base)
	}
	if r := float64(restored) / float64(base); r < 0.7 || r > 1.3 {
		t.Errorf("restored TTFT %v is %.2f× the modelled %v, want ~1×", restored, r, base)
	}

	for _, f := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := s.SetSlowdown(f); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SetSlowdown(%v) = %v, want ErrInvalidOptions", f, err)
		}
	}
	if got := s.Slowdown(); got != 1 {
		t.Errorf("Slowdown() = %v after invalid factors, want 1 (unchanged)", got)
	}
}
