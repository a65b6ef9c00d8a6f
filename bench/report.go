package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteTables writes results as markdown: for each rate, one table of performance (throughput,
// latency, cache, balance) and one of admission (shedding by turn, waits, fairness), one row
// per configuration (see Cells), in the order of results, then one of the latency models'
// prediction error for the routers that have one (see PredictionError). A configuration run
// under several seeds shows each figure as the median over its seeds with the min–max range in
// parentheses, where the seeds differ at the printed precision; with one seed per
// configuration the tables hold the single runs' figures. Workloads with sessions get a table
// of task completion times (see TaskStats) after the admission tables. Runs with latency targets
// (Config.Targets) get a table of SLO attainment too, before the prediction error.
func WriteTables(w io.Writer, results []*Result) error {
	var b strings.Builder
	cells := Cells(results)
	if n := maxRuns(cells); n > 1 {
		fmt.Fprintf(&b, "Each figure is the median over %d seeds (%s), with the min–max range in parentheses where the seeds differ.\n\n", n, seedList(results))
	}
	for _, rate := range rates(results) {
		rows := cellsAt(cells, rate)
		fmt.Fprintf(&b, "### Load ×%g — performance\n\n", rate)
		b.WriteString("| policy | router | req/s | out tok/s | TTFT p50 | TTFT p90 | TTFT p99 | E2E p50 | E2E p99 | hit | ideal | hit/ideal | max/mean load |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router,
				c.fmt(reqPerSec, f2), c.fmt(func(r *Result) float64 { return r.OutPerSec }, f0),
				c.fmt(func(r *Result) float64 { return float64(r.TTFT.P50) }, secsF),
				c.fmt(func(r *Result) float64 { return float64(r.TTFT.P90) }, secsF),
				c.fmt(ttftP99, secsF),
				c.fmt(func(r *Result) float64 { return float64(r.E2E.P50) }, secsF),
				c.fmt(func(r *Result) float64 { return float64(r.E2E.P99) }, secsF),
				c.fmt(func(r *Result) float64 { return r.HitRate }, pct),
				c.fmt(func(r *Result) float64 { return r.IdealHitRate }, pct),
				c.fmt(hitShare, f2), c.fmt(imbalance, f2))
		}
		fmt.Fprintf(&b, "\n### Load ×%g — admission (first turns / later turns)\n\n", rate)
		b.WriteString("| policy | router | sent | completed | shed first | shed later | expired | rejected | failed | abandoned | wait p99 first | wait p99 later | Jain | events/s |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rows {
			count := func(f func(*Result) int) string {
				return c.fmt(func(r *Result) float64 { return float64(f(r)) }, num)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router,
				count(func(r *Result) int { return r.Sent }), count(func(r *Result) int { return r.Completed }),
				count(func(r *Result) int { return r.First.Shed() }), count(func(r *Result) int { return r.Later.Shed() }),
				count(func(r *Result) int { return r.First.Expired + r.Later.Expired }),
				count(func(r *Result) int { return r.First.Rejected + r.Later.Rejected }),
				count(func(r *Result) int { return r.First.Failed + r.Later.Failed }),
				count(func(r *Result) int { return r.First.Abandoned + r.Later.Abandoned }),
				c.fmt(func(r *Result) float64 { return float64(r.First.WaitP99) }, secsF),
				c.fmt(func(r *Result) float64 { return float64(r.Later.WaitP99) }, secsF),
				c.fmt(func(r *Result) float64 { return r.Jain }, f3),
				c.fmt(func(r *Result) float64 { return r.EventsPerSec / 1000 }, func(x float64) string { return fmt.Sprintf("%.0fk", x) }))
		}
		fmt.Fprintf(&b, "\n### Load ×%g — newcomers against later turns\n\n", rate)
		b.WriteString("| policy | router | first sent | first shed | shed answered after (p50) | first wait p99 | first TTFT p50 | first TTFT p99 | first hit | later sent | later abandoned | later TTFT p50 | later TTFT p99 | later hit |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rows {
			count := func(f func(*Result) int) string {
				return c.fmt(func(r *Result) float64 { return float64(f(r)) }, num)
			}
			dur := func(f func(*Result) time.Duration) string {
				return c.fmt(func(r *Result) float64 { return float64(f(r)) }, secsF)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router,
				count(func(r *Result) int { return r.First.Sent }), count(func(r *Result) int { return r.First.Shed() }),
				dur(func(r *Result) time.Duration { return r.First.ShedAfter.P50 }),
				dur(func(r *Result) time.Duration { return r.First.WaitP99 }),
				dur(func(r *Result) time.Duration { return r.First.TTFT.P50 }),
				dur(func(r *Result) time.Duration { return r.First.TTFT.P99 }),
				c.fmt(func(r *Result) float64 { return r.First.HitRate }, pct),
				count(func(r *Result) int { return r.Later.Sent }), count(func(r *Result) int { return r.Later.Abandoned }),
				dur(func(r *Result) time.Duration { return r.Later.TTFT.P50 }),
				dur(func(r *Result) time.Duration { return r.Later.TTFT.P99 }),
				c.fmt(func(r *Result) float64 { return r.Later.HitRate }, pct))
		}
		b.WriteString("\n")
		writeTaskTable(&b, rate, rows)
		writeSLOTable(&b, rate, rows)
		writePredictionTable(&b, rate, rows)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Goal thresholds of the comparison (issue 8's goal, stated as figures to report against).
const (
	goalHitShare    = 0.90  // usher's hit rate ≥ 90% of the ideal
	goalImbalance   = 1.25  // max/mean load ≤ 1.25
	goalKeptHitRate = 0.95  // bounded wait keeps ≥ 95% of turn-priority's hit rate
	kneeServed      = 0.99  // the knee: the highest rate at which some peer still serves 99%
	throughputTol   = 0.001 // throughputs within 0.1% of each other are equal
)

// Names the goal check looks for.
const (
	turnPriorityName      = "turn-priority"
	boundedWaitPolicyName = "bounded-wait"
)

// isUsher reports whether a router is one of usher's (usher and its variants);
// every other router is a peer.
func isUsher(router string) bool { return strings.HasPrefix(router, "usher") }

// WriteGoal writes, as markdown, the comparison the goal asks for, over configurations
// (see Cells) and on their medians when they ran under several seeds.
//
// At the knee — the highest swept rate, among those with a run of usher's routers, at which
// some peer configuration still completes at least 99% of the requests sent (median over
// seeds); the highest rate when none does — usher's best configuration (any of usher's routers
// under any policy, best by median throughput, then median p99 TTFT) is set against the best
// peer (any other router, same ordering). A comparison with the peer is "met" or "NOT met" when
// the two configurations' min–max ranges over seeds are apart, and a "tie" when they overlap
// (throughputs within 0.1% count as equal); with several seeds the line also counts the seeds
// on which usher was ahead, level and behind. A threshold (hit rate, balance) is judged on the
// median, with a note when the seeds' range crosses it. At every rate, bounded wait is set
// against llm-d turn-priority on the same router, on medians.
func WriteGoal(w io.Writer, results []*Result) error {
	var b strings.Builder
	rs := rates(results)
	if len(rs) == 0 {
		return nil
	}
	cells := Cells(results)
	served := func(r *Result) float64 { return ratio(float64(r.Completed), float64(r.Sent)) }
	knee := rs[len(rs)-1]
	for i := len(rs) - 1; i >= 0; i-- {
		ok, hasUsher := false, false
		for _, c := range cellsAt(cells, rs[i]) {
			if isUsher(c.Router) {
				hasUsher = true
			} else if c.Spread(served).Median >= kneeServed {
				ok = true
			}
		}
		if ok && hasUsher {
			knee = rs[i]
			break
		}
	}
	var usher, peer *Cell
	for _, c := range cellsAt(cells, knee) {
		if isUsher(c.Router) {
			if better(c, usher) {
				usher = c
			}
		} else if better(c, peer) {
			peer = c
		}
	}
	fmt.Fprintf(&b, "### Goal check at the knee (load ×%g)\n\n", knee)
	if usher == nil || peer == nil {
		b.WriteString("Not enough configurations to compare (need the usher router and at least one peer).\n\n")
	} else {
		b.WriteString("| | policy | router | req/s | TTFT p99 | hit/ideal | max/mean load |\n|---|---|---|---:|---:|---:|---:|\n")
		for _, x := range []struct {
			label string
			c     *Cell
		}{{"usher's best", usher}, {"best peer", peer}} {
			c := x.c
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", x.label, c.Policy, c.Router,
				c.fmt(reqPerSec, f2), c.fmt(ttftP99, secsF), c.fmt(hitShare, f2), c.fmt(imbalance, f2))
		}
		b.WriteString("\n")
		if n := min(len(usher.Runs), len(peer.Runs)); n > 1 {
			fmt.Fprintf(&b, "Medians over %d seeds; a comparison is a tie where the two min–max ranges overlap.\n\n", n)
		}
		bySeed := func(f func(*Result) float64, higher bool, tol float64) string {
			a, l, b := paired(usher, peer, f, higher, tol)
			if a+l+b < 2 {
				return ""
			}
			return fmt.Sprintf("; by seed usher ahead %d, level %d, behind %d", a, l, b)
		}
		ur, pr := usher.Spread(reqPerSec), peer.Spread(reqPerSec)
		fmt.Fprintf(&b, "- throughput ≥ best peer's (%s vs %s req/s%s): **%s**\n",
			fmtSpread(ur, f2), fmtSpread(pr, f2), bySeed(reqPerSec, true, throughputTol), versus(ur, pr, true, throughputTol))
		ut, pt := usher.Spread(ttftP99), peer.Spread(ttftP99)
		fmt.Fprintf(&b, "- lower p99 TTFT (%s vs %s%s): **%s**\n",
			fmtSpread(ut, secsF), fmtSpread(pt, secsF), bySeed(ttftP99, false, 0), versus(ut, pt, false, 0))
		hit, ideal := usher.Spread(func(r *Result) float64 { return r.HitRate }), usher.Spread(func(r *Result) float64 { return r.IdealHitRate })
		hs := usher.Spread(hitShare)
		v, note := threshold(hs, goalHitShare, true)
		fmt.Fprintf(&b, "- hit rate ≥ 90%% of ideal (%s of %s: %s): **%s**%s\n", pct(hit.Median), pct(ideal.Median), f2(hs.Median), v, note)
		lb := usher.Spread(imbalance)
		v, note = threshold(lb, goalImbalance, false)
		fmt.Fprintf(&b, "- max/mean load ≤ 1.25 (%s): **%s**%s\n", fmtSpread(lb, f2), v, note)
		b.WriteString("\n")
	}
	b.WriteString("### Bounded wait against llm-d turn-priority (same router)\n\n")
	b.WriteString("| load | router | turn-priority shed first | bounded wait shed first | turn-priority hit | bounded wait hit | kept | verdict |\n|---:|---|---:|---:|---:|---:|---:|---|\n")
	shedFirst := func(r *Result) float64 { return float64(r.First.Shed()) }
	hitRate := func(r *Result) float64 { return r.HitRate }
	n := 0
	for _, rate := range rs {
		rows := cellsAt(cells, rate)
		for _, tp := range rows {
			if tp.Policy != turnPriorityName {
				continue
			}
			for _, bw := range rows {
				if bw.Policy != boundedWaitPolicyName || bw.Router != tp.Router || bw.Workload != tp.Workload {
					continue
				}
				n++
				tpShed, bwShed := tp.Spread(shedFirst).Median, bw.Spread(shedFirst).Median
				kept := ratio(bw.Spread(hitRate).Median, tp.Spread(hitRate).Median)
				verdict := "turn-priority sheds no newcomer here"
				if tpShed > 0 {
					switch {
					case bwShed == 0 && kept >= goalKeptHitRate:
						verdict = "met"
					case bwShed > 0:
						verdict = "NOT met: bounded wait sheds newcomers too"
					default:
						verdict = "NOT met: hit rate below 95%"
					}
				}
				fmt.Fprintf(&b, "| ×%g | %s | %s | %s | %s | %s | %.2f | %s |\n", rate, tp.Router,
					tp.fmt(shedFirst, num), bw.fmt(shedFirst, num), tp.fmt(hitRate, pct), bw.fmt(hitRate, pct), kept, verdict)
			}
		}
	}
	if n == 0 {
		b.WriteString("| | (no run of both policies) | | | | | | |\n")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// threshold judges a spread against a goal's bound (at least bound when atLeast, at most
// otherwise) on its median: "met" or "NOT met", with a note when some seeds meet the bound and
// others do not.
func threshold(s Spread, bound float64, atLeast bool) (v, note string) {
	meets := func(x float64) bool {
		if atLeast {
			return x >= bound
		}
		return x <= bound
	}
	v = "NOT met"
	if meets(s.Median) {
		v = "met"
	}
	if meets(s.Min) != meets(s.Max) {
		note = fmt.Sprintf(" on the median, not on every seed (%s–%s)", f2(s.Min), f2(s.Max))
	}
	return v, note
}

// better reports whether cell a beats b (nil) on medians: more throughput, within 0.5% equal,
// then lower p99 TTFT.
func better(a, b *Cell) bool {
	if b == nil {
		return true
	}
	ar, br := a.Spread(reqPerSec).Median, b.Spread(reqPerSec).Median
	if math.Abs(ar-br) > 0.005*max(ar, br) {
		return ar > br
	}
	return a.Spread(ttftP99).Median < b.Spread(ttftP99).Median
}

// The metrics the goal check compares.
func reqPerSec(r *Result) float64 { return r.ReqPerSec }
func ttftP99(r *Result) float64   { return float64(r.TTFT.P99) }
func hitShare(r *Result) float64  { return ratio(r.HitRate, r.IdealHitRate) }
func imbalance(r *Result) float64 { return r.LoadImbalance }

// fmt formats the spread of f over c's runs (see fmtSpread).
func (c *Cell) fmt(f func(*Result) float64, format func(float64) string) string {
	return fmtSpread(c.Spread(f), format)
}

func maxRuns(cells []*Cell) int {
	n := 0
	for _, c := range cells {
		n = max(n, len(c.Runs))
	}
	return n
}

func cellsAt(cells []*Cell, rate float64) []*Cell {
	var out []*Cell
	for _, c := range cells {
		if c.Rate == rate {
			out = append(out, c)
		}
	}
	return out
}

// Number formats of the tables.
func f0(x float64) string    { return fmt.Sprintf("%.0f", x) }
func f2(x float64) string    { return fmt.Sprintf("%.2f", x) }
func f3(x float64) string    { return fmt.Sprintf("%.3f", x) }
func pct(x float64) string   { return fmt.Sprintf("%.1f%%", 100*x) }
func num(x float64) string   { return strconv.FormatFloat(x, 'f', -1, 64) }
func secsF(x float64) string { return secs(time.Duration(x)) }

func rates(results []*Result) []float64 {
	var rs []float64
	for _, r := range results {
		if !slices.Contains(rs, r.Rate) {
			rs = append(rs, r.Rate)
		}
	}
	slices.Sort(rs)
	return rs
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// secs formats a duration in seconds with a precision that suits its size.
func secs(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s == 0:
		return "0"
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	case s < 100:
		return fmt.Sprintf("%.1fs", s)
	}
	return fmt.Sprintf("%.0fs", s)
}

// WriteReplicaTable writes, as markdown, one row per gateway-replica setting (Result.Replicas
// and SyncLag, in the order of their first result) and configuration (see Cells): throughput,
// p99 TTFT, hit rate, balance, and the hit rate and p99 TTFT as a ratio to the same
// configuration's run with one replica, when the results hold one. Medians over seeds, with
// the min–max range where the seeds differ.
func WriteReplicaTable(w io.Writer, results []*Result) error {
	type setting struct {
		replicas int
		lag      time.Duration
	}
	var order []setting
	by := map[setting][]*Result{}
	for _, r := range results {
		k := setting{r.Replicas, r.SyncLag}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	type cfg struct {
		workload, policy, router string
		rate                     float64
	}
	single := map[cfg]*Cell{}
	for _, c := range Cells(by[setting{1, 0}]) {
		single[cfg{c.Workload, c.Policy, c.Router, c.Rate}] = c
	}
	hitRate := func(r *Result) float64 { return r.HitRate }
	var b strings.Builder
	b.WriteString("| replicas | sync | policy | router | load | req/s | TTFT p99 | hit | hit/ideal | max/mean load | hit vs 1 replica | p99 vs 1 replica |\n")
	b.WriteString("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range order {
		for _, c := range Cells(by[k]) {
			vsHit, vsP99 := "", ""
			if one := single[cfg{c.Workload, c.Policy, c.Router, c.Rate}]; one != nil && k.replicas > 1 {
				vsHit = f2(ratio(c.Spread(hitRate).Median, one.Spread(hitRate).Median))
				vsP99 = f2(ratio(c.Spread(ttftP99).Median, one.Spread(ttftP99).Median))
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | ×%g | %s | %s | %s | %s | %s | %s | %s |\n", k.replicas, SyncLagString(k.replicas, k.lag),
				c.Policy, c.Router, c.Rate, c.fmt(reqPerSec, f2), c.fmt(ttftP99, secsF), c.fmt(hitRate, pct),
				c.fmt(hitShare, f2), c.fmt(imbalance, f2), vsHit, vsP99)
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// SyncLagString describes how replicas sync: "–" for one replica, "none" for NoSync, else the
// lag ("0s", "10ms").
func SyncLagString(replicas int, lag time.Duration) string {
	switch {
	case replicas <= 1:
		return "–"
	case lag < 0:
		return "none"
	}
	return lag.String()
}

// writeTaskTable writes the sessions as tasks (TaskStats) of the rows at rate, if any has
// sessions: the task completion time (first arrival to last answer) and the sum of the
// session's response times of the completed sessions, mean, p50 and p90, the share of sessions
// abandoned, the sessions the end of the run censored, and the mean task time with the
// abandoned sessions counted as done at the end of the run (TaskStats.TimeMeanAll).
func writeTaskTable(b *strings.Builder, rate float64, rows []*Cell) {
	if !slices.ContainsFunc(rows, func(c *Cell) bool {
		return slices.ContainsFunc(c.Runs, func(r *Result) bool { return r.Tasks.Sessions > 0 })
	}) {
		return
	}
	fmt.Fprintf(b, "### Load ×%g — sessions as tasks\n\n", rate)
	b.WriteString("| policy | router | sessions | completed | abandoned share | censored | task time mean | task time p50 | task time p90 | Σ response mean | Σ response p50 | Σ response p90 | task time mean, abandoned at end |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range rows {
		count := func(f func(*TaskStats) int) string {
			return c.fmt(func(r *Result) float64 { return float64(f(&r.Tasks)) }, num)
		}
		dur := func(f func(*TaskStats) time.Duration) string {
			return c.fmt(func(r *Result) float64 { return float64(f(&r.Tasks)) }, secsF)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router,
			count(func(t *TaskStats) int { return t.Sessions }), count(func(t *TaskStats) int { return t.Completed }),
			c.fmt(func(r *Result) float64 { return r.Tasks.AbandonedShare() }, pct),
			count(func(t *TaskStats) int { return t.Censored }),
			dur(func(t *TaskStats) time.Duration { return t.TimeMean }),
			dur(func(t *TaskStats) time.Duration { return t.Time.P50 }),
			dur(func(t *TaskStats) time.Duration { return t.Time.P90 }),
			dur(func(t *TaskStats) time.Duration { return t.ResponseMean }),
			dur(func(t *TaskStats) time.Duration { return t.Response.P50 }),
			dur(func(t *TaskStats) time.Duration { return t.Response.P90 }),
			dur(func(t *TaskStats) time.Duration { return t.TimeMeanAll }))
	}
	b.WriteString("\n")
}
