package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// LoRA is the simulated servers' adapter configuration (Config.LoRA): slots (vLLM's
// --max-loras) and the time to load an adapter into one, which the step that loads it pays.
// The engines follow internal/glue/simfleet's rules: an adapter is loaded into an empty slot or in
// place of the least recently used idle one, and a request whose adapter finds every slot
// serving other adapters' running requests waits.
type LoRA = engine.LoRA

// DefaultAdapterLoadCost is the adapter load cost of the LoRA comparison: the simulated
// servers' figure, simfleet.DefaultLoRALoadCost (50 ms), taken from published measurements.
const DefaultAdapterLoadCost = simfleet.DefaultLoRALoadCost

// DefaultAdapterWeight is the weight of lora.NewAffinity's scorer in AdapterRouter when none is
// given: the weight the LoRA comparison measures (bench/README.md, "LoRA adapters").
const DefaultAdapterWeight = 2

// LoRAOptions configures LoRAWorkload. Zero values take the defaults in brackets.
type LoRAOptions struct {
	Requests int     // requests [4000]
	Rate     float64 // mean Poisson arrivals per second [24]
	Adapters int     // LoRA adapters on the base model [64]
	// Zipf is the exponent of the adapters' popularity: adapter k (from 0) is chosen with
	// weight 1/(k+1)^Zipf [1].
	Zipf float64
	// BaseShare is the share of requests to the base model, without an adapter [0.1].
	BaseShare    float64
	SystemTokens int // each adapter's system prompt, shared by its requests [768]
	PromptTokens int // mean unique part of the prompt, exponential [400]
	OutputTokens int // mean answer, exponential [120]
	Seed         uint64
}

// LoRAWorkload generates open-loop single requests for a multi-tenant LoRA fleet: each runs
// under one of Adapters adapters chosen with Zipf popularity (or the base model), starts
// with its adapter's system prompt and adds a unique question. The prompt of an adapter is
// cached per adapter, as on vLLM.
func LoRAWorkload(o LoRAOptions) *Workload {
	def(&o.Requests, 4000)
	deff(&o.Rate, 24)
	def(&o.Adapters, 64)
	deff(&o.Zipf, 1)
	if o.BaseShare == 0 {
		o.BaseShare = 0.1
	}
	o.BaseShare = min(max(o.BaseShare, 0), 1)
	def(&o.SystemTokens, 768)
	def(&o.PromptTokens, 400)
	def(&o.OutputTokens, 120)
	g := newGen("lora", o.Seed)
	weights := make([]float64, o.Adapters)
	for k := range weights {
		weights[k] = 1 / math.Pow(float64(k+1), o.Zipf)
	}
	cum := cumulative(weights)
	g.w.Adapters = make([]string, o.Adapters)
	for k := range g.w.Adapters {
		g.w.Adapters[k] = "lora-" + strconv.Itoa(k)
	}
	// The same system prompt text under every adapter: the adapter alone tells the caches
	// apart, as vLLM's block hashes do.
	system, _ := g.extend(nil, 0, o.SystemTokens)
	var at time.Duration
	for n := 0; n < o.Requests; n++ {
		at += g.exp(time.Duration(float64(time.Second) / o.Rate))
		adapter := int32(0)
		if g.rng.Float64() >= o.BaseShare {
			adapter = int32(pickCum(g.rng.Float64()*cum[len(cum)-1], cum)) + 1
		}
		ids, tokens := g.extend(slices.Clone(system), o.SystemTokens, g.expInt(o.PromptTokens, 16))
		i := g.add(int32(n), 1, -1, at, ids, tokens, g.expInt(o.OutputTokens, 4))
		g.w.Requests[i].Adapter = adapter
	}
	return g.done(o.Requests)
}

// AdapterRouter is profiles.Usher with the adapter-affinity term at weight w
// (profiles.UsherOptions.AdapterWeight; w ≤ 0 means DefaultAdapterWeight): usher's default
// profile for fleets serving LoRA adapters. Its other weights are the default profile's.
func AdapterRouter(w float64) Router {
	if w <= 0 {
		w = DefaultAdapterWeight
	}
	name := "usher+adapter"
	if w != DefaultAdapterWeight {
		name += "(" + strconv.FormatFloat(w, 'g', -1, 64) + ")"
	}
	return Router{Name: name, New: func() routing.Profile {
		return profiles.Usher(profiles.UsherOptions{AdapterWeight: w})
	}}
}

// LoRACompareOptions configures LoRACompare. Zero values take the defaults in brackets.
type LoRACompareOptions struct {
	Workload LoRAOptions // the workload (its Seed is set per run)
	Servers  int         // servers [8]
	Slots    int         // adapter slots per server [4]
	// Costs are the adapter load costs to compare [DefaultAdapterLoadCost × 0.5, 1, 2].
	Costs []time.Duration
	// Routers are compared [UsherRouter (adapter-blind), AdapterRouter(DefaultAdapterWeight)].
	Routers []Router
	Seeds   int    // seeds per configuration: Seed, Seed+1, ... [3]
	Seed    uint64 // [DefaultSeed]
	// Parallel bounds the runs at once [1].
	Parallel int
}

// LoRARow is one router at one adapter load cost, over the seeds: the median and the range
// of each figure.
type LoRARow struct {
	Router   string
	LoadCost time.Duration
	Seeds    int
	// TTFT percentiles, adapter loads per minute and max/mean server load, each as median
	// [min, max] over the seeds.
	TTFTp50, TTFTp99 [3]time.Duration
	LoadsPerMin      [3]float64
	Imbalance        [3]float64
	// Completed is the share of sent requests completed (median).
	Completed float64
}

// LoRACompare runs the LoRA comparison: every router at every load cost over the seeds, on
// LoRAWorkload, with the default gateway (FCFS, a concurrency gate). Rows come in the order
// of Costs, then Routers.
func LoRACompare(o LoRACompareOptions) ([]LoRARow, error) {
	def(&o.Servers, 8)
	def(&o.Slots, 4)
	def(&o.Seeds, 3)
	def(&o.Parallel, 1)
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if len(o.Costs) == 0 {
		o.Costs = []time.Duration{DefaultAdapterLoadCost / 2, DefaultAdapterLoadCost, 2 * DefaultAdapterLoadCost}
	}
	if len(o.Routers) == 0 {
		o.Routers = []Router{UsherRouter(), AdapterRouter(0)}
	}
	type job struct {
		row, seed int
		w         *Workload
		cfg       Config
	}
	var jobs []job
	rows := make([]LoRARow, 0, len(o.Costs)*len(o.Routers))
	workloads := make([]*Workload, o.Seeds)
	for k := range workloads {
		wo := o.Workload
		wo.Seed = o.Seed + uint64(k)
		workloads[k] = LoRAWorkload(wo)
	}
	for _, c := range o.Costs {
		for _, r := range o.Routers {
			rows = append(rows, LoRARow{Router: r.Name, LoadCost: c, Seeds: o.Seeds})
			for k := range o.Seeds {
				jobs = append(jobs, job{row: len(rows) - 1, seed: k, w: workloads[k], cfg: Config{
					Servers: o.Servers, Router: r, Seed: o.Seed + uint64(k),
					LoRA: LoRA{MaxLoRAs: o.Slots, LoadCost: c},
				}})
			}
		}
	}
	results := make([]*Result, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, o.Parallel)
	done := make(chan struct{})
	for i := range jobs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; done <- struct{}{} }()
			results[i], errs[i] = Run(jobs[i].w, jobs[i].cfg)
		}()
	}
	for range jobs {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s at %v, seed %d: %w", rows[jobs[i].row].Router, rows[jobs[i].row].LoadCost, jobs[i].seed, err)
		}
	}
	for ri := range rows {
		var p50, p99 []time.Duration
		var loads, imb, done []float64
		for i, j := range jobs {
			if j.row != ri {
				continue
			}
			r := results[i]
			p50, p99 = append(p50, r.TTFT.P50), append(p99, r.TTFT.P99)
			loads, imb = append(loads, r.AdapterLoadsPerMin), append(imb, r.LoadImbalance)
			done = append(done, float64(r.Completed)/float64(max(r.Sent, 1)))
		}
		row := &rows[ri]
		row.TTFTp50, row.TTFTp99 = spread(p50), spread(p99)
		row.LoadsPerMin, row.Imbalance = spread(loads), spread(imb)
		row.Completed = spread(done)[0]
	}
	return rows, nil
}

// spread returns the median, min and max of xs (len ≥ 1).
func spread[T int64 | float64 | time.Duration](xs []T) [3]T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return [3]T{s[len(s)/2], s[0], s[len(s)-1]}
}

// FormatLoRATable renders rows as the Markdown table of bench/README.md.
func FormatLoRATable(rows []LoRARow) string {
	var b strings.Builder
	b.WriteString("| load cost | router | TTFT p50 | TTFT p99 | adapter loads/min | max/mean load | completed |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	ms := func(d [3]time.Duration) string {
		f := func(x time.Duration) string { return strconv.FormatFloat(float64(x)/1e6, 'f', 0, 64) }
		return f(d[0]) + " ms (" + f(d[1]) + "–" + f(d[2]) + ")"
	}
	num := func(v [3]float64, prec int) string {
		f := func(x float64) string { return strconv.FormatFloat(x, 'f', prec, 64) }
		return f(v[0]) + " (" + f(v[1]) + "–" + f(v[2]) + ")"
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %v | %s | %s | %s | %s | %s | %.1f%% |\n", r.LoadCost, r.Router, ms(r.TTFTp50), ms(r.TTFTp99),
			num(r.LoadsPerMin, 0), num(r.Imbalance, 2), 100*r.Completed)
	}
	return b.String()
}

// GIEAdapterRouter is profiles.Usher plus, at DefaultAdapterWeight, a reference scorer with
// the tiers of GIE's LoRA-affinity scorer as published: 1 where the adapter has running
// requests, 0.8 where fewer distinct adapters run or wait than max_lora, 0.6 where it only
// waits, 0 otherwise, from the scraped signals alone (0.5 without them). The LoRA
// comparison holds lora.NewAffinity's scorer against it.
func GIEAdapterRouter() Router {
	tiers := routing.ScorerFunc(func(req *routing.Request, cands []routing.Candidate, dst []float64) {
		for i := range cands {
			c := &cands[i]
			switch st := c.State; {
			case req.Adapter == "":
				dst[i] = 0
			case !c.Fresh.Has(routing.SignalAdapters):
				dst[i] = 0.5
			case slices.Contains(st.RunningAdapters, req.Adapter):
				dst[i] = 1
			case distinctNames(st.RunningAdapters, st.WaitingAdapters) < st.MaxAdapters:
				dst[i] = 0.8
			case slices.Contains(st.WaitingAdapters, req.Adapter):
				dst[i] = 0.6
			default:
				dst[i] = 0
			}
		}
	})
	return Router{Name: "usher+gie-tiers", New: func() routing.Profile {
		return profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: tiers, Weight: DefaultAdapterWeight})
	}}
}

// distinctNames counts the distinct names in a ∪ b.
func distinctNames(a, b []string) int {
	n := 0
	for i, x := range a {
		if !slices.Contains(a[:i], x) {
			n++
		}
	}
	for i, x := range b {
		if !slices.Contains(b[:i], x) && !slices.Contains(a, x) {
			n++
		}
	}
	return n
}
