package bench

import (
	"math"
	"slices"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/routing"
)

// Percentiles are latency quantiles (nearest rank).
type Percentiles struct {
	P50, P90, P99 time.Duration
}

// TurnStats counts what happened to one class of requests (first turns of sessions, or later
// turns).
type TurnStats struct {
	// Sent is the number of requests that reached the gateway.
	Sent int
	// Completed were served to the end.
	Completed int
	// Expired waited in the gateway until their TTL passed; Rejected were refused at arrival
	// (queue full); Failed were admitted but could not be routed or served (no backend, too
	// long for the model).
	Expired, Rejected, Failed int
	// Abandoned turns were never sent because an earlier turn of their session was shed or
	// failed (closed-loop workloads only).
	Abandoned int
	// WaitMean and WaitP99 are the time admitted requests waited in the gateway queue.
	WaitMean, WaitP99 time.Duration
	// TTFT is the time to first token of this class's completed requests, from arrival.
	TTFT Percentiles
	// ShedAfter is how long the shed requests of this class waited for their answer: the TTL
	// for an expired one, about zero for one rejected on arrival.
	ShedAfter Percentiles
	// HitRate is the share of this class's completed prompt tokens served from a server's
	// prefix cache.
	HitRate float64
	// SLO counts this class's requests against their latency targets (Config.Targets,
	// LaterTargets); zero without targets.
	SLO SLOStats
}

// SLOStats counts sent requests with latency targets by what they got, each in exactly one of
// Met, Missed, Shed, Expired, Failed and Unfinished — as the gateway counts them
// (usher_slo_requests_total), a request turned away counting against the targets.
type SLOStats struct {
	// Sent is the number of requests with targets that reached the gateway.
	Sent int
	// Met completed with a TTFT from arrival within its target and a TPOT, (E2E − TTFT)/
	// (output − 1) over an answer of two tokens or more, within its target (each when set).
	Met int
	// Missed completed outside a target; MissedTPOT of them met their TTFT target and missed
	// only TPOT's.
	Missed, MissedTPOT int
	// Shed were refused on arrival (early shedding, or a full queue); Expired waited in the
	// gateway past their deadline; Failed were admitted but could not be routed or served;
	// Unfinished were still waiting or running at Config.MaxTime.
	Shed, Expired, Failed, Unfinished int
	// MetOutputTokens is the output tokens of the met requests.
	MetOutputTokens int64
}

// Attainment is Met/Sent, the share of requests that met their targets; 0 when none was sent.
func (s SLOStats) Attainment() float64 {
	if s.Sent == 0 {
		return 0
	}
	return float64(s.Met) / float64(s.Sent)
}

func (s *SLOStats) add(o SLOStats) {
	s.Sent += o.Sent
	s.Met += o.Met
	s.Missed += o.Missed
	s.MissedTPOT += o.MissedTPOT
	s.Shed += o.Shed
	s.Expired += o.Expired
	s.Failed += o.Failed
	s.Unfinished += o.Unfinished
	s.MetOutputTokens += o.MetOutputTokens
}

// count adds r, a sent request with targets, to s.
func (s *SLOStats) count(r *simReq) {
	s.Sent++
	switch r.state {
	case rsQueued, rsRunning:
		s.Unfinished++
	case rsShed:
		if r.outcome == flowcontrol.Expired {
			s.Expired++
		} else {
			s.Shed++
		}
	case rsFailed:
		s.Failed++
	case rsDone:
		t := r.targets
		ttft := t.TTFT == 0 || r.firstToken-r.arrival <= t.TTFT
		tpot := t.TPOT == 0 || r.w.OutputTokens < 2 || (r.finish-r.firstToken)/time.Duration(r.w.OutputTokens-1) <= t.TPOT
		switch {
		case ttft && tpot:
			s.Met++
			s.MetOutputTokens += int64(r.w.OutputTokens)
		case ttft:
			s.Missed++
			s.MissedTPOT++
		default:
			s.Missed++
		}
	}
}

// Shed is Expired + Rejected: requests the gateway turned away.
func (t TurnStats) Shed() int { return t.Expired + t.Rejected }

// Result is the measurement of one run.
type Result struct {
	// Workload, Policy and Router name the run; Rate is the caller's label for the load
	// (Run does not scale the workload itself; see Workload.Scaled).
	Workload, Policy, Router string
	Rate                     float64
	// Seed is the configuration's seed (Config.Seed after defaults). Results of one
	// configuration under several seeds are summarised together (see Cells).
	Seed uint64
	// Replicas is the number of gateway replicas (1: one gateway) and SyncLag how late they
	// saw each other's changes (NoSync: never; 0 with one replica), as configured.
	Replicas int
	SyncLag  time.Duration

	// Sent, Completed and Unfinished (still waiting or running at Config.MaxTime) count
	// requests, NotSent those that had not arrived by Config.MaxTime; First and Later split
	// the counts by turn.
	Sent, Completed, Unfinished, NotSent int
	First, Later                         TurnStats

	// TTFT is the time from arrival at the gateway to the first output token, E2E to the last,
	// over completed requests; both include the wait in the gateway queue.
	TTFT, E2E Percentiles
	// TPOT is the time per output token after the first, (E2E − TTFT)/(output − 1), over
	// completed requests of more than one output token: how smoothly answers stream.
	TPOT Percentiles
	// SLO counts the requests with latency targets (Config.Targets) by what they got: First.SLO
	// plus Later.SLO. Zero without targets.
	SLO SLOStats
	// Targets and LaterTargets are the run's latency targets, as configured.
	Targets, LaterTargets routing.Latency
	// MetPerSec and MetOutPerSec are the met requests (SLO.Met) and their output tokens per
	// second of Window: the goodput within the targets.
	MetPerSec, MetOutPerSec float64
	// Attained holds, per goal of Config.Goals, the share of the workload's requests (sent or
	// not, a shed, failed or unfinished one counting as a miss) that completed attaining it.
	Attained []float64
	// Disaggregated is the share of sent requests prefilled on a prefill server
	// (Config.PrefillServers), and TransferMean their mean KV transfer time.
	Disaggregated float64
	TransferMean  time.Duration
	// With a role planner (Config.Decider a *disagg.Planner): RoleChanges counts the
	// servers' role changes, and Roles the servers in prefill over time, from the first scrape
	// and at every change.
	RoleChanges int
	Roles       []RoleSample

	// Window is the virtual time from the first arrival to the last, the time the load was
	// offered; Span runs from the first arrival to the last completion (Window plus the drain).
	Window, Span time.Duration
	// ReqPerSec and TokPerSec are completed requests and their tokens (prompt + output) per
	// second of Window, the goodput under the offered load (what was served, not what was
	// sent); OutPerSec counts output tokens only. Dividing by Window rather than Span keeps a
	// few slow requests at the very end from deciding the figure; their cost shows in the
	// latency percentiles instead.
	ReqPerSec, TokPerSec, OutPerSec float64

	// HitRate is the share of the completed requests' prompt tokens served from a server's
	// prefix cache; IdealHitRate is the share an infinite cache shared by all servers would
	// serve for the same requests (replayed in workload order).
	HitRate, IdealHitRate float64

	// LoadMean and LoadMax are the time-averaged number of requests on a server (waiting or
	// running in its engine), over servers and for the most loaded one; LoadImbalance is
	// LoadMax/LoadMean.
	LoadMean, LoadMax, LoadImbalance float64

	// Tasks measures the run's sessions as tasks: their completion times, from the first
	// turn's arrival to the last turn's answer, and how many were abandoned or cut off by the
	// end of the run (see TaskStats).
	Tasks TaskStats

	// Jain is Jain's fairness index over sessions of the share of each session's requested
	// tokens that was served: (Σx)²/(n·Σx²), 1 when every session got the same share.
	Jain float64

	// Duration is the virtual time the run took, from time zero to the last event.
	Duration time.Duration
	// InSystem is the mean number of requests in the gateway (waiting in its queue or in
	// flight to a server), sampled from the queue's gauges at every metrics scrape; Sojourn is
	// the mean time from arrival to completion of completed requests. By Little's law,
	// InSystem ≈ (Completed/Duration)·Sojourn when nothing is shed.
	InSystem float64
	Sojourn  time.Duration

	// Prediction is the error of the router's latency model over spans of the completed
	// requests (see PredictionError), nil when the router has none.
	Prediction []PredictionError

	// Preemptions is the engines' total recompute preemptions.
	Preemptions int64
	// AdapterLoads is the number of LoRA adapters the engines loaded into a slot (Config.LoRA),
	// and AdapterLoadsPerMin that per minute of Window.
	AdapterLoads       int64
	AdapterLoadsPerMin float64

	// Events is the number of simulated events; Wall the wall-clock time of the run, and
	// EventsPerSec their ratio.
	Events       int64
	Wall         time.Duration
	EventsPerSec float64
}

// Deterministic returns a copy of r without the wall-clock fields, for comparing runs.
func (r Result) Deterministic() Result {
	r.Wall, r.EventsPerSec = 0, 0
	return r
}

func (s *sim) result(wall time.Duration) *Result {
	res := &Result{
		Workload: s.w.Name, Policy: s.cfg.Policy.Name, Router: s.cfg.Router.Name, Seed: s.cfg.Seed,
		Replicas: len(s.gw), SyncLag: s.cfg.SyncLag, Targets: s.cfg.Targets, LaterTargets: s.cfg.LaterTargets,
		Events: s.nEvents, Wall: wall, Preemptions: s.preempts, Duration: s.now,
	}
	if s.samples > 0 {
		res.InSystem = s.inSystem / float64(s.samples)
	}
	for i := range s.srv {
		res.AdapterLoads += s.srv[i].e.Stats().LoRALoads
	}
	if wall > 0 {
		res.EventsPerSec = float64(s.nEvents) / wall.Seconds()
	}
	ideal := s.w.idealHits(s.cfg.Profile.BlockSize)
	if len(s.cfg.Goals) > 0 {
		res.Attained = make([]float64, len(s.cfg.Goals)) // counts until the end
	}
	var ttft, e2e, tpot []time.Duration
	var waits, ttfts, sheds [2][]time.Duration
	var prompt, cached, idealHit, tokens, out int64
	var classPrompt, classCached [2]int64 // completed prompt and cached tokens of first and later turns
	first, last, lastArrival := time.Duration(math.MaxInt64), time.Duration(0), time.Duration(0)
	served := make([]float64, s.w.Sessions)
	asked := make([]float64, s.w.Sessions)
	for i := range s.reqs {
		r := &s.reqs[i]
		t := &res.First
		cls := 0
		if r.w.Turn > 1 {
			t, cls = &res.Later, 1
		}
		if r.state == rsAbandoned {
			t.Abandoned++
			continue
		}
		if r.state == rsNone {
			res.NotSent++ // had not arrived at MaxTime
			continue
		}
		res.Sent++
		t.Sent++
		if r.targets != (routing.Latency{}) {
			t.SLO.count(r)
		}
		first = min(first, r.arrival)
		lastArrival = max(lastArrival, r.arrival)
		size := float64(r.w.PromptTokens) + float64(r.w.OutputTokens)
		if r.w.Session >= 0 {
			asked[r.w.Session] += size
		}
		if r.state == rsRunning || r.state == rsDone {
			waits[cls] = append(waits[cls], r.wait)
		}
		if r.state == rsDone {
			ttfts[cls] = append(ttfts[cls], r.firstToken-r.arrival)
		}
		if r.state == rsShed {
			sheds[cls] = append(sheds[cls], r.finish-r.arrival)
		}
		switch r.state {
		case rsQueued, rsRunning:
			res.Unfinished++
		case rsShed:
			if r.outcome == flowcontrol.Expired {
				t.Expired++
			} else {
				t.Rejected++
			}
		case rsFailed:
			t.Failed++
		case rsDone:
			for g, goal := range s.cfg.Goals {
				if goal.Attains(r.firstToken-r.arrival, r.finish-r.arrival, int(r.w.OutputTokens)) {
					res.Attained[g]++
				}
			}
			res.Completed++
			t.Completed++
			ttft = append(ttft, r.firstToken-r.arrival)
			e2e = append(e2e, r.finish-r.arrival)
			if r.w.OutputTokens > 1 {
				tpot = append(tpot, (r.finish-r.firstToken)/time.Duration(r.w.OutputTokens-1))
			}
			last = max(last, r.finish)
			prompt += int64(r.w.PromptTokens)
			cached += int64(r.cached)
			classPrompt[cls] += int64(r.w.PromptTokens)
			classCached[cls] += int64(r.cached)
			idealHit += int64(ideal[i])
			tokens += int64(r.w.PromptTokens) + int64(r.w.OutputTokens)
			out += int64(r.w.OutputTokens)
			if r.w.Session >= 0 {
				served[r.w.Session] += size
			}
		}
	}
	if len(e2e) > 0 {
		var sum time.Duration
		for _, d := range e2e {
			sum += d
		}
		res.Sojourn = sum / time.Duration(len(e2e))
	}
	res.TTFT, res.E2E, res.TPOT = percentiles(ttft), percentiles(e2e), percentiles(tpot)
	if s.planner != nil {
		res.RoleChanges, res.Roles = int(s.planner.Stats().Changes), s.roles
	}
	if n := s.pd.disaggregated; n > 0 {
		res.Disaggregated = float64(n) / float64(max(res.Sent, 1))
		res.TransferMean = s.pd.transfer / time.Duration(n)
	}
	for k, t := range [2]*TurnStats{&res.First, &res.Later} {
		t.TTFT, t.ShedAfter = percentiles(ttfts[k]), percentiles(sheds[k])
		if classPrompt[k] > 0 {
			t.HitRate = float64(classCached[k]) / float64(classPrompt[k])
		}
		w := waits[k]
		if len(w) > 0 {
			var sum time.Duration
			for _, d := range w {
				sum += d
			}
			t.WaitMean = sum / time.Duration(len(w))
			t.WaitP99 = percentiles(w).P99
		}
	}
	if res.Completed > 0 && last > first {
		res.Span = last - first
		res.Window = max(lastArrival-first, time.Millisecond)
		res.AdapterLoadsPerMin = float64(res.AdapterLoads) / res.Window.Minutes()
		sec := res.Window.Seconds()
		res.ReqPerSec = float64(res.Completed) / sec
		res.TokPerSec = float64(tokens) / sec
		res.OutPerSec = float64(out) / sec
	}
	for g := range res.Attained {
		res.Attained[g] /= float64(max(len(s.reqs), 1))
	}
	res.SLO = res.First.SLO
	res.SLO.add(res.Later.SLO)
	if res.Window > 0 {
		res.MetPerSec = float64(res.SLO.Met) / res.Window.Seconds()
		res.MetOutPerSec = float64(res.SLO.MetOutputTokens) / res.Window.Seconds()
	}
	if prompt > 0 {
		res.HitRate = float64(cached) / float64(prompt)
		res.IdealHitRate = float64(idealHit) / float64(prompt)
	}
	if s.now > 0 && len(s.srv) > 0 {
		sum := 0.0
		for i := range s.srv {
			l := s.srv[i].area / s.now.Seconds()
			sum += l
			res.LoadMax = max(res.LoadMax, l)
		}
		res.LoadMean = sum / float64(len(s.srv))
		if res.LoadMean > 0 {
			res.LoadImbalance = res.LoadMax / res.LoadMean
		}
	}
	xs := make([]float64, 0, len(asked))
	for i, a := range asked {
		if a > 0 {
			xs = append(xs, served[i]/a)
		}
	}
	res.Jain = Jain(xs)
	idle := s.cfg.SessionIdle
	if idle <= 0 {
		idle = DefaultIdleFactor * s.w.LongestThink()
	}
	res.Tasks = s.tasks(idle)
	res.Prediction = s.predictionErrors()
	return res
}

// percentiles returns nearest-rank quantiles of d (sorted in place).
func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	q := func(p float64) time.Duration {
		k := int(math.Ceil(p*float64(len(d)))) - 1
		return d[min(max(k, 0), len(d)-1)]
	}
	return Percentiles{P50: q(0.50), P90: q(0.90), P99: q(0.99)}
}

// Jain returns Jain's fairness index of xs, (Σx)²/(n·Σx²): 1 when all are equal, 1/n when one
// gets everything. It returns 1 for an empty or all-zero slice (nobody is treated worse than
// anybody else). O(len(xs)).
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
