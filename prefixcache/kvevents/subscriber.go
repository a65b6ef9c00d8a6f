package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-zeromq/zmq4"

	"github.com/usher-llm/usher/prefixcache"
)

// Applier is the part of the prefix index the Subscriber writes to: the
// exact mode of *prefixcache.Index. Its methods must be safe for
// concurrent use (the Subscriber applies each source from its own
// goroutine).
type Applier interface {
	Lookup(name string) (prefixcache.BackendID, bool)
	ApplyStored(id prefixcache.BackendID, ev prefixcache.StoredBlocks) error
	ApplyRemovedFrom(id prefixcache.BackendID, medium string, engineHashes []uint64) error
	ApplyCleared(id prefixcache.BackendID) error
}

var _ Applier = (*prefixcache.Index)(nil)

// ErrRunning is returned by Run while another Run of the same Subscriber
// is in progress.
var ErrRunning = errors.New("kvevents: already running")

// ErrReplay wraps the errors of a failed replay exchange, which the
// Subscriber reports through Options.OnError and survives.
var ErrReplay = errors.New("kvevents: replay")

// Source is one publisher: a model-server process (or one data-parallel
// rank of it) publishing KV events.
type Source struct {
	// Endpoint is the publisher's PUB address, e.g. "tcp://10.0.0.7:5557".
	Endpoint string
	// ReplayEndpoint is its ROUTER replay address; "" disables replay (gaps
	// are then counted as lost and restarts detected from sequence
	// numbers alone).
	ReplayEndpoint string
	// Backend is the name the backend is registered under in the index;
	// "" takes the pod from the topic kv@<pod>@<model>.
	Backend string
	// Model names the model for the chain seed (prefixcache.Seed(model,
	// lora_name, "")); "" takes the model from the topic. It must be the
	// name the gateway hashes requests with.
	Model string
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
}

// Options configures a Subscriber. Zero values take the documented
// defaults.
type Options struct {
	// Sources lists the publishers; at least one is required.
	Sources []Source
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
	// Missed batches are applied and the connection is replaced. Default
	// 1 s; negative disables probing.
	ProbeInterval time.Duration
	// OnError, if set, is called with errors that the Subscriber counts
	// and otherwise survives (decode, apply, replay), with the backend's
	// name. It runs on the source's goroutine and must not block.
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
	// contributed; ReplayErrors the exchanges that failed.
	Replays, Replayed, ReplayErrors int64
	// Lost counts batches no replay recovered (the publisher's history no
	// longer held them, or there was no replay endpoint).
	Lost int64
	// Reconnects counts connections made after a source's first one.
	Reconnects int64
	// Stale counts connections replaced because an idle probe found
	// batches they had not delivered.
	Stale int64
	// Resets counts publisher restarts detected; each cleared the backend.
	Resets int64
	// DecodeErrors counts malformed messages (bad frames, topic or
	// payload); ApplyErrors events the index rejected (for instance a
	// BlockStored whose parent it never saw); Unregistered batches for a
	// backend not registered in the index.
	DecodeErrors, ApplyErrors, Unregistered int64
}

// SourceStatus describes one source as its goroutine last left it.
//
// Batches, Lost, Resets and Reconnects are this source's share of the
// Stats counters of the same names, counted since New at the same places:
// over all sources they add up to Stats (up to the increments in flight
// while the two are read, since both are read one counter at a time).
type SourceStatus struct {
	Source Source // as configured
	// Backend is the backend events are applied to: Source.Backend, or
	// the pod learnt from the topic ("" until a batch arrived).
	Backend string
	// Connected reports whether the PUB connection is up now.
	Connected bool
	// Applied is the sequence number of the last batch applied; valid
	// when HasApplied (false before the first batch and after a reset).
	Applied    uint64
	HasApplied bool
	// Batches counts batches applied from this source, live and
	// replayed.
	Batches int64
	// Lost counts batches of this source no replay recovered.
	Lost int64
	// Resets counts restarts of this source's publisher detected; each
	// cleared the backend.
	Resets int64
	// Reconnects counts connections to this source after its first one.
	Reconnects int64
}

type counters struct {
	batches, events, unknown, gaps, replays, replayed, replayErrors, lost,
	reconnects, stale, resets, decodeErrors, applyErrors, unregistered atomic.Int64
}

// Subscriber keeps a prefix index exact by applying the KV events of many
// publishers: it subscribes to each publisher's PUB socket, detects
// sequence gaps and publisher restarts, recovers through the replay
// endpoint and reconnects with exponential backoff. Each source is handled
// by one goroutine, so a backend's events are applied in sequence order.
//
// Events of one Source are applied in order; Sources that name the same
// backend are not ordered with respect to each other.
//
// New starts nothing; Run does the work until its context ends or Close is
// called. Stats, Sources and Close are safe for concurrent use with Run.
type Subscriber struct {
	// Immutable after New, except that each stream is owned by the
	// goroutine Run starts for it.
	ix      Applier
	opts    Options
	streams []*stream

	c counters // atomic

	mu      sync.Mutex // guards the fields below
	running bool
	closed  bool
	cancel  context.CancelFunc // cancels Run's context
	done    chan struct{}      // closed when Run returns
}

// New validates opts and returns a Subscriber that applies events to ix.
// It returns an error wrapping ErrInvalidOptions for a nil ix, no
// sources, a source without an endpoint, or negative durations.
func New(ix Applier, opts Options) (*Subscriber, error) {
	switch {
	case ix == nil:
		return nil, fmt.Errorf("%w: nil index", ErrInvalidOptions)
	case len(opts.Sources) == 0:
		return nil, fmt.Errorf("%w: no sources", ErrInvalidOptions)
	case opts.MinBackoff < 0 || opts.MaxBackoff < 0 || opts.ReplayTimeout < 0:
		return nil, fmt.Errorf("%w: negative duration", ErrInvalidOptions)
	}
	for i, s := range opts.Sources {
		if s.Endpoint == "" {
			return nil, fmt.Errorf("%w: source %d has no endpoint", ErrInvalidOptions, i)
		}
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
	opts.Sources = append([]Source(nil), opts.Sources...)
	s := &Subscriber{ix: ix, opts: opts}
	for _, src := range opts.Sources {
		s.streams = append(s.streams, newStream(s, src))
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
		Resets: c.resets.Load(), DecodeErrors: c.decodeErrors.Load(),
		ApplyErrors: c.applyErrors.Load(), Unregistered: c.unregistered.Load(),
	}
}

// Run connects to every source and applies their events until ctx is done
// or Close is called, then closes its sockets and returns nil. It runs one
// goroutine per source, plus one per live connection reading its socket,
// and waits for all of them before returning. A later Run resumes from the
// sequence numbers reached. It returns ErrClosed after Close, and
// ErrRunning if Run is already running.
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
	s.running, s.cancel, s.done = true, cancel, make(chan struct{})
	s.mu.Unlock()
	defer func() {
		cancel()
		s.mu.Lock()
		s.running = false
		close(s.done)
		s.mu.Unlock()
	}()

	var wg sync.WaitGroup
	for _, st := range s.streams {
		wg.Go(func() { st.run(ctx) })
	}
	wg.Wait()
	return nil
}

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
// it.
type stream struct {
	s   *Subscriber
	src Source
	dec *Decoder
	b   Batch

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

	// Published for Sources, written only by the source's goroutine.
	connected   atomic.Bool
	appliedPlus atomic.Uint64          // applied+1; 0 when !hasApplied
	backendName atomic.Pointer[string] // a copy of backend
	// This source's share of the Subscriber's counters of the same
	// names, incremented next to them.
	batches, lost, resets, reconnects atomic.Int64

	// Where events go, resolved from Source and the topic.
	topic      string // last topic seen
	backend    string
	model      string
	seedLoRA   string
	seedLoRAID int64
	seed       prefixcache.BlockHash
	seedOK     bool
}

// loraSeed is the chain seed of blocks computed with an adapter. Blocks of
// an adapter known only by its id (publishers that send lora_id without
// lora_name) get a seed of their own, "lora_id:<id>", which no request
// hashed by name matches: missing a match is better than matching blocks
// of an adapter against base-model requests.
func loraSeed(model, name string, id int64) prefixcache.BlockHash {
	if name == "" && id != 0 {
		name = "lora_id:" + strconv.FormatInt(id, 10)
	}
	return prefixcache.Seed(model, name, "")
}

func newStream(s *Subscriber, src Source) *stream {
	st := &stream{s: s, src: src, dec: NewDecoder(), backend: src.Backend, model: src.Model}
	name := src.Backend
	st.backendName.Store(&name)
	return st
}

// Sources returns the status of every source, in Options.Sources order.
// It is O(sources), safe for concurrent use with Run, and allocates the
// result.
func (s *Subscriber) Sources() []SourceStatus {
	out := make([]SourceStatus, len(s.streams))
	for i, st := range s.streams {
		out[i] = SourceStatus{
			Source: st.src, Backend: *st.backendName.Load(), Connected: st.connected.Load(),
			Batches: st.batches.Load(), Lost: st.lost.Load(), Resets: st.resets.Load(), Reconnects: st.reconnects.Load(),
		}
		if a := st.appliedPlus.Load(); a != 0 {
			out[i].Applied, out[i].HasApplied = a-1, true
		}
	}
	return out
}

func (st *stream) report(err error) {
	if f := st.s.opts.OnError; f != nil {
		f(st.backend, err)
	}
}

// run connects, consumes until the connection drops, and reconnects with
// backoff, until ctx is done.
func (st *stream) run(ctx context.Context) {
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
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
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
	}()

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
			if st.probeStale(ctx) {
				st.s.c.stale.Add(1)
				return delivered
			}
			timer.Reset(interval)
		}
	}
}

// probeStale runs on a connection that delivered nothing for a probe
// interval: it asks the replay endpoint what happened since the last
// applied batch. Batches the connection should have delivered are applied
// from the replay, and the connection is reported stale so that run
// replaces it; a restarted publisher is handled as in sync.
func (st *stream) probeStale(ctx context.Context) bool {
	if st.backend == "" {
		return false
	}
	before, had := st.applied, st.hasApplied
	st.sync(ctx)
	return st.hasApplied && (!had || st.applied != before)
}

// sync brings the backend up to date through the replay endpoint right
// after connecting, and tells a publisher that restarted from one that did
// not: it asks for the history from the last applied batch and checks that
// the first reply is that very batch. If it is not, the publisher is a new
// process: the backend is cleared and the whole history replayed.
func (st *stream) sync(ctx context.Context) {
	if st.src.ReplayEndpoint == "" || st.backend == "" {
		return
	}
	if !st.hasApplied {
		st.replay(ctx, 0, false)
		return
	}
	if ok, verified := st.replay(ctx, st.applied, true); ok && !verified {
		st.reset()
		st.replay(ctx, 0, false)
	}
}

// reset forgets the sequence state and clears the backend: the publisher
// restarted and its engine's cache is gone.
func (st *stream) reset() {
	st.s.c.resets.Add(1)
	st.resets.Add(1)
	st.hasApplied, st.liveOnConn = false, false
	st.appliedPlus.Store(0)
	if id, ok := st.s.ix.Lookup(st.backend); ok {
		if err := st.s.ix.ApplyCleared(id); err != nil {
			st.s.c.applyErrors.Add(1)
			st.report(err)
		}
	}
}

// live handles one message from the PUB socket: [topic, seq, payload].
func (st *stream) live(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		st.s.c.decodeErrors.Add(1)
		st.report(fmt.Errorf("%w: message of %d frames, want topic, 8-byte sequence, payload", ErrMalformed, len(frames)))
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
			st.replay(ctx, next, false)
			if st.hasApplied && seq <= st.applied {
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
	st.apply(seq, frames[2], false)
}

// learnTopic resolves the backend and model from the topic when the
// Source does not name them. It reports false when the message cannot be
// attributed to a backend.
func (st *stream) learnTopic(topic []byte) bool {
	if string(topic) == st.topic || (st.src.Backend != "" && st.src.Model != "") {
		return true
	}
	pod, model, err := ParseTopic(string(topic))
	if err != nil {
		if st.src.Backend != "" {
			st.topic = string(topic)
			return true // the model stays as configured or unknown
		}
		st.s.c.decodeErrors.Add(1)
		st.report(err)
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

// replay asks the replay endpoint for the history from start and applies
// every batch past the last applied one, in order. With verify, the first
// reply must be the last applied batch itself (same sequence number and
// payload); verified reports whether it was. ok is false when the exchange
// failed; batches received before the failure stay applied.
func (st *stream) replay(ctx context.Context, start uint64, verify bool) (ok, verified bool) {
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
	first := true
	for {
		msg, err := d.Recv()
		if err != nil {
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
			st.s.c.decodeErrors.Add(1)
			return fail(fmt.Errorf("%w: replay reply of %d frames", ErrMalformed, len(msg.Frames)))
		}
		seq := binary.BigEndian.Uint64(fr[0])
		if seq == EndOfReplay {
			st.s.c.replays.Add(1)
			return true, verified
		}
		if verify && first {
			verified = st.hasApplied && seq == st.applied && xxhash.Sum64(fr[1]) == st.digest
			if !verified {
				// A different history: drain nothing more, the caller
				// resets and replays from the start.
				st.s.c.replays.Add(1)
				return true, false
			}
		}
		first = false
		if st.hasApplied && seq <= st.applied {
			continue
		}
		expect := start
		if st.hasApplied {
			expect = st.applied + 1
		}
		if seq > expect {
			st.addLost(seq - expect)
		}
		st.apply(seq, fr[1], true)
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
	st.appliedPlus.Store(seq + 1)
	c := &st.s.c
	if replayed {
		c.replayed.Add(1)
	}
	if err := st.dec.Decode(payload, &st.b); err != nil {
		c.decodeErrors.Add(1)
		st.report(fmt.Errorf("seq %d: %w", seq, err))
		return
	}
	c.unknown.Add(int64(st.b.Unknown))
	id, ok := st.s.ix.Lookup(st.backend)
	if !ok {
		c.unregistered.Add(1)
		return
	}
	c.batches.Add(1)
	st.batches.Add(1)
	c.events.Add(int64(len(st.b.Events)))
	for i := range st.b.Events {
		if err := st.applyEvent(id, &st.b.Events[i]); err != nil {
			c.applyErrors.Add(1)
			st.report(fmt.Errorf("seq %d event %d: %w", seq, i, err))
		}
	}
}

func (st *stream) applyEvent(id prefixcache.BackendID, e *Event) error {
	switch e.Kind {
	case BlockStored:
		if !st.seedOK || e.LoRAName != st.seedLoRA || e.LoRAID != st.seedLoRAID {
			st.seed, st.seedLoRA, st.seedLoRAID, st.seedOK = loraSeed(st.model, e.LoRAName, e.LoRAID), e.LoRAName, e.LoRAID, true
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
