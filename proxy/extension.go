package proxy

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing/session"
)

// An Extension runs beside a Handler and keeps it fed from outside the request path: the
// backends' KV events (package proxy/kvfeed), the state of the other gateway replicas
// (package gateway/replicaext over package replica). It is how the Handler uses a heavy
// client (ZMQ, Redis) without linking it: only a program that builds the extension, or
// registers its factory ([Registry.AddExtension]), imports its package.
//
// [New] calls Prepare on each extension in order, then builds its defaults, then calls
// Attach on each; [Handler.Run] runs each Run until its context ends; [Handler.Close] calls
// Close. Attach runs once, from New; Close may run concurrently with Run, and must be safe for
// it. An extension with series of its own registers them on [Handler.Registry] in Attach.
type Extension interface {
	// Prepare adjusts the options of the parts New builds when [Options] leaves them nil
	// (a replication layer sets their feeds and the keyer's secret). New calls it once;
	// whoever builds those parts itself calls it first on [Defaults] of its own to build them
	// alike (package gateway does), so Prepare must only set options, and may be called
	// more than once.
	Prepare(d *Defaults) error
	// Attach connects the extension to the built Handler: its Index, Router, Queue,
	// MaxInFlight, Registry (to register its own collectors), Logger, and the KV-event
	// publishers it follows (FollowKVEvents).
	Attach(h *Handler) error
	// Run does the extension's work until ctx ends, and returns ctx's error.
	Run(ctx context.Context) error
	// Close releases what the extension holds. It may be called before, after or without
	// Run.
	Close() error
}

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
}

// KVPublisher is one KV-event publisher of the fleet, as [Options.Backends] describe it: the
// backend (or data-parallel rank) whose blocks it reports, by its name in the router and the
// index. It is plain data.
type KVPublisher struct {
	// Backend is the name the events are applied under.
	Backend string
	// Endpoint is the publisher's ZMQ endpoint, which the server binds ("" when it connects
	// to the gateway instead, naming Pod in its topics).
	Endpoint, Pod string
	// Replay is the publisher's replay endpoint, if any.
	Replay string
	// Ranks names the backends of a shared publisher's data-parallel ranks, in rank order
	// (nil when the publisher serves one backend).
	Ranks []string
}

// FollowKVEvents returns the KV-event publishers the Backends name (a fresh slice), and records
// that the caller follows them: an [Extension] that applies KV events to [Handler.Index]
// (package proxy/kvfeed) calls it from Attach. New refuses Backends that name KV events when
// no extension's Attach called it, rather than leave them unheard. Safe for concurrent use;
// O(backends).
func (h *Handler) FollowKVEvents() []KVPublisher {
	h.kvFollowed.Store(true)
	return h.kvPublishers()
}

// kvPublishers lists the KV-event publishers the Backends name.
func (h *Handler) kvPublishers() []KVPublisher {
	var out []KVPublisher
	for _, m := range h.members {
		if m.kvEvents == "" && m.kvPod == "" {
			continue
		}
		out = append(out, KVPublisher{Backend: m.name, Endpoint: m.kvEvents, Pod: m.kvPod, Replay: m.replay, Ranks: append([]string(nil), m.rankBackends...)})
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

// Logger returns the Handler's logger (Options.Logger, or slog.Default()).
func (h *Handler) Logger() *slog.Logger { return h.log }
