package proxy

import (
	"log/slog"
	"net/http"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/peer"
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
	proxyseam.AddLimitSharer(func(host any) (proxyseam.LimitShare, bool) {
		h, ok := host.(*Handler)
		if !ok || h.limit <= 0 {
			return nil, ok
		}
		var last int // the share set last; touched by the one replication goroutine
		return func(replicas int) int {
			share := (h.limit + replicas - 1) / max(replicas, 1)
			if share != last {
				last = share
				peer.SetMaxInFlight(h.queue, share)
			}
			return share
		}, true
	})
	proxyseam.PoolQueue = func(h any, model string) *flowcontrol.Queue {
		hh := h.(*Handler)
		mi, _ := hh.resolveModel(model)
		return hh.queueFor(mi.base)
	}
	proxyseam.Retries = func(h any) proxyseam.RetryStats { return h.(*Handler).retryStats() }
	proxyseam.Saturation = func(h any) float64 { return h.(*Handler).saturationLevel() }
	proxyseam.DefaultTransport = func() *http.Transport { return defaultTransport(Timeouts{}.withDefaults()) }
}
