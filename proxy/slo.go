package proxy

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/slo"
)

// Service-level objectives: a request's latency targets, from its band's configuration and
// (when trusted) its headers; the admission deadline they set; and their outcomes.

// setSLO validates Options.SLO, TrustSLOHeaders and SLOShedAbove.
func (h *Handler) setSLO(opts Options) (err error) {
	h.slo, err = slo.New(opts.SLO, opts.TrustSLOHeaders, opts.SLOShedAbove, h.bands, ErrInvalidOptions)
	return err
}

// sloTarget returns the time-to-first-token target the Handler gave r, a request it asks its
// queue to admit (Options.SLO, TrustSLOHeaders), or 0 when r has none: the Target of the
// Registry's slo policy, a fairness.NewSLODeadline. O(1), no allocation.
func sloTarget(r *flowcontrol.Request) time.Duration { return slo.Target(r.Value) }

// observeLatency records the prediction's error and the targets' outcome of a request that
// was admitted (slo.Observe). Call it from finish, under ex.mu, with ex.info's Err and End set.
func (ex *exchange) observeLatency() {
	slo.Observe(ex.h.usher, &slo.Finished{
		Band: ex.id.Band, Targets: ex.targets, Stream: ex.req != nil && ex.req.Stream,
		Pick: ex.pick, Picked: ex.picked, PickAt: ex.pickAt, Arrival: ex.arrival, Info: &ex.info,
		ClientLeft: ex.ctx.Err() != nil,
	})
}
