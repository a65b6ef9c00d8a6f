package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// Service-level objectives: a request's latency targets, from its band's configuration and
// (when trusted) its headers; the admission deadline they set; and their outcomes.

// The headers a trusted proxy may set a request's targets with (Options.TrustSLOHeaders).
const (
	sloTTFTHeader = "X-Slo-Ttft-Ms"
	sloTPOTHeader = "X-Slo-Tpot-Ms"
	// maxSLOMillis bounds a header's value: one hour.
	maxSLOMillis = 3_600_000
)

// minSLOWait is the least time a request with a TTFT target may wait for admission, however
// far the router predicts it to miss its target: what it takes the queue to dispatch a
// request that is next in line, so that a request that cannot meet its target is still
// served when it would go (nearly) at once, and refused — shed on arrival by EarlyShed, or
// expired — rather than held when it would not.
const minSLOWait = 50 * time.Millisecond

// setSLO validates Options.SLO and keeps it by band.
func (h *Handler) setSLO(opts Options) error {
	h.trustSLO = opts.TrustSLOHeaders
	if a := opts.SLOShedAbove; a != 0 && !(a >= 1 && a <= 1000) {
		return fmt.Errorf("%w: SLOShedAbove %v: want 0 (off) or a factor from 1 to 1000", ErrInvalidOptions, a)
	}
	h.shedAbove = opts.SLOShedAbove
	if len(opts.SLO) == 0 {
		return nil
	}
	h.slo = make([]routing.Latency, h.bands)
	for b, t := range opts.SLO {
		if b < 0 || b >= h.bands {
			return fmt.Errorf("%w: SLO names band %d, want 0..%d", ErrInvalidOptions, b, h.bands-1)
		}
		if t.TTFT < 0 || t.TPOT < 0 {
			return fmt.Errorf("%w: SLO of band %d: negative target %+v", ErrInvalidOptions, b, t)
		}
		h.slo[b] = t
	}
	return nil
}

// targets returns the targets of a request of band band with headers hd: the band's, each
// loosened (never tightened) by a trusted header. A trusted header that is not a whole
// number of milliseconds in [1, maxSLOMillis] is a 400 naming it.
func (h *Handler) targets(hd http.Header, band int) (routing.Latency, *openai.Error) {
	var t routing.Latency
	if h.slo != nil {
		t = h.slo[band]
	}
	if !h.trustSLO {
		return t, nil
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{sloTTFTHeader, &t.TTFT}, {sloTPOTHeader, &t.TPOT}} {
		vs := hd.Values(f.name)
		if len(vs) == 0 {
			continue
		}
		n, err := strconv.Atoi(vs[0])
		if len(vs) > 1 || err != nil || n < 1 || n > maxSLOMillis {
			return routing.Latency{}, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest,
				Code: "invalid_header", Param: f.name,
				Message: fmt.Sprintf("header %s: want one whole number of milliseconds from 1 to %d", f.name, maxSLOMillis)}
		}
		// A header only loosens its band's target: a tighter one would move the request
		// ahead of its band under the slo and edf policies, and a band without a target
		// leaves none to loosen.
		if d := time.Duration(n) * time.Millisecond; *f.dst > 0 {
			*f.dst = max(*f.dst, d)
		}
	}
	return t, nil
}

// SLOTarget returns the time-to-first-token target the Handler gave r, a request it asks its
// queue to admit (Options.SLO, TrustSLOHeaders), or 0 when r has none: the Target of a
// fairness.NewSLODeadline policy that orders each request by its own target,
//
//	fairness.NewSLODeadline(fairness.SLODeadlineOptions{TTFT: 2 * time.Second, Target: proxy.SLOTarget})
//
// (the Registry's slo policy is this one). O(1), no allocation.
func SLOTarget(r *flowcontrol.Request) time.Duration {
	if t, ok := r.Value.(*routing.Latency); ok && t != nil {
		return t.TTFT
	}
	return 0
}

// sloDeadline returns the admission deadline of a request with TTFT target ttft, arriving at
// arrival and routed as rr: the latest dispatch that still meets the target on the backend
// predicted fastest, arrival + ttft − p̂, no sooner than minSLOWait from now; zero (the
// queue's TTL) when the router predicts nothing or that deadline is beyond the TTL. shed says
// the request is to be refused at once (Options.SLOShedAbove): p̂ exceeds that many times the
// target, with a model that has learned enough to say so.
func (h *Handler) sloDeadline(rr *routing.Request, ttft time.Duration, arrival, now time.Time) (dl time.Time, shed bool) {
	best, ok := h.router.Predict(rr)
	if !ok {
		return time.Time{}, false
	}
	if h.shedAbove > 0 && float64(best.TTFT) > h.shedAbove*float64(ttft) &&
		h.router.Stats().LatencyOutcomes >= routing.ColdLatencyOutcomes {
		return time.Time{}, true
	}
	dl = arrival.Add(ttft - best.TTFT)
	if floor := now.Add(minSLOWait); dl.Before(floor) {
		dl = floor
	}
	if h.ttl > 0 && !dl.Before(arrival.Add(h.ttl)) {
		return time.Time{}, false
	}
	return dl, false
}

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
