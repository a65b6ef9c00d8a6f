package flowcontrol_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
)

// positionQueue returns a queue under policy p (a keyed Ranker) whose one slot is taken and
// whose rate is known (warmRate), and a function that reads back, from an estimate, how many
// requests of the band it counted ahead: with the clock still, EstimateWait(0) is (queued +
// ½) × the interval between dispatches, and an estimate without a class is (ahead + ½) × the
// same interval.
func positionQueue(t *testing.T, p flowcontrol.Policy) (*flowcontrol.Queue, time.Time, func(est time.Duration) int) {
	t.Helper()
	q, clk := newBareQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 1})
	warmRate(q, clk)
	if _, err := q.TryAdmit(flowcontrol.Request{Flow: "holder"}); err != nil {
		t.Fatal(err)
	}
	return q, clk.Now(), func(est time.Duration) int {
		all, ok := flowcontrol.EstimateBandWait(q, 0)
		if !ok {
			t.Fatal("rate unknown after warming up")
		}
		iv := float64(all) / (float64(q.Stats().Queued) + 0.5)
		return int(math.Round(float64(est)/iv - 0.5))
	}
}

// TestEstimateWaitPosition compares the requests EstimateWait counts ahead of a request
// under StrictPriority with a naive reference: every waiting request of every flow whose
// head comes before the flow the request would be in (head priority, then arrival, then
// enqueue order), plus the requests of its own flow if it joins behind that flow's head;
// or the whole band once more than 64 flows are ahead. 500 requests of random priority in
// 200 flows wait; each probe is a request of random priority in a random flow (or a new
// one).
func TestEstimateWaitPosition(t *testing.T) {
	q, now, aheadOf := positionQueue(t, fairness.StrictPriority())
	clk := 0 // the requests' arrivals, in µs from a second ago; the queue's clock stays still
	at := func(us int) time.Time { return now.Add(-time.Second + time.Duration(us)*time.Microsecond) }
	type req struct {
		prio, arrival, seq int
	}
	flows := map[flowcontrol.FlowID][]req{}
	rng := rand.New(rand.NewPCG(9, 9))
	const nflows, nreqs = 200, 500
	for i := range nreqs {
		f := flowcontrol.FlowID(fmt.Sprint("f", rng.IntN(nflows)))
		r := req{prio: rng.IntN(4), arrival: clk, seq: i}
		clk++
		if _, err := q.Enqueue(flowcontrol.Request{Flow: f, Priority: r.prio, Arrival: at(r.arrival)}); err != nil {
			t.Fatal(err)
		}
		flows[f] = append(flows[f], r)
	}
	// before reports whether a comes first among heads: higher priority, then arrival, then seq.
	before := func(a, b req) bool {
		return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.seq, b.seq)) < 0
	}
	head := func(rs []req) req {
		return slices.MinFunc(rs, func(a, b req) int {
			if before(a, b) {
				return -1
			}
			return 1
		})
	}
	exact, capped := 0, 0
	for probe := range 400 {
		f := flowcontrol.FlowID(fmt.Sprint("f", rng.IntN(nflows+20))) // some new flows
		r := req{prio: rng.IntN(4), arrival: clk, seq: nreqs + probe}
		own := flows[f]
		mine := r // the head r's flow would have
		joins := len(own) > 0 && !before(r, head(own))
		if joins {
			mine = head(own)
		}
		want, ahead := 0, 0
		if joins {
			want = len(own)
		}
		for g, rs := range flows {
			if g != f && before(head(rs), mine) {
				want += len(rs)
				ahead++
			}
		}
		if ahead > 64 {
			want = nreqs
			capped++
		} else {
			exact++
		}
		est, ok := q.EstimateWait(flowcontrol.Request{Flow: f, Priority: r.prio, Arrival: at(r.arrival)})
		if !ok {
			t.Fatal("estimate unknown")
		}
		if got := aheadOf(est); got != want {
			t.Errorf("probe %d (flow %s, priority %d, joins its flow %v, %d flows ahead): counted %d ahead, want %d", probe, f, r.prio, joins, ahead, got, want)
		}
	}
	t.Logf("%d probes counted exactly, %d past 64 flows ahead", exact, capped)
	if exact < 50 || capped < 50 {
		t.Errorf("%d exact and %d capped probes: the test covers both too thinly", exact, capped)
	}
}

// classPolicy is a test Ranker in two classes: flows named "vip…" (class 1) always go before
// the others (class 2), each class in arrival order, like turn-priority's later turns and
// newcomers. It has no Rank; rankedClassPolicy is the same order with one.
type classPolicy struct{}

func (classPolicy) tier(f flowcontrol.FlowID) int64 {
	if len(f) >= 3 && f[:3] == "vip" {
		return 0
	}
	return 1
}

func (p classPolicy) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tier: p.tier(r.Flow), Tie: r.Arrival.UnixNano()}
}

func (classPolicy) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

func (classPolicy) Observe(*flowcontrol.Event) {}

type rankedClassPolicy struct{ classPolicy }

func (p rankedClassPolicy) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	k := p.ItemKey(r, f, now)
	if f.Head != nil && f.HeadKey.Less(k) {
		k = f.HeadKey // the flow's key stays its head's
	}
	return flowcontrol.Rank{Key: k, Class: int(p.tier(r.Flow)) + 1}
}

// TestEarlyShedStarvedClass: a server that dispatches a request every 100 ms behind 4
// slots; class 1 arrives every 100 ms too, 50 ms after each dispatch, on top of a backlog of
// 3, so that class 1 always has requests waiting; class 2, which goes only when class 1 has
// nobody waiting, arrives at 2/s (Poisson) from 1 s to 50 s, with a 5 s TTL. Class 2 is never served, while
// few requests wait ahead of a new one: the band count, under a second of dispatches, never
// sheds one, and every class 2 request expires after waiting 5 s. With the policy a Ranker
// the class's rate — no dispatch in all the time it waited — shows it: once its backlog has
// lasted a few seconds, class 2 requests are refused on arrival (at least 85% of them;
// measured 91 of 102: the seven that arrive in the first three seconds of its backlog
// expire, and three later ones that arrive when none of their class waits, whose estimate is
// half the class's interval), while class 1 is never refused and is served exactly as
// before.
func TestEarlyShedStarvedClass(t *testing.T) {
	const ttl = 5 * time.Second
	var arr []simArrival
	for range 3 {
		arr = append(arr, simArrival{flow: "vip"})
	}
	for at := simCadence / 2; at < 60*time.Second; at += simCadence {
		arr = append(arr, simArrival{at: at, flow: "vip"})
	}
	for i, a := range poisson(12, 0, 2, func(time.Duration) float64 { return 2 }, 49*time.Second) {
		a.at += time.Second
		a.flow = flowcontrol.FlowID(fmt.Sprint("other-", i))
		arr = append(arr, a)
	}
	slices.SortStableFunc(arr, func(a, b simArrival) int { return cmp.Compare(a.at, b.at) })
	es := flowcontrol.EarlyShed{Enabled: true}
	plain := simulate(t, flowcontrol.Options{Policy: classPolicy{}, TTL: ttl, EarlyShed: es}, arr, 70*time.Second)
	ranked := simulate(t, flowcontrol.Options{Policy: rankedClassPolicy{}, TTL: ttl, EarlyShed: es}, arr, 70*time.Second)
	type tally struct{ dispatched, expired, shed int }
	count := func(run *simRun) (vip, other tally, vipWait time.Duration) {
		for i, so := range run.out {
			c := &other
			if arr[i].flow == "vip" {
				c = &vip
				vipWait = max(vipWait, so.wait)
			}
			switch so.outcome {
			case flowcontrol.Dispatched:
				c.dispatched++
			case flowcontrol.Expired:
				c.expired++
			case flowcontrol.RejectedWait:
				c.shed++
				if !so.atOnce {
					t.Errorf("request %d shed after waiting %v", i, so.wait)
				}
			}
		}
		return vip, other, vipWait
	}
	pv, po, pw := count(plain)
	rv, ro, rw := count(ranked)
	t.Logf("without Rank: class 1 %+v (longest wait %v), class 2 %+v", pv, pw, po)
	t.Logf("with Rank:    class 1 %+v (longest wait %v), class 2 %+v", rv, rw, ro)
	var late []time.Duration // arrivals of class 2 requests admitted with Rank that expired
	for i, so := range ranked.out {
		if arr[i].flow != "vip" && so.outcome == flowcontrol.Expired {
			late = append(late, so.arrival)
		}
	}
	t.Logf("with Rank, class 2 requests that expired arrived at %v", late)
	n2 := po.dispatched + po.expired + po.shed
	if po.shed != 0 || po.dispatched*50 > n2 {
		t.Errorf("without Rank class 2 %+v: want (nearly) every request expired (the scenario starves it)", po)
	}
	if ro.shed*20 < n2*17 || ro.dispatched < po.dispatched {
		t.Errorf("with Rank class 2 %+v of %d (without: %+v): want at least 85%% refused on arrival, and those served still served", ro, n2, po)
	}
	if pv.shed != 0 || rv != pv || rw != pw {
		t.Errorf("class 1 %+v, longest wait %v with Rank; %+v, %v without: want it never refused and served alike", rv, rw, pv, pw)
	}
}

// withinPolicy is rankedClassPolicy with Rank.Within set, as BoundedWait's promotion.
type withinPolicy struct {
	rankedClassPolicy
	within time.Duration
}

func (p withinPolicy) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	rk := p.rankedClassPolicy.Rank(r, f, now)
	rk.Within = p.within
	return rk
}

// TestEstimateWaitWithin: for 3 s a server dispatches 10 vip requests/s (class 1) while
// more keep waiting, and 5 requests of class 2 wait without ever being served; then a class
// 2 request's estimate is its class's: 5½ intervals of at least the 3 s its class waited,
// far above the 3.55 s the band count gives. Rank.Within caps it at the larger of what is
// left of Within and the band count, and a cap above the estimate changes nothing.
func TestEstimateWaitWithin(t *testing.T) {
	var uncapped time.Duration
	for _, c := range []struct {
		within, arrivedAgo time.Duration
		want               string // "uncapped", "band" (EstimateWait's) or a duration
	}{
		{0, 0, "uncapped"},
		{time.Hour, 0, "uncapped"},
		{5 * time.Second, 0, "5s"},
		{time.Second, 0, "band"},                           // the wait behind everything is longer
		{5 * time.Second, 2500 * time.Millisecond, "band"}, // 2.5 s of it is left
	} {
		q, clk := newBareQueue(t, flowcontrol.Options{Policy: withinPolicy{within: c.within}, MaxInFlight: 1})
		first, _ := q.Enqueue(flowcontrol.Request{Flow: "vip"}) // takes the slot
		fifo := []flowcontrol.Ticket{first}
		for range 5 {
			q.Enqueue(flowcontrol.Request{Flow: "other"})
		}
		for range 30 {
			for range 2 {
				tk, _ := q.Enqueue(flowcontrol.Request{Flow: "vip"})
				fifo = append(fifo, tk)
			}
			clk.Advance(100 * time.Millisecond)
			fifo[0].Done(flowcontrol.Usage{})
			fifo = fifo[1:]
		}
		band, ok := flowcontrol.EstimateBandWait(q, 0)
		if !ok {
			t.Fatal("rate unknown")
		}
		est, ok := q.EstimateWait(flowcontrol.Request{Flow: "other-new", Arrival: clk.Now().Add(-c.arrivedAgo)})
		if !ok {
			t.Fatalf("Within %v: estimate unknown", c.within)
		}
		if c.within == 0 {
			uncapped = est
			if est < 15*time.Second || est < 4*band {
				t.Errorf("class 2 estimate %v (band count %v), want at least 15 s: its class was not served", est, band)
			}
		}
		want := uncapped
		switch c.want {
		case "uncapped":
		case "band":
			want = band
		default:
			want, _ = time.ParseDuration(c.want)
		}
		if est != want {
			t.Errorf("Within %v, arrived %v ago: EstimateWait = %v, want %v (band count %v, uncapped %v)", c.within, c.arrivedAgo, est, want, band, uncapped)
		}
	}
}
