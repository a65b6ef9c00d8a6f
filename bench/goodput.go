package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Goodput: the highest offered rate at which a share of requests meets both a TTFT and a TPOT
// target, per server (DistServe's measure of disaggregated serving).
//
// The targets are measured, not enforced: a Goal changes nothing in admission or routing
// (Config.Targets does both), so every configuration is judged on what it serves at the
// offered rate. The rate is searched as a multiplier of a workload's arrival rate
// (Workload.Scaled): doubled or halved from Start until the share is met at one multiplier
// and missed at the next (a bracket), then bisected geometrically until the bracket is
// narrower than Step of its lower end. Attainment is assumed to fall as the rate grows; a
// configuration whose attainment is not monotone gets one of the rates where it crosses the
// share.

// Goal is a pair of latency targets; a request attains it when it completes within both (see
// Goal.Attains). Goal is a plain value.
type Goal struct {
	// Name labels the goal in reports ("tight").
	Name string
	// TTFT bounds the time from arrival to the first token; TPOT the mean time per output
	// token after the first. Zero: unbounded.
	TTFT, TPOT time.Duration
}

// The two fixed goals of the P/D figures (issue 46): tight, TTFT ≤ 1 s and TPOT ≤ 25 ms;
// relaxed, TTFT ≤ 3 s and TPOT ≤ 50 ms.
var (
	TightGoal   = Goal{Name: "tight", TTFT: time.Second, TPOT: 25 * time.Millisecond}
	RelaxedGoal = Goal{Name: "relaxed", TTFT: 3 * time.Second, TPOT: 50 * time.Millisecond}
)

// DefaultGoals returns [TightGoal, RelaxedGoal], a new slice each call.
func DefaultGoals() []Goal { return []Goal{TightGoal, RelaxedGoal} }

// String describes g as "tight (TTFT ≤ 1s, TPOT ≤ 25ms)".
func (g Goal) String() string {
	return fmt.Sprintf("%s (TTFT ≤ %v, TPOT ≤ %v)", g.Name, g.TTFT, g.TPOT)
}

// Attains reports whether a completed request attains g: its TTFT (from arrival) within
// g.TTFT and, for an answer of two tokens or more, its TPOT, (e2e − ttft)/(output − 1) with
// e2e the time from arrival to the last token, within g.TPOT. It is the rule SLOStats counts
// Met by. O(1).
func (g Goal) Attains(ttft, e2e time.Duration, output int) bool {
	if g.TTFT > 0 && ttft > g.TTFT {
		return false
	}
	if g.TPOT > 0 && output >= 2 && (e2e-ttft)/time.Duration(output-1) > g.TPOT {
		return false
	}
	return true
}

// GoodputOptions configures SearchGoodput. Zero values take the defaults in brackets.
type GoodputOptions struct {
	// Share is the share of requests that must attain the goal [0.9, DistServe's].
	Share float64
	// Step ends the search: the bracket's upper end is at most (1+Step) times its lower end
	// [0.025].
	Step float64
	// Start is the first rate tried [1].
	Start float64
	// Min and Max bound the rates tried: below Min the goodput is 0; at Max the search stops
	// and reports Max [Start/64, Start·64].
	Min, Max float64
}

// ErrInvalidGoodput is wrapped by the errors of the goodput search for invalid options.
var ErrInvalidGoodput = errors.New("bench: invalid goodput options")

func (o GoodputOptions) withDefaults() (GoodputOptions, error) {
	if o.Share == 0 {
		o.Share = 0.9
	}
	if o.Step == 0 {
		o.Step = 0.025
	}
	if o.Start == 0 {
		o.Start = 1
	}
	if o.Min == 0 {
		o.Min = o.Start / 64
	}
	if o.Max == 0 {
		o.Max = o.Start * 64
	}
	if !(o.Share > 0 && o.Share <= 1) || !(o.Step > 0) || !(o.Start > 0) || !(o.Min > 0 && o.Min <= o.Start && o.Start <= o.Max) {
		return o, fmt.Errorf("%w: %+v", ErrInvalidGoodput, o)
	}
	return o, nil
}

// GoodputPoint is one rate the search measured and the share of requests that attained the
// goal there.
type GoodputPoint struct {
	Rate, Attainment float64
}

// SearchGoodput returns the highest rate at which attain reports a share of at least o.Share,
// within o.Step (see the section comment: a bracket by doubling or halving from o.Start, then
// a geometric bisection), and every point it measured, in order. It returns 0 when the share
// is missed at o.Min, o.Max when it is met there. attain is called O(log(Max/Min) +
// log(1/Step)) times, one at a time; its error ends the search.
func SearchGoodput(attain func(rate float64) (float64, error), o GoodputOptions) (float64, []GoodputPoint, error) {
	o, err := o.withDefaults()
	if err != nil {
		return 0, nil, err
	}
	var pts []GoodputPoint
	ok := func(rate float64) (bool, error) {
		a, err := attain(rate)
		if err != nil {
			return false, err
		}
		pts = append(pts, GoodputPoint{Rate: rate, Attainment: a})
		return a >= o.Share, nil
	}
	lo, hi := 0.0, 0.0 // met at lo, missed at hi
	r := o.Start
	met, err := ok(r)
	if err != nil {
		return 0, pts, err
	}
	if met {
		for lo = r; hi == 0; {
			if lo >= o.Max {
				return o.Max, pts, nil
			}
			r = min(lo*2, o.Max)
			if met, err = ok(r); err != nil {
				return 0, pts, err
			} else if met {
				lo = r
			} else {
				hi = r
			}
		}
	} else {
		for hi = r; lo == 0; {
			if hi <= o.Min {
				return 0, pts, nil
			}
			r = max(hi/2, o.Min)
			if met, err = ok(r); err != nil {
				return 0, pts, err
			} else if met {
				lo = r
			} else {
				hi = r
			}
		}
	}
	for hi > lo*(1+o.Step) {
		r = math.Sqrt(lo * hi)
		if met, err = ok(r); err != nil {
			return 0, pts, err
		} else if met {
			lo = r
		} else {
			hi = r
		}
	}
	return lo, pts, nil
}

// GoodputSpec describes a configuration whose goodput Goodput measures.
type GoodputSpec struct {
	// Workload returns the workload for a seed at its own rate (multiplier 1); the search
	// scales it (Workload.Scaled). It is called once per run and may share ids between calls.
	Workload func(seed uint64) *Workload
	// Config returns the configuration for a seed: a fresh one per run, so stateful parts
	// (deciders, planners) are not shared between runs. Its Seed and Goals are set by Goodput.
	Config func(seed uint64) Config
	// Goals are the goals searched, each on its own; one run measures all of them. Empty:
	// DefaultGoals.
	Goals []Goal
	// Seeds are the seeds; the goodput is their median. Empty: DefaultSeed, +1 and +2.
	Seeds []uint64
	// Options configures each search (rates are multipliers of the workload's rate).
	Options GoodputOptions
	// Parallel is how many seeds are searched at once. Zero: one.
	Parallel int
}

// GoodputResult is the goodput of a configuration at one goal.
type GoodputResult struct {
	Goal Goal
	// PerServer is the median over seeds of the offered request rate (requests per second of
	// arrivals, Result.Sent/Result.Window) at the highest multiplier where the goal was met,
	// divided by the servers; 0 when it was missed at the lowest multiplier tried.
	PerServer float64
	// Seeds holds each seed's goodput per server, Multipliers each seed's multiplier, in
	// Spec.Seeds' order.
	Seeds, Multipliers []float64
	// Points holds, per seed, every multiplier the search measured with its attainment.
	Points [][]GoodputPoint
}

// Goodput measures the goodput per server of spec's configuration at each of its goals: per
// seed and goal a SearchGoodput over multipliers of the workload's rate, runs shared between
// the goals where they measure the same multiplier; the median over seeds. It returns one
// result per goal, in order. Each run is a Run; their number is about len(Seeds) × len(Goals)
// × (log2(Max/Min) + log2(1/Step)) at most.
func Goodput(spec GoodputSpec) ([]GoodputResult, error) {
	goals := spec.Goals
	if len(goals) == 0 {
		goals = DefaultGoals()
	}
	seeds := spec.Seeds
	if len(seeds) == 0 {
		seeds = []uint64{DefaultSeed, DefaultSeed + 1, DefaultSeed + 2}
	}
	out := make([]GoodputResult, len(goals))
	for g := range out {
		out[g] = GoodputResult{Goal: goals[g], Seeds: make([]float64, len(seeds)), Multipliers: make([]float64, len(seeds)), Points: make([][]GoodputPoint, len(seeds))}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(spec.Parallel, 1))
	errs := make([]error, len(seeds))
	for k, seed := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			type run struct {
				att     []float64
				offered float64 // requests per second
				servers int
			}
			runs := map[float64]run{}
			measure := func(m float64) (run, error) {
				if r, ok := runs[m]; ok {
					return r, nil
				}
				cfg := spec.Config(seed)
				cfg.Seed, cfg.Goals = seed, goals
				res, err := Run(spec.Workload(seed).Scaled(m), cfg)
				if err != nil {
					return run{}, err
				}
				r := run{att: res.Attained, servers: cfg.Servers}
				if r.servers == 0 {
					r.servers = DefaultServers
				}
				if res.Window > 0 {
					r.offered = float64(res.Sent) / res.Window.Seconds()
				}
				runs[m] = r
				return r, nil
			}
			for g := range goals {
				m, pts, err := SearchGoodput(func(m float64) (float64, error) {
					r, err := measure(m)
					return r.att[g], err
				}, spec.Options)
				if err != nil {
					errs[k] = err
					return
				}
				out[g].Multipliers[k], out[g].Points[k] = m, pts
				if m > 0 {
					r, err := measure(m)
					if err != nil {
						errs[k] = err
						return
					}
					out[g].Seeds[k] = r.offered / float64(r.servers)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for g := range out {
		v := slices.Clone(out[g].Seeds)
		slices.Sort(v)
		out[g].PerServer = v[len(v)/2]
	}
	return out, nil
}
