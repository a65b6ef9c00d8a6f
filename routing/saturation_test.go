package routing_test

import (
	"math"
	"testing"
	"time"

	. "github.com/usher-llm/usher/routing"
)

func TestSaturation(t *testing.T) {
	r := mustNew(t, Options{})
	if got := r.Saturation(SaturationOptions{}); got != 1 {
		t.Fatalf("no backends: level %v, want 1", got)
	}
	f := fleet(2, t0)
	f[0].Queued, f[0].KVUtilization = 2, 0.2  // waiting 2/4 = 0.5 (kv 0.21)
	f[1].Queued, f[1].KVUtilization = 0, 0.76 // kv 0.76/0.95 = 0.8
	mustUpdate(t, r, f)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if got := r.Saturation(SaturationOptions{}); !near(got, 0.5) {
		t.Fatalf("least saturated level %v, want 0.5", got)
	}
	if got := r.Saturation(SaturationOptions{Mean: true}); !near(got, 0.65) {
		t.Fatalf("mean level %v, want 0.65", got)
	}
	// Requests sent since the scrape count as waiting until the server shows them running: six
	// picks on b0 (which reports nothing running) make it 6/4 waiting, past the scraped 2.
	var held []Result
	for range 6 {
		p, err := r.Pick(&Request{Exclude: []BackendID{1}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	if got := r.Saturation(SaturationOptions{Mean: true}); !near(got, (1.5+0.8)/2) {
		t.Fatalf("after a burst: mean level %v, want %v", got, (1.5+0.8)/2)
	}
	// The server now reports 5 of them running: 1 waiting, fewer than the 2 it queues.
	f[0].Running = 5
	mustUpdate(t, r, f)
	if got := r.Saturation(SaturationOptions{Queue: 2}); !near(got, 0.8) {
		t.Fatalf("Queue 2: level %v, want min(2/2, 0.8) = 0.8", got)
	}
	for _, p := range held {
		p.Done(DoneInfo{})
	}
	// Stale signals: judged by the router's own count (0 here), unhealthy backends skipped.
	old := fleet(2, t0.Add(-time.Hour))
	old[0].Queued, old[0].KVUtilization = 100, 1
	old[1].Health = Unhealthy
	mustUpdate(t, r, old)
	if got := r.Saturation(SaturationOptions{}); got != 0 {
		t.Fatalf("stale backend with nothing in flight: level %v, want 0", got)
	}
	old[0].Health = Unhealthy
	mustUpdate(t, r, old)
	if got := r.Saturation(SaturationOptions{}); got != 1 {
		t.Fatalf("no healthy backend: level %v, want 1", got)
	}
}

func TestSaturationAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	r := mustNew(t, Options{})
	mustUpdate(t, r, fleet(100, t0))
	if n := testing.AllocsPerRun(100, func() { r.Saturation(SaturationOptions{}) }); n != 0 {
		t.Fatalf("Saturation allocates %v times", n)
	}
}
