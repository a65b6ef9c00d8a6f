package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// WriteTables writes results as markdown: for each rate, one table of performance (throughput,
// latency, cache, balance) and one of admission (shedding by turn, waits, fairness). Rows keep
// the order of results.
func WriteTables(w io.Writer, results []*Result) error {
	var b strings.Builder
	for _, rate := range rates(results) {
		rows := byRate(results, rate)
		fmt.Fprintf(&b, "### Load ×%g — performance\n\n", rate)
		b.WriteString("| policy | router | req/s | out tok/s | TTFT p50 | TTFT p90 | TTFT p99 | E2E p50 | E2E p99 | hit | ideal | hit/ideal | max/mean load |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %.2f | %.0f | %s | %s | %s | %s | %s | %.1f%% | %.1f%% | %.2f | %.2f |\n",
				r.Policy, r.Router, r.ReqPerSec, r.OutPerSec,
				secs(r.TTFT.P50), secs(r.TTFT.P90), secs(r.TTFT.P99), secs(r.E2E.P50), secs(r.E2E.P99),
				100*r.HitRate, 100*r.IdealHitRate, ratio(r.HitRate, r.IdealHitRate), r.LoadImbalance)
		}
		fmt.Fprintf(&b, "\n### Load ×%g — admission (first turns / later turns)\n\n", rate)
		b.WriteString("| policy | router | sent | completed | shed first | shed later | expired | rejected | failed | abandoned | wait p99 first | wait p99 later | Jain | events/s |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %.3f | %.0fk |\n",
				r.Policy, r.Router, r.Sent, r.Completed, r.First.Shed(), r.Later.Shed(),
				r.First.Expired+r.Later.Expired, r.First.Rejected+r.Later.Rejected,
				r.First.Failed+r.Later.Failed, r.First.Abandoned+r.Later.Abandoned,
				secs(r.First.WaitP99), secs(r.Later.WaitP99), r.Jain, r.EventsPerSec/1000)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Goal thresholds of the comparison (issue 8's goal, stated as figures to report against).
const (
	goalHitShare    = 0.90 // usher's hit rate ≥ 90% of the ideal
	goalImbalance   = 1.25 // max/mean load ≤ 1.25
	goalKeptHitRate = 0.95 // bounded wait keeps ≥ 95% of turn-priority's hit rate
	kneeServed      = 0.99 // the knee: the highest rate at which some peer still serves 99%
)

// Names the goal check looks for.
const (
	turnPriorityName      = "llm-d-turn"
	boundedWaitPolicyName = "bounded-wait"
)

// isUsher reports whether a router is one of usher's (usher, usher-default, the variants);
// every other router is a peer.
func isUsher(router string) bool { return strings.HasPrefix(router, "usher") }

// WriteGoal writes, as markdown, the comparison the goal asks for: at the knee (the
// highest swept rate, among those with a run of usher's routers, at which some peer
// configuration still completes at least 99% of the requests sent; the highest rate when none
// does), usher's best configuration (any of usher's
// routers under any policy, best by throughput, then p99 TTFT) against the best peer (any other
// router, same ordering); and, at every rate, bounded wait against llm-d turn-priority on the
// same router. Every comparison says plainly whether usher wins or loses.
func WriteGoal(w io.Writer, results []*Result) error {
	var b strings.Builder
	rs := rates(results)
	if len(rs) == 0 {
		return nil
	}
	knee := rs[len(rs)-1]
	for i := len(rs) - 1; i >= 0; i-- {
		ok, hasUsher := false, false
		for _, r := range byRate(results, rs[i]) {
			if isUsher(r.Router) {
				hasUsher = true
			} else if r.Sent > 0 && float64(r.Completed) >= kneeServed*float64(r.Sent) {
				ok = true
			}
		}
		if ok && hasUsher {
			knee = rs[i]
			break
		}
	}
	rows := byRate(results, knee)
	var usher, peer *Result
	for _, r := range rows {
		if isUsher(r.Router) {
			if better(r, usher) {
				usher = r
			}
		} else if better(r, peer) {
			peer = r
		}
	}
	fmt.Fprintf(&b, "### Goal check at the knee (load ×%g)\n\n", knee)
	if usher == nil || peer == nil {
		b.WriteString("Not enough configurations to compare (need the usher router and at least one peer).\n\n")
	} else {
		b.WriteString("| | policy | router | req/s | TTFT p99 | hit/ideal | max/mean load |\n|---|---|---|---:|---:|---:|---:|\n")
		for _, x := range []struct {
			label string
			r     *Result
		}{{"usher's best", usher}, {"best peer", peer}} {
			r := x.r
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s | %.2f | %.2f |\n", x.label, r.Policy, r.Router, r.ReqPerSec, secs(r.TTFT.P99), ratio(r.HitRate, r.IdealHitRate), r.LoadImbalance)
		}
		b.WriteString("\n")
		check := func(ok bool, what string) {
			mark := "met"
			if !ok {
				mark = "NOT met"
			}
			fmt.Fprintf(&b, "- %s: **%s**\n", what, mark)
		}
		check(usher.ReqPerSec >= peer.ReqPerSec*0.999, fmt.Sprintf("throughput ≥ best peer's (%.2f vs %.2f req/s)", usher.ReqPerSec, peer.ReqPerSec))
		check(usher.TTFT.P99 < peer.TTFT.P99, fmt.Sprintf("lower p99 TTFT (%s vs %s)", secs(usher.TTFT.P99), secs(peer.TTFT.P99)))
		check(ratio(usher.HitRate, usher.IdealHitRate) >= goalHitShare, fmt.Sprintf("hit rate ≥ 90%% of ideal (%.1f%% of %.1f%%: %.2f)", 100*usher.HitRate, 100*usher.IdealHitRate, ratio(usher.HitRate, usher.IdealHitRate)))
		check(usher.LoadImbalance <= goalImbalance, fmt.Sprintf("max/mean load ≤ 1.25 (%.2f)", usher.LoadImbalance))
		b.WriteString("\n")
	}
	b.WriteString("### Bounded wait against llm-d turn-priority (same router)\n\n")
	b.WriteString("| load | router | turn-priority shed first | bounded wait shed first | turn-priority hit | bounded wait hit | kept | verdict |\n|---:|---|---:|---:|---:|---:|---:|---|\n")
	n := 0
	for _, rate := range rs {
		rows := byRate(results, rate)
		for _, tp := range rows {
			if tp.Policy != turnPriorityName {
				continue
			}
			for _, bw := range rows {
				if bw.Policy != boundedWaitPolicyName || bw.Router != tp.Router {
					continue
				}
				n++
				kept := ratio(bw.HitRate, tp.HitRate)
				verdict := "turn-priority sheds no newcomer here"
				if tp.First.Shed() > 0 {
					switch {
					case bw.First.Shed() == 0 && kept >= goalKeptHitRate:
						verdict = "met"
					case bw.First.Shed() > 0:
						verdict = "NOT met: bounded wait sheds newcomers too"
					default:
						verdict = "NOT met: hit rate below 95%"
					}
				}
				fmt.Fprintf(&b, "| ×%g | %s | %d | %d | %.1f%% | %.1f%% | %.2f | %s |\n", rate, tp.Router, tp.First.Shed(), bw.First.Shed(), 100*tp.HitRate, 100*bw.HitRate, kept, verdict)
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

// better reports whether a beats b (nil): more throughput, within 0.5% equal, then lower p99
// TTFT.
func better(a, b *Result) bool {
	if b == nil {
		return true
	}
	if math.Abs(a.ReqPerSec-b.ReqPerSec) > 0.005*max(a.ReqPerSec, b.ReqPerSec) {
		return a.ReqPerSec > b.ReqPerSec
	}
	return a.TTFT.P99 < b.TTFT.P99
}

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

func byRate(results []*Result, rate float64) []*Result {
	var out []*Result
	for _, r := range results {
		if r.Rate == rate {
			out = append(out, r)
		}
	}
	return out
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
