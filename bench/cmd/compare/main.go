// Command compare runs the bench simulator over a matrix of admission policies and routers, at
// one load or a sweep of loads, and prints markdown tables (bench/README.md keeps the current
// ones with the commands that produced them).
//
//	go run ./bench/cmd/compare                         # Mooncake trace, ×4 load, whole matrix
//	go run ./bench/cmd/compare -sweep 2,4,6,8          # a sweep; the goal check picks the knee
//	go run ./bench/cmd/compare -workload agentic -policies fcfs,llm-d-turn,bounded-wait
//
// Configurations run in parallel (-parallel, default the number of CPUs), each in one
// goroutine; a progress line goes to stderr.
package main

import (
	"context"
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
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		workload = flag.String("workload", "mooncake", "mooncake, chat, agentic or bursty")
		trace    = flag.String("trace", "", "Mooncake trace path (default: shared/traces/"+bench.MooncakeTraceName+" found above the working directory)")
		requests = flag.Int("requests", 0, "use only the first N requests (0: all)")
		rate     = flag.Float64("rate", 4, "load: arrival rate multiplier")
		sweep    = flag.String("sweep", "", "comma-separated rate multipliers (overrides -rate)")
		policies = flag.String("policies", "all", "comma-separated policies, or all")
		routers  = flag.String("routers", "all", "comma-separated routers, or all")
		servers  = flag.Int("servers", bench.DefaultServers, "model servers")
		gate     = flag.String("gate", "concurrency", "admission gate: concurrency, saturation, both or none")
		inflight = flag.Int("max-inflight", bench.DefaultMaxInFlight, "concurrency gate: requests in flight per server")
		ttl      = flag.Duration("ttl", 60*time.Second, "admission TTL")
		scrape   = flag.Duration("scrape", bench.DefaultScrapeInterval, "metrics scrape interval")
		stale    = flag.Duration("stale", 0, "router staleness limit (0: routing's default, 2s)")
		seed     = flag.Uint64("seed", bench.DefaultSeed, "seed for the router and the synthetic workloads")
		parallel = flag.Int("parallel", runtime.NumCPU(), "configurations run at once")
		goal     = flag.Bool("goal", true, "print the goal check after the tables")
		kvBlocks = flag.Int("kv-blocks", 0, "KV cache blocks per server (0: the profile's, 4500 of 64 tokens)")
	)
	flag.Parse()

	w, err := load(*workload, *trace, *seed)
	if err != nil {
		return err
	}
	if *requests > 0 {
		w = w.Head(*requests)
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
	profile := bench.BenchProfile()
	if *kvBlocks > 0 {
		profile.NumBlocks = *kvBlocks
	}
	base := bench.Config{
		Profile: profile,
		Servers: *servers, Gate: g, MaxInFlight: *inflight, TTL: *ttl,
		ScrapeInterval: *scrape, StaleAfter: *stale, Seed: *seed,
	}

	type job struct {
		w    *bench.Workload
		rate float64
		cfg  bench.Config
	}
	var jobs []job
	for _, r := range rs {
		sw := w.Scaled(r)
		for _, p := range ps {
			for _, ro := range ros {
				c := base
				c.Policy, c.Router = p, ro
				jobs = append(jobs, job{sw, r, c})
			}
		}
	}
	st := w.Stats()
	fmt.Fprintf(os.Stderr, "%s: %d requests, %d sessions, mean prompt %.0f, mean output %.0f, ideal block hit rate %.1f%%; %d configurations\n",
		w.Name, st.Requests, st.Sessions, st.MeanPrompt, st.MeanOutp, 100*st.IdealBlockHitRate, len(jobs))

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
			fmt.Fprintf(os.Stderr, "\r[%d/%d] ×%g %s × %s: %.2f req/s, p99 TTFT %.1fs (%.1fs)      ",
				done, len(jobs), j.rate, j.cfg.Policy.Name, j.cfg.Router.Name, res.ReqPerSec, res.TTFT.P99.Seconds(), res.Wall.Seconds())
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

	fmt.Printf("Workload %s: %d requests, %d sessions; %d servers (%s, %d KV blocks of %d tokens), gate %s (%d in flight per server), TTL %v, scrape %v, seed %d.\n\n",
		w.Name, st.Requests, st.Sessions, base.Servers, profile.Name, profile.NumBlocks, profile.BlockSize, g, base.MaxInFlight, base.TTL, base.ScrapeInterval, base.Seed)
	if err := bench.WriteTables(os.Stdout, results); err != nil {
		return err
	}
	if *goal {
		return bench.WriteGoal(os.Stdout, results)
	}
	return nil
}

// load returns the named workload.
func load(name, trace string, seed uint64) (*bench.Workload, error) {
	switch name {
	case "mooncake":
		if trace == "" {
			p, err := bench.FindTrace(bench.MooncakeTraceName)
			if err != nil {
				return nil, fmt.Errorf("%w (pass -trace, or use -workload chat|agentic|bursty)", err)
			}
			trace = p
		}
		return bench.LoadMooncakeFile(trace, bench.MooncakeOptions{})
	case "chat":
		return bench.Chat(bench.ChatOptions{Seed: seed}), nil
	case "agentic":
		return bench.Agentic(bench.AgenticOptions{Seed: seed}), nil
	case "bursty":
		return bench.Bursty(bench.BurstyOptions{Seed: seed}), nil
	}
	return nil, fmt.Errorf("unknown workload %q", name)
}
