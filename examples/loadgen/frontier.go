package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/usher-llm/usher/bench"
)

// The frontier mode (-frontier DIR) reads reports that loadgen -json wrote, one run per
// policy against the same load, prints them as one markdown table of first turns against
// later turns, and draws them as the admission frontier in DIR/frontier.png and
// DIR/frontier.svg.
//
// The plot is drawn here rather than by bench.PlotFrontier, whose x axis is the newcomers'
// p99 wait in the gateway queue: a client does not see that wait, only the time to the
// first token, which adds the prefill to it. The axes are named for what loadgen measured,
// and the markers follow bench's (FCFS and turn-priority in their own colour and shape, the
// others grey circles, hollow for a "+shed" label) so that the two plots read alike.

// errNoReport is returned when the frontier mode has no report to read.
var errNoReport = errors.New("no loadgen -json report")

// frontierRun is one report of the frontier and the name it goes by.
type frontierRun struct {
	label string
	path  string
	rep   *Report // nil when the file could not be read
	err   error   // why rep is nil
}

// frontierRuns reads the reports at paths, in order; with no paths, every *.json file of dir
// in name order. A file that cannot be read or is not a loadgen report gives a run with its
// error, named by its file. O(total size of the files).
func frontierRuns(dir string, paths []string) ([]frontierRun, error) {
	if len(paths) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
		var err error
		if paths, err = filepath.Glob(filepath.Join(dir, "*.json")); err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%w in %s (give the reports' files after the flags)", errNoReport, dir)
		}
	}
	runs := make([]frontierRun, len(paths))
	for i, p := range paths {
		runs[i] = frontierRun{label: strings.TrimSuffix(filepath.Base(p), ".json"), path: p}
		rep, err := readReport(p)
		if err != nil {
			runs[i].err = err
			continue
		}
		runs[i].rep = rep
		if rep.Label != "" {
			runs[i].label = rep.Label
		}
	}
	return runs, nil
}

// readReport reads one loadgen -json report. A JSON file without the first-turn and
// later-turn figures (an -overhead report, a report of another tool, an empty file) is an
// error.
func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe struct {
		Target     *string          `json:"target"`
		FirstTurn  *json.RawMessage `json:"first_turn"`
		LaterTurns *json.RawMessage `json:"later_turns"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, errNoReport, err)
	}
	if probe.Target == nil || probe.FirstTurn == nil || probe.LaterTurns == nil {
		return nil, fmt.Errorf("%s: %w: no target, first_turn or later_turns", path, errNoReport)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, errNoReport, err)
	}
	return &rep, nil
}

// writeFrontierTable writes runs as a markdown table, one row per run in order: first turns
// sent, their 429 and 503 answers, their TTFT p50 and p99 in seconds; the same for later
// turns; completed requests per second. A run without a report has a row saying why. O(runs).
func writeFrontierTable(w io.Writer, runs []frontierRun) {
	fmt.Fprintln(w, "| policy | first sent | first 429/503 | first TTFT p50 / p99 | later sent | later 429/503 | later TTFT p50 / p99 | req/s |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---:|---|---:|")
	for _, r := range runs {
		if r.rep == nil {
			fmt.Fprintf(w, "| %s | no report (%v) |\n", r.label, r.err)
			continue
		}
		f, l := &r.rep.FirstTurn, &r.rep.LaterTurns
		fmt.Fprintf(w, "| %s | %d | %d/%d | %s | %d | %d/%d | %s | %.2f |\n", r.label,
			f.Requests, f.Rejected429, f.Rejected503, ttftSeconds(f.TTFT),
			l.Requests, l.Rejected429, l.Rejected503, ttftSeconds(l.TTFT), r.rep.RequestsPerSec)
	}
}

// writeTaskTable writes runs as a markdown table of task completion time, one row per label
// in the order labels first appear, its runs (a policy run several times) summarised by the
// median and, when they differ, the range (min–max): first turns shed (429 and 503 answers)
// and their TTFT p99; later turns shed and their TTFT p50 and p99; sessions completed,
// abandoned (their share of the sessions whose outcome is known) and censored; the completed
// sessions' task completion time (mean, p50, p90) and sum of response times (mean); completed
// requests per second. Runs without a report are left out of their label's row, and a label
// with none has a row saying so. O(runs log runs).
func writeTaskTable(w io.Writer, runs []frontierRun) {
	fmt.Fprintln(w, "| policy | runs | first shed | first TTFT p99 | later shed | later TTFT p50 | later TTFT p99 | sessions completed | abandoned | censored | task time mean | task time p50 | task time p90 | Σ response mean | req/s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	labels, groups := groupRuns(runs)
	for _, label := range labels {
		reps := groups[label]
		if len(reps) == 0 {
			fmt.Fprintf(w, "| %s | no report |\n", label)
			continue
		}
		col := func(format string, f func(*Report) float64) string { return column(reps, format, f) }
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, len(reps),
			col("%.0f", func(r *Report) float64 { return float64(r.FirstTurn.Rejected429 + r.FirstTurn.Rejected503) }),
			col("%.2fs", func(r *Report) float64 { return secs(r.FirstTurn.TTFT.P99) }),
			col("%.0f", func(r *Report) float64 { return float64(r.LaterTurns.Rejected429 + r.LaterTurns.Rejected503) }),
			col("%.2fs", func(r *Report) float64 { return secs(r.LaterTurns.TTFT.P50) }),
			col("%.2fs", func(r *Report) float64 { return secs(r.LaterTurns.TTFT.P99) }),
			col("%.0f", func(r *Report) float64 { return float64(r.Tasks.Completed) }),
			col("%.1f%%", func(r *Report) float64 { return 100 * r.Tasks.AbandonedShare }),
			col("%.0f", func(r *Report) float64 { return float64(r.Tasks.Censored) }),
			col("%.1fs", func(r *Report) float64 { return secs(r.Tasks.Time.Mean) }),
			col("%.1fs", func(r *Report) float64 { return secs(r.Tasks.Time.P50) }),
			col("%.1fs", func(r *Report) float64 { return secs(r.Tasks.Time.P90) }),
			col("%.1fs", func(r *Report) float64 { return secs(r.Tasks.Response.Mean) }),
			col("%.2f", func(r *Report) float64 { return r.RequestsPerSec }))
	}
}

// groupRuns returns the labels of runs in the order they first appear and each label's
// reports (none for a label whose runs have no report). O(runs).
func groupRuns(runs []frontierRun) ([]string, map[string][]*Report) {
	var labels []string
	groups := map[string][]*Report{}
	for _, r := range runs {
		if _, seen := groups[r.label]; !seen {
			labels = append(labels, r.label)
			groups[r.label] = nil
		}
		if r.rep != nil {
			groups[r.label] = append(groups[r.label], r.rep)
		}
	}
	return labels, groups
}

// column formats f over reps as medianRange does. O(len(reps) log len(reps)).
func column(reps []*Report, format string, f func(*Report) float64) string {
	v := make([]float64, len(reps))
	for i, r := range reps {
		v[i] = f(r)
	}
	return medianRange(v, format)
}

func secs(ms float64) float64 { return ms / 1000 }

// writeSplitTable writes, for the runs with a -split, the turns sent before the split against
// those sent after it, a row per label as writeTaskTable's (median and range over its runs):
// the split, the sessions over by then (SplitStats.Ended), first turns shed and their TTFT
// p99, later turns' TTFT p50 and p99, each as "before → after". It writes nothing when no run
// has a split. O(runs log runs).
func writeSplitTable(w io.Writer, runs []frontierRun) {
	var split []frontierRun
	for _, r := range runs {
		if r.rep != nil && r.rep.Split != nil {
			split = append(split, r)
		}
	}
	if len(split) == 0 {
		return
	}
	fmt.Fprintln(w, "| policy | runs | split | sessions over by then | first shed before → after | first TTFT p99 before → after | later TTFT p50 before → after | later TTFT p99 before → after |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---|---|")
	labels, groups := groupRuns(split)
	for _, label := range labels {
		reps := groups[label]
		col := func(format string, f func(*SplitStats) float64) string {
			return column(reps, format, func(r *Report) float64 { return f(r.Split) })
		}
		pair := func(format string, f func(*Phase) float64) string {
			return col(format, func(s *SplitStats) float64 { return f(&s.Before) }) + " → " + col(format, func(s *SplitStats) float64 { return f(&s.After) })
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", label, len(reps),
			col("%.0fs", func(s *SplitStats) float64 { return secs(s.AtMs) }),
			col("%.0f", func(s *SplitStats) float64 { return float64(s.Ended) }),
			pair("%.0f", func(p *Phase) float64 { return float64(p.FirstShed) }),
			pair("%.2fs", func(p *Phase) float64 { return secs(p.FirstTTFT.P99) }),
			pair("%.2fs", func(p *Phase) float64 { return secs(p.LaterTTFT.P50) }),
			pair("%.2fs", func(p *Phase) float64 { return secs(p.LaterTTFT.P99) }))
	}
}

// medianRange formats the median of v (the lower of the two middle values for an even
// count, so that it is one of the runs) and, when the values differ once formatted, their
// range: "m (lo–hi)". O(len(v) log len(v)); v is sorted in place.
func medianRange(v []float64, format string) string {
	slices.Sort(v)
	m := fmt.Sprintf(format, v[(len(v)-1)/2])
	lo, hi := fmt.Sprintf(format, v[0]), fmt.Sprintf(format, v[len(v)-1])
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, lo, hi)
}

// ttftSeconds formats a TTFT distribution's p50 and p99 as "p50 / p99 s", or "-" when no
// request completed.
func ttftSeconds(d Dist) string {
	if d.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f s", d.P50/1000, d.P99/1000)
}

// plotFrontier draws the runs' frontier with bench.PlotFrontierPoints and saves it to path,
// as PNG or SVG by the extension: x is the p99 TTFT of first turns (newcomers; loadgen sees
// their time to first token, queue wait and prefill together), y the p50 TTFT of later turns,
// both in seconds; the marker's area grows with the first turns rejected (429 and 503
// answers). A run's label (the gateway's policy name, bench.EarlyShedSuffix for a run with
// -early-shed) chooses its style. Runs of one label (a policy run with several seeds) make one
// point, each coordinate and the marker the median of theirs (the lower middle one for an
// even count). Runs without a report or without a completed first and later turn are left out
// and returned by label; it is an error when no run is left. O(runs log runs).
func plotFrontier(runs []frontierRun, title, path string) (skipped []string, err error) {
	var labels []string
	groups := map[string][][3]float64{} // a label's runs: x, y, shed
	for _, r := range runs {
		if r.rep == nil {
			continue
		}
		f, l := &r.rep.FirstTurn, &r.rep.LaterTurns
		if f.TTFT.Count == 0 || l.TTFT.Count == 0 {
			skipped = append(skipped, r.label)
			continue
		}
		if _, seen := groups[r.label]; !seen {
			labels = append(labels, r.label)
		}
		groups[r.label] = append(groups[r.label], [3]float64{f.TTFT.P99 / 1000, l.TTFT.P50 / 1000, float64(f.Rejected429 + f.Rejected503)})
	}
	var pts []bench.FrontierPoint
	for _, label := range labels {
		g := groups[label]
		median := func(k int) float64 {
			v := make([]float64, len(g))
			for i := range g {
				v[i] = g[i][k]
			}
			slices.Sort(v)
			return v[(len(v)-1)/2]
		}
		pts = append(pts, bench.FrontierPoint{X: median(0), Y: median(1), Shed: median(2), Label: label, Policy: policyOf(label)})
	}
	if len(pts) == 0 {
		return skipped, errors.New("no report with a completed first turn and a completed later turn to plot")
	}
	axes := bench.FrontierAxes{X: "first-turn p99 TTFT (s)", Y: "later-turn p50 TTFT (s)", Shed: "first turns rejected"}
	if err := bench.PlotFrontierPoints(pts, axes, title, path); err != nil {
		return skipped, fmt.Errorf("saving the plot: %w", err)
	}
	return skipped, nil
}

// policyOf returns the policy of a run's label: the label without a bounded wait's "-W"
// suffix ("bounded-wait-10s" → "bounded-wait"), keeping bench.EarlyShedSuffix.
func policyOf(label string) string {
	base, shed := strings.CutSuffix(label, bench.EarlyShedSuffix)
	if rest, ok := strings.CutPrefix(base, "bounded-wait-"); ok && rest != "" {
		base = "bounded-wait"
	}
	if shed {
		base += bench.EarlyShedSuffix
	}
	return base
}

// runFrontier is the frontier mode: it reads the reports, prints the table to stdout, and
// writes frontier.png and frontier.svg into the directory, creating it if missing. The table
// is printed and the plots drawn from the readable reports even when some are not readable;
// the error then names those.
func runFrontier(cfg config, stdout, stderr io.Writer) error {
	runs, err := frontierRuns(cfg.frontierDir, cfg.frontierReports)
	if err != nil {
		return err
	}
	writeFrontierTable(stdout, runs)
	fmt.Fprintln(stdout)
	writeTaskTable(stdout, runs)
	if slices.ContainsFunc(runs, func(r frontierRun) bool { return r.rep != nil && r.rep.Split != nil }) {
		fmt.Fprintln(stdout)
		writeSplitTable(stdout, runs)
	}
	var bad []error
	for _, r := range runs {
		if r.err != nil {
			bad = append(bad, r.err)
		}
	}
	if len(bad) == len(runs) {
		return errors.Join(bad...)
	}
	if err := os.MkdirAll(cfg.frontierDir, 0o755); err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(cfg.frontierDir, "frontier"+ext)
		skipped, err := plotFrontier(runs, cfg.frontierTitle, path)
		if err != nil {
			return errors.Join(append(bad, err)...)
		}
		if ext == ".png" && len(skipped) > 0 {
			fmt.Fprintf(stderr, "loadgen: not plotted, without a completed first and later turn: %s\n", strings.Join(skipped, ", "))
		}
		fmt.Fprintf(stderr, "loadgen: wrote %s\n", path)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d reports unreadable: %w", len(bad), len(runs), errors.Join(bad...))
	}
	return nil
}

// runTable prints the reports at paths as a markdown table, a row each: requests, errors,
// 429/503 answers, the share of later turns' prompt tokens that were cached, the same over
// all prompts, and TTFT p50 / p99. A report that cannot be read gets a row saying why, and
// the error names it.
func runTable(paths []string, w io.Writer) error {
	runs, err := frontierRuns("", paths)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "| run | requests | errors | 429/503 | later-turn hit rate | prompt hit rate | TTFT p50 / p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	var bad []string
	for _, r := range runs {
		if r.rep == nil {
			fmt.Fprintf(w, "| %s | no report (%v) |\n", r.label, r.err)
			bad = append(bad, r.label)
			continue
		}
		p := r.rep
		fmt.Fprintf(w, "| %s | %d | %d | %d/%d | %.3f | %.3f | %s |\n", r.label, p.Requests, p.Errors,
			p.Rejected429, p.Rejected503, p.LaterTurns.HitRate, p.HitRate, ttftSeconds(p.TTFT))
	}
	if len(bad) > 0 {
		return fmt.Errorf("unreadable reports: %s", strings.Join(bad, ", "))
	}
	return nil
}
