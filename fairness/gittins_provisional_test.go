package fairness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// provTurn drives one turn of flow id through core c's Observe at now: its dispatch, then its
// completion a second later; it returns the time of the completion.
func provTurn(c *gittins, id string, now time.Time, prompt, output int) time.Time {
	f := &flowcontrol.FlowState{ID: flowcontrol.FlowID(id), InFlight: 1}
	r := &flowcontrol.Request{Flow: f.ID, PromptTokens: prompt, Arrival: now}
	c.Observe(&flowcontrol.Event{Kind: flowcontrol.EventDispatch, Now: now, Flow: f, Request: r})
	now = now.Add(time.Second)
	f.InFlight = 0
	c.Observe(&flowcontrol.Event{Kind: flowcontrol.EventDone, Now: now, Flow: f, Request: r,
		Usage: flowcontrol.Usage{PromptTokens: prompt, OutputTokens: output}})
	return now
}

// provEnqueue tells core c that flow id queued a request at now (it is active again), which
// charges nothing.
func provEnqueue(c *gittins, id string, now time.Time) {
	f := &flowcontrol.FlowState{ID: flowcontrol.FlowID(id), Queued: 1}
	c.Observe(&flowcontrol.Event{Kind: flowcontrol.EventEnqueue, Now: now, Flow: f,
		Request: &flowcontrol.Request{Flow: f.ID, Arrival: now}})
}

func newProvCore(t *testing.T, o GittinsOptions) *gittins {
	t.Helper()
	c, err := newGittins(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGittinsProvisionalTakeBack: a session idle past the provisional limit is counted as
// ended at once; when it returns the end is taken back exactly (the model is the one before);
// when the table finally forgets it, it is counted once.
func TestGittinsProvisionalTakeBack(t *testing.T) {
	c := newProvCore(t, GittinsOptions{Memory: Memory{Forget: 80 * time.Second}}) // provisional: 4 × the median gap, 5 s to 80 s
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	provTurn(c, "a", t0, 1000, 500)
	provTurn(c, "b", t0, 100, 50)
	before := c.model
	bin := c.flows.get(flowRef{id: "a"}).reached - 1

	provEnqueue(c, "b", t0.Add(5*time.Second)) // a idle 4 s: not yet
	if got := c.model; got != before {
		t.Fatalf("a idle 4 s: model changed, ended %d, want %d", got.ended, before.ended)
	}
	provEnqueue(c, "b", t0.Add(20*time.Second)) // a idle 19 s: provisionally ended
	if got, want := c.model.ended, before.ended+1; got != want {
		t.Fatalf("a idle 19 s: ended %d, want %d", got, want)
	}
	if got, want := c.model.died[bin], before.died[bin]+1; got != want {
		t.Fatalf("a idle 19 s: died[%d] = %g, want %g", bin, got, want)
	}
	provEnqueue(c, "a", t0.Add(30*time.Second)) // a returns: taken back
	if got := c.model; got != before {
		t.Fatalf("a returned: model %+v, want %+v", got, before)
	}
	// a is served once more, then idles past the provisional limit and past Forget.
	end := provTurn(c, "a", t0.Add(31*time.Second), 1000, 500)
	provEnqueue(c, "b", end.Add(20*time.Second))
	if got, want := c.model.ended, before.ended+1; got != want {
		t.Fatalf("a idle again: ended %d, want %d", got, want)
	}
	provEnqueue(c, "b", end.Add(100*time.Second))
	if c.flows.get(flowRef{id: "a"}) != nil {
		t.Fatal("a idle past Forget: still remembered")
	}
	if got, want := c.model.ended, before.ended+1; got != want {
		t.Fatalf("a forgotten: ended %d, want %d (counted once)", got, want)
	}
}

// TestGittinsProvisionalReturns: sessions whose gaps between turns run past the provisional
// limit, and back, end up counted as a model that never counted them provisionally counts
// them (no fading, so that the order of the counts does not matter): each once, in the bin it
// ended in. The provisional ring reaches its size and stops allocating.
func TestGittinsProvisionalReturns(t *testing.T) {
	o := GittinsOptions{Memory: Memory{Forget: 80 * time.Second}}
	prov, ref := newProvCore(t, o), newProvCore(t, o)
	prov.model.halfLife, ref.model.halfLife = math.Inf(1), math.Inf(1) // every weight 1
	ref.provisional = math.MaxInt64                                    // never provisional: ends counted when forgotten
	r := rand.New(rand.NewPCG(45, 7))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type sess struct {
		id    string
		turns int
	}
	open := make([]sess, 8)
	n := 0
	for i := range open {
		n++
		open[i] = sess{fmt.Sprintf("s%d", n), 1 + r.IntN(6)}
	}
	for step := 0; step < 4000; step++ {
		i := r.IntN(len(open))
		s := &open[i]
		gap := time.Duration(r.IntN(3000)) * time.Millisecond
		if r.IntN(10) == 0 {
			gap = 15 * time.Second // every session idles past the provisional limit; some return
		}
		now = now.Add(gap)
		p, out := 1+r.IntN(4000), r.IntN(2000)
		provTurn(prov, s.id, now, p, out)
		now = provTurn(ref, s.id, now, p, out)
		if s.turns--; s.turns == 0 {
			n++
			*s = sess{fmt.Sprintf("s%d", n), 1 + r.IntN(6)}
		}
	}
	// Let every session be forgotten.
	now = now.Add(time.Hour)
	provEnqueue(prov, "last", now)
	provEnqueue(ref, "last", now)
	if prov.model.ended != ref.model.ended || prov.model.ended < 500 {
		t.Fatalf("ended %d, want %d (the reference's, ≥ 500)", prov.model.ended, ref.model.ended)
	}
	for b := range gBins {
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"entered", prov.model.entered[b], ref.model.entered[b]}, {"died", prov.model.died[b], ref.model.died[b]}} {
			if math.Abs(c.got-c.want) > 1e-9*max(1, c.want) {
				t.Errorf("%s[%d] = %g, want %g", c.name, b, c.got, c.want)
			}
		}
	}
	if prov.qLen != 0 {
		t.Errorf("ring holds %d entries after every session was forgotten", prov.qLen)
	}
	size := len(prov.idleQ)
	allocs := testing.AllocsPerRun(100, func() {
		now = now.Add(15 * time.Second)
		provTurn(prov, "s1", now, 100, 100)
	})
	if len(prov.idleQ) != size {
		t.Errorf("ring grew from %d to %d in steady state", size, len(prov.idleQ))
	}
	_ = allocs // the table's map may allocate for new flows; the ring is checked above
}

// TestGittinsProvisionalFloor: the provisional limit is at least Forget/16 while fewer than 64
// idle gaps are known, then four times their running median, however short against Forget.
func TestGittinsProvisionalFloor(t *testing.T) {
	forget := 10 * time.Minute
	c := newProvCore(t, GittinsOptions{Memory: Memory{Forget: forget}})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	floor, gap := int64(forget/gittinsProvisional), 2*time.Second // 4 × 2 s, well below 37.5 s
	if g := time.Duration(c.gap); g != 0 {
		t.Fatalf("running median %v before any gap", g)
	}
	for k := 1; k <= gittinsGapsKnown+1; k++ {
		now = provTurn(c, "a", now, 100, 10)
		now = now.Add(gap)
		provEnqueue(c, "a", now) // a returns after gap: one more gap known
		want := floor
		if k >= gittinsGapsKnown {
			want = int64(gittinsGaps * c.gap) // the running median, near 2 s
		}
		if got := c.provisional; got != want || (k >= gittinsGapsKnown && got >= floor/2) {
			t.Fatalf("after %d gaps of %v: provisional limit %v, want %v", k, gap, time.Duration(got), time.Duration(want))
		}
	}
}
