package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/usher-llm/usher/routing"
)

// writeSLOTable writes, as markdown, the SLO attainment of the configurations in rows whose
// requests had latency targets (Config.Targets): one row per configuration, medians over seeds
// with the min–max range (the failed column counts the unfinished too), then the
// configuration with the highest median attainment and those whose range reaches its (a
// tie). Nothing when no run had targets. O(rows · seeds log seeds).
func writeSLOTable(b *strings.Builder, rate float64, rows []*Cell) {
	var with []*Cell
	for _, c := range rows {
		if c.Runs[0].SLO.Sent > 0 {
			with = append(with, c)
		}
	}
	if len(with) == 0 {
		return
	}
	fmt.Fprintf(b, "### Load ×%g — SLO attainment (%s; shed or expired counts as a miss)\n\n", rate, TargetsString(with[0].Runs[0].Targets, with[0].Runs[0].LaterTargets))
	b.WriteString("| policy | router | sent | met | missed | of which TPOT only | shed | expired | failed | attainment | first turns | later turns | met req/s | met out tok/s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	count := func(c *Cell, f func(*SLOStats) int) string {
		return c.fmt(func(r *Result) float64 { return float64(f(&r.SLO)) }, num)
	}
	for _, c := range with {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router,
			count(c, func(s *SLOStats) int { return s.Sent }), count(c, func(s *SLOStats) int { return s.Met }),
			count(c, func(s *SLOStats) int { return s.Missed }), count(c, func(s *SLOStats) int { return s.MissedTPOT }),
			count(c, func(s *SLOStats) int { return s.Shed }),
			count(c, func(s *SLOStats) int { return s.Expired }), count(c, func(s *SLOStats) int { return s.Failed + s.Unfinished }),
			c.fmt(attainment, pct),
			classAttainment(c, func(r *Result) SLOStats { return r.First.SLO }),
			classAttainment(c, func(r *Result) SLOStats { return r.Later.SLO }),
			c.fmt(func(r *Result) float64 { return r.MetPerSec }, f2),
			c.fmt(func(r *Result) float64 { return r.MetOutPerSec }, f0))
	}
	var best *Cell
	for _, c := range with {
		if best == nil || c.Spread(attainment).Median > best.Spread(attainment).Median {
			best = c
		}
	}
	bs := best.Spread(attainment)
	if len(best.Runs) == 1 {
		fmt.Fprintf(b, "\nHighest attainment: %s %s, %s.\n\n", best.Policy, best.Router, pct(bs.Median))
		return
	}
	var ties []string
	for _, c := range with {
		if c != best && c.Spread(attainment).Max >= bs.Min {
			a, l, bh := paired(best, c, attainment, true, 0)
			ties = append(ties, fmt.Sprintf("%s %s (%s; %s seed by seed %d/%d/%d ahead/level/behind)",
				c.Policy, c.Router, c.fmt(attainment, pct), best.Router, a, l, bh))
		}
	}
	fmt.Fprintf(b, "\nHighest attainment: %s %s, %s", best.Policy, best.Router, fmtSpread(bs, pct))
	if len(ties) == 0 {
		b.WriteString(", ranges apart from every other.\n\n")
		return
	}
	fmt.Fprintf(b, "; tie (ranges overlapping) with %s.\n\n", strings.Join(ties, ", "))
}

// classAttainment formats the attainment of one class of c's requests (first or later
// turns) over the seeds, "–" when the class had no requests.
func classAttainment(c *Cell, class func(*Result) SLOStats) string {
	if c.Spread(func(r *Result) float64 { return float64(class(r).Sent) }).Max == 0 {
		return "–"
	}
	return c.fmt(func(r *Result) float64 { return class(r).Attainment() }, pct)
}

// attainment is a run's SLO attainment (SLOStats.Attainment).
func attainment(r *Result) float64 { return r.SLO.Attainment() }

// TargetsString describes latency targets (Config.Targets, LaterTargets) as the tables'
// headings do: "TTFT ≤ 2s, TPOT ≤ 80ms", with ", later turns ..." when LaterTargets is set;
// "no targets" when neither is.
func TargetsString(t, later routing.Latency) string {
	one := func(t routing.Latency) string {
		var parts []string
		if t.TTFT > 0 {
			parts = append(parts, "TTFT ≤ "+shortDur(t.TTFT))
		}
		if t.TPOT > 0 {
			parts = append(parts, "TPOT ≤ "+shortDur(t.TPOT))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	switch {
	case t == (routing.Latency{}) && later == (routing.Latency{}):
		return "no targets"
	case later == (routing.Latency{}):
		return one(t)
	}
	return "first turns " + one(t) + ", later turns " + one(later)
}

// shortDur formats d without trailing zero units ("2s", "80ms", "1.5s").
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2] // "1m0s" → "1m"
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2] // "1h0m" → "1h"
	}
	return s
}
