package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ColdRequests is how many of a run's first picks Result.Prediction's "cold" span holds: the
// latency model's start, from its prior, before it has learned much.
const ColdRequests = 200

// SlowedHead is how many of the requests picked on a slowed server after its slowdown
// (Config.Slowdowns) Result.Prediction's "slowed, first" span holds: the time the model takes
// to notice; "slowed, later" holds the rest.
const SlowedHead = 50

// Spans of Result.Prediction.
const (
	SpanAll         = "all"
	SpanCold        = "cold"
	SpanBeforeSlow  = "before slowdown"
	SpanAfterSlow   = "after slowdown"
	SpanSlowedFirst = "slowed, first"
	SpanSlowedLater = "slowed, later"
)

// spanNames are the spans in the order Result.Prediction holds them; the first two are in
// every run's, the others only in a run with slowdowns.
var spanNames = [...]string{SpanAll, SpanCold, SpanBeforeSlow, SpanAfterSlow, SpanSlowedFirst, SpanSlowedLater}

// PredictionError is how far a router's latency model (routing.Result.Predicted, from
// latency.NewScorer) was from what one span of completed requests got. TTFT is
// observed from the pick, as the router's model learns it (not from the arrival at the
// gateway: the wait in the queue is no server's doing); TPOT over the answer after its first
// token, for answers of two tokens or more.
type PredictionError struct {
	// Span names the requests: SpanAll, SpanCold (the first ColdRequests picks), and with
	// Config.Slowdowns SpanBeforeSlow and SpanAfterSlow (picked before and from the first
	// slowdown), SpanSlowedFirst and SpanSlowedLater (picked on a slowed server from its
	// slowdown: the first SlowedHead of them, and the rest).
	Span string
	// N is the number of requests with a TTFT prediction, NTPOT with a TPOT prediction.
	N, NTPOT int
	// TTFT and TPOT are quantiles of |predicted − observed|.
	TTFT, TPOT Percentiles
	// TTFTRel is the median of |predicted − observed|/observed TTFT.
	TTFTRel float64
}

// predictionErrors returns the spans of Result.Prediction for s's completed requests, or nil
// when the router predicted nothing (it has no latency model). O(n log n) for n requests.
func (s *sim) predictionErrors() []PredictionError {
	var slowAt time.Duration = -1
	for _, d := range s.cfg.Slowdowns {
		if slowAt < 0 || d.At < slowAt {
			slowAt = d.At
		}
	}
	type pick struct {
		r      *simReq
		spans  [len(spanNames)]bool
		slowed bool // on a slowed server, from its slowdown
	}
	var picks []pick
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.state != rsDone || r.res.Predicted.TTFT <= 0 {
			continue
		}
		p := pick{r: r}
		if sv := &s.srv[r.server]; len(sv.slow) > 0 && r.picked >= sv.slow[0].At {
			p.slowed = true
		}
		picks = append(picks, p)
	}
	if len(picks) == 0 {
		return nil
	}
	slices.SortFunc(picks, func(a, b pick) int { return cmp.Compare(a.r.pickNo, b.r.pickNo) })
	slowed := 0
	for k := range picks {
		p := &picks[k]
		p.spans[0] = true
		p.spans[1] = p.r.pickNo < ColdRequests
		if slowAt >= 0 {
			p.spans[2], p.spans[3] = p.r.picked < slowAt, p.r.picked >= slowAt
			if p.slowed {
				p.spans[4], p.spans[5] = slowed < SlowedHead, slowed >= SlowedHead
				slowed++
			}
		}
	}
	spans := 2
	if slowAt >= 0 {
		spans = len(spanNames)
	}
	out := make([]PredictionError, 0, spans)
	var ttft, tpot []time.Duration
	var rel []float64
	for k := range spans {
		ttft, tpot, rel = ttft[:0], tpot[:0], rel[:0]
		for _, p := range picks {
			if !p.spans[k] {
				continue
			}
			r := p.r
			obs := r.firstToken - r.picked
			e := absDur(r.res.Predicted.TTFT - obs)
			ttft = append(ttft, e)
			rel = append(rel, e.Seconds()/max(obs.Seconds(), 1e-9))
			if r.w.OutputTokens > 1 && r.res.Predicted.TPOT > 0 {
				obs := (r.finish - r.firstToken) / time.Duration(r.w.OutputTokens-1)
				tpot = append(tpot, absDur(r.res.Predicted.TPOT-obs))
			}
		}
		pe := PredictionError{Span: spanNames[k], N: len(ttft), NTPOT: len(tpot), TTFT: percentiles(ttft), TPOT: percentiles(tpot)}
		if len(rel) > 0 {
			slices.Sort(rel)
			pe.TTFTRel = rel[int(math.Ceil(0.5*float64(len(rel))))-1]
		}
		out = append(out, pe)
	}
	return out
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

// PredictionOf returns r's prediction error over span (see PredictionError.Span), and false when
// r has none: its router has no latency model, or the run had no such span.
func (r *Result) PredictionOf(span string) (PredictionError, bool) {
	for _, p := range r.Prediction {
		if p.Span == span {
			return p, true
		}
	}
	return PredictionError{}, false
}

// writePredictionTable writes, as markdown, the prediction error of the latency models of the
// configurations in rows that have one (see PredictionError), one row per configuration and
// span, medians over seeds with the min–max range: nothing when no row has a model. The
// errors of a span are summarised over the seeds in which it holds requests (a slowed server
// may get none after its slowdown), the count over every seed.
func writePredictionTable(b *strings.Builder, rate float64, rows []*Cell) {
	var spans []string
	for _, c := range rows {
		for _, r := range c.Runs {
			for _, p := range r.Prediction {
				if !slices.Contains(spans, p.Span) {
					spans = append(spans, p.Span)
				}
			}
		}
	}
	if len(spans) == 0 {
		return
	}
	fmt.Fprintf(b, "### Load ×%g — latency prediction error (|predicted − observed|, TTFT from the pick)\n\n", rate)
	b.WriteString("| policy | router | requests | n | TTFT err p50 | TTFT err p90 | TTFT rel err p50 | TPOT err p50 | TPOT err p90 |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range rows {
		for _, span := range spans {
			if _, ok := c.Runs[0].PredictionOf(span); !ok {
				continue
			}
			// of formats f's spread over the seeds whose span has requests (all with every).
			of := func(every bool, f func(p *PredictionError) float64, format func(float64) string) string {
				var xs []float64
				for _, r := range c.Runs {
					if p, _ := r.PredictionOf(span); every || p.N > 0 {
						xs = append(xs, f(&p))
					}
				}
				if len(xs) == 0 {
					return "–"
				}
				return fmtSpread(SpreadOf(xs), format)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Policy, c.Router, spanLabel(span),
				of(true, func(p *PredictionError) float64 { return float64(p.N) }, num),
				of(false, func(p *PredictionError) float64 { return float64(p.TTFT.P50) }, secsFine),
				of(false, func(p *PredictionError) float64 { return float64(p.TTFT.P90) }, secsFine),
				of(false, func(p *PredictionError) float64 { return p.TTFTRel }, pct),
				of(false, func(p *PredictionError) float64 { return float64(p.TPOT.P50) }, secsFine),
				of(false, func(p *PredictionError) float64 { return float64(p.TPOT.P90) }, secsFine))
		}
	}
	b.WriteString("\n")
}

// spanLabel is span as the prediction table shows it.
func spanLabel(span string) string {
	switch span {
	case SpanCold:
		return fmt.Sprintf("first %d", ColdRequests)
	case SpanSlowedFirst:
		return fmt.Sprintf("slowed server, first %d after", SlowedHead)
	case SpanSlowedLater:
		return "slowed server, later"
	}
	return span
}

// secsFine formats a duration given in nanoseconds in seconds, to the tenth of a millisecond
// below a second (errors of TPOT are milliseconds), coarser above.
func secsFine(x float64) string {
	s := x / 1e9
	switch {
	case s == 0:
		return "0"
	case s < 1:
		return fmt.Sprintf("%.4fs", s)
	case s < 10:
		return fmt.Sprintf("%.3fs", s)
	}
	return secs(time.Duration(x))
}
