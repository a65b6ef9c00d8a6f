package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-zeromq/zmq4"

	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache"
)

// quiet discards the zmq4 library's own log lines.
var quiet = log.New(io.Discard, "", 0)

// Applier is the part of the prefix index the Subscriber writes to: the
// exact mode of *prefixcache.Index. Its methods must be safe for
// concurrent use (the Subscriber applies each source from its own
// goroutine).
type Applier interface {
	Lookup(name string) (prefixcache.HolderID, bool)
	ApplyStored(id prefixcache.HolderID, ev prefixcache.StoredBlocks) error
	ApplyRemovedFrom(id prefixcache.HolderID, medium string, engineHashes []uint64) error
	ApplyCleared(id prefixcache.HolderID) error
}

var _ Applier = (*prefixcache.Index)(nil)

// ErrRunning is returned by Run while another Run of the same Subscriber
// is in progress.
var ErrRunning = errors.New("kvevents: already running")

// ErrReplay wraps the errors of a failed replay exchange, which the
// Subscriber reports through Options.OnError and survives.
var ErrReplay = kvpub.ErrReplay

// ErrClosed is returned by operations on a closed Subscriber.
var ErrClosed = kvpub.ErrClosed

// ErrInvalidOptions reports options that New rejects.
var ErrInvalidOptions = kvpub.ErrInvalidOptions

// EndOfReplay is the sequence number that ends a replay: all ones, which is
// what vLLM sends as (-1).to_bytes(8, "big", signed=True).
const EndOfReplay = kvpub.EndOfReplay

// ErrSilent is wrapped by the warning Options.OnError receives when a
// configured source has delivered no batch for Options.SilentAfter.
var ErrSilent = errors.New("kvevents: source silent")

// ErrUnknownSource is wrapped by the errors Options.OnError receives for
// messages on the listening socket from a pod that is not a source: not
// in Options.ListenSources without Options.AcceptUnknown, or past
// Options.MaxSources.
var ErrUnknownSource = errors.New("kvevents: unknown source")

// Defaults of Options fields left zero.
const (
	DefaultSilentAfter = 30 * time.Second
	DefaultMaxSources  = 1024
)

// inboxSize is the number of messages the listening socket queues for one
// source while the source's goroutine is busy (a replay, typically).
// Beyond it messages are dropped, and the source sees a gap.
const inboxSize = 256

// Source is one publisher: a model-server process (or one data-parallel
// rank of it) publishing KV events.
//
// In Options.Sources (connect mode) the Subscriber connects to Endpoint.
// In Options.ListenSources (listen mode) the publisher connects to the
// Subscriber's listening socket and is recognised by the pod in its
// topics, kv@<pod>@<model>: Backend is that pod and Endpoint and Topic
// stay empty.
type Source struct {
	// Endpoint is the publisher's PUB address, e.g. "tcp://10.0.0.7:5557".
	// Empty in listen mode.
	Endpoint string
	// ReplayEndpoint is its ROUTER replay address; "" disables replay (gaps
	// are then counted as lost and restarts detected from sequence
	// numbers alone).
	ReplayEndpoint string
	// Backend is the name the backend is registered under in the index;
	// "" takes the pod from the topic kv@<pod>@<model>. In listen mode it
	// is required.
	Backend string
	// RankBackends, for a publisher whose batches carry a data-parallel
	// rank for several ranks at once (SGLang's attn_dp_rank, one publisher
	// per server), names the backend of each rank: a batch of rank r is
	// applied to RankBackends[r]; a batch without a rank, or of a rank
	// beyond the list, to Backend. A publisher restart clears them all.
	// Nil: every batch goes to Backend.
	RankBackends []string
	// Pod is, in listen mode, the pod the source's topics name
	// (kv@<pod>@<model>), which tells its messages apart on the listening
	// socket; "" means Backend. Unused in connect mode.
	Pod string
	// Model names the model for the chain seed (prefixcache.Seed(model,
	// lora_name, "")); "" takes the model from the topic. It must be the
	// name the gateway hashes requests with.
	Model string
	// Topic is the subscription prefix; "" receives every topic. Empty
	// in listen mode (the listening socket receives every topic).
	Topic string
}

// pod is the pod a listen-mode source's topics name.
func (s Source) pod() string {
	if s.Pod != "" {
		return s.Pod
	}
	return s.Backend
}

// Options configures a Subscriber. Zero values take the documented
// defaults. Index is required, and at least one of Sources and Listen;
// both may be used at once.
type Options struct {
	// Index receives the events (required): a *prefixcache.Index is an
	// Applier.
	Index Applier
	// Sources lists the publishers the Subscriber connects to (connect
	// mode: the publisher binds, as vLLM does with "tcp://*:5557").
	Sources []Source
	// Listen, if set, is an endpoint Run binds a SUB socket to, which
	// publishers connect to (listen mode: vLLM connects when its endpoint
	// names a concrete host, "tcp://gateway:5557"), e.g.
	// "tcp://0.0.0.0:5557", or "tcp://127.0.0.1:0" for any free port (see
	// ListenAddr). Sources on it are told apart by topic, which must be
	// kv@<pod>@<model>: messages with other topics are counted as decode
	// errors.
	Listen string
	// ListenSources configures the publishers that connect to Listen,
	// one per pod (see Source). Each gets the same sequence, replay and
	// restart handling as a connect-mode source.
	ListenSources []Source
	// AcceptUnknown makes the listening socket accept pods that are not
	// in ListenSources: each becomes a source of its own, without replay,
	// applied to the backend named after the pod with the model from the
	// topic. Without it their messages are counted in Stats.Rejected.
	// Anyone who can reach the listening endpoint can publish: bind it
	// on a network only model servers reach.
	AcceptUnknown bool
	// MaxSources bounds the pods AcceptUnknown learns, so that topics
	// cannot grow memory without bound. At the bound a new pod takes the
	// place of the learnt source that has been silent the longest, if it
	// has been silent for SilentAfter (DefaultSilentAfter if warnings are
	// disabled); otherwise the new pod's messages are rejected. Default
	// DefaultMaxSources.
	MaxSources int
	// MinBackoff is the first wait before reconnecting to a publisher that
	// refused or dropped the connection; it doubles up to MaxBackoff and
	// returns to MinBackoff once a connection delivers. Defaults 50 ms
	// and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// ReplayTimeout bounds one replay exchange (connect, request, all
	// replies). Default 2 s.
	ReplayTimeout time.Duration
	// ProbeInterval is how long a connection to a source with a replay
	// endpoint may stay silent before the Subscriber asks the replay
	// endpoint whether it missed anything (a PUB connection can lose its
	// subscription or outlive its publisher without reporting an error).
	// Batches published since are applied at once; if the connection then
	// passes them, or stays silent for the grace (ProbeInterval, at least a
	// second), they were missed: the probe is counted stale and, in
	// connect mode, the connection replaced (in listen mode, where the
	// publisher owns the connection, only counted; see Stats.Live). It also spaces the history checks that blocks continuing
	// blocks the index never saw bring (see the package doc's Failure
	// handling; 1 s when probing is disabled). Default 1 s; negative
	// disables probing.
	ProbeInterval time.Duration
	// SilentAfter is how long a configured source (in Sources or
	// ListenSources) may deliver no batch before OnError receives a
	// warning wrapping ErrSilent, once per silence: the next comes only
	// after a batch has arrived and another silence has lasted as long.
	// The listening socket itself is watched the same way (the warning
	// names backend ""). An idle engine publishes nothing, so a warning
	// says "look", not "broken". Default DefaultSilentAfter; negative
	// disables.
	SilentAfter time.Duration
	// OnError, if set, is called with errors that the Subscriber counts
	// and otherwise survives (decode, apply, replay, silence, unknown
	// sources), with the backend's name: "" for the listening socket's
	// own (messages that name no pod, its silence). It runs on the
	// source's goroutine, the listening socket's reader for messages no
	// source took, Run's for the socket's silence, and must not block.
	OnError func(backend string, err error)
}

// Stats counts what a Subscriber did since New. Counters are read one by
// one, so they are individually accurate but not mutually consistent.
type Stats struct {
	Batches int64 // batches applied (live and replayed)
	Events  int64 // events applied
	Unknown int64 // events of unknown type, skipped
	// Gaps counts sequence gaps on a live stream: a batch arrived whose
	// sequence number was past the next expected one.
	Gaps int64
	// Replays counts completed replay exchanges (gap recovery, the check
	// made on connecting, idle probes); Replayed the batches they
	// contributed (applied first from a replay, whether or not the live
	// connection delivered them too: see Live); ReplayErrors the exchanges
	// that failed.
	Replays, Replayed, ReplayErrors int64
	// Lost counts batches no replay recovered (there was no replay
	// endpoint, or it failed). Batches before the first one seen from a
	// source are not counted: that one is where the source starts.
	Lost int64
	// Reconnects counts connections made after a source's first one.
	Reconnects int64
	// Stale counts idle probes that found batches their connection had
	// missed: batches the probe's replay applied that the connection then
	// passed (it delivered a later one) or still had not delivered after
	// a grace of ProbeInterval, and at least a second (in connect mode the
	// connection is then replaced). A probe whose batches the connection delivers after all
	// (the probe raced the publisher) is not stale.
	Stale int64
	// Live and ReplayOnly split the batches (sequence numbers) of every
	// source by how they arrived: Live those the live connection delivered,
	// even if a replay racing the publisher had applied them moments
	// before; ReplayOnly those only a replay delivered, because the
	// connection missed them or they were published before it subscribed.
	// A batch a replay applied ahead of the live connection counts in
	// neither until the connection delivers it or passes it, or stays
	// silent for the grace (ProbeInterval, at least a second), or ends.
	// Late counts batches counted in ReplayOnly that the connection
	// delivered afterwards, later than the grace (listen mode only; it
	// should stay 0).
	Live, ReplayOnly, Late int64
	// Resets counts publisher restarts detected; each cleared the backend.
	Resets int64
	// DecodeErrors counts malformed messages (bad frames, topic or
	// payload); ApplyErrors events the index rejected (for instance a
	// BlockStored whose parent it never saw, unless a publisher restart
	// detected because of it explains it); Unregistered batches for a
	// backend not registered in the index.
	DecodeErrors, ApplyErrors, Unregistered int64
	// Rejected counts messages on the listening socket from pods that are
	// not sources (ErrUnknownSource); Dropped those dropped because their
	// source's queue was full (the source then sees a gap).
	Rejected, Dropped int64
}

// SourceStatus describes one source as its goroutine last left it.
//
// Batches, Events, Lost, Resets, Reconnects, Stale, Live, ReplayOnly,
// Late, DecodeErrors and ApplyErrors are this source's share of the Stats counters of the same
// names, counted since New at the same places: over all sources they add
// up to Stats (up to the increments in flight while the two are read,
// since both are read one counter at a time), except for decode errors
// of listening-socket messages that name no source, and for learnt
// sources forgotten at MaxSources.
type SourceStatus struct {
	// Source is as configured; for a pod learnt from a topic
	// (AcceptUnknown) it is Source{Backend: pod}, and Learnt is set.
	Source Source
	Learnt bool
	// Backend is the backend events are applied to: Source.Backend, or
	// the pod learnt from the topic ("" until a batch arrived).
	Backend string
	// Connected reports whether the PUB connection is up now. In listen
	// mode, where the publisher's connection is not visible, it reports
	// that the source has delivered a message during this Run and no
	// idle probe of its replay endpoint has failed since.
	Connected bool
	// Applied is the sequence number of the last batch applied; valid
	// when HasApplied (false before the first batch and after a reset).
	Applied    uint64
	HasApplied bool
	// LastBatch is when the last batch of this source arrived, live or
	// replayed; zero before the first.
	LastBatch time.Time
	// Batches counts batches applied from this source, live and
	// replayed; Events the events in them.
	Batches, Events int64
	// Lost counts batches of this source no replay recovered.
	Lost int64
	// Resets counts restarts of this source's publisher detected; each
	// cleared the backend.
	Resets int64
	// Reconnects counts connections to this source after its first one.
	Reconnects int64
	// Stale counts idle probes that found batches the connection had
	// missed (see Stats.Stale).
	Stale int64
	// Live, ReplayOnly and Late split this source's batches by how they
	// arrived (see Stats.Live).
	Live, ReplayOnly, Late int64
	// DecodeErrors counts this source's malformed messages, ApplyErrors
	// its events the index rejected.
	DecodeErrors, ApplyErrors int64
}

type counters struct {
	batches, events, unknown, gaps, replays, replayed, replayErrors, lost,
	reconnects, stale, resets, decodeErrors, applyErrors, unregistered,
	rejected, dropped, live, replayOnly, late atomic.Int64
}

// Subscriber keeps a prefix index exact by applying the KV events of many
// publishers: it subscribes to each publisher's PUB socket (connect mode)
// or binds one SUB socket that publishers connect to (listen mode),
// detects sequence gaps and publisher restarts, recovers through the
// replay endpoint and reconnects with exponential backoff. Each source is
// handled by one goroutine, so a backend's events are applied in sequence
// order.
//
// Events of one Source are applied in order; Sources that name the same
// backend are not ordered with respect to each other.
//
// New starts nothing; Run does the work until its context ends or Close is
// called. Stats, Sources, ListenAddr, Ready and Close are safe for
// concurrent use with Run.
type Subscriber struct {
	// Immutable after New, except that each stream is owned by the
	// goroutine Run starts for it.
	ix      Applier
	opts    Options
	streams []*stream // connect mode, in Options.Sources order
	lis     *listener // nil without Options.Listen
	ready   chan struct{}

	// listening holds the listen-mode sources: ListenSources in order,
	// then learnt pods in the order they arrived. Written by New and by
	// the listening socket's goroutine (copy on write), read by Sources.
	listening atomic.Pointer[[]*stream]

	c counters // atomic

	mu       sync.Mutex // guards the fields below
	running  bool
	closed   bool
	isReady  bool
	addr     string             // the bound listening address, "" before
	rebind   string             // the endpoint a later Run binds
	cancel   context.CancelFunc // cancels Run's context
	done     chan struct{}      // closed when Run returns
	runStart time.Time
}

// New validates opts and returns a Subscriber that applies events to
// opts.Index. It returns an error wrapping ErrInvalidOptions for a nil Index, neither
// sources nor a listening endpoint, a source without an endpoint, a
// listen source without a pod or with an endpoint or topic, a pod named
// twice, ListenSources or AcceptUnknown without Listen, Listen with
// nothing to accept, negative durations or a negative MaxSources. New
// binds nothing and starts nothing.
func New(opts Options) (*Subscriber, error) {
	ix := opts.Index
	switch {
	case ix == nil:
		return nil, fmt.Errorf("%w: nil Index", ErrInvalidOptions)
	case len(opts.Sources) == 0 && opts.Listen == "":
		return nil, fmt.Errorf("%w: no sources and no listening endpoint", ErrInvalidOptions)
	case opts.MinBackoff < 0 || opts.MaxBackoff < 0 || opts.ReplayTimeout < 0:
		return nil, fmt.Errorf("%w: negative duration", ErrInvalidOptions)
	case opts.MaxSources < 0:
		return nil, fmt.Errorf("%w: MaxSources %d < 0", ErrInvalidOptions, opts.MaxSources)
	case opts.Listen == "" && (len(opts.ListenSources) > 0 || opts.AcceptUnknown):
		return nil, fmt.Errorf("%w: ListenSources or AcceptUnknown without Listen", ErrInvalidOptions)
	case opts.Listen != "" && !strings.Contains(opts.Listen, "://"):
		return nil, fmt.Errorf("%w: Listen %q is not an endpoint like tcp://0.0.0.0:5557", ErrInvalidOptions, opts.Listen)
	case opts.Listen != "" && len(opts.ListenSources) == 0 && !opts.AcceptUnknown:
		return nil, fmt.Errorf("%w: Listen without ListenSources or AcceptUnknown accepts nothing", ErrInvalidOptions)
	}
	for i, s := range opts.Sources {
		if s.Endpoint == "" {
			return nil, fmt.Errorf("%w: source %d has no endpoint", ErrInvalidOptions, i)
		}
	}
	pods := make(map[string]bool, len(opts.ListenSources))
	for i, s := range opts.ListenSources {
		pod := s.pod()
		switch {
		case s.Backend == "":
			return nil, fmt.Errorf("%w: listen source %d has no Backend", ErrInvalidOptions, i)
		case strings.Contains(pod, "@"):
			return nil, fmt.Errorf("%w: listen source %d: %q is not a pod name", ErrInvalidOptions, i, pod)
		case s.Endpoint != "" || s.Topic != "":
			return nil, fmt.Errorf("%w: listen source %d (%s): Endpoint and Topic must be empty", ErrInvalidOptions, i, s.Backend)
		case pods[pod]:
			return nil, fmt.Errorf("%w: listen source %d: pod %q named twice", ErrInvalidOptions, i, pod)
		}
		pods[pod] = true
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.ReplayTimeout == 0 {
		opts.ReplayTimeout = 2 * time.Second
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = time.Second
	}
	if opts.SilentAfter == 0 {
		opts.SilentAfter = DefaultSilentAfter
	}
	if opts.MaxSources == 0 {
		opts.MaxSources = DefaultMaxSources
	}
	opts.Sources = append([]Source(nil), opts.Sources...)
	opts.ListenSources = append([]Source(nil), opts.ListenSources...)
	s := &Subscriber{ix: ix, opts: opts, ready: make(chan struct{}), rebind: opts.Listen}
	for _, src := range opts.Sources {
		st := newStream(s, src)
		st.watched = true
		s.streams = append(s.streams, st)
	}
	if opts.Listen != "" {
		s.lis = newListener(s)
	}
	return s, nil
}

// Stats returns the counters. It is O(1) and safe for concurrent use.
func (s *Subscriber) Stats() Stats {
	c := &s.c
	return Stats{
		Batches: c.batches.Load(), Events: c.events.Load(), Unknown: c.unknown.Load(),
		Gaps: c.gaps.Load(), Replays: c.replays.Load(), Replayed: c.replayed.Load(),
		ReplayErrors: c.replayErrors.Load(), Lost: c.lost.Load(), Reconnects: c.reconnects.Load(), Stale: c.stale.Load(),
		Live: c.live.Load(), ReplayOnly: c.replayOnly.Load(), Late: c.late.Load(),
		Resets: c.resets.Load(), DecodeErrors: c.decodeErrors.Load(),
		ApplyErrors: c.applyErrors.Load(), Unregistered: c.unregistered.Load(),
		Rejected: c.rejected.Load(), Dropped: c.dropped.Load(),
	}
}

// Run binds the listening socket, if Options.Listen is set, connects to
// every source in Options.Sources and applies their events until ctx is
// done or Close is called, then closes its sockets and returns nil. It
// runs one goroutine per source, plus one per live connection reading its
// socket and one reading the listening socket, and waits for all of them
// before returning. A later Run resumes from the sequence numbers reached
// and binds the address the first one got (the same port, if Listen asked
// for any free one). It returns the error if the listening socket cannot
// be bound, ErrClosed after Close, and ErrRunning if Run is already
// running.
//
// Per batch the work is O(payload size + blocks in its events): one decode
// into reused buffers and one index call per event.
func (s *Subscriber) Run(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.running:
		s.mu.Unlock()
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	s.running, s.cancel, s.done, s.runStart = true, cancel, make(chan struct{}), time.Now()
	s.mu.Unlock()
	defer func() {
		cancel()
		s.mu.Lock()
		s.running = false
		close(s.done)
		s.mu.Unlock()
	}()

	var sock zmq4.Socket
	if s.lis != nil {
		var err error
		if sock, err = s.bind(ctx); err != nil {
			return err
		}
	}
	s.mu.Lock()
	if !s.isReady {
		s.isReady = true
		close(s.ready)
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, st := range s.streams {
		wg.Go(func() { st.run(ctx) })
	}
	if sock != nil {
		s.lis.run(ctx, sock, &wg)
	}
	wg.Wait()
	return nil
}

// ListenAddr returns the address the listening socket is bound to, with
// the port resolved ("tcp://127.0.0.1:40123"), once Run has bound it (see
// Ready); "" before, or without Options.Listen. It is O(1).
func (s *Subscriber) ListenAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Ready returns a channel closed once the first Run has started: after it
// bound the listening socket, if there is one, so that ListenAddr is
// valid. It stays open if Run fails to bind; wait for it together with
// Run's result.
func (s *Subscriber) Ready() <-chan struct{} { return s.ready }

// Close stops Run, waits for it to return, and makes later Run calls fail
// with ErrClosed. It is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel, done, running := s.cancel, s.done, s.running
	s.mu.Unlock()
	if running {
		cancel()
		<-done
	}
	return nil
}

// stream is the state of one source. Only the source's goroutine touches
// it, except where marked.
type stream struct {
	s   *Subscriber
	src Source
	dec *Decoder
	b   Batch
	// watched sources get silence warnings: the configured ones.
	watched bool

	// Listen mode. inbox carries the messages the listening socket
	// dispatched to this source; nil in connect mode.
	inbox  chan [][]byte
	learnt bool
	// Owned by the listening socket's goroutine: when it last dispatched
	// a message here, and how it stops a learnt source's goroutine.
	lastMsg time.Time
	cancel  context.CancelFunc

	// Sequence state. applied is the highest sequence number applied
	// (valid when hasApplied); digest is the hash of that batch's payload,
	// which identifies the publisher's epoch when it is replayed.
	applied    uint64
	hasApplied bool
	digest     uint64
	// lastLive is the last sequence number received on the current
	// connection (valid when liveOnConn).
	lastLive   uint64
	liveOnConn bool
	// anchor is the last applied batch known to come from the publisher
	// process the backend follows (valid when hasAnchor): the last one a
	// replay exchange applied or found in the history, or a live batch
	// while trustLive. sync checks the history against it. In listen mode
	// a live batch is not known to come from that process (a restarted
	// publisher reconnects unseen), so the anchor stays behind the last
	// applied batch until the next replay; in connect mode, once a
	// connection is checked, it follows every batch.
	anchor    mark
	hasAnchor bool
	// trustLive: the live batches on the current connection come from the
	// process of the anchor (connect mode, after a sync succeeded on it).
	trustLive bool
	// held keeps the unknown-parent errors of the live batch being
	// applied until recheck decides whether a restart explains them;
	// nextCheck is the earliest time of the next such check.
	held      []error
	nextCheck time.Time
	// ahead holds the batches a replay applied that the live connection
	// has neither delivered nor passed yet (see reconcile); probing is set
	// while an idle probe's replay runs. missed is the last range counted
	// replay-only on silence alone (listen mode), to tell if it arrives
	// after all (Late).
	ahead   seqRange
	probing bool
	missed  seqRange

	// The silence warning: timer is nil when the source is not watched.
	quiet silence
	timer *time.Timer

	// Published for Sources, written only by the source's goroutine.
	connected   atomic.Bool
	appliedPlus atomic.Uint64          // applied+1; 0 when !hasApplied
	backendName atomic.Pointer[string] // a copy of backend
	lastBatch   atomic.Int64           // UnixNano; 0 before the first batch
	// This source's share of the Subscriber's counters of the same
	// names, incremented next to them.
	batches, events, lost, resets, reconnects, stale, decodeErrors, applyErrors,
	liveN, replayOnly, late atomic.Int64

	// Where events go, resolved from Source and the topic.
	topic      string // last topic seen
	backend    string
	model      string
	seedLoRA   string
	seedLoRAID int64
	seedSalt   string
	seed       prefixcache.BlockHash
	seedOK     bool
}

// loraSeed is the chain seed of blocks computed with an adapter. Blocks of
// an adapter known only by its id (publishers that send lora_id without
// lora_name) get a seed of their own, "lora_id:<id>", which no request
// hashed by name matches: missing a match is better than matching blocks
// of an adapter against base-model requests. salt is the request's
// cache_salt, from the first block's extra_keys.
func loraSeed(model, name string, id int64, salt string) prefixcache.BlockHash {
	if name == "" && id != 0 {
		name = "lora_id:" + strconv.FormatInt(id, 10)
	}
	return prefixcache.Seed(model, name, salt)
}

// mark identifies a batch: its sequence number and the hash of its
// payload.
type mark struct {
	seq, digest uint64
}

func newStream(s *Subscriber, src Source) *stream {
	st := &stream{s: s, src: src, dec: new(Decoder), backend: src.Backend, model: src.Model}
	name := src.Backend
	st.backendName.Store(&name)
	return st
}

// Sources returns the status of every source: Options.Sources in order,
// then Options.ListenSources in order, then the pods learnt from topics
// in the order they arrived. It is O(sources), safe for concurrent use
// with Run, and allocates the result.
func (s *Subscriber) Sources() []SourceStatus {
	var listening []*stream
	if p := s.listening.Load(); p != nil {
		listening = *p
	}
	out := make([]SourceStatus, 0, len(s.streams)+len(listening))
	for _, list := range [][]*stream{s.streams, listening} {
		for _, st := range list {
			out = append(out, st.status())
		}
	}
	return out
}

func (st *stream) status() SourceStatus {
	ss := SourceStatus{
		Source: st.src, Learnt: st.learnt, Backend: *st.backendName.Load(), Connected: st.connected.Load(),
		Batches: st.batches.Load(), Events: st.events.Load(), Lost: st.lost.Load(), Resets: st.resets.Load(),
		Reconnects: st.reconnects.Load(), Stale: st.stale.Load(),
		Live: st.liveN.Load(), ReplayOnly: st.replayOnly.Load(), Late: st.late.Load(),
		DecodeErrors: st.decodeErrors.Load(), ApplyErrors: st.applyErrors.Load(),
	}
	if a := st.appliedPlus.Load(); a != 0 {
		ss.Applied, ss.HasApplied = a-1, true
	}
	if t := st.lastBatch.Load(); t != 0 {
		ss.LastBatch = time.Unix(0, t)
	}
	return ss
}

func (st *stream) report(err error) {
	if f := st.s.opts.OnError; f != nil {
		f(st.backend, err)
	}
}

// decodeError counts and reports a malformed message of this source.
func (st *stream) decodeError(err error) {
	st.s.c.decodeErrors.Add(1)
	st.decodeErrors.Add(1)
	if err != nil {
		st.report(err)
	}
}

// applyError counts and reports an event the index rejected.
func (st *stream) applyError(err error) {
	st.s.c.applyErrors.Add(1)
	st.applyErrors.Add(1)
	st.report(err)
}

// silence decides when a source that delivers nothing is warned about:
// once after a silence of length after, counted from the later of its
// last batch and the start of the watch, and not again until a batch has
// arrived. It is plain state, driven by the caller's clock.
type silence struct {
	after      time.Duration
	since      time.Time // the watch started (Run did)
	warned     bool
	warnedFrom time.Time // the start of the silence last warned about
}

// check reports whether a warning is due at now for a source whose last
// batch arrived at last (zero for none), how long the source has been
// silent, and how long to wait before checking again. O(1).
func (q *silence) check(now, last time.Time) (warn bool, idle, wait time.Duration) {
	from := q.since
	if last.After(from) {
		from = last
	}
	idle = now.Sub(from)
	if idle < q.after {
		return false, idle, q.after - idle
	}
	if q.warned && q.warnedFrom.Equal(from) {
		return false, idle, q.after
	}
	q.warned, q.warnedFrom = true, from
	return true, idle, q.after
}

// watch starts the silence timer of a watched source at the start of a
// Run; stopWatch stops it.
func (st *stream) watch() {
	after := st.s.opts.SilentAfter
	if !st.watched || after <= 0 {
		return
	}
	st.s.mu.Lock()
	since := st.s.runStart
	st.s.mu.Unlock()
	st.quiet = silence{after: after, since: since}
	st.timer = time.NewTimer(after)
}

func (st *stream) stopWatch() {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
}

// silent is the silence timer's channel, nil (never ready) when the
// source is not watched.
func (st *stream) silent() <-chan time.Time {
	if st.timer == nil {
		return nil
	}
	return st.timer.C
}

// checkSilence runs when the silence timer fires.
func (st *stream) checkSilence(now time.Time) {
	var last time.Time
	if t := st.lastBatch.Load(); t != 0 {
		last = time.Unix(0, t)
	}
	warn, idle, wait := st.quiet.check(now, last)
	st.timer.Reset(wait)
	if !warn {
		return
	}
	var state string
	switch {
	case st.inbox == nil && st.connected.Load():
		state = "connected to " + st.src.Endpoint + "; an idle engine publishes nothing"
	case st.inbox == nil:
		state = "not connected to " + st.src.Endpoint
	case st.connected.Load():
		state = "heard from on the listening socket; an idle engine publishes nothing"
	default:
		state = "not heard from on the listening socket " + st.s.ListenAddr()
	}
	if last.IsZero() {
		state += "; no batch ever"
	}
	st.report(fmt.Errorf("%w: no batch for %v (%s)", ErrSilent, idle.Round(time.Millisecond), state))
}

// run connects, consumes until the connection drops, and reconnects with
// backoff, until ctx is done.
func (st *stream) run(ctx context.Context) {
	st.watch()
	defer st.stopWatch()
	backoff := st.s.opts.MinBackoff
	connected := false
	for ctx.Err() == nil {
		sub, err := st.dial(ctx)
		if err == nil {
			if connected {
				st.s.c.reconnects.Add(1)
				st.reconnects.Add(1)
			}
			connected = true
			if st.consume(ctx, sub) {
				backoff = st.s.opts.MinBackoff
			}
		}
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(backoff)
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				break wait
			case now := <-st.silent():
				st.checkSilence(now)
			}
		}
		backoff = min(2*backoff, st.s.opts.MaxBackoff)
	}
}

func (st *stream) dial(ctx context.Context) (zmq4.Socket, error) {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(quiet), zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(st.s.opts.ReplayTimeout))
	if err := sub.SetOption(zmq4.OptionSubscribe, st.src.Topic); err != nil {
		sub.Close()
		return nil, err
	}
	if err := sub.Dial(st.src.Endpoint); err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// consume handles one connection until it fails or looks stale; it
// reports whether any message arrived. The socket's Recv cannot be
// interrupted except by closing the socket, so a reader goroutine feeds
// the loop, which also wakes up to probe an idle connection.
func (st *stream) consume(ctx context.Context, sub zmq4.Socket) (delivered bool) {
	st.liveOnConn = false
	st.connected.Store(true)
	defer st.connected.Store(false)
	msgs := make(chan zmq4.Msg)
	failed := make(chan struct{})
	connCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			msg, err := sub.Recv()
			if err != nil {
				close(failed)
				return
			}
			select {
			case msgs <- msg:
			case <-connCtx.Done():
				return
			}
		}
	})
	defer func() {
		cancel()
		sub.Close() // makes Recv return
		wg.Wait()
		// Nothing more can arrive on this connection: what a replay
		// applied ahead of it was delivered by the replay alone.
		st.settle(false)
	}()

	st.trustLive = false
	st.sync(ctx)
	interval := st.s.opts.ProbeInterval
	var probe <-chan time.Time
	var timer *time.Timer
	if interval > 0 && st.src.ReplayEndpoint != "" {
		timer = time.NewTimer(interval)
		defer timer.Stop()
		probe = timer.C
	}
	for {
		select {
		case msg := <-msgs:
			delivered = true
			st.live(ctx, msg.Frames)
			if timer != nil {
				timer.Reset(interval)
			}
		case <-failed:
			return delivered
		case <-ctx.Done():
			return delivered
		case now := <-st.silent():
			st.checkSilence(now)
		case <-probe:
			// A message that became ready together with the timer
			// means the connection is not idle, only slow to be read.
			select {
			case msg := <-msgs:
				delivered = true
				st.live(ctx, msg.Frames)
				timer.Reset(interval)
				continue
			default:
			}
			// Batches a replay applied longer ago than the grace that
			// the connection has not delivered since: it missed them,
			// and may be broken; a new connection is checked by sync.
			if st.settleSilent(time.Now()) {
				return delivered
			}
			st.probe(ctx)
			timer.Reset(interval)
		}
	}
}

// probe runs on a connection that delivered nothing for a probe
// interval: it asks the replay endpoint what happened since the last
// applied batch. Batches published since are applied from the replay,
// ahead of the live connection: whether the connection missed them or the
// probe merely raced the publisher is settled by what the connection does
// next (see reconcile). A restarted publisher is handled as in sync. It
// reports false when the replay exchange failed.
func (st *stream) probe(ctx context.Context) (ok bool) {
	if st.backend == "" {
		return true
	}
	st.probing = true
	ok, _ = st.sync(ctx)
	st.probing = false
	return ok
}

// sync brings the backend up to date through the replay endpoint, right
// after connecting, whenever a gap shows and when recheck asks, and tells
// a publisher that restarted from one that did not: it asks for the
// history from the anchor (the last applied batch if there is none) and
// checks that the first reply is that very batch. If it is not, the
// publisher is a new process (or one whose history no longer reaches back
// that far): the backend is cleared and the whole history replayed. It
// reports whether the replay endpoint answered (true when there is
// nothing to ask) and whether the backend was reset.
func (st *stream) sync(ctx context.Context) (ok, restarted bool) {
	if st.src.ReplayEndpoint == "" || st.backend == "" {
		return true, false
	}
	if !st.hasApplied {
		ok, _ = st.replay(ctx, nil)
	} else {
		want := mark{st.applied, st.digest}
		if st.hasAnchor {
			want = st.anchor
		}
		var verified bool
		if ok, verified = st.replay(ctx, &want); ok && !verified {
			st.reset()
			restarted = true
			ok, _ = st.replay(ctx, nil)
		}
	}
	if st.inbox == nil {
		// In connect mode the connection and the replay endpoint are the
		// same process: what the connection delivers next follows what
		// the replay left.
		st.trustLive = ok
	}
	return ok, restarted
}

// recheck runs after a live batch not known to come from the process the
// backend follows (see anchor) had blocks the index could not place
// because it never saw their parents: evidence that the stream is not the
// one the index followed, typically a publisher that restarted and
// reconnected unseen, whose first batches the PUB socket dropped, so that
// the first one seen continued the old sequence. sync checks the history
// against the anchor: after a restart the backend is rebuilt from the new
// history, which places those blocks too, and the errors, explained by
// the restart, are dropped; otherwise (or if the check cannot be made)
// they are reported as apply errors. Checks are at least ProbeInterval
// apart (a second when probing is disabled), so that a stream that keeps
// continuing blocks the index evicted does not replay on every batch.
func (st *stream) recheck(ctx context.Context) {
	if now := time.Now(); !now.Before(st.nextCheck) {
		interval := st.s.opts.ProbeInterval
		if interval <= 0 {
			interval = time.Second
		}
		st.nextCheck = now.Add(interval)
		if _, restarted := st.sync(ctx); restarted {
			clear(st.held)
			st.held = st.held[:0]
			return
		}
	}
	for _, err := range st.held {
		st.applyError(err)
	}
	clear(st.held)
	st.held = st.held[:0]
}

// reset forgets the sequence state and clears the backend: the publisher
// restarted and its engine's cache is gone.
func (st *stream) reset() {
	st.s.c.resets.Add(1)
	st.resets.Add(1)
	// The batches applied ahead of the live connection are cleared with the
	// rest: counted neither live nor replay-only (a replay may apply them
	// again, to be counted then).
	st.ahead, st.missed = seqRange{}, seqRange{}
	st.hasApplied, st.hasAnchor, st.liveOnConn = false, false, false
	st.appliedPlus.Store(0)
	for _, name := range append([]string{st.backend}, st.src.RankBackends...) {
		if id, ok := st.s.ix.Lookup(name); ok {
			if err := st.s.ix.ApplyCleared(id); err != nil {
				st.applyError(err)
			}
		}
	}
}

// live handles one message from the PUB socket: [topic, seq, payload].
func (st *stream) live(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		st.decodeError(fmt.Errorf("%w: message of %d frames, want topic, 8-byte sequence, payload", ErrMalformed, len(frames)))
		return
	}
	model := st.model
	if !st.learnTopic(frames[0]) {
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	replay := st.src.ReplayEndpoint != ""
	if st.hasApplied && st.model != model {
		// Batches replayed before the first live topic named the model were
		// chained from the wrong seed (replay replies need not carry the
		// topic): their blocks could never match a request. Rebuild the
		// backend under the right model; the gap below replays the history.
		st.reset()
	}
	switch {
	case st.liveOnConn && seq <= st.lastLive,
		!st.liveOnConn && !replay && st.hasApplied && seq <= st.applied:
		// The sequence went back: a new publisher process. With a
		// replay endpoint a reconnect was already checked by sync.
		st.reset()
	}
	st.liveOnConn, st.lastLive = true, seq
	if st.hasApplied && seq <= st.applied {
		st.reconcile(seq)
		return // already applied from a replay
	}
	var next uint64
	if st.hasApplied {
		next = st.applied + 1
	}
	if seq > next {
		if st.hasApplied {
			st.s.c.gaps.Add(1)
		}
		if replay {
			// sync rather than a replay from next: a publisher that
			// restarted and already passed our position shows here.
			st.sync(ctx)
			if st.hasApplied && seq <= st.applied {
				// The replay applied seq itself (and maybe batches
				// published after it).
				st.reconcile(seq)
				return
			}
			if st.hasApplied {
				next = st.applied + 1
			}
		}
		if st.hasApplied && seq > next {
			st.addLost(seq - next)
		}
	}
	st.reconcile(seq)
	st.countLive()
	st.apply(seq, frames[2], false)
	if len(st.held) > 0 {
		st.recheck(ctx)
	}
}

// learnTopic resolves the backend and model from the topic when the
// Source does not name them. It reports false when the message cannot be
// attributed to a backend.
func (st *stream) learnTopic(topic []byte) bool {
	if string(topic) == st.topic || (st.src.Backend != "" && st.src.Model != "") {
		return true
	}
	pod, model, err := parseTopic(string(topic))
	if err != nil {
		if st.src.Backend != "" {
			st.topic = string(topic)
			return true // the model stays as configured or unknown
		}
		st.decodeError(err)
		return false
	}
	st.topic = string(topic)
	if st.src.Backend == "" && pod != st.backend {
		st.backend = pod
		name := pod
		st.backendName.Store(&name)
	}
	if st.src.Model == "" && model != st.model {
		st.model, st.seedOK = model, false
	}
	return true
}

// replay asks the replay endpoint for the history and applies every batch
// past the last applied one, in order. Without want it asks for all of
// it. With want, a batch applied before, it asks for the history from
// want, whose first reply must be want itself (same sequence number and
// payload); if the history starts past want (it no longer reaches back
// that far) but not past the last applied batch, the reply at the last
// applied sequence number must be that batch instead. verified reports
// whether the check passed; the anchor then moves to the last applied
// batch, and every batch applied from the reply becomes the anchor in
// turn. ok is false when the exchange failed; batches received before the
// failure stay applied. The exchange always reads up to the end-of-replay
// message (within ReplayTimeout), even once the answer is known, so that
// the publisher is not cut off in the middle of its reply.
func (st *stream) replay(ctx context.Context, want *mark) (ok, verified bool) {
	var start uint64
	if want != nil {
		start = want.seq
	}
	ctx, cancel := context.WithTimeout(ctx, st.s.opts.ReplayTimeout)
	defer cancel()
	fail := func(err error) (bool, bool) {
		st.s.c.replayErrors.Add(1)
		st.report(fmt.Errorf("%w from %s: %w", ErrReplay, st.src.ReplayEndpoint, err))
		return false, false
	}
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(quiet), zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(st.s.opts.ReplayTimeout), zmq4.WithTimeout(st.s.opts.ReplayTimeout))
	defer d.Close()
	if err := d.Dial(st.src.ReplayEndpoint); err != nil {
		return fail(err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	// vLLM's replay server expects [empty delimiter, start] after the
	// identity its ROUTER adds.
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, req[:])); err != nil {
		return fail(err)
	}
	// verifying: want is being looked for; fallback: the history starts
	// past want, and the last applied batch is looked for instead;
	// draining: the history is not the one applied, and the rest of the
	// reply is read and ignored.
	verifying, fallback, draining := want != nil, false, false
	first := true
	for {
		msg, err := d.Recv()
		if err != nil {
			if draining {
				return true, false // the answer is known; only the drain was cut short
			}
			return fail(err)
		}
		fr := msg.Frames
		if len(fr) > 0 && len(fr[0]) == 0 {
			fr = fr[1:] // the delimiter echoed by a vLLM-style server
		}
		if len(fr) == 3 {
			fr = fr[1:] // [topic, seq, payload]
		}
		if len(fr) != 2 || len(fr[0]) != 8 {
			if draining {
				continue
			}
			st.decodeError(nil)
			return fail(fmt.Errorf("%w: replay reply of %d frames", ErrMalformed, len(msg.Frames)))
		}
		seq := binary.BigEndian.Uint64(fr[0])
		if seq == EndOfReplay {
			if !draining {
				st.s.c.replays.Add(1)
			}
			return true, verified
		}
		if draining {
			continue
		}
		if verifying {
			sum := xxhash.Sum64(fr[1])
			if first && seq > want.seq && st.hasApplied && seq <= st.applied {
				fallback = true
			}
			first = false
			switch {
			case !fallback && seq == want.seq && sum == want.digest,
				fallback && seq == st.applied && sum == st.digest:
				verifying, verified = false, true
				st.anchor, st.hasAnchor = mark{st.applied, st.digest}, true
			case fallback && seq < st.applied:
				continue
			default:
				// A different history: the caller resets and replays
				// from the start.
				st.s.c.replays.Add(1)
				draining = true
				continue
			}
		}
		if st.hasApplied && seq <= st.applied {
			continue
		}
		// Before the first batch applied, the first one replayed is
		// where the source starts (vLLM counts from 0, others from 1,
		// and a long-running publisher's history starts wherever it
		// does): nothing before it counts as lost.
		if st.hasApplied && seq > st.applied+1 {
			st.addLost(seq - st.applied - 1)
		}
		st.apply(seq, fr[1], true)
		st.aheadAdd(seq)
	}
}

// addLost counts n batches of this source as lost.
func (st *stream) addLost(n uint64) {
	st.s.c.lost.Add(int64(n))
	st.lost.Add(int64(n))
}

// apply decodes a payload and applies its events to the backend.
func (st *stream) apply(seq uint64, payload []byte, replayed bool) {
	st.applied, st.hasApplied, st.digest = seq, true, xxhash.Sum64(payload)
	trusted := replayed || st.trustLive
	if trusted {
		st.anchor, st.hasAnchor = mark{seq, st.digest}, true
	}
	st.appliedPlus.Store(seq + 1)
	st.lastBatch.Store(time.Now().UnixNano())
	c := &st.s.c
	if replayed {
		c.replayed.Add(1)
	}
	if err := st.dec.Decode(payload, &st.b); err != nil {
		st.decodeError(fmt.Errorf("seq %d: %w", seq, err))
		return
	}
	c.unknown.Add(int64(st.b.Unknown))
	name := st.backend
	if r := st.b.DataParallelRank; st.b.HasRank && r >= 0 && r < len(st.src.RankBackends) {
		name = st.src.RankBackends[r]
	}
	id, ok := st.s.ix.Lookup(name)
	if !ok {
		c.unregistered.Add(1)
		return
	}
	c.batches.Add(1)
	st.batches.Add(1)
	c.events.Add(int64(len(st.b.Events)))
	st.events.Add(int64(len(st.b.Events)))
	for i := range st.b.Events {
		if err := st.applyEvent(id, &st.b.Events[i]); err != nil {
			err = fmt.Errorf("seq %d event %d: %w", seq, i, err)
			if !trusted && st.src.ReplayEndpoint != "" && errors.Is(err, prefixcache.ErrUnknownParent) {
				st.held = append(st.held, err) // for recheck
				continue
			}
			st.applyError(err)
		}
	}
}

func (st *stream) applyEvent(id prefixcache.HolderID, e *BlockEvent) error {
	switch e.Kind {
	case BlockStored:
		salt := e.Salt // "" unless the chain starts here, salted
		if !st.seedOK || e.LoRAName != st.seedLoRA || e.LoRAID != st.seedLoRAID || salt != st.seedSalt {
			st.seed, st.seedLoRA, st.seedLoRAID, st.seedSalt, st.seedOK = loraSeed(st.model, e.LoRAName, e.LoRAID, salt), e.LoRAName, e.LoRAID, salt, true
		}
		return st.s.ix.ApplyStored(id, prefixcache.StoredBlocks{
			EngineHashes: e.Hashes, Parent: e.Parent, HasParent: e.HasParent,
			Tokens: e.Tokens, BlockSize: e.BlockSize, Seed: st.seed, Medium: e.Medium,
		})
	case BlockRemoved:
		return st.s.ix.ApplyRemovedFrom(id, e.Medium, e.Hashes)
	case AllBlocksCleared:
		return st.s.ix.ApplyCleared(id)
	}
	return nil
}
