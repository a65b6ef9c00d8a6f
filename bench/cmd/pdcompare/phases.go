package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/bench"
)

// The -phases mode: one phase-changing workload — chat, then long prompts, then chat again,
// -phase-minutes of simulated time each — at one load multiplier (-rates' first) under
// aggregated serving, always-P/D at every split of the fleet, the deciders of -modes at their
// splits and the role planner: the share of requests attaining each goal over the whole run,
// and the planner's role changes (a plot of its servers in prefill over time with -curves).

// phaseWorkload is the phase-changing workload for seed at load multiplier rate.
func phaseWorkload(seed uint64, rate float64, phase time.Duration) *bench.Workload {
	w, err := bench.PhaseMix(seed, rate, phase)
	if err != nil {
		log.Fatal(err)
	}
	return w
}

// phaseRows returns the rows of the -phases table: aggregated, always-P/D at every split, the
// other deciders of modes and the planner.
func phaseRows(all, modes []mode, servers int) []mode {
	out := staticModes(all, servers)
	for _, m := range modes {
		switch m.key {
		case "aggregated", "always", "never", "allboth":
		default:
			if m.prefill > 0 && !slices.ContainsFunc(out, func(o mode) bool { return o.name == m.name }) {
				m.name = fmt.Sprintf("%s %d+%d", all[slices.IndexFunc(all, func(a mode) bool { return a.key == m.key })].name, m.prefill, servers-m.prefill)
			}
			out = append(out, m)
		}
	}
	return out
}

// phaseTable runs rows on the phase workload and prints the table; with plot set, it writes
// the planner's servers in prefill over time there (every seed).
func phaseTable(out io.Writer, rows []mode, servers int, rate float64, phase time.Duration, seeds []uint64, parallel int,
	perToken, latency time.Duration, plot string) {
	title := fmt.Sprintf("Phases: chat %v, long prompts %v, chat %v; load ×%g, transfer %v/token + %v", phase, phase, phase, rate, perToken, latency)
	build := func(seed uint64) *bench.Workload { return phaseWorkload(seed, rate, phase) }
	attainTable(out, rows, servers, build, title, seeds, parallel, perToken, latency, plot, []time.Duration{phase, 2 * phase},
		fmt.Sprintf("Role planner: servers in prefill (simulated time; %d servers; chat, long prompts, chat; load ×%g)", servers, rate))
}

// attainTable runs rows on the workloads build makes (one per seed) and prints the share of
// requests attaining each goal, the latencies and the planner's role changes under title;
// with plot set, it writes the planner's servers in prefill over time there (every seed; marks
// at the times of marks, the plot titled plotTitle).
func attainTable(out io.Writer, rows []mode, servers int, build func(seed uint64) *bench.Workload, title string, seeds []uint64, parallel int,
	perToken, latency time.Duration, plot string, marks []time.Duration, plotTitle string) {
	start := time.Now()
	res := make([][]*bench.Result, len(rows))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(parallel, 1))
	var mu sync.Mutex
	wls := map[uint64]*bench.Workload{}
	workload := func(seed uint64) *bench.Workload {
		mu.Lock()
		defer mu.Unlock()
		if w, ok := wls[seed]; ok {
			return w
		}
		w := build(seed)
		wls[seed] = w
		return w
	}
	for i, md := range rows {
		res[i] = make([]*bench.Result, len(seeds))
		for k, seed := range seeds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				cfg := bench.Config{Servers: servers, Seed: seed, PrefillServers: md.prefill, TransferPerToken: perToken, TransferLatency: latency,
					Profile: bench.Qwen3Profile(), Goals: bench.DefaultGoals()}
				if md.decider != nil {
					cfg.Decider = md.decider()
				}
				r, err := bench.Run(workload(seed), cfg)
				if err != nil {
					log.Fatal(err)
				}
				res[i][k] = r
			}()
		}
	}
	wg.Wait()
	fmt.Fprintf(out, "\n**%s** (%d servers, %d seeds, median and range; share of all requests attaining each goal over the whole run)\n\n",
		title, servers, len(seeds))
	fmt.Fprintln(out, "| mode | tight | relaxed | TTFT p50 | TTFT p99 | TPOT p99 | disaggregated | role changes | changes per server per 30 s |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	var series []bench.RoleSeries
	for i, md := range rows {
		get := func(f func(*bench.Result) float64) bench.Spread {
			var v []float64
			for _, r := range res[i] {
				v = append(v, f(r))
			}
			return bench.SpreadOf(v)
		}
		ms := func(f func(*bench.Result) time.Duration) string {
			s := get(func(r *bench.Result) float64 { return float64(f(r)) / 1e6 })
			return fmt.Sprintf("%.0f (%.0f–%.0f) ms", s.Median, s.Min, s.Max)
		}
		share := func(g int) string {
			s := get(func(r *bench.Result) float64 { return r.Attained[g] })
			return fmt.Sprintf("%.3f (%.3f–%.3f)", s.Median, s.Min, s.Max)
		}
		changes := get(func(r *bench.Result) float64 { return float64(r.RoleChanges) })
		rate := get(func(r *bench.Result) float64 {
			return float64(r.RoleChanges) / float64(servers) / (r.Span.Seconds() / 30)
		})
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %.2f | %.0f (%.0f–%.0f) | %.3f (max %.3f) |\n", md.name, share(0), share(1),
			ms(func(r *bench.Result) time.Duration { return r.TTFT.P50 }), ms(func(r *bench.Result) time.Duration { return r.TTFT.P99 }),
			ms(func(r *bench.Result) time.Duration { return r.TPOT.P99 }),
			get(func(r *bench.Result) float64 { return r.Disaggregated }).Median, changes.Median, changes.Min, changes.Max, rate.Median, rate.Max)
		if md.key == "planner" {
			for k, r := range res[i] {
				series = append(series, bench.RoleSeries{Name: fmt.Sprintf("%s, seed %d", md.name, seeds[k]), Samples: r.Roles, End: r.Span})
			}
		}
	}
	if plot != "" && len(series) > 0 {
		if err := bench.PlotRoles(series, marks, plotTitle, plot); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("pdcompare: %s: %d rows in %v", title, len(rows), time.Since(start).Round(time.Second))
}

// processRoles plots the servers in prefill over time that bench/pd-kvboth-processes.sh
// sampled on processes (files of "SECONDS SERVERS" lines, one per run) to plot, with marks at
// the phases' ends.
func processRoles(files []string, phase time.Duration, title, plot string) {
	var series []bench.RoleSeries
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			log.Fatal(err)
		}
		s := bench.RoleSeries{Name: strings.TrimSuffix(filepath.Base(f), ".roles")}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var sec float64
			var n int
			if _, err := fmt.Sscan(line, &sec, &n); err != nil {
				log.Fatalf("%s: %q: %v", f, line, err)
			}
			at := time.Duration(sec * float64(time.Second))
			s.Samples = append(s.Samples, bench.RoleSample{At: at, Prefill: n})
			s.End = at
		}
		series = append(series, s)
	}
	if err := bench.PlotRoles(series, []time.Duration{phase, 2 * phase}, title, plot); err != nil {
		log.Fatal(err)
	}
}
