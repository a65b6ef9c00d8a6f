// Command pdcompare compares aggregated and disaggregated serving in the bench simulator at an
// equal number of servers: every server serving both (aggregated), every request prefilled on
// a prefill server (always), and per-request deciders (llm-d's prefix rule, and the prefix rule
// weighed by the decode server's running answers), on a long-prompt/short-answer workload and
// the chat workload, at several loads, KV transfer costs and seeds. It prints one markdown
// table per workload, load and transfer cost: the median over seeds and the range. "pool" is
// disagg.NewPoolAware's decider, which also weighs the prefill servers' load; "all both, prefix" is an
// experiment without a prefill pool: every server serves both and a long prefill goes to
// another server.
//
//	go run ./bench/cmd/pdcompare
//	go run ./bench/cmd/pdcompare -servers 8 -prefill 4 -rates 1,1.5 -transfer-scales 0.5,1,2
//	go run ./bench/cmd/pdcompare -workloads long-prompt,chat-full -rates 4,5 -prefill 3,4,5,6 -modes aggregated,always,prefix,busy16,pool
//
// -modes selects the rows by key: aggregated, always, never (a disaggregated fleet whose
// decode servers serve every request whole), prefix, busy4, busy16, pool, allboth, planner
// (every server kv_both, its role set by disagg.Planner, which also decides; a row of its own
// in the -goodput tables). -prefill lists the fleet splits: each disaggregated mode has a row
// per split, named with it ("always 5+3") when there are several.
//
// -goodput prints goodput tables instead: per workload and transfer cost, the highest offered
// rate (requests/s per server) at which 90% of requests meet both targets of each goal
// (bench.TightGoal: TTFT ≤ 1 s and TPOT ≤ 25 ms; bench.RelaxedGoal: 3 s and 50 ms), searched to
// 2.5% (bench.Goodput), the median of -seeds seeds, for aggregated serving, always-P/D at every
// split of the fleet and the deciders of -modes at the -prefill splits. -curves DIR also writes
// the attainment-vs-rate plots of the first workload at transfer ×1 (-curve-rates):
//
//	go run ./bench/cmd/pdcompare -goodput -workloads long-prompt,chat-full -transfer-scales 1,0.5,2 -curves bench/plots
//
// -phases prints the phase-changing run instead (chat, long prompts, chat; see phases.go):
//
//	go run ./bench/cmd/pdcompare -phases -rates 1.5 -modes aggregated,pool,planner -prefill 5 -roles-plot bench/plots/roles-phases.png
//
// -attain prints the same columns for one workload at one fixed rate (the simulator's side of
// bench/pd-kvboth-processes.sh's long-prompt run):
//
//	go run ./bench/cmd/pdcompare -attain -workloads long-prompt -requests 1500 -rates 2 -modes aggregated,always,planner -prefill 5
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/bench"
	"github.com/usher-llm/usher/routing/disagg"
)

// mode is one way of serving.
type mode struct {
	key     string // its name in -modes
	name    string
	prefill int // prefill servers; 0: aggregated
	decider func() disagg.Decider
}

func main() {
	var (
		servers    = flag.Int("servers", 8, "servers in every mode")
		splits     = flag.String("prefill", "4", "of them, prefill servers in the disaggregated modes: a list, a row per split")
		workloads  = flag.String("workloads", "long-prompt,chat", "workloads: long-prompt (PrefixGroup: one request each, a shared document of lognormal length, median 6k tokens, plus 2k tokens of its own on average, 128-token answers on average), chat (the Chat workload's first -requests requests) and chat-full (all of it: 2,000 conversations, about 10k requests)")
		rates      = flag.String("rates", "1,1.5", "load multipliers of each workload's default rate")
		scales     = flag.String("transfer-scales", "1", "multipliers of the KV transfer's per-token cost")
		perToken   = flag.Duration("transfer-per-token", 5200*time.Nanosecond, "KV transfer time per token (Qwen3-32B: 256 KiB per token over 400 Gb/s)")
		latency    = flag.Duration("transfer-latency", time.Millisecond, "fixed time of one KV transfer")
		requests   = flag.Int("requests", 4000, "requests of each workload (its first N; chat-full: all)")
		seeds      = flag.Int("seeds", 3, "seeds per configuration")
		parallel   = flag.Int("parallel", runtime.NumCPU(), "runs at once")
		only       = flag.String("modes", "aggregated,always,prefix,busy4,busy16,pool,allboth", "rows, by key: aggregated, always, never, prefix, busy4, busy16, pool, allboth, planner")
		goodput    = flag.Bool("goodput", false, "print goodput tables instead (per workload and transfer cost: aggregated, always-P/D at every split, and the deciders of -modes at the -prefill splits, at the tight and the relaxed goal; -rates is ignored)")
		curves     = flag.String("curves", "", "with -goodput: write attainment-vs-rate plots for the first workload at transfer ×1 into this directory")
		curveAt    = flag.String("curve-rates", "0.5,1,1.5,2,2.5,3,3.5,4,5,6", "with -curves: the load multipliers of the plots' points")
		phases     = flag.Bool("phases", false, "print the phase-changing run instead: chat, long prompts, chat, -phase-minutes each, at the first of -rates, under aggregated, always-P/D at every split and the deciders of -modes (-transfer-scales' first)")
		attain     = flag.Bool("attain", false, "print the share of requests attaining each goal instead, with the latencies and the planner's role changes (the -phases table's columns), for the first of -workloads at the first of -rates, under the rows of -modes at the -prefill splits (-transfer-scales' first): the simulator's side of fixed-rate process runs")
		procRoles  = flag.String("process-roles", "", "with -roles-plot: plot instead the servers in prefill that bench/pd-kvboth-processes.sh sampled on processes (its .roles files, comma-separated; -phase-minutes: the phases' length)")
		phaseMin   = flag.Duration("phase-minutes", 10*time.Minute, "with -phases: each phase's length, simulated")
		rolePlot   = flag.String("roles-plot", "", "with -phases: write the planner's servers in prefill over time to this .png or .svg")
		searchMin  = flag.Float64("search-min", 0.125, "with -goodput: the lowest load multiplier the search tries (below it, goodput 0: a low rate is a long simulated run)")
		plannerOpt = flag.String("planner", "", "the planner's options as JSON (disagg.PlannerOptions; durations in nanoseconds), e.g. {\"window\":3000000000}")
		static     = flag.Bool("phase-static", true, "with -phases or -goodput: run aggregated and always-P/D at every split beside -modes (false: -modes only; with -goodput, the planner only)")
		curveOnly  = flag.String("curves-only", "", "with -goodput and -curves: no tables, only the plots, with always-P/D at these splits (a list of prefill servers) beside aggregated and the deciders")
	)
	flag.Parse()
	var prefill []int
	for _, f := range strings.Split(*splits, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n >= *servers {
			log.Fatalf("-prefill: %q: want a number of servers between 1 and %d", f, *servers-1)
		}
		prefill = append(prefill, n)
	}
	busy := func(n int) func() disagg.Decider {
		return func() disagg.Decider {
			d, err := disagg.NewPrefix(disagg.PrefixOptions{BusyDecodes: n})
			if err != nil {
				log.Fatal(err)
			}
			return d
		}
	}
	pool := func() disagg.Decider {
		d, err := disagg.NewPoolAware(disagg.PoolAwareOptions{})
		if err != nil {
			log.Fatal(err)
		}
		return d
	}
	planner := func() disagg.Decider {
		var o disagg.PlannerOptions
		if *plannerOpt != "" {
			if err := json.Unmarshal([]byte(*plannerOpt), &o); err != nil {
				log.Fatalf("-planner: %v", err)
			}
		}
		p, err := disagg.NewPlanner(o)
		if err != nil {
			log.Fatal(err)
		}
		return p
	}
	all := []mode{ // prefill: 1 for the disaggregated modes, set below per split
		{"aggregated", "aggregated", 0, nil},
		{"always", "always", 1, func() disagg.Decider { return disagg.Always }},
		{"never", "never", 1, func() disagg.Decider { return disagg.Never }},
		{"prefix", "prefix", 1, busy(0)},
		{"busy4", "prefix busy=4", 1, busy(4)},
		{"busy16", "prefix busy=16", 1, busy(16)},
		{"pool", "pool", 1, pool},
		{"allboth", "all both, prefix", 0, busy(0)},
		{"planner", "planner (kv_both)", 0, planner},
	}
	var modes []mode
	for _, k := range strings.Split(*only, ",") {
		i := slices.IndexFunc(all, func(m mode) bool { return m.key == k })
		if i < 0 {
			log.Fatalf("-modes: unknown mode %q", k)
		}
		m := all[i]
		if m.prefill == 0 {
			modes = append(modes, m)
			continue
		}
		for _, n := range prefill {
			m.prefill = n
			if len(prefill) > 1 {
				m.name = fmt.Sprintf("%s %d+%d", all[i].name, n, *servers-n)
			}
			modes = append(modes, m)
		}
	}
	if *phases {
		rate, scale, ss := fixedRun(*rates, *scales, *seeds)
		rows := modes
		if *static {
			rows = phaseRows(all, modes, *servers)
		}
		phaseTable(os.Stdout, rows, *servers, rate, *phaseMin, ss, *parallel,
			time.Duration(scale*float64(*perToken)), *latency, *rolePlot)
		return
	}
	if *procRoles != "" {
		if *rolePlot == "" {
			log.Fatal("-process-roles needs -roles-plot")
		}
		processRoles(strings.Split(*procRoles, ","), *phaseMin, fmt.Sprintf("Role planner on processes: servers in prefill (real time, %v phases)", *phaseMin), *rolePlot)
		return
	}
	if *attain {
		rate, scale, ss := fixedRun(*rates, *scales, *seeds)
		wl := strings.Split(*workloads, ",")[0]
		pt := time.Duration(scale * float64(*perToken))
		attainTable(os.Stdout, modes, *servers, func(seed uint64) *bench.Workload { return workload(wl, seed, *requests).Scaled(rate) },
			fmt.Sprintf("%s, first %d requests; load ×%g, transfer %v/token + %v", wl, *requests, rate, pt, *latency), ss, *parallel, pt, *latency, "", nil, "")
		return
	}
	if *goodput {
		g := &goodputRun{servers: *servers, requests: *requests, parallel: *parallel, perToken: *perToken, latency: *latency,
			curves: *curves, searchMin: *searchMin, wl: map[wlKey]*bench.Workload{}, agg: map[string][]bench.GoodputResult{}}
		for k := range *seeds {
			g.seeds = append(g.seeds, bench.DefaultSeed+uint64(k))
		}
		for _, f := range strings.Split(*curveAt, ",") {
			m, err := strconv.ParseFloat(f, 64)
			if err != nil || !(m > 0) {
				log.Fatalf("-curve-rates: %q: want a positive number", f)
			}
			g.curveRates = append(g.curveRates, m)
		}
		rows := goodputModes(all, modes, *servers)
		if !*static {
			rows = nil
		}
		for _, m := range modes {
			if m.key == "planner" {
				rows = append(rows, m)
			}
		}
		if *curveOnly != "" {
			sel := []mode{rows[0]}
			for _, f := range strings.Split(*curveOnly, ",") {
				n, err := strconv.Atoi(f)
				if err != nil || n <= 0 || n >= *servers {
					log.Fatalf("-curves-only: %q: want a number of servers between 1 and %d", f, *servers-1)
				}
				sel = append(sel, rows[n])
			}
			sel = append(sel, rows[*servers:]...)
			g.curvesOf(strings.Split(*workloads, ",")[0], 1, sel)
			return
		}
		for w, wl := range strings.Split(*workloads, ",") {
			for _, ss := range strings.Split(*scales, ",") {
				scale, err := strconv.ParseFloat(ss, 64)
				if err != nil {
					log.Fatalf("-transfer-scales: %v", err)
				}
				res := g.goodputTable(os.Stdout, wl, scale, rows)
				if *curves != "" && w == 0 && scale == 1 {
					g.curvesOf(wl, scale, curveRows(rows, res))
				}
			}
		}
		return
	}
	for _, wl := range strings.Split(*workloads, ",") {
		for _, rs := range strings.Split(*rates, ",") {
			rate, err := strconv.ParseFloat(rs, 64)
			if err != nil {
				log.Fatalf("-rates: %v", err)
			}
			for _, ss := range strings.Split(*scales, ",") {
				scale, err := strconv.ParseFloat(ss, 64)
				if err != nil {
					log.Fatalf("-transfer-scales: %v", err)
				}
				table(os.Stdout, wl, rate, scale, modes, *servers, *splits, *requests, *seeds, *parallel,
					time.Duration(scale*float64(*perToken)), *latency)
			}
		}
	}
}

// curveRows picks the rows of the attainment plots: aggregated, always-P/D at its best split for
// each goal, and the deciders.
func curveRows(rows []mode, res [][]bench.GoodputResult) []mode {
	out := []mode{rows[0]}
	for g := range res[0] {
		best := -1
		for i, m := range rows {
			if m.key == "always" && (best < 0 || res[i][g].PerServer > res[best][g].PerServer) {
				best = i
			}
		}
		if best >= 0 && !slices.ContainsFunc(out, func(m mode) bool { return m.name == rows[best].name }) {
			out = append(out, rows[best])
		}
	}
	for _, m := range rows {
		if m.key != "always" && m.key != "aggregated" {
			out = append(out, m)
		}
	}
	return out
}

// workload builds the named workload for seed.
func workload(name string, seed uint64, n int) *bench.Workload {
	var w *bench.Workload
	switch name {
	case "long-prompt":
		return bench.LongPrompts(n, seed)
	case "chat":
		w = bench.Chat(bench.ChatOptions{Seed: seed})
	case "chat-full":
		return bench.Chat(bench.ChatOptions{Seed: seed})
	default:
		log.Fatalf("unknown workload %q", name)
	}
	return w.Head(n)
}

type row struct {
	mode string
	res  []*bench.Result
}

func table(out *os.File, wl string, rate, scale float64, modes []mode, servers int, splits string, requests, seeds, parallel int, perToken, latency time.Duration) {
	rows := make([]row, len(modes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(parallel, 1))
	var mu sync.Mutex
	for m, md := range modes {
		rows[m].mode = md.name
		rows[m].res = make([]*bench.Result, seeds)
		for k := range seeds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				seed := bench.DefaultSeed + uint64(k)
				cfg := bench.Config{Servers: servers, Seed: seed, PrefillServers: md.prefill, TransferPerToken: perToken, TransferLatency: latency,
					Profile: bench.Qwen3Profile()}
				if md.decider != nil {
					cfg.Decider = md.decider()
				}
				res, err := bench.Run(workload(wl, seed, requests).Scaled(rate), cfg)
				if err != nil {
					log.Fatal(err)
				}
				mu.Lock()
				rows[m].res[k] = res
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	fmt.Fprintf(out, "\n**%s, load ×%g, transfer %v/token + %v** (%d servers; disaggregated modes %s of them prefill servers; %d seeds, median and range)\n\n",
		wl, rate, perToken, latency, servers, splits, seeds)
	fmt.Fprintln(out, "| mode | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | disaggregated | transfer mean | completed |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		get := func(f func(*bench.Result) float64) []float64 {
			var v []float64
			for _, x := range r.res {
				v = append(v, f(x))
			}
			slices.Sort(v)
			return v
		}
		ms := func(f func(*bench.Result) time.Duration, digits int) string {
			v := get(func(x *bench.Result) float64 { return float64(f(x)) / 1e6 })
			return fmt.Sprintf("%.*f (%.*f–%.*f) ms", digits, v[len(v)/2], digits, v[0], digits, v[len(v)-1])
		}
		dis := get(func(x *bench.Result) float64 { return x.Disaggregated })
		done := get(func(x *bench.Result) float64 { return float64(x.Completed) / float64(max(x.Sent, 1)) })
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %.2f | %s | %.3f |\n", r.mode,
			ms(func(x *bench.Result) time.Duration { return x.TTFT.P50 }, 0), ms(func(x *bench.Result) time.Duration { return x.TTFT.P99 }, 0),
			ms(func(x *bench.Result) time.Duration { return x.TPOT.P50 }, 1), ms(func(x *bench.Result) time.Duration { return x.TPOT.P99 }, 1),
			dis[len(dis)/2], ms(func(x *bench.Result) time.Duration { return x.TransferMean }, 1), done[len(done)/2])
	}
}

// fixedRun reads what a run at one fixed rate (-phases, -attain) takes from the flags: the
// first of -rates, the first of -transfer-scales, and the seeds.
func fixedRun(rates, scales string, seeds int) (rate, scale float64, ss []uint64) {
	rate, err := strconv.ParseFloat(strings.Split(rates, ",")[0], 64)
	if err != nil {
		log.Fatalf("-rates: %v", err)
	}
	scale, err = strconv.ParseFloat(strings.Split(scales, ",")[0], 64)
	if err != nil {
		log.Fatalf("-transfer-scales: %v", err)
	}
	for k := range seeds {
		ss = append(ss, bench.DefaultSeed+uint64(k))
	}
	return rate, scale, ss
}
