// Package kvfeed follows the KV events of a proxy.Handler's backends (vLLM's and SGLang's
// ZMQ publishers, package prefixcache/kvevents) and applies them to the Handler's prefix
// index, which is then exact. It is a proxy.Extension, in a package of its own so that a
// program that never follows KV events does not link ZMQ:
//
//	feed, err := kvfeed.New(kvfeed.Options{Listen: "tcp://0.0.0.0:5557"})
//	if err != nil { ... }
//	opts.Extensions = append(opts.Extensions, feed)
//
// A program configured by package gateway registers the feed instead, and the configuration
// decides whether it runs ([Register]):
//
//	reg := new(proxy.Registry)
//	if err := kvfeed.Register(reg); err != nil { ... }
//	cfg.Registry = reg
//
// A Backend's KVEvents endpoint is a publisher the server binds and the feed connects to; a
// Backend's KVPod names a server that connects to Options.Listen instead. Problems are logged
// once per kind, backend and interval, with a count, and exported as usher_kvevents_* series
// on the Handler's registry, one label value per backend that publishes plus "other":
// connected, batches, lost, resets, reconnects, events, stale probes, decode and apply errors,
// the time of the last batch, and usher_kvevents_delivered_batches_total{via}, which splits the
// batches into those the live connection delivered (via="live") and those only a replay did
// (via="replay"; see kvevents.Stats.Live). On a healthy fleet nearly every batch is live; a
// growing via="replay" share, or usher_kvevents_stale_probes_total, means the live path loses
// batches and the index is kept exact by replays, later. usher_kvevents_late_batches_total
// counts batches counted via="replay" that arrived live afterwards, later than the subscriber's
// grace (kvevents.Options.ProbeInterval, at least a second; it should stay 0).
package kvfeed

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/lograte"
	"github.com/usher-llm/usher/prefixcache/kvevents"
	"github.com/usher-llm/usher/proxy"
)

// Options configures a Follower.
type Options struct {
	// Listen, if set, is an endpoint the feed binds, to which servers with a KVPod connect
	// (e.g. tcp://0.0.0.0:5557; the bound address, port resolved, is the Subscriber's
	// ListenAddr). Bind it where only model servers reach it: whoever connects can publish.
	Listen string
	// Subscriber, if set, adjusts the subscriber's options (backoff, replay timeout, ...)
	// before it is built; Index, Sources, Listen, ListenSources and OnError are the feed's.
	Subscriber func(*kvevents.Options)
}

// Follower is the extension. Its methods are safe for concurrent use once [New] returned; the
// Handler calls Prepare, Attach, Run and Close.
type Follower struct {
	opts Options
	sub  *kvevents.Subscriber // nil until Attach, and when no backend publishes
}

var _ proxy.Extension = (*Follower)(nil)

// New returns a feed with opts. A Listen that is not an endpoint like tcp://0.0.0.0:5557 is
// an error wrapping [proxy.ErrInvalidOptions]. New binds and connects nothing: Run does.
func New(opts Options) (*Follower, error) {
	if opts.Listen != "" && !strings.Contains(opts.Listen, "://") {
		return nil, fmt.Errorf("%w: kv listen %q is not an endpoint like tcp://0.0.0.0:5557", proxy.ErrInvalidOptions, opts.Listen)
	}
	return &Follower{opts: opts}, nil
}

// Register adds the feed to r as the extension named "kv-events", which package gateway
// asks for when its configuration names KV events (kv_listen, or a backend's kv_events or
// kv_pod). Its params are {"listen": "tcp://0.0.0.0:5557"} ([Options].Listen; unknown keys
// are an error); each use builds a new [Follower]. Registering twice is an error wrapping
// [proxy.ErrInvalidOptions].
func Register(r *proxy.Registry) error {
	return proxy.Register(r, "kv-events", func(p proxy.Params) (proxy.Extension, error) {
		var o struct {
			Listen string `json:"listen"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return New(Options{Listen: o.Listen})
	})
}

// Prepare implements proxy.Extension; the feed changes no default.
func (*Follower) Prepare(*proxy.Defaults) error { return nil }

// Attach follows the KV-event publishers h's backends name (which [proxy.New] refuses when
// no extension follows them): it registers their usher_kvevents_* series on h's registry
// and builds the subscriber over them and h's index. Without any publisher and without
// Listen it builds no subscriber.
func (f *Follower) Attach(c proxy.Core) error {
	h, ok := c.(*proxy.Handler)
	if !ok {
		return fmt.Errorf("%w: kvfeed follows the KV events of a proxy.Handler's backends, not a %T's (an extproc.Server follows its endpoints' itself)", proxy.ErrInvalidOptions, c)
	}
	pubs := proxyseam.FollowKVEvents(h)
	names := make([]string, len(pubs))
	for i, p := range pubs {
		names[i] = p.Backend
	}
	kv, err := gatewaymetrics.NewKVEvents(names, nil)
	if err != nil {
		return err
	}
	if err := h.Registry().Register(series{f, kv}); err != nil {
		return err
	}
	var sources, listening []kvevents.Source
	for _, s := range pubs {
		src := kvevents.Source{Endpoint: s.Endpoint, ReplayEndpoint: s.Replay, Backend: s.Backend, RankBackends: s.Ranks, Pod: s.Pod}
		if s.Endpoint != "" {
			sources = append(sources, src)
		} else {
			listening = append(listening, src)
		}
	}
	if len(listening) > 0 && f.opts.Listen == "" {
		return fmt.Errorf("%w: backends with a KVPod need kvfeed.Options.Listen", proxy.ErrInvalidOptions)
	}
	if len(sources)+len(listening) == 0 && f.opts.Listen == "" {
		return nil
	}
	var o kvevents.Options
	if f.opts.Subscriber != nil {
		f.opts.Subscriber(&o)
	}
	log := lograte.New(proxyseam.Logger(h), 0)
	// One line per kind of problem per backend and interval, with a count: a run of events
	// that fail alike is counted in usher_kvevents_*_total, not logged one by one.
	o.Sources, o.OnError = sources, func(backend string, err error) { log.Warn("kv events", backend, err) }
	if f.opts.Listen != "" {
		o.Listen, o.ListenSources = f.opts.Listen, listening
	}
	o.Index = h.Index()
	sub, err := kvevents.New(o)
	if err != nil {
		return err
	}
	f.sub = sub
	return nil
}

// Run follows the publishers until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	if f.sub == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.sub.Run(ctx)
}

// Close stops following.
func (f *Follower) Close() error {
	if f.sub == nil {
		return nil
	}
	if err := f.sub.Close(); err != nil && !errors.Is(err, kvevents.ErrClosed) {
		return err
	}
	return nil
}

// series is the feed's usher_kvevents_* collector: each gather copies the subscriber's state
// of every source into kv, whose counters never go down, and collects kv.
type series struct {
	f  *Follower
	kv *gatewaymetrics.KVEvents
}

func (s series) Describe(ch chan<- *prometheus.Desc) { s.kv.Describe(ch) }

func (s series) Collect(ch chan<- prometheus.Metric) {
	if sub := s.f.sub; sub != nil {
		for _, st := range sub.Sources() {
			s.kv.Set(st.Source.Backend, gatewaymetrics.KVStatus{
				Connected: st.Connected, Batches: uint64(st.Batches), Lost: uint64(st.Lost),
				Resets: uint64(st.Resets), Reconnects: uint64(st.Reconnects), Events: uint64(st.Events),
				Stale: uint64(st.Stale), Live: uint64(st.Live), ReplayOnly: uint64(st.ReplayOnly), Late: uint64(st.Late),
				DecodeErrors: uint64(st.DecodeErrors), ApplyErrors: uint64(st.ApplyErrors),
				LastBatch: st.LastBatch,
			})
		}
	}
	s.kv.Collect(ch)
}

// Subscriber returns the KV-event subscriber (its Stats, Sources, Ready), nil before Attach
// or when no backend publishes.
func (f *Follower) Subscriber() *kvevents.Subscriber { return f.sub }
