package proxy

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// An Extension runs beside a Handler, or beside an endpoint picker (package proxy/extproc's
// Server), and keeps it fed from outside the request path: the backends' KV events (package
// proxy/kvfeed, for a Handler), the state of the other replicas of a gateway or a picker
// (package gateway/replicaext over package replica). It is how the Handler and the picker use
// a heavy client (ZMQ, Redis) without linking it: only a program that builds the extension,
// or registers its factory ([Register]), imports its package.
//
// [New] calls Prepare on each extension in order, then builds its defaults, then calls
// Attach on each; [Handler.Run] runs each Run until its context ends; [Handler.Close] calls
// Close. Attach runs once, from New; Close may run concurrently with Run, and must be safe for
// it. An extension with series of its own registers them on the [Core]'s Registry in Attach.
// The picker's New and Run do the same.
type Extension interface {
	// Prepare adjusts the options of the parts New builds when [Options] leaves them nil
	// (a replication layer sets their feeds and the keyer's secret). New calls it once;
	// whoever builds those parts itself calls it first on [Defaults] of its own to build them
	// alike (package gateway does), so Prepare must only set options, and may be called
	// more than once.
	Prepare(d *Defaults) error
	// Attach connects the extension to the built Handler or picker: its Index, Router, Queue
	// and Registry (to register its own collectors). An extension that needs what only one
	// of them has (kvfeed, the Handler's backends) refuses the other with an error.
	Attach(c Core) error
	// Run does the extension's work until ctx ends, and returns ctx's error.
	Run(ctx context.Context) error
	// Close releases what the extension holds. It may be called before, after or without
	// Run.
	Close() error
}

// Core is what an [Extension] attaches to: the parts a [Handler] and an endpoint picker
// (package proxy/extproc's Server) both have. Both implement it; an extension may assert
// which it was given. Its methods are safe for concurrent use and O(1).
type Core interface {
	// Index returns the prefix index the router matches prompts against.
	Index() *prefixcache.Index
	// Router returns the router that picks the backends.
	Router() *routing.Router
	// Queue returns the admission queue.
	Queue() *flowcontrol.Queue
	// Registry returns the registry the Core's metrics are served from.
	Registry() *prometheus.Registry
}

var _ Core = (*Handler)(nil)

// Defaults are the options of the parts [New] builds when [Options] leaves them nil, for an
// [Extension]'s Prepare to adjust.
type Defaults struct {
	// Index configures the default prefix index.
	Index *prefixcache.Options
	// Session configures the session table of the default router's session scorer.
	Session *session.AffinityOptions
	// Keyer configures the default [FlowKeyer] ([NewKeyer]); nil when [Options.Keyer] is
	// set. Replicas must derive an API key's tenant alike, so a replication layer sets its
	// Secret when none is given.
	Keyer *KeyerOptions
	// Quota configures the quota Limiter package gateway builds from its configuration
	// (quota.New, handed to [Options].Quota); nil when no quota is configured, and always
	// from [New], which builds no Limiter. A replication layer sets its Shared store, so that
	// the replicas hold each tenant's quota together.
	Quota *quota.Options
}

// kvPublishers lists the KV-event publishers the Backends name.
func (h *Handler) kvPublishers() []proxyseam.KVPublisher {
	var out []proxyseam.KVPublisher
	for _, m := range h.members {
		if m.kvEvents == "" && m.kvPod == "" {
			continue
		}
		out = append(out, proxyseam.KVPublisher{Backend: m.name, Endpoint: m.kvEvents, Pod: m.kvPod, Replay: m.replay, Ranks: append([]string(nil), m.rankBackends...)})
	}
	return out
}

// checkKVFollowed refuses KV-event endpoints nobody follows.
func (h *Handler) checkKVFollowed() error {
	src := h.kvPublishers()
	if len(src) == 0 || h.kvFollowed.Load() {
		return nil
	}
	return fmt.Errorf("%w: backend %s names KV events but no extension follows them (add kvfeed.New to Options.Extensions, or register kvfeed with the Registry of a gateway configuration)", ErrInvalidOptions, src[0].Backend)
}
