package fairness_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// The wait estimate (flowcontrol.Queue.EstimateWait) against the realised wait, per
// policy, on the scenario harness: multi-turn sessions in front of 8 slots.

const (
	eSlots = 8
	eEnd   = 900 * time.Second
)

// estimate is what the queue estimated for one request on its arrival.
type estimate struct {
	j        *job
	turn     int
	est, old time.Duration // EstimateWait(r), and the band count (see bandCounts)
	ok, okO  bool
}

// sessionLoad describes the sessions of runSessions.
type sessionLoad struct {
	seed uint64
	// rate returns the sessions started per second at offset t.
	rate     func(t time.Duration) float64
	peak     float64 // the largest rate
	maxTurns int     // turns per session: uniform in [1, maxTurns]
	ttl      time.Duration
}

// runSessions runs sessions through a queue with policy p: they start as a Poisson process,
// have a uniform number of turns, and each turn is submitted a think time (1–4 s) after the
// previous one completed; a turn that is shed or expires ends its session. A turn's
// service takes 2–6 s (8 slots: 2 requests/s on average) and its prompt grows with the
// turn. Every arrival's estimates are recorded just before it is enqueued.
func runSessions(t testing.TB, p flowcontrol.Policy, l sessionLoad) []estimate {
	s := newSimOptions(t, flowcontrol.Options{Policy: p, MaxInFlight: eSlots, TTL: l.ttl})
	rng := rand.New(rand.NewPCG(l.seed, 7))
	type session struct{ turn, turns int }
	sessions := map[flowcontrol.FlowID]*session{}
	turnJob := func(flow flowcontrol.FlowID, turn int) *job {
		return &job{
			flow: flow, class: fmt.Sprint(turn),
			prompt: flowcontrol.Tokens(1000 * turn), output: 200,
			service: 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))),
		}
	}
	n := 0
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() / l.peak * float64(time.Second))
		if at >= eEnd-2*l.ttl {
			break
		}
		if rng.Float64()*l.peak >= l.rate(at) {
			continue
		}
		flow := flowcontrol.FlowID(fmt.Sprintf("s%04d", n))
		n++
		sessions[flow] = &session{turn: 1, turns: 1 + rng.IntN(l.maxTurns)}
		s.submit(simStart.Add(at), turnJob(flow, 1))
	}
	s.onDone = func(s *sim, j *job) {
		ss := sessions[j.flow]
		if ss.turn++; ss.turn <= ss.turns {
			think := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
			s.submit(s.now().Add(think), turnJob(j.flow, ss.turn))
		}
	}
	var es []estimate
	s.arrive = func(s *sim, j *job, r flowcontrol.Request) {
		e := estimate{j: j, turn: sessions[j.flow].turn}
		e.est, e.ok = s.q.EstimateWait(r)
		es = append(es, e)
	}
	s.run(simStart.Add(eEnd))
	return es
}

// unranked hides a policy's Rank from the queue, which then estimates every request's wait
// behind its whole band: the band count. Rank changes nothing else (it must not change the
// policy's state, and only early shedding, off in runSessions, acts on it), so a run under
// unranked dispatches exactly as one under the policy.
type unranked struct{ flowcontrol.Policy }

// unrankedPicker is unranked for a FlowPicker.
type unrankedPicker struct {
	flowcontrol.Policy
	flowcontrol.FlowPicker
}

func unrank(p flowcontrol.Policy) flowcontrol.Policy {
	if fp, ok := p.(flowcontrol.FlowPicker); ok {
		return unrankedPicker{p, fp}
	}
	return unranked{p}
}

// bandCounts runs runSessions again under unrank(p) and records each arrival's estimate
// there, the band count, as es's old estimate. It fails t if the runs differ.
func bandCounts(t testing.TB, es []estimate, p flowcontrol.Policy, l sessionLoad) {
	band := runSessions(t, unrank(p), l)
	if len(band) != len(es) {
		t.Fatalf("%d arrivals under the band count, %d under the policy", len(band), len(es))
	}
	for i := range es {
		b, e := &band[i], &es[i]
		if b.j.flow != e.j.flow || !b.j.arrival.Equal(e.j.arrival) || !b.j.dispatched.Equal(e.j.dispatched) {
			t.Fatalf("arrival %d: %s at %v dispatched %v under the band count, %s at %v dispatched %v under the policy",
				i, b.j.flow, b.j.arrival, b.j.dispatched, e.j.flow, e.j.arrival, e.j.dispatched)
		}
		e.old, e.okO = b.est, b.ok
	}
}

// relErrors returns the relative errors |est − wait| / wait of the estimates of requests
// that were dispatched after waiting at least minWait and whose estimate was known, for
// the new estimate and the band count, over the turns selected by keep.
func relErrors(es []estimate, minWait time.Duration, keep func(e *estimate) bool) (errNew, errOld []float64) {
	for i := range es {
		e := &es[i]
		w := e.j.dispatched.Sub(e.j.arrival)
		if e.j.dispatched.IsZero() || w < minWait || !e.ok || !keep(e) {
			continue
		}
		errNew = append(errNew, math.Abs(float64(e.est-w))/float64(w))
		errOld = append(errOld, math.Abs(float64(e.old-w))/float64(w))
	}
	return errNew, errOld
}

// quantile returns the q-quantile (nearest rank) of xs; NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(max(int(math.Ceil(q*float64(len(s))))-1, 0), len(s)-1)]
}

// signedErrors returns the signed relative errors (est − wait) / wait over the same
// requests as relErrors, for the new estimate and the band count.
func signedErrors(es []estimate, minWait time.Duration, keep func(e *estimate) bool) (errNew, errOld []float64) {
	for i := range es {
		e := &es[i]
		w := e.j.dispatched.Sub(e.j.arrival)
		if e.j.dispatched.IsZero() || w < minWait || !e.ok || !keep(e) {
			continue
		}
		errNew = append(errNew, float64(e.est-w)/float64(w))
		errOld = append(errOld, float64(e.old-w)/float64(w))
	}
	return errNew, errOld
}

// swingLoad is sessionLoad's rate for the error measurement: 0.6 sessions/s (about 1.35
// times the 2 requests/s the slots serve, at 4.5 turns a session) for two minutes, then
// 0.3/s for two, and so on, so that a backlog builds and drains again.
func swingLoad(t time.Duration) float64 {
	if (t/(120*time.Second))%2 == 0 {
		return 0.6
	}
	return 0.3
}

// TestEstimateWaitError measures, per policy, the estimate of each request's wait on its
// arrival (Queue.EstimateWait, early shedding off) against the wait it then had, over the
// requests that waited at least 2 s (four dispatch intervals), in runSessions under
// swingLoad with a 120 s TTL (nothing expires). It reports the median and the 90th
// percentile of the relative error |est − wait| / wait, the signed error's 10th and 90th
// percentiles (under- and over-estimates), and the same for the band count
// (the estimate before the policy's order was taken into account: bandCounts). The
// bounds, with what the estimate does not see:
//
//   - FCFS: the count ahead is exact; the error is the noise of the dispatch process alone
//     (service times of 2–6 s on 8 slots: over a wait of n dispatches the count's relative
//     spread is about 1/√n, 15–20% at typical waits). Median ≤ 15%, p90 ≤ 40%.
//   - Turn-priority and bounded wait (around it; waits here stay mostly below its 25 s
//     promotion): a newcomer is timed by its class's rate, which follows the swinging load
//     with the rate's half-life; a later turn is overtaken by deeper turns that arrive while
//     it waits, which nothing foresees, so it errs low. Median ≤ 50%, p90 ≤ 95%, signed p90
//     ≤ +60%; newcomers' median ≤ 40% and below the band count's (which is about 70%: it
//     does not see the later turns that overtake them). The band count also over-states
//     the deep turns the policy serves first: its signed p90 is higher.
//   - VTC and LAS: no classes; a flow that arrives later starts at the lowest service
//     (LAS) or is lifted to the lowest counter (VTC) and goes first, so the estimate errs
//     low and rarely high: VTC median ≤ 45%, p90 ≤ 80%, signed p90 ≤ +15%; LAS median ≤
//     75%, p90 ≤ 95%, signed p90 ≤ 0 (nine in ten of its waits are under-stated), where the
//     band count's signed p90 is +140% and +170%.
//
// Measured (seed 1), median and p90: FCFS 9% and 28%; turn-priority 38% and 82%, newcomers'
// median 28% (band count 69%, 87%, newcomers 73%); bounded wait 41% and 84% (band count
// 67%, 94%); VTC 33% and 64%; LAS 63% and 90%. Signed p90: FCFS +17%, turn-priority +42%
// (band count +49%), bounded wait +42% (+91%), VTC +1% (+140%), LAS −15% (+170%). Over
// three more seeds the figures stay within about ten points.
func TestEstimateWaitError(t *testing.T) {
	const minWait = 2 * time.Second
	all := func(*estimate) bool { return true }
	first := func(e *estimate) bool { return e.turn == 1 }
	for _, c := range []struct {
		policy    string
		p50, p90  float64 // bounds on |relative error|
		over      float64 // bound on the signed p90
		first     float64 // bound on the newcomers' median, if set
		beatsBand bool    // the signed p90 must be below the band count's
	}{
		{"fcfs", 0.15, 0.40, 0.25, 0, false},
		{"turn-priority", 0.50, 0.95, 0.60, 0.40, true},
		{"bounded-wait", 0.50, 0.95, 0.60, 0.40, true},
		{"vtc", 0.45, 0.80, 0.15, 0, true},
		{"las", 0.75, 0.95, 0, 0, true},
	} {
		t.Run(c.policy, func(t *testing.T) {
			load := sessionLoad{seed: 1, rate: swingLoad, peak: 0.6, maxTurns: 8, ttl: 120 * time.Second}
			es := runSessions(t, policyByName(t, c.policy), load)
			bandCounts(t, es, policyByName(t, c.policy), load)
			abs, absOld := relErrors(es, minWait, all)
			sg, sgOld := signedErrors(es, minWait, all)
			firstAbs, firstOld := relErrors(es, minWait, first)
			if len(abs) < 200 {
				t.Fatalf("%d requests waited ≥ %v: the scenario does not test the estimate", len(abs), minWait)
			}
			p50, p90, over, under := quantile(abs, .5), quantile(abs, .9), quantile(sg, .9), quantile(sg, .1)
			t.Logf("%s: %d waited ≥ %v; |error| median %.0f%%, p90 %.0f%%, signed p10 %+.0f%% p90 %+.0f%%; newcomers' median %.0f%% (%d); band count: median %.0f%%, p90 %.0f%%, signed p90 %+.0f%%, newcomers' median %.0f%%",
				c.policy, len(abs), minWait, 100*p50, 100*p90, 100*under, 100*over, 100*quantile(firstAbs, .5), len(firstAbs),
				100*quantile(absOld, .5), 100*quantile(absOld, .9), 100*quantile(sgOld, .9), 100*quantile(firstOld, .5))
			if p50 > c.p50 || p90 > c.p90 {
				t.Errorf("|relative error| median %.1f%%, p90 %.1f%%; want ≤ %.0f%% and ≤ %.0f%%", 100*p50, 100*p90, 100*c.p50, 100*c.p90)
			}
			if over > c.over {
				t.Errorf("signed error p90 %+.1f%%, want ≤ %+.0f%%: the estimate over-states too many waits", 100*over, 100*c.over)
			}
			if c.first > 0 {
				if m := quantile(firstAbs, .5); m > c.first || m >= quantile(firstOld, .5) {
					t.Errorf("newcomers: median |relative error| %.1f%% (band count %.1f%%), want ≤ %.0f%% and below the band count's", 100*m, 100*quantile(firstOld, .5), 100*c.first)
				}
			}
			if c.beatsBand && over >= quantile(sgOld, .9) {
				t.Errorf("signed p90 %+.1f%%, band count's %+.1f%%: want fewer over-estimates than the band count", 100*over, 100*quantile(sgOld, .9))
			}
		})
	}
}

// TestEarlyShedNewcomerStarvation runs scenario (a) — 8 deep sessions saturating 8 slots, a
// newcomer every 15 s — under llm-d's turn-priority with early shedding, against the same
// run without. Without shedding a newcomer waits behind every deep turn still to come and
// 37 of 40 wait their whole 60 s TTL (TestNewcomerStarvationTurnPriority); the band count
// ahead of one is the 8 deep requests waiting, a few seconds of dispatches, so shedding by
// it never refused one. The estimate sees that the newcomers' class is not served while it
// waits, and refuses newcomers on arrival (RejectedWait): measured, 35 of 40. The first
// three arrive before the class's backlog has lasted long enough to show it, and two more
// arrive when nobody of their class waits (the estimate is then half the class's interval,
// which its history shows up to about 58 s at the default half-life); those five wait and
// expire. Deep sessions are served as before.
//
// Every refused newcomer must be one that the run without shedding shed at its TTL or
// served only after 45 s (three were, when a starved deep session's turn reset let one
// through: the estimate does not foresee that), at least 80% of the newcomers must be
// refused on arrival, and deep throughput must stay within 1%. Deep requests are refused
// too: those of the deep sessions turn-priority starves itself (their turn resets to 1 after
// 120 s without a completion, into the newcomers' class), which without shedding wait their
// TTL and expire, and here are refused and retried every second.
func TestEarlyShedNewcomerStarvation(t *testing.T) {
	off := runNewcomers(t, policyByName(t, "turn-priority"))
	on := runNewcomersShed(t, policyByName(t, "turn-priority"), flowcontrol.EarlyShed{Enabled: true})
	t.Logf("without shedding: %d of %d newcomers shed at their TTL, deep %.3f dispatches/s, %d deep requests expired", len(off.expired), off.newcomers, off.deepPerSec, off.deepExpired)
	t.Logf("with shedding: %d refused on arrival, %d expired, %d served; deep %.3f dispatches/s, %d deep attempts refused or expired", len(on.rejected), len(on.expired), len(on.waits), on.deepPerSec, on.deepExpired)
	if on.newcomers != 40 || off.newcomers != 40 {
		t.Fatalf("newcomers %d and %d, want 40", on.newcomers, off.newcomers)
	}
	for _, i := range on.rejected {
		if w, served := off.waitOf[i]; served && w < 45*time.Second {
			t.Errorf("newcomer %d refused on arrival; without shedding it was served after %v", i, w)
		}
	}
	if len(on.rejected)*5 < on.newcomers*4 {
		t.Errorf("%d of %d newcomers refused on arrival, want at least 80%%", len(on.rejected), on.newcomers)
	}
	if math.Abs(on.deepPerSec-off.deepPerSec) > off.deepPerSec/100 {
		t.Errorf("deep throughput %.3f/s with shedding, %.3f/s without: want the later turns served as before", on.deepPerSec, off.deepPerSec)
	}
}
