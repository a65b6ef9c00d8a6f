package saturation_test

import (
	"math"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/saturation"
)

func TestSaturation(t *testing.T) {
	r := routingtest.MustNew(t, routing.Options{})
	if got := saturation.Level(r, saturation.Options{}); got != 1 {
		t.Fatalf("no backends: level %v, want 1", got)
	}
	f := routingtest.Fleet(2, routingtest.T0)
	f[0].Queued, f[0].KVUtilization = 2, 0.2  // waiting 2/4 = 0.5 (kv 0.21)
	f[1].Queued, f[1].KVUtilization = 0, 0.76 // kv 0.76/0.95 = 0.8
	routingtest.MustUpdate(t, r, f)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if got := saturation.Level(r, saturation.Options{}); !near(got, 0.5) {
		t.Fatalf("least saturated level %v, want 0.5", got)
	}
	if got := saturation.Level(r, saturation.Options{Mean: true}); !near(got, 0.65) {
		t.Fatalf("mean level %v, want 0.65", got)
	}
	// Requests sent since the scrape count as waiting until the server shows them running: six
	// picks on b0 (which reports nothing running) make it 6/4 waiting, past the scraped 2.
	var held []routing.Result
	for range 6 {
		p, err := r.Pick(&routing.Request{Exclude: []routing.BackendID{1}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	if got := saturation.Level(r, saturation.Options{Mean: true}); !near(got, (1.5+0.8)/2) {
		t.Fatalf("after a burst: mean level %v, want %v", got, (1.5+0.8)/2)
	}
	// The server now reports 5 of them running: 1 waiting, fewer than the 2 it queues.
	f[0].Running = 5
	routingtest.MustUpdate(t, r, f)
	if got := saturation.Level(r, saturation.Options{Queue: 2}); !near(got, 0.8) {
		t.Fatalf("Queue 2: level %v, want min(2/2, 0.8) = 0.8", got)
	}
	for _, p := range held {
		p.Done(routing.DoneInfo{})
	}
	// Stale signals: judged by the router's own count (0 here), unhealthy backends skipped.
	old := routingtest.Fleet(2, routingtest.T0.Add(-time.Hour))
	old[0].Queued, old[0].KVUtilization = 100, 1
	old[1].Health = routing.Unhealthy
	routingtest.MustUpdate(t, r, old)
	if got := saturation.Level(r, saturation.Options{}); got != 0 {
		t.Fatalf("stale backend with nothing in flight: level %v, want 0", got)
	}
	old[0].Health = routing.Unhealthy
	routingtest.MustUpdate(t, r, old)
	if got := saturation.Level(r, saturation.Options{}); got != 1 {
		t.Fatalf("no healthy backend: level %v, want 1", got)
	}
}

func TestSaturationAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("allocation counts differ under the race detector")
	}
	r := routingtest.MustNew(t, routing.Options{})
	routingtest.MustUpdate(t, r, routingtest.Fleet(100, routingtest.T0))
	if n := testing.AllocsPerRun(100, func() { saturation.Level(r, saturation.Options{}) }); n != 0 {
		t.Fatalf("Saturation allocates %v times", n)
	}
}

// Level counts the peers' requests as waiting, like the router's own.
func TestLevelCountsPeers(t *testing.T) {
	r := routingtest.MustNew(t, routing.Options{})
	routingtest.MustUpdate(t, r, []routing.BackendState{{Name: "a", Health: routing.Healthy, UpdatedAt: routingtest.T0, Known: routing.SignalQueued | routing.SignalRunning}})
	if got := saturation.Level(r, saturation.Options{}); got != 0 {
		t.Fatalf("idle saturation %v", got)
	}
	peer.SetPeerLoads(r, []peer.Load{{Backend: "a", Requests: 2}})
	if got := saturation.Level(r, saturation.Options{}); got != 0.5 {
		t.Errorf("saturation with 2 peer requests = %v, want 2/4", got)
	}
	p, _ := r.Pick(&routing.Request{})
	defer p.Done(routing.DoneInfo{})
	p2, _ := r.Pick(&routing.Request{})
	defer p2.Done(routing.DoneInfo{})
	if got := saturation.Level(r, saturation.Options{}); got != 1 {
		t.Errorf("saturation with 2 own + 2 peer requests = %v, want 1", got)
	}
}
