package fairness_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// gittinsRun is a real queue with one slot under a Gittins policy, recording dispatches.
type gittinsRun struct {
	t     *testing.T
	clk   *flowcontroltest.FakeClock
	q     *flowcontrol.Queue
	order []flowcontrol.FlowID
	held  []flowcontrol.Ticket
}

func newGittinsRun(t *testing.T, o fairness.GittinsOptions) *gittinsRun {
	g := &gittinsRun{t: t, clk: new(flowcontroltest.FakeClock)}
	g.clk.Set(simStart)
	p, err := fairness.NewGittins(o)
	if err != nil {
		t.Fatal(err)
	}
	g.q, err = flowcontrol.New(flowcontrol.Options{
		Policy: p, MaxInFlight: 1, Clock: g.clk, TTL: 24 * time.Hour,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			if r.Outcome == flowcontrol.Dispatched {
				g.order = append(g.order, r.Request.Flow)
				g.held = append(g.held, r.Ticket)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// turn is one request of 100 prompt and 100 output tokens (300 weighted tokens) served
// through the free slot in 100 ms.
func (g *gittinsRun) turn(id flowcontrol.FlowID) {
	tk, err := g.q.TryAdmit(flowcontrol.Request{Flow: id, PromptTokens: 100})
	if err != nil {
		g.t.Fatal(err)
	}
	g.clk.Advance(100 * time.Millisecond)
	tk.Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 100})
}

func (g *gittinsRun) enqueue(id flowcontrol.FlowID) {
	if _, err := g.q.Enqueue(flowcontrol.Request{Flow: id, PromptTokens: 100}); err != nil {
		g.t.Fatal(err)
	}
}

// TestGittinsLearnsOrderThroughQueue trains a real queue on sessions of one shape, then lets
// an old session (5 turns served) and a newcomer wait behind a busy slot, keyed while the
// prior (FCFS) still holds. The sessions trained end only after both wait (they are idle past
// Memory.Forget by the next event), so the table is rebuilt while they wait and they must be
// re-keyed. Heavy-tailed sessions (most end after one turn, the rest run 10 to 40): the
// newcomer is likelier to finish soon, and goes first although it came second. Sessions of a
// typical length (6 to 8 turns): the old session is near its end and goes first although it
// came second. With the prior kept (MinSessions out of reach) the order is FCFS.
func TestGittinsLearnsOrderThroughQueue(t *testing.T) {
	heavy := func(r *rand.Rand) int {
		if r.Float64() < 0.7 {
			return 1
		}
		return 10 + r.IntN(31)
	}
	typical := func(r *rand.Rand) int { return 6 + r.IntN(3) }
	for _, c := range []struct {
		name        string
		turns       func(*rand.Rand) int
		minSessions int
		first       flowcontrol.FlowID // enqueued first
		second      flowcontrol.FlowID
		want        flowcontrol.FlowID
	}{
		{"heavy-tailed", heavy, 0, "old", "new", "new"},
		{"typical-length", typical, 0, "new", "old", "old"},
		{"heavy-tailed/prior", heavy, 1 << 30, "old", "new", "old"},
		{"typical-length/prior", typical, 1 << 30, "new", "old", "new"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGittinsRun(t, fairness.GittinsOptions{MinSessions: c.minSessions, Memory: fairness.Memory{Forget: time.Hour}})
			r := rand.New(rand.NewPCG(3, 4))
			for i := range 400 {
				for range c.turns(r) {
					g.turn(flowcontrol.FlowID(fmt.Sprintf("train-%d", i)))
				}
			}
			for range 5 {
				g.turn("old")
			}
			g.order = g.order[:0]
			g.enqueue("blocker") // dispatched at once: the slot is now busy
			g.enqueue(c.first)
			g.enqueue(c.second)
			g.clk.Advance(2 * time.Hour) // every trained session is now idle past Forget
			g.enqueue("poke")            // the event that forgets them: they end, the table is rebuilt
			g.held[len(g.held)-1].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 100})
			if len(g.order) != 2 || g.order[0] != "blocker" {
				t.Fatalf("dispatched %v, want the blocker then one waiter", g.order)
			}
			if got := g.order[1]; got != c.want {
				t.Errorf("%s went first, want %s (%s enqueued first)", got, c.want, c.first)
			}
		})
	}
}

// TestGittinsComposesWithBoundedWait checks that NewBoundedWait wraps a Gittins policy, and
// that GittinsOptions.Wait bounds a newcomer's wait behind sessions the index prefers.
func TestGittinsComposesWithBoundedWait(t *testing.T) {
	p, err := fairness.NewGittins(fairness.GittinsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Second, Inner: p}); err != nil {
		t.Errorf("NewBoundedWait over NewGittins: %v", err)
	}
	withWait, _ := fairness.NewGittins(fairness.GittinsOptions{Wait: 10 * time.Second})
	if _, err := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Second, Inner: withWait}); err == nil {
		t.Errorf("NewBoundedWait over a Gittins with its own Wait: no error, want one (two bounds)")
	}
	if _, err := fairness.NewHierarchy(fairness.HierarchyOptions{Sessions: p}); err == nil {
		t.Errorf("NewHierarchy with Gittins sessions: no error, want one (its keys change at rebuilds)")
	}
	for _, o := range []fairness.GittinsOptions{{Wait: -1}, {Headroom: time.Second}, {Wait: time.Second, Headroom: time.Second}, {HalfLife: -1}} {
		if _, err := fairness.NewGittins(o); err == nil {
			t.Errorf("NewGittins(%+v): no error", o)
		}
	}

	// Typical-length sessions learned; then a newcomer waits while old sessions near their
	// end keep arriving: without a bound it waits for all of them, with Wait 10 s it is
	// promoted and served within the bound.
	typical := func(r *rand.Rand) int { return 6 + r.IntN(3) }
	for _, wait := range []time.Duration{0, 10 * time.Second} {
		g := newGittinsRun(t, fairness.GittinsOptions{Wait: wait, Headroom: wait / 10, MinSessions: 100, RebuildEvery: 16, Memory: fairness.Memory{Forget: 5 * time.Minute}})
		r := rand.New(rand.NewPCG(5, 6))
		for i := range 300 {
			for range typical(r) {
				g.turn(flowcontrol.FlowID(fmt.Sprintf("train-%d", i)))
			}
			g.clk.Advance(6 * time.Minute) // the session ends (idle past Forget) at the next event
		}
		for i := range 40 { // deep sessions at turn 6, near their end
			for range 5 {
				g.turn(flowcontrol.FlowID(fmt.Sprintf("deep-%d", 39-i)))
			}
		}
		g.order = g.order[:0]
		g.enqueue("blocker")
		g.enqueue("new")
		start := g.clk.Now()
		var served time.Duration
		for i := 0; served == 0 && i < 40; i++ {
			g.enqueue(flowcontrol.FlowID(fmt.Sprintf("deep-%d", i)))
			g.clk.Advance(time.Second)
			g.held[len(g.held)-1].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 100})
			if g.order[len(g.order)-1] == "new" {
				served = g.clk.Now().Sub(start)
			}
		}
		t.Logf("Wait %v: newcomer served after %v (0: not within 40 s)", wait, served)
		switch {
		case wait == 0 && served != 0 && served < 20*time.Second:
			t.Errorf("without a bound the newcomer was served after %v: the sessions near their end do not go first", served)
		case wait > 0 && (served == 0 || served > wait):
			t.Errorf("Wait %v: the newcomer was served after %v, want within the bound", wait, served)
		}
	}
}
