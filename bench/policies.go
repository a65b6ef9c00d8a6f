package bench

import (
	"slices"
	"strconv"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/builtin"
)

// BoundedWaitBound is the wait bound W of the matrix's bounded-wait policy, half the default
// 60 s TTL; requests are promoted BoundedWaitHeadroom before it, leaving the gate time to
// admit them.
const (
	BoundedWaitBound    = 30 * time.Second
	BoundedWaitHeadroom = 5 * time.Second
)

// fairnessPolicies returns the fairness package's policies for the matrix, by their
// registry names (the built-in table behind proxy.Registry), each with its defaults (the peers' published ones where it
// reproduces a peer):
//
//	las            fairness.NewLAS: usher's least attained service (keyed, O(log flows))
//	las-reference  llm-d's LAS (internal/refpolicy), min-max normalised service and wait
//	turn-priority  fairness.NewTurnPriority: llm-d's turn-priority (turn + 0.05·wait)
//	vtc            fairness.NewVTC: virtual token counters (Sheng et al.)
//	bounded-wait   fairness.NewBoundedWait around turn-priority, W = 30 s, 5 s headroom
//
// Flows are sessions (a request without a session is a flow of its own).
func fairnessPolicies() []Policy {
	var ps []Policy
	for _, name := range []string{"las", "las-reference", "turn-priority", "vtc", "bounded-wait"} {
		ps = append(ps, Policy{Name: name, New: func() flowcontrol.Policy {
			return must(builtin.Policy(name, builtin.PolicyOptions{BoundedWait: BoundedWaitBound, BoundedWaitHeadroom: BoundedWaitHeadroom}))
		}})
	}
	return ps
}

// must unwraps a constructor's result for options fixed in this file; an error is a bug here.
func must[P flowcontrol.Policy](p P, err error) flowcontrol.Policy {
	if err != nil {
		panic("bench: " + err.Error())
	}
	return p
}

// EarlyShedSuffix ends the name of a policy run with early shedding (Config.EarlyShed), as
// compare -early-shed labels it; the plots draw such a policy as its twin's hollow marker.
const EarlyShedSuffix = "+shed"

// boundedWait is fairness.NewBoundedWait around turn-priority with wait bound w, promoted
// min(5 s, w/4) before it, reserving share of the dispatches for first turns.
func boundedWait(w time.Duration, share float64) Policy {
	name := "bw-" + w.String()
	if share > 0 {
		name += "-share" + strconv.FormatFloat(share, 'g', -1, 64)
	}
	return Policy{Name: name, New: func() flowcontrol.Policy {
		return must(fairness.NewBoundedWait(fairness.BoundedWaitOptions{
			Wait: w, Headroom: min(BoundedWaitHeadroom, w/4), FirstTurnShare: share,
		}))
	}}
}

// GittinsIdle is the idle limit after which the frontier's Gittins policies count a session
// as ended (fairness.GittinsOptions.Memory.Forget) when they are built without a workload
// (Policy.New): three mean think times of the chat workloads (20 s), thirty of the agentic
// ones (2 s), so that a run of a few minutes ends enough sessions to learn from. In the
// simulator they take gittinsIdle of the workload instead.
const GittinsIdle = 60 * time.Second

// gittinsIdleCap bounds gittinsIdle: a session idle for ten minutes is a new task as far as
// the queue can tell, and a longer limit ends too few sessions within an hour's run to learn
// from (the trace's, whose think gaps run to 50 minutes).
const gittinsIdleCap = 10 * time.Minute

// gittinsIdle is the idle limit of the Gittins policies on workload w: twice the 99th
// percentile of its gaps between a session's turns (Workload.LongestThink's gaps), so that
// about one session in a hundred is split in two, at most gittinsIdleCap; GittinsIdle for a
// workload without multi-turn sessions. O(requests · log requests).
func gittinsIdle(w *Workload) time.Duration {
	var gaps []time.Duration
	last := make(map[int32]time.Duration)
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Prev >= 0 {
			gaps = append(gaps, r.At)
			continue
		}
		if r.Session < 0 {
			continue
		}
		if at, ok := last[r.Session]; ok {
			gaps = append(gaps, r.At-at)
		}
		last[r.Session] = r.At
	}
	if len(gaps) == 0 {
		return GittinsIdle
	}
	slices.Sort(gaps)
	return min(2*gaps[len(gaps)*99/100], gittinsIdleCap)
}

// gittins is fairness.NewGittins with, if w > 0, wait bound w promoted min(5 s, w/4) before
// it, and idle limit GittinsIdle, or gittinsIdle of the workload in the simulator.
func gittins(w time.Duration) Policy { return gittinsShare(w, 0) }

// gittinsShare is gittins(w) that, if share > 0, also reserves that share of the dispatches
// for first turns: fairness.NewBoundedWait with the Gittins policy as its Inner.
func gittinsShare(w time.Duration, share float64) Policy {
	name := "gittins"
	if w > 0 {
		name += "-bw-" + w.String()
	}
	if share > 0 {
		name += "-share" + strconv.FormatFloat(share, 'g', -1, 64)
	}
	build := func(idle time.Duration) flowcontrol.Policy {
		if share == 0 {
			return must(fairness.NewGittins(fairness.GittinsOptions{
				Wait: w, Headroom: min(BoundedWaitHeadroom, w/4), Memory: fairness.Memory{Forget: idle},
			}))
		}
		inner := must(fairness.NewGittins(fairness.GittinsOptions{Memory: fairness.Memory{Forget: idle}}))
		return must(fairness.NewBoundedWait(fairness.BoundedWaitOptions{
			Wait: w, Headroom: min(BoundedWaitHeadroom, w/4), Inner: inner, FirstTurnShare: share,
		}))
	}
	return Policy{
		Name:        name,
		New:         func() flowcontrol.Policy { return build(GittinsIdle) },
		forWorkload: func(wl *Workload) flowcontrol.Policy { return build(gittinsIdle(wl)) },
	}
}

// FrontierPolicies returns the policies of the admission frontier (SelectPolicies
// "frontier"): FCFS, llm-d's turn-priority, LAS, VTC and a hierarchy (VTC across tenants,
// turn-priority within one; in the simulator every session is its own tenant), bounded
// wait around turn-priority with W from 5 s to 45 s, with and without a 20% first-turn share,
// and the Gittins index learned online, alone and with W = 10 s.
func FrontierPolicies() []Policy {
	ps := []Policy{FCFSPolicy()}
	for _, p := range fairnessPolicies() {
		if p.Name != "bounded-wait" && p.Name != "las-reference" {
			ps = append(ps, p)
		}
	}
	ps = append(ps, Policy{Name: "hierarchy", New: func() flowcontrol.Policy {
		return must(fairness.NewHierarchy(fairness.HierarchyOptions{}))
	}})
	for _, w := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 45 * time.Second} {
		ps = append(ps, boundedWait(w, 0))
	}
	for _, w := range []time.Duration{10 * time.Second, 30 * time.Second} {
		ps = append(ps, boundedWait(w, 0.2))
	}
	ps = append(ps, gittins(0), gittins(10*time.Second))
	return ps
}

// gittinsVariants are the Gittins policies tried beside the frontier's two (bench/README,
// increasing hazard): wait bounds from 5 s to 20 s (promoted min(5 s, W/4) before it; the runs' TTL is 20 s) and first-turn shares.
// Selected by name only.
func gittinsVariants() []Policy {
	var ps []Policy
	for _, w := range []time.Duration{5 * time.Second, 15 * time.Second, 20 * time.Second} {
		ps = append(ps, gittins(w))
	}
	for _, w := range []time.Duration{10 * time.Second, 15 * time.Second, 20 * time.Second} {
		for _, share := range []float64{0.1, 0.2, 0.3} {
			ps = append(ps, gittinsShare(w, share))
		}
	}
	return ps
}

// SLOPolicy is "slo": fairness.NewSLODeadline ordering each request by its arrival plus its
// own TTFT target (Config.Targets, LaterTargets), the gateway's slo policy;
// a request without a target goes by its arrival. With one target for every request it is
// FCFS; it differs when later turns have targets of their own. It is not a
// flowcontrol.Ranker, so early shedding estimates a request's wait behind every request
// waiting, whatever their deadlines. Not part of Policies; select it by name.
func SLOPolicy() Policy {
	return Policy{Name: "slo", New: func() flowcontrol.Policy {
		return must(fairness.NewSLODeadline(fairness.SLODeadlineOptions{Target: sloTarget}))
	}}
}

// sloTarget is the TTFT target of a simulated request in the queue, 0 without one.
func sloTarget(r *flowcontrol.Request) time.Duration {
	if sr, ok := r.Value.(*simReq); ok {
		return sr.targets.TTFT
	}
	return 0
}
