package proxy

import (
	"log/slog"
	"net/http"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
)

// init installs the seam the module's own extensions and tests read a Handler through
// (package proxyseam's doc says why it is not the Handler's API).
func init() {
	proxyseam.FollowKVEvents = func(h any) []proxyseam.KVPublisher {
		hh := h.(*Handler)
		hh.kvFollowed.Store(true)
		return hh.kvPublishers()
	}
	proxyseam.Logger = func(h any) *slog.Logger { return h.(*Handler).log }
	proxyseam.MaxInFlight = func(h any) int { return h.(*Handler).limit }
	proxyseam.PoolQueue = func(h any, model string) *flowcontrol.Queue {
		hh := h.(*Handler)
		mi, _ := hh.resolveModel(model)
		return hh.queueFor(mi.base)
	}
	proxyseam.Retries = func(h any) proxyseam.RetryStats { return h.(*Handler).retryStats() }
	proxyseam.Saturation = func(h any) float64 { return h.(*Handler).saturationLevel() }
	proxyseam.DefaultTransport = func() *http.Transport { return defaultTransport(Timeouts{}.withDefaults()) }
}
