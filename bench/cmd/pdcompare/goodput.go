package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/usher-llm/usher/bench"
)

// The -goodput mode: per workload and transfer cost, one table of every configuration's
// goodput at the two goals (bench.TightGoal, bench.RelaxedGoal): aggregated, always-P/D at
// every split of the fleet, and each decider at the -prefill splits.

// goodputRun is what the -goodput mode needs besides the modes.
type goodputRun struct {
	servers, requests, parallel int
	seeds                       []uint64
	perToken, latency           time.Duration
	searchMin                   float64   // GoodputOptions.Min
	curves                      string    // directory for the attainment plots; empty: none
	curveRates                  []float64 // multipliers of the curves
	mu                          sync.Mutex
	wl                          map[wlKey]*bench.Workload
	agg                         map[string][]bench.GoodputResult // aggregated, by workload (no transfer)
}

type wlKey struct {
	name string
	seed uint64
}

// workload returns the named workload for seed, built once.
func (g *goodputRun) workload(name string, seed uint64) *bench.Workload {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := wlKey{name, seed}
	if w, ok := g.wl[k]; ok {
		return w
	}
	w := workload(name, seed, g.requests)
	g.wl[k] = w
	return w
}

// config returns the configuration of md at transfer scale.
func (g *goodputRun) config(md mode, scale float64) func(uint64) bench.Config {
	return func(seed uint64) bench.Config {
		cfg := bench.Config{Servers: g.servers, Seed: seed, PrefillServers: md.prefill,
			TransferPerToken: time.Duration(scale * float64(g.perToken)), TransferLatency: g.latency, Profile: bench.Qwen3Profile()}
		if md.decider != nil {
			cfg.Decider = md.decider()
		}
		return cfg
	}
}

// staticModes returns aggregated (all[0]) and always-P/D (all[1]) at every split from 1 to
// servers−1, the static rows of the goodput and phase tables.
func staticModes(all []mode, servers int) []mode {
	out := []mode{all[0]}
	for n := 1; n < servers; n++ {
		m := all[1]
		m.prefill, m.name = n, fmt.Sprintf("always %d+%d", n, servers-n)
		out = append(out, m)
	}
	return out
}

// goodputModes returns the rows of the -goodput tables: aggregated, always-P/D at every split
// from 1 to servers−1, and the deciders of modes (never, allboth and always left out) at their
// splits.
func goodputModes(all []mode, modes []mode, servers int) []mode {
	out := staticModes(all, servers)
	for _, m := range modes {
		switch m.key {
		case "prefix", "busy4", "busy16", "pool":
			if m.name == all[slices.IndexFunc(all, func(a mode) bool { return a.key == m.key })].name {
				m.name = fmt.Sprintf("%s %d+%d", m.name, m.prefill, servers-m.prefill)
			}
			out = append(out, m)
		}
	}
	return out
}

// goodputTable measures and prints the goodput table of workload wl at transfer scale, and
// returns the results by row.
func (g *goodputRun) goodputTable(out io.Writer, wl string, scale float64, rows []mode) [][]bench.GoodputResult {
	start := time.Now()
	res := make([][]bench.GoodputResult, len(rows))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(g.parallel, 1))
	for i, md := range rows {
		if md.prefill == 0 && md.decider == nil {
			g.mu.Lock()
			r, ok := g.agg[wl]
			g.mu.Unlock()
			if ok {
				res[i] = r
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := bench.Goodput(bench.GoodputSpec{
				Workload: func(seed uint64) *bench.Workload { return g.workload(wl, seed) },
				Config:   g.config(md, scale),
				Seeds:    g.seeds,
				Options:  bench.GoodputOptions{Min: g.searchMin},
			})
			if err != nil {
				log.Fatal(err)
			}
			res[i] = r
			fmt.Fprintf(os.Stderr, "pdcompare: %s ×%g: %s done (%v)\n", wl, scale, md.name, time.Since(start).Round(time.Second))
			if md.prefill == 0 && md.decider == nil {
				g.mu.Lock()
				g.agg[wl] = r
				g.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "\n**%s, transfer %v/token + %v: goodput** (requests/s per server at which ≥ 90%% of requests meet both targets; %d servers, %d seeds, median and range; 0: missed at load ×%g)\n\n",
		wl, time.Duration(scale*float64(g.perToken)), g.latency, g.servers, len(g.seeds), g.searchMin)
	fmt.Fprintf(out, "| mode | tight: %v | relaxed: %v |\n|---|---|---|\n", goalString(bench.TightGoal), goalString(bench.RelaxedGoal))
	for i, md := range rows {
		fmt.Fprintf(out, "| %s |", md.name)
		for _, r := range res[i] {
			s := bench.SpreadOf(r.Seeds)
			fmt.Fprintf(out, " %.3f (%.3f–%.3f) |", r.PerServer, s.Min, s.Max)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(os.Stderr, "pdcompare: %s ×%g: %d rows in %v\n", wl, scale, len(rows), time.Since(start).Round(time.Second))
	return res
}

func goalString(g bench.Goal) string {
	return fmt.Sprintf("TTFT ≤ %v, TPOT ≤ %v", g.TTFT, g.TPOT)
}

// curvesOf sweeps g.curveRates for each row and writes one attainment plot per goal under
// g.curves: the median over seeds at each multiplier, against the offered rate per server.
func (g *goodputRun) curvesOf(wl string, scale float64, rows []mode) {
	goals := bench.DefaultGoals()
	type pt struct{ rate, att []float64 }
	pts := make([][]pt, len(rows)) // [row][multiplier]
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(g.parallel, 1))
	var mu sync.Mutex
	for i, md := range rows {
		pts[i] = make([]pt, len(g.curveRates))
		for j, m := range g.curveRates {
			for _, seed := range g.seeds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					cfg := g.config(md, scale)(seed)
					cfg.Goals = goals
					res, err := bench.Run(g.workload(wl, seed).Scaled(m), cfg)
					if err != nil {
						log.Fatal(err)
					}
					mu.Lock()
					defer mu.Unlock()
					pts[i][j].rate = append(pts[i][j].rate, float64(res.Sent)/res.Window.Seconds()/float64(g.servers))
					pts[i][j].att = append(pts[i][j].att, res.Attained...)
				}()
			}
		}
	}
	wg.Wait()
	for k, goal := range goals {
		var curves []bench.AttainmentCurve
		for i, md := range rows {
			c := bench.AttainmentCurve{Name: md.name}
			for _, p := range pts[i] {
				var att []float64
				for s := k; s < len(p.att); s += len(goals) {
					att = append(att, p.att[s])
				}
				c.Points = append(c.Points, bench.GoodputPoint{Rate: bench.SpreadOf(p.rate).Median, Attainment: bench.SpreadOf(att).Median})
			}
			curves = append(curves, c)
		}
		path := filepath.Join(g.curves, fmt.Sprintf("goodput-%s-x%g-%s.png", wl, scale, goal.Name))
		title := fmt.Sprintf("%s, transfer ×%g: %s", wl, scale, goalString(goal))
		if err := bench.PlotAttainment(curves, 0.9, title, path); err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "pdcompare: wrote %s\n", path)
	}
}
