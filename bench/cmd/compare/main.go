// Command compare runs the bench simulator over a matrix of admission policies and routers, at
// one load or a sweep of loads, under several seeds, and prints markdown tables
// (bench/README.md keeps the current ones with the commands that produced them).
//
//	go run ./bench/cmd/compare                         # Mooncake trace, ×4 load, whole matrix, 3 seeds
//	go run ./bench/cmd/compare -sweep 2,4,6,8          # a sweep; the goal check picks the knee
//	go run ./bench/cmd/compare -workload agentic -policies fcfs,turn-priority,bounded-wait
//	go run ./bench/cmd/compare -workload prefix-group -policies fcfs -seeds 5
//	go run ./bench/cmd/compare -policies fcfs -routers usher -replica-sweep 1,3:none,3:10ms,3:200ms
//	go run ./bench/cmd/compare -lora                   # LoRA adapters: adapter-blind vs affine
//
// -slow 1:3@300s makes server 1 three times slower from virtual time 300 s on, and the table
// of the latency models' prediction error then shows it before and after.
//
// -slo-ttft 2s -slo-tpot 80ms gives every request latency targets: routed by them, admitted
// by them as the gateway admits (deadline arrival + target − predicted TTFT, early shedding
// on), and counted in a table of SLO attainment; -slo-later-ttft and -slo-later-tpot give
// later turns targets of their own, and -policies slo orders the queue by each target.
//
// -replicas K puts K gateway replicas in front of the servers (requests dealt round-robin),
// which share what they learn SyncLag late (-sync-lag, a duration or "none"); -replica-sweep
// runs every configuration at each of a list of K:lag settings and ends with a table of them
// side by side.
//
// Workloads with sessions get a table of sessions as tasks (bench.TaskStats): task completion
// time from a session's first arrival to its last answer, the sum of its response times, the
// share abandoned and the sessions the end of the run censored; -session-idle sets the idle
// limit after which a session is over. -json FILE writes every run's bench.Result as JSON.
//
// Every configuration runs once per seed (-seeds, from -seed up): the seed generates the
// synthetic workloads and drives the router's random choices (the Mooncake trace itself does
// not change). The tables give each figure as the median over the seeds with its min–max
// range, and the goal check calls a tie where the ranges of usher and the best peer overlap.
//
// Configurations run in parallel (-parallel, default the number of CPUs), each in one
// goroutine; a progress line goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/usher-llm/usher/bench"
	"github.com/usher-llm/usher/routing"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		workload  = flag.String("workload", "mooncake", "workload: "+bench.WorkloadNames())
		trace     = flag.String("trace", "", "Mooncake-format trace path for -workload mooncake and trace-sessions (default: the conversation trace shipped in bench/traces)")
		requests  = flag.Int("requests", 0, "use only the first N requests (0: all)")
		rate      = flag.Float64("rate", 4, "load: arrival rate multiplier")
		sweep     = flag.String("sweep", "", "comma-separated rate multipliers (overrides -rate)")
		policies  = flag.String("policies", "all", "comma-separated policies, or all")
		routers   = flag.String("routers", "all", "comma-separated routers, or all")
		servers   = flag.Int("servers", bench.DefaultServers, "model servers")
		gate      = flag.String("gate", "concurrency", "admission gate: concurrency, saturation, both or none")
		inflight  = flag.Int("max-inflight", bench.DefaultMaxInFlight, "concurrency gate: requests in flight per server")
		ttl       = flag.Duration("ttl", 60*time.Second, "admission TTL")
		scrape    = flag.Duration("scrape", bench.DefaultScrapeInterval, "metrics scrape interval")
		stale     = flag.Duration("stale", 0, "router staleness limit (0: routing's default, 2s)")
		seed      = flag.Uint64("seed", bench.DefaultSeed, "first seed for the router and the synthetic workloads")
		seeds     = flag.Int("seeds", 3, "seeds per configuration (seed, seed+1, ...); tables show the median and min–max")
		parallel  = flag.Int("parallel", runtime.NumCPU(), "configurations run at once")
		goal      = flag.Bool("goal", true, "print the goal check after the tables")
		kvBlocks  = flag.Int("kv-blocks", 0, "KV cache blocks per server (0: the profile's, 4500 of 64 tokens)")
		index     = flag.String("index", "auto", "prefix index: auto (exact for routers built on KV events), approx or exact for all")
		evDelay   = flag.Duration("event-delay", bench.DefaultEventDelay, "exact mode: delay from an engine's step to its KV events reaching the index")
		frontend  = flag.Duration("frontend", 0, "time from the pick to the request's arrival in the engine (HTTP, parsing, tokenizing), plus -frontend-per-token per prompt token")
		frontTok  = flag.Duration("frontend-per-token", 0, "time per prompt token from the pick to the engine (see -frontend), e.g. 500ns")
		shed      = flag.String("early-shed", "off", "early shedding in the gateway queue: off, on, or both (every policy twice, the shedding one named POLICY+shed)")
		plotDir   = flag.String("plot", "", "write the admission frontier of every rate (and the knee of a sweep, and hit rate against KV of a -kv-sweep) as PNG and SVG into this directory")
		kvSweep   = flag.String("kv-sweep", "", "comma-separated KV cache blocks per server: run everything at each (overrides -kv-blocks), print the tables of each, and plot hit rate against KV")
		replicas  = flag.Int("replicas", 1, "gateway replicas in front of the servers, each with its own queue (its share of the limit), router, prefix index and session table")
		syncLag   = flag.String("sync-lag", "0", "with -replicas > 1: how late one replica's changes (prefix chains, session placements, in-flight counts, flushed every -sync-interval) reach the others, a duration, or none (never: each replica alone)")
		syncEvery = flag.Duration("sync-interval", bench.DefaultSyncInterval, "with -replicas > 1: how often each replica flushes what it learnt")
		repSweep  = flag.String("replica-sweep", "", "comma-separated replica settings K or K:LAG (LAG a duration or none), e.g. 1,3:none,3:10ms,3:200ms: run everything at each (overrides -replicas and -sync-lag), print the tables of each and a table of all")
		spread    = flag.Bool("spread-arrivals", false, "spread open-loop requests that arrive at the same instant evenly up to the next instant (the Mooncake trace's timestamps are 3 s apart, about ten requests each)")
		lora      = flag.Bool("lora", false, "run the LoRA comparison instead (bench/README.md, \"LoRA adapters\"): adapter-blind usher against usher with GIE's LoRA tiers and usher+adapter on the LoRA workload at 0.5, 1 and 2 times the adapter load cost, with -seeds, -seed, -servers (default 8 here), -requests, -rate (default 24/s here) and -parallel")
		loraSlots = flag.Int("lora-slots", 4, "with -lora: adapter slots per server")
		loraCost  = flag.Duration("lora-load-cost", bench.DefaultAdapterLoadCost, "with -lora: the adapter load cost, also run at half and twice")
		slow      = flag.String("slow", "", "comma-separated server slowdowns SERVER:FACTOR@TIME, e.g. 1:3@300s (server 1's steps take 3 times as long from virtual time 300 s; a later one of the same server replaces it, FACTOR 1 restores it); the prediction-error table then splits before and after")
		sloTTFT   = flag.Duration("slo-ttft", 0, "latency target: time to first token from arrival, set on every request (routing.Request.Targets) and admitted as the gateway admits it (deadline arrival + target − predicted TTFT, early shedding on); adds an SLO attainment table (0: none)")
		sloTPOT   = flag.Duration("slo-tpot", 0, "latency target: time per output token after the first (see -slo-ttft; 0: none)")
		laterTTFT = flag.Duration("slo-later-ttft", 0, "later turns of a session: their TTFT target instead of -slo-ttft (0: -slo-ttft's, unless -slo-later-tpot is set)")
		laterTPOT = flag.Duration("slo-later-tpot", 0, "later turns of a session: their TPOT target instead of -slo-tpot (0: -slo-tpot's, unless -slo-later-ttft is set)")
		shedAbove = flag.Float64("slo-shed-above", 0, "with targets: refuse on arrival a request whose router predicts no server can serve it within this many times its TTFT target (routers with a latency model only; the gateway's -slo-shed-above; 0: off)")
		idle      = flag.Duration("session-idle", 0, "a session is over, abandoned, when no turn of it arrives within this long of its previous answer (task completion times); 0: twice the workload's longest think time")
		jsonOut   = flag.String("json", "", "also write every run's result (bench.Result, with its task completion times in Tasks) as a JSON array to this file")
		after     = flag.String("after-shed", "end", "a closed-loop session whose turn is shed or fails: end (its later turns are abandoned) or continue (its next turn is still sent, so every policy is offered the same turns)")
	)
	flag.Parse()

	if *seeds < 1 || *seed == 0 {
		return fmt.Errorf("need -seeds ≥ 1 and -seed ≥ 1 (got %d and %d)", *seeds, *seed)
	}
	if *lora {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o := bench.LoRACompareOptions{Seeds: *seeds, Seed: *seed, Parallel: *parallel, Slots: *loraSlots,
			Costs:   []time.Duration{*loraCost / 2, *loraCost, 2 * *loraCost},
			Routers: []bench.Router{bench.UsherRouter(), bench.GIEAdapterRouter(), bench.AdapterRouter(0)}}
		o.Workload.Requests = *requests
		if set["servers"] {
			o.Servers = *servers
		}
		if set["rate"] {
			o.Workload.Rate = *rate
		}
		rows, err := bench.LoRACompare(o)
		if err != nil {
			return err
		}
		fmt.Print(bench.FormatLoRATable(rows))
		return nil
	}
	// One workload per seed; the trace, which no seed changes, is loaded once.
	seeded := true
	for _, s := range bench.WorkloadSources() {
		if s.Name == *workload {
			seeded = s.Seeded
		}
	}
	var ws []*bench.Workload
	for k := range *seeds {
		if k > 0 && !seeded {
			ws = append(ws, ws[0])
			continue
		}
		w, err := bench.LoadWorkload(*workload, bench.LoadOptions{Seed: *seed + uint64(k), Trace: *trace})
		if err != nil {
			return err
		}
		if *requests > 0 {
			w = w.Head(*requests)
		}
		if *spread {
			w = w.SpreadArrivals()
		}
		ws = append(ws, w)
	}
	rs := []float64{*rate}
	if *sweep != "" {
		rs = rs[:0]
		for _, f := range strings.Split(*sweep, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || !(v > 0) {
				return fmt.Errorf("bad -sweep value %q", f)
			}
			rs = append(rs, v)
		}
	}
	ps, err := bench.SelectPolicies(*policies)
	if err != nil {
		return err
	}
	ros, err := bench.SelectRouters(*routers)
	if err != nil {
		return err
	}
	g, err := bench.ParseGate(*gate)
	if err != nil {
		return err
	}
	im, err := bench.ParseIndexMode(*index)
	if err != nil {
		return err
	}
	profile := bench.BenchProfile()
	if *kvBlocks > 0 {
		profile.NumBlocks = *kvBlocks
	}
	kvs := []int{profile.NumBlocks}
	if *kvSweep != "" {
		kvs = kvs[:0]
		for _, f := range strings.Split(*kvSweep, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v <= 0 {
				return fmt.Errorf("bad -kv-sweep value %q (a positive number of blocks)", f)
			}
			kvs = append(kvs, v)
		}
	}
	type replicaSetting struct {
		n   int
		lag time.Duration
	}
	parseReplicas := func(n int, lag string) (replicaSetting, error) {
		if n < 1 || n > bench.MaxReplicas {
			return replicaSetting{}, fmt.Errorf("bad replica count %d (1 to %d)", n, bench.MaxReplicas)
		}
		if lag == "none" {
			return replicaSetting{n, bench.NoSync}, nil
		}
		d, err := time.ParseDuration(lag)
		if err != nil || d < 0 {
			return replicaSetting{}, fmt.Errorf("bad sync lag %q (a duration ≥ 0, or none)", lag)
		}
		return replicaSetting{n, d}, nil
	}
	if *syncEvery <= 0 {
		return fmt.Errorf("bad -sync-interval %v (> 0)", *syncEvery)
	}
	var reps []replicaSetting
	if *repSweep == "" {
		rp, err := parseReplicas(*replicas, *syncLag)
		if err != nil {
			return err
		}
		reps = append(reps, rp)
	} else {
		for _, f := range strings.Split(*repSweep, ",") {
			n, lag, _ := strings.Cut(strings.TrimSpace(f), ":")
			k, err := strconv.Atoi(n)
			if err != nil {
				return fmt.Errorf("bad -replica-sweep entry %q (K or K:LAG)", f)
			}
			if lag == "" {
				lag = "0"
			}
			rp, err := parseReplicas(k, lag)
			if err != nil {
				return err
			}
			reps = append(reps, rp)
		}
	}
	var continueAfterShed bool
	switch *after {
	case "end":
	case "continue":
		continueAfterShed = true
	default:
		return fmt.Errorf("bad -after-shed %q (end or continue)", *after)
	}
	slowdowns, err := parseSlowdowns(*slow)
	if err != nil {
		return err
	}
	if *sloTTFT < 0 || *sloTPOT < 0 || *laterTTFT < 0 || *laterTPOT < 0 {
		return fmt.Errorf("negative latency target")
	}
	targets := routing.Latency{TTFT: *sloTTFT, TPOT: *sloTPOT}
	var later routing.Latency
	if *laterTTFT > 0 || *laterTPOT > 0 {
		later = routing.Latency{TTFT: *laterTTFT, TPOT: *laterTPOT}
	}
	base := bench.Config{
		Targets: targets, LaterTargets: later, SLOShedAbove: *shedAbove,
		Profile: profile,
		Servers: *servers, Gate: g, MaxInFlight: *inflight, TTL: *ttl,
		ScrapeInterval: *scrape, StaleAfter: *stale,
		Index: im, EventDelay: *evDelay,
		Frontend: *frontend, FrontendPerToken: *frontTok,
		ContinueAfterShed: continueAfterShed,
		SessionIdle:       *idle,
		Slowdowns:         slowdowns,
	}

	type job struct {
		w    *bench.Workload
		rate float64
		kv   int // index into kvs
		rp   int // index into reps
		cfg  bench.Config
	}
	switch *shed {
	case "off":
	case "on", "both":
		var with []bench.Policy
		if *shed == "both" {
			with = append(with, ps...)
		}
		for _, p := range ps {
			p.Name += bench.EarlyShedSuffix
			with = append(with, p)
		}
		ps = with
	default:
		return fmt.Errorf("bad -early-shed %q (off, on or both)", *shed)
	}
	var jobs []job
	for kv, blocks := range kvs {
		for rp, rep := range reps {
			for _, r := range rs {
				for k, w := range ws {
					sw := w.Scaled(r)
					for _, p := range ps {
						for _, ro := range ros {
							c := base
							c.Profile.NumBlocks = blocks
							c.Policy, c.Router, c.Seed = p, ro, *seed+uint64(k)
							c.EarlyShed.Enabled = strings.HasSuffix(p.Name, bench.EarlyShedSuffix) // and with targets (Config.Targets)
							c.Replicas, c.SyncLag, c.SyncInterval = rep.n, rep.lag, *syncEvery
							jobs = append(jobs, job{sw, r, kv, rp, c})
						}
					}
				}
			}
		}
	}
	var requestsOf, sessionsOf []string
	for k, w := range ws {
		st := w.Stats()
		requestsOf = append(requestsOf, strconv.Itoa(st.Requests))
		sessionsOf = append(sessionsOf, strconv.Itoa(st.Sessions))
		fmt.Fprintf(os.Stderr, "%s, seed %d: %d requests, %d sessions, mean prompt %.0f, mean output %.0f, ideal block hit rate %.1f%%\n",
			w.Name, *seed+uint64(k), st.Requests, st.Sessions, st.MeanPrompt, st.MeanOutp, 100*st.IdealBlockHitRate)
	}
	fmt.Fprintf(os.Stderr, "%d configurations × %d seeds = %d runs\n", len(jobs) / *seeds, *seeds, len(jobs))

	results := make([]*bench.Result, len(jobs))
	var mu sync.Mutex
	done := 0
	var events int64
	start := time.Now()
	eg, _ := errgroup.WithContext(context.Background())
	eg.SetLimit(max(*parallel, 1))
	for i, j := range jobs {
		eg.Go(func() error {
			res, err := bench.Run(j.w, j.cfg)
			if err != nil {
				return fmt.Errorf("%s × %s at ×%g: %w", j.cfg.Policy.Name, j.cfg.Router.Name, j.rate, err)
			}
			res.Rate = j.rate
			results[i] = res
			mu.Lock()
			done++
			events += res.Events
			fmt.Fprintf(os.Stderr, "\r[%d/%d] ×%g %s × %s%s, seed %d: %.2f req/s, p99 TTFT %.1fs (%.1fs)      ",
				done, len(jobs), j.rate, j.cfg.Policy.Name, j.cfg.Router.Name, replicaNote(j.cfg.Replicas, j.cfg.SyncLag, *syncEvery), j.cfg.Seed, res.ReqPerSec, res.TTFT.P99.Seconds(), res.Wall.Seconds())
			mu.Unlock()
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		fmt.Fprintln(os.Stderr)
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "\ndone: %d runs, %d events in %v (%.0f events/s over all runs)\n", len(jobs), events, el.Round(time.Millisecond), float64(events)/el.Seconds())

	if *jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	seedsOf := strconv.FormatUint(*seed, 10)
	if *seeds > 1 {
		seedsOf = fmt.Sprintf("%d–%d", *seed, *seed+uint64(*seeds-1))
	}
	var points []bench.KVPoint
	for kv, blocks := range kvs {
		var ofKV []*bench.Result
		for rp, rep := range reps {
			var mine []*bench.Result
			for i, j := range jobs {
				if j.kv == kv && j.rp == rp {
					mine = append(mine, results[i])
					if r := results[i]; len(reps) == 1 {
						points = append(points, bench.KVPoint{Router: r.Router, KVBlocks: blocks, HitOverIdeal: hitOverIdeal(r)})
					}
				}
			}
			ofKV = append(ofKV, mine...)
			if kv > 0 || rp > 0 {
				fmt.Println()
			}
			fmt.Printf("Workload %s: %s requests, %s sessions; %d servers (%s, %d KV blocks of %d tokens), gate %s (%d in flight per server), TTL %v, scrape %v, seeds %s%s%s%s%s%s%s.\n\n",
				ws[0].Name, perSeed(requestsOf), perSeed(sessionsOf), base.Servers, profile.Name, blocks, profile.BlockSize, g, base.MaxInFlight, base.TTL, base.ScrapeInterval, seedsOf,
				replicaNote(rep.n, rep.lag, *syncEvery), spreadNote(*spread), afterShedNote(continueAfterShed), frontendNote(*frontend, *frontTok), slowNote(slowdowns), sloNote(targets, later, *shedAbove))
			if err := bench.WriteTables(os.Stdout, mine); err != nil {
				return err
			}
			if *goal {
				if err := bench.WriteGoal(os.Stdout, mine); err != nil {
					return err
				}
			}
			if *plotDir != "" && len(kvs) == 1 && len(reps) == 1 {
				paths, err := bench.WritePlots(*plotDir, mine)
				for _, p := range paths {
					fmt.Fprintln(os.Stderr, "wrote", p)
				}
				if err != nil {
					return err
				}
			}
		}
		if len(reps) > 1 {
			fmt.Printf("### Gateway replicas side by side\n\n")
			if err := bench.WriteReplicaTable(os.Stdout, ofKV); err != nil {
				return err
			}
		}
	}
	if *plotDir != "" && len(kvs) > 1 {
		paths, err := bench.WriteHitVsKV(*plotDir, ws[0].Name, points)
		for _, p := range paths {
			fmt.Fprintln(os.Stderr, "wrote", p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// hitOverIdeal is a run's hit rate as a share of the ideal one (0 when the ideal is 0).
func hitOverIdeal(r *bench.Result) float64 {
	if r.IdealHitRate <= 0 {
		return 0
	}
	return r.HitRate / r.IdealHitRate
}

// replicaNote says, in the tables' heading, how many gateway replicas there were and how
// they synced; nothing for one.
func replicaNote(n int, lag, every time.Duration) string {
	switch {
	case n <= 1:
		return ""
	case lag < 0:
		return fmt.Sprintf("; %d gateway replicas, no sync", n)
	}
	return fmt.Sprintf("; %d gateway replicas, synced every %v, %v late", n, every, lag)
}

// spreadNote says, in the tables' heading, that bunched arrivals were spread.
func spreadNote(spread bool) string {
	if spread {
		return "; arrivals at one instant spread to the next (-spread-arrivals)"
	}
	return ""
}

// afterShedNote says, in the tables' heading, that shed sessions went on.
func afterShedNote(cont bool) string {
	if cont {
		return "; a shed turn's session continues (equal offered load)"
	}
	return ""
}

// perSeed joins per-seed values with slashes, in seed order ("20007/20000/20000"), or gives
// the one value when every seed has it ("12031").
func perSeed(xs []string) string {
	for _, x := range xs {
		if x != xs[0] {
			return strings.Join(xs, "/")
		}
	}
	return xs[0]
}

// frontendNote describes -frontend and -frontend-per-token for the tables' heading.
func frontendNote(base, perToken time.Duration) string {
	if base == 0 && perToken == 0 {
		return ""
	}
	return fmt.Sprintf("; front end %v + %v per prompt token", base, perToken)
}

// parseSlowdowns parses -slow: comma-separated SERVER:FACTOR@TIME entries.
func parseSlowdowns(list string) ([]bench.Slowdown, error) {
	if list == "" {
		return nil, nil
	}
	var out []bench.Slowdown
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		srv, rest, ok1 := strings.Cut(f, ":")
		factor, at, ok2 := strings.Cut(rest, "@")
		n, err1 := strconv.Atoi(srv)
		x, err2 := strconv.ParseFloat(factor, 64)
		d, err3 := time.ParseDuration(at)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || n < 0 || !(x > 0) || d < 0 {
			return nil, fmt.Errorf("bad -slow entry %q (SERVER:FACTOR@TIME, e.g. 1:3@300s)", f)
		}
		out = append(out, bench.Slowdown{Server: n, Factor: x, At: d})
	}
	return out, nil
}

// sloNote describes the latency targets for the tables' heading.
func sloNote(t, later routing.Latency, shedAbove float64) string {
	if t == (routing.Latency{}) && later == (routing.Latency{}) {
		return ""
	}
	s := "; latency targets " + bench.TargetsString(t, later) + ", SLO admission with early shedding"
	if shedAbove > 0 {
		s += fmt.Sprintf(", refusing on arrival a request predicted above %g× its TTFT target", shedAbove)
	}
	return s
}

// slowNote describes -slow for the tables' heading.
func slowNote(ds []bench.Slowdown) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "; server %d ×%g slower from %v", d.Server, d.Factor, d.At)
	}
	return b.String()
}
