package proxy

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/slo"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/routing"
)

// Service-level objectives: a request's latency targets, from its band's configuration and
// (when trusted) its headers; the admission deadline they set; and their outcomes.

// setSLO validates Options.SLO, TrustSLOHeaders and SLOShedAbove.
func (h *Handler) setSLO(opts Options) (err error) {
	h.slo, err = slo.New(opts.SLO, opts.TrustSLOHeaders, opts.SLOShedAbove, h.bands, ErrInvalidOptions)
	return err
}

// SLOTarget returns the time-to-first-token target the Handler gave r, a request it asks its
// queue to admit (Options.SLO, TrustSLOHeaders), or 0 when r has none: the Target of a
// fairness.NewSLODeadline policy that orders each request by its own target,
//
//	fairness.NewSLODeadline(fairness.SLODeadlineOptions{TTFT: 2 * time.Second, Target: proxy.SLOTarget})
//
// (the Registry's slo policy is this one). O(1), no allocation.
func SLOTarget(r *flowcontrol.Request) time.Duration { return slo.Target(r.Value) }

// observeLatency records, when a streamed request that was admitted finishes, how far the
// router's prediction was from what the chosen backend did, and whether a request with
// targets met them (TTFT counted from arrival, as the client sees it). A whole answer's
// first token is not seen, so other requests count in neither. Call it from finish, under
// ex.mu, with the request's outcome and end.
func (ex *exchange) observeLatency(err error, end time.Time) {
	if ex.req == nil || !ex.req.Stream {
		return
	}
	info := &ex.info
	var tpot time.Duration
	if !info.FirstTokenAt.IsZero() && err == nil && info.OutputTokens >= 2 {
		tpot = end.Sub(info.FirstTokenAt) / time.Duration(info.OutputTokens-1)
	}
	if p := ex.pick.Predicted; ex.picked && p != (routing.Latency{}) && !info.FirstTokenAt.IsZero() {
		// As the router learns it: TTFT from the pick.
		ex.h.usher.ObservePrediction(p, routing.Latency{TTFT: info.FirstTokenAt.Sub(ex.pickAt), TPOT: tpot})
	}
	t := ex.targets
	if t == (routing.Latency{}) || (err != nil && ex.ctx.Err() != nil) {
		return // no targets, or the client left: neither met nor missed
	}
	met := err == nil && !info.FirstTokenAt.IsZero() &&
		(t.TTFT == 0 || info.FirstTokenAt.Sub(ex.arrival) <= t.TTFT) &&
		(t.TPOT == 0 || tpot <= t.TPOT)
	if met {
		ex.h.usher.ObserveSLO(ex.id.Band, metrics.SLOMet)
	} else {
		ex.h.usher.ObserveSLO(ex.id.Band, metrics.SLOMissed)
	}
}
