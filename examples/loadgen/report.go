package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/usher-llm/usher/bench"
)

// percentile returns the q-quantile (0 ≤ q ≤ 1) of sorted values by linear interpolation
// between the closest ranks (the "R-7" definition of NumPy's and R's defaults): rank
// h = (n−1)·q, value x[⌊h⌋] + (h−⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]). NaN for no values. O(1).
func percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	h := float64(n-1) * min(max(q, 0), 1)
	lo := int(h)
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Dist summarises a latency distribution, in milliseconds.
type Dist struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Mean  float64 `json:"mean_ms"`
	Max   float64 `json:"max_ms"`
}

// distOf sorts ms in place and summarises it. O(n log n).
func distOf(ms []float64) Dist {
	if len(ms) == 0 {
		return Dist{}
	}
	slices.Sort(ms)
	sum := 0.0
	for _, v := range ms {
		sum += v
	}
	return Dist{Count: len(ms), P50: percentile(ms, 0.50), P90: percentile(ms, 0.90), P99: percentile(ms, 0.99),
		Mean: sum / float64(len(ms)), Max: ms[len(ms)-1]}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TurnClass is the figures of first turns or of later turns.
type TurnClass struct {
	Requests     int     `json:"requests"`
	OK           int     `json:"ok"`
	Errors       int     `json:"errors"`
	Rejected429  int     `json:"rejected_429"`
	Rejected503  int     `json:"rejected_503"`
	TTFT         Dist    `json:"ttft"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"prefix_hit_rate"`
}

// Report is the summary of a run.
type Report struct {
	// Label is the run's name, from -label.
	Label           string    `json:"label,omitempty"`
	Target          string    `json:"target"`
	URL             string    `json:"url"`
	Workload        string    `json:"workload"`
	Seconds         float64   `json:"seconds"`
	Requests        int       `json:"requests"`
	OK              int       `json:"ok"`
	Errors          int       `json:"errors"`
	Rejected429     int       `json:"rejected_429"`
	Rejected503     int       `json:"rejected_503"`
	RequestsPerSec  float64   `json:"requests_per_sec"`
	OutputTokPerSec float64   `json:"output_tokens_per_sec"`
	OutputTokens    int64     `json:"output_tokens"`
	PromptTokens    int64     `json:"prompt_tokens"`
	CachedTokens    int64     `json:"cached_tokens"`
	HitRate         float64   `json:"prefix_hit_rate"`
	TTFT            Dist      `json:"ttft"`
	ITL             Dist      `json:"inter_token"`
	TPOT            Dist      `json:"tpot"` // each answer's mean time per output token after the first (answers of 2 tokens or more)
	E2E             Dist      `json:"e2e"`
	FirstTurn       TurnClass `json:"first_turn"`
	LaterTurns      TurnClass `json:"later_turns"`
	// Goals is the share of requests that met both targets of each of bench's goals
	// (bench.DefaultGoals: tight and relaxed), a failed request counting as a miss.
	Goals []GoalShare `json:"goals"`
	// Tasks is the sessions as tasks (see TaskStats).
	Tasks TaskStats `json:"tasks"`
	// Split is the run divided at -split (nil without it).
	Split        *SplitStats `json:"split,omitempty"`
	ErrorSamples []string    `json:"error_samples,omitempty"`
}

// GoalShare is how many requests attained a goal: TTFT within TTFTMs and a time per output
// token after the first, (e2e − TTFT)/(output − 1), within TPOTMs (bench.Goal.Attains).
type GoalShare struct {
	Name     string  `json:"name"`
	TTFTMs   float64 `json:"ttft_ms"`
	TPOTMs   float64 `json:"tpot_ms"`
	Attained int     `json:"attained"`
	Share    float64 `json:"share"`
}

// summarize builds the report of results measured over elapsed. Rates count successful
// requests; latencies are those of successful requests; errors include requests that were
// rejected after their last retry. O(n log n) in requests and tokens.
func summarize(name, url, workload string, results []result, elapsed time.Duration) Report {
	rep := Report{Target: name, URL: url, Workload: workload, Seconds: elapsed.Seconds()}
	var ttft, itl, tpot, e2e, ttft0, ttft1 []float64
	samples := map[string]bool{}
	goals := bench.DefaultGoals()
	for _, g := range goals {
		rep.Goals = append(rep.Goals, GoalShare{Name: g.Name, TTFTMs: millis(g.TTFT), TPOTMs: millis(g.TPOT)})
	}
	for i := range results {
		r := &results[i]
		if r.cut {
			continue
		}
		rep.Requests++
		cls := &rep.FirstTurn
		if r.turn > 0 {
			cls = &rep.LaterTurns
		}
		cls.Requests++
		cls.Rejected429 += r.rej429
		cls.Rejected503 += r.rej503
		rep.Rejected429 += r.rej429
		rep.Rejected503 += r.rej503
		if !r.ok() {
			rep.Errors++
			cls.Errors++
			if len(samples) < 5 {
				samples[clip(r.err, 160)] = true
			}
			continue
		}
		rep.OK++
		cls.OK++
		for k, g := range goals {
			if g.Attains(r.ttft, r.e2e, r.output) {
				rep.Goals[k].Attained++
			}
		}
		rep.OutputTokens += int64(r.output)
		rep.PromptTokens += int64(r.prompt)
		rep.CachedTokens += int64(r.cached)
		cls.PromptTokens += int64(r.prompt)
		cls.CachedTokens += int64(r.cached)
		ttft = append(ttft, millis(r.ttft))
		e2e = append(e2e, millis(r.e2e))
		if r.output > 1 {
			tpot = append(tpot, millis(r.e2e-r.ttft)/float64(r.output-1))
		}
		if r.turn > 0 {
			ttft1 = append(ttft1, millis(r.ttft))
		} else {
			ttft0 = append(ttft0, millis(r.ttft))
		}
		for _, d := range r.itl {
			itl = append(itl, millis(d))
		}
	}
	for s := range samples {
		rep.ErrorSamples = append(rep.ErrorSamples, s)
	}
	slices.Sort(rep.ErrorSamples)
	rep.TTFT, rep.ITL, rep.TPOT, rep.E2E = distOf(ttft), distOf(itl), distOf(tpot), distOf(e2e)
	rep.FirstTurn.TTFT, rep.LaterTurns.TTFT = distOf(ttft0), distOf(ttft1)
	rep.HitRate = ratio(rep.CachedTokens, rep.PromptTokens)
	for k := range rep.Goals {
		rep.Goals[k].Share = ratio(int64(rep.Goals[k].Attained), int64(rep.Requests))
	}
	rep.FirstTurn.HitRate = ratio(rep.FirstTurn.CachedTokens, rep.FirstTurn.PromptTokens)
	rep.LaterTurns.HitRate = ratio(rep.LaterTurns.CachedTokens, rep.LaterTurns.PromptTokens)
	if s := elapsed.Seconds(); s > 0 {
		rep.RequestsPerSec = float64(rep.OK) / s
		rep.OutputTokPerSec = float64(rep.OutputTokens) / s
	}
	return rep
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// WriteText writes the report as readable tables.
func (r *Report) WriteText(w io.Writer) {
	if r.Label != "" {
		fmt.Fprintf(w, "%s: ", r.Label)
	}
	fmt.Fprintf(w, "%s  %s  (%s)\n", r.Target, r.URL, r.Workload)
	fmt.Fprintf(w, "requests %d: ok %d, errors %d; rejections 429: %d, 503: %d; %.1f s\n",
		r.Requests, r.OK, r.Errors, r.Rejected429, r.Rejected503, r.Seconds)
	fmt.Fprintf(w, "throughput %.2f req/s, %.0f output tok/s; prefix hit rate %.1f%% (%d of %d prompt tokens cached)\n\n",
		r.RequestsPerSec, r.OutputTokPerSec, 100*r.HitRate, r.CachedTokens, r.PromptTokens)
	for _, g := range r.Goals {
		fmt.Fprintf(w, "%s goal (TTFT ≤ %g ms, TPOT ≤ %g ms): %.1f%% of requests (%d of %d)\n", g.Name, g.TTFTMs, g.TPOTMs, 100*g.Share, g.Attained, r.Requests)
	}
	if len(r.Goals) > 0 {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp90\tp99\tmean\tmax\t")
	for _, row := range []struct {
		name string
		d    Dist
	}{{"TTFT", r.TTFT}, {"inter-token", r.ITL}, {"TPOT", r.TPOT}, {"end-to-end", r.E2E},
		{"TTFT first turn", r.FirstTurn.TTFT}, {"TTFT later turns", r.LaterTurns.TTFT}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", row.name, row.d.Count,
			fmtMs(row.d, row.d.P50), fmtMs(row.d, row.d.P90), fmtMs(row.d, row.d.P99), fmtMs(row.d, row.d.Mean), fmtMs(row.d, row.d.Max))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "turns\trequests\tok\terrors\t429\t503\thit rate\t")
	for _, row := range []struct {
		name string
		c    TurnClass
	}{{"first", r.FirstTurn}, {"later", r.LaterTurns}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", row.name, row.c.Requests, row.c.OK, row.c.Errors,
			row.c.Rejected429, row.c.Rejected503, 100*row.c.HitRate)
	}
	tw.Flush()
	fmt.Fprintln(w)
	t := &r.Tasks
	fmt.Fprintf(w, "sessions %d: completed %d, abandoned %d (%.1f%%), censored %d; idle limit %s\n",
		t.Sessions, t.Completed, t.Abandoned, 100*t.AbandonedShare, t.Censored, time.Duration(t.IdleLimitMs*float64(time.Millisecond)).Round(time.Millisecond))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "completed sessions (ms)\tcount\tp50\tp90\tp99\tmean\tmax\t")
	for _, row := range []struct {
		name string
		d    Dist
	}{{"task completion time", t.Time}, {"sum of response times", t.Response}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", row.name, row.d.Count,
			fmtMs(row.d, row.d.P50), fmtMs(row.d, row.d.P90), fmtMs(row.d, row.d.P99), fmtMs(row.d, row.d.Mean), fmtMs(row.d, row.d.Max))
	}
	tw.Flush()
	if len(r.ErrorSamples) > 0 {
		fmt.Fprintf(w, "\nerrors, for example:\n  %s\n", strings.Join(r.ErrorSamples, "\n  "))
	}
}

func fmtMs(d Dist, v float64) string {
	if d.Count == 0 {
		return "-"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
