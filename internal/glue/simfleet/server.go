package simfleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-llm/usher/internal/engine"
)

// Errors of the package.
var (
	ErrInvalidOptions = errors.New("simfleet: invalid options")
	ErrRunning        = errors.New("simfleet: server already running")
	ErrClosed         = errors.New("simfleet: server closed")
)

// Options configures a Server. The zero value serves the engine's Demo profile.
type Options struct {
	// Engine configures the engine model; its zero value is the Demo profile. KVEvents is
	// turned on when OnKVEvents is set.
	Engine engine.Options
	// Model is the served model name; empty means the profile's Model.
	Model string
	// MinAnswerTokens and MaxAnswerTokens bound the length the simulated model chooses for an
	// answer when max_tokens does not force it (with ignore_eos): a hash of the prompt picks a
	// length in the range. Zero values mean 16 and 256.
	MinAnswerTokens, MaxAnswerTokens int
	// MaxBodyBytes caps a request body (413 above it); 0 means 8 MiB.
	MaxBodyBytes int64
	// OnKVEvents, if set, receives the engine's KV events (vLLM's BlockStored, BlockRemoved,
	// AllBlocksCleared) after every step that recorded some, on Run's goroutine and outside the
	// server's lock. It must not block for long: the engine waits. This is the hook for a
	// publisher of vLLM's ZMQ wire format (prefixcache/kvevents).
	OnKVEvents func([]engine.KVEvent)
	// TransferPerToken and TransferLatency model the time a decode server of disaggregated
	// serving spends receiving a prompt's KV from its prefill server: TransferLatency plus
	// TransferPerToken for each prompt token not already in its prefix cache. Zero values mean
	// 5.2 µs and 1 ms: Qwen3-32B holds 256 KiB of KV per token (64 layers × 8 KV heads × 128
	// head dim × 2 for K and V × 2 bytes), which a 400 Gb/s (50 GB/s) RDMA NIC moves at line
	// rate in 5.2 µs. A negative value means no wait.
	TransferPerToken, TransferLatency time.Duration
	// TransferTimeout is how long a prefill server keeps a prompt's KV for a decode server to
	// pull, as vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT; 0 means 60 s.
	TransferTimeout time.Duration
	// LoRA configures the LoRA adapters served on the model (lora.go). Zero: none.
	LoRA LoRAOptions
	// SideChannel is the host:port a prefill answer's kv_transfer_params names for decode
	// servers to pull the KV from (remote_host, remote_port). It must reach this server's
	// HTTP listener, which serves the pulls. Empty means the local address of the connection
	// each prefill request came on, which is right unless the listener is reached through an
	// address translation.
	SideChannel string
	// Tokens, if set, replaces the simulated tokenization of chat, Messages and Responses
	// prompts and of /tokenize's messages with a lookup in the table (TokenTable): the
	// server then caches the ids a real tokenizer and chat template give. Nil: RenderChat
	// and Tokenize.
	Tokens TokenTable
}

// Server is a simulated vLLM-compatible model server: an http.Handler serving the OpenAI API,
// /tokenize, /health and vLLM's /metrics, backed by an engine model advanced in real time by
// Run.
//
// The handler may be served by any http.Server (or httptest.Server); requests wait until Run
// (or Start) drives the engine. Close stops the engine, aborting whatever it holds. A Server
// is safe for concurrent use. Lock discipline: the fields above mu are immutable after New;
// mu guards the engine, the streams and their pending events.
type Server struct {
	model     string
	profile   engine.Profile
	minAnswer int
	maxAnswer int
	maxBody   int64
	onKV      func([]engine.KVEvent)
	table     TokenTable // Options.Tokens; nil: simulated tokenization
	epoch     time.Time
	idSalt    uint64
	mux       *http.ServeMux
	registry  *prometheus.Registry
	ttft      prometheus.Observer
	itl       prometheus.Observer
	e2e       prometheus.Observer
	queueTime prometheus.Observer
	success   *prometheus.CounterVec
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	stopOnce  sync.Once
	started   atomic.Bool
	slowdown  atomic.Uint64 // math.Float64bits of the factor SetSlowdown set; 0 means 1

	// Disaggregated serving (disagg.go).
	engineID         string
	sideHost         string // Options.SideChannel, or "" for the connection's local address
	sidePort         int
	transferPerToken time.Duration
	transferLatency  time.Duration
	pullClient       *http.Client
	transfers        transfers  // has its own lock
	kv               kvCounters // atomic

	lora loraState // the LoRA adapters served (lora.go); has its own lock

	stored responseStore // the Responses API's stored conversations (responses.go); has its own lock

	mu      sync.Mutex
	eng     *engine.Engine
	streams map[engine.RequestID]*stream
	nextID  engine.RequestID
	closed  bool
}

// stream is one request's mailbox: the engine loop appends its events and signals notify; the
// handler takes them. Fields other than notify are guarded by Server.mu.
type stream struct {
	notify    chan struct{}
	evs       []engine.Event
	reason    string // finish reason when it finishes: "stop" or "length"
	lastToken time.Duration
}

// New returns a Server whose engine is idle until Run or Start.
func New(opts Options) (*Server, error) {
	if opts.OnKVEvents != nil {
		opts.Engine.KVEvents = true
	}
	adapters, err := setupLoRA(&opts)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(opts.Engine)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	p := eng.Profile()
	s := &Server{
		model:     opts.Model,
		profile:   p,
		minAnswer: opts.MinAnswerTokens,
		maxAnswer: opts.MaxAnswerTokens,
		maxBody:   opts.MaxBodyBytes,
		onKV:      opts.OnKVEvents,
		table:     opts.Tokens,
		epoch:     time.Now(),
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		eng:       eng,
		streams:   make(map[engine.RequestID]*stream),

		engineID:         fmt.Sprintf("simfleet-%016x", rand.Uint64()),
		transferPerToken: opts.TransferPerToken,
		transferLatency:  opts.TransferLatency,
		transfers:        transfers{ttl: opts.TransferTimeout},
		pullClient:       &http.Client{Transport: pullTransport()},
	}
	switch {
	case s.transferPerToken == 0:
		s.transferPerToken = 5200 * time.Nanosecond
	case s.transferPerToken < 0:
		s.transferPerToken = 0
	}
	switch {
	case s.transferLatency == 0:
		s.transferLatency = time.Millisecond
	case s.transferLatency < 0:
		s.transferLatency = 0
	}
	if s.transfers.ttl == 0 {
		s.transfers.ttl = 60 * time.Second
	}
	if s.transfers.ttl < 0 {
		return nil, fmt.Errorf("%w: negative TransferTimeout %v", ErrInvalidOptions, opts.TransferTimeout)
	}
	if opts.SideChannel != "" {
		if s.sideHost, s.sidePort, err = splitHostPort(opts.SideChannel); err != nil || s.sideHost == "" {
			return nil, fmt.Errorf("%w: SideChannel %q is not host:port", ErrInvalidOptions, opts.SideChannel)
		}
	}
	if s.model == "" {
		s.model = p.Model
	}
	if s.model == "" {
		s.model = "usher/sim"
	}
	if s.minAnswer == 0 {
		s.minAnswer = 16
	}
	if s.maxAnswer == 0 {
		s.maxAnswer = 256
	}
	if s.maxBody == 0 {
		s.maxBody = 8 << 20
	}
	if s.minAnswer < 1 || s.maxAnswer < s.minAnswer || s.maxBody < 0 {
		return nil, fmt.Errorf("%w: answer length range [%d, %d], body limit %d", ErrInvalidOptions, s.minAnswer, s.maxAnswer, s.maxBody)
	}
	s.idSalt = uint64(s.epoch.UnixNano())
	s.initMetrics()
	s.initLoRA(adapters, opts.Engine.LoRA.MaxLoRAs)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("/v1/completions", s.handleCompletions)
	s.mux.HandleFunc("/v1/messages", s.handleMessages) // anthropic.go
	s.mux.HandleFunc("/v1/messages/count_tokens", s.handleCountTokens)
	s.mux.HandleFunc("/v1/responses", s.handleResponses) // responses.go
	s.mux.HandleFunc("/v1/embeddings", s.handleEmbeddings)
	s.mux.HandleFunc("/v1/models", s.handleModels)
	s.mux.HandleFunc("/tokenize", s.handleTokenize)
	s.mux.HandleFunc("/health", s.handleHealth)
	s.mux.HandleFunc("/version", s.handleVersion)
	s.mux.HandleFunc("/kv_transfer/pull", s.handlePull)
	s.mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFoundError", "Not Found")
	})
	return s, nil
}

// Model returns the served model name.
func (s *Server) Model() string { return s.model }

// Profile returns the engine profile.
func (s *Server) Profile() engine.Profile { return s.profile }

// ServeHTTP serves the simulated vLLM API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns a snapshot of the engine's state. O(1).
func (s *Server) Stats() engine.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.Stats()
}

// CachedPrefix returns how many leading full blocks of tokens the engine holds in its prefix
// cache now, read from the engine's own block table (not from its KV events), so that a test
// or a tool can check a gateway's prefix index against what the server really caches.
// O(len(tokens)).
func (s *Server) CachedPrefix(tokens []uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.profile.BlockSize
	var parent engine.BlockHash
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		parent = s.eng.HashBlock(parent, i > 0, tokens[i*bs:(i+1)*bs])
		if !s.eng.Cached(parent) {
			return i
		}
	}
	return len(tokens) / bs
}

// now is the engine time: time since New, on the monotonic clock.
func (s *Server) now() time.Duration { return time.Since(s.epoch) }

// Start runs Run in a new goroutine; Close stops it.
func (s *Server) Start() {
	go func() { _ = s.Run(context.Background()) }()
}

// maxLag is how far the step schedule may fall behind the wall clock before it resets instead
// of catching up (after a GC pause or a descheduled process).
const maxLag = 50 * time.Millisecond

// Run drives the engine in real time until ctx ends or Close is called: it begins a step,
// sleeps for the step's modelled duration, ends it and delivers the step's events to the
// waiting handlers, and sleeps while there is no work. Step ends are scheduled on a cursor that
// advances by each step's duration, so timer overshoot and the loop's own work do not slow the
// simulated server down. When it returns, every request still in the engine has been aborted
// and the server accepts no more. Run returns ErrRunning if already running, nil after Close
// and ctx.Err() after ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer close(s.done)
	var evs []engine.Event
	var kvs []engine.KVEvent
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	cursor := time.Now()
	for {
		s.mu.Lock()
		evs = s.deliverLocked(evs)
		var d time.Duration
		ok := false
		if s.eng.HasWork() {
			d, ok = s.eng.BeginStep(s.now())
		}
		kvs = s.takeKVLocked(kvs)
		s.mu.Unlock()
		s.publishKV(kvs)
		if !ok {
			select {
			case <-s.wake:
				// Idle time is not lag to catch up on: the first step after it
				// takes its full modelled duration.
				cursor = time.Now()
				continue
			case <-ctx.Done():
				s.shutdown()
				return ctx.Err()
			case <-s.stop:
				s.shutdown()
				return nil
			}
		}
		if now := time.Now(); cursor.Before(now.Add(-maxLag)) {
			cursor = now
		}
		if f := s.Slowdown(); f != 1 {
			d = time.Duration(min(float64(d)*f, math.MaxInt64/2)) // no overflow of the cursor
		}
		cursor = cursor.Add(d)
		var err error
		stopped := false
		if wait := time.Until(cursor); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				stopped, err = true, ctx.Err()
			case <-s.stop:
				timer.Stop()
				stopped = true
			}
		}
		s.mu.Lock()
		s.eng.EndStep(s.now())
		evs = s.deliverLocked(evs)
		kvs = s.takeKVLocked(kvs)
		s.mu.Unlock()
		s.publishKV(kvs)
		if stopped {
			s.shutdown()
			return err
		}
	}
}

// SetSlowdown makes every engine step begun from now on take factor times its modelled
// duration — the step's base cost, its prefill and decode costs and any LoRA load in it alike —
// as a noisy neighbour or a thermally throttled GPU slows a real server down; 1 restores the
// modelled speed, and a factor below 1 speeds the server up. The step in progress keeps its
// duration. Nothing else changes: the profile, /metrics' configuration and the KV transfer
// times are the modelled ones, so a router sees the slowdown only in the latencies it
// measures. It returns ErrInvalidOptions, leaving the factor as it was, unless factor is
// positive and finite. Safe for concurrent use; O(1).
func (s *Server) SetSlowdown(factor float64) error {
	if !(factor > 0) || math.IsInf(factor, 1) {
		return fmt.Errorf("%w: slowdown factor %v, want a positive finite number", ErrInvalidOptions, factor)
	}
	s.slowdown.Store(math.Float64bits(factor))
	return nil
}

// Slowdown returns the factor SetSlowdown set: 1 until it is called. O(1).
func (s *Server) Slowdown() float64 {
	if b := s.slowdown.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// shutdown refuses new requests and aborts every request in the engine.
func (s *Server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	now := s.now()
	for id := range s.streams {
		s.eng.Abort(id, now)
	}
	s.deliverLocked(nil)
}

// Close stops Run (waiting for it to return) and aborts every request. It is idempotent and
// returns nil.
func (s *Server) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	if s.started.Load() {
		<-s.done
	} else {
		s.shutdown()
	}
	s.pullClient.CloseIdleConnections()
	return nil
}

func (s *Server) takeKVLocked(dst []engine.KVEvent) []engine.KVEvent {
	if s.onKV == nil {
		return dst[:0]
	}
	return s.eng.KVEvents(dst[:0])
}

func (s *Server) publishKV(kvs []engine.KVEvent) {
	if len(kvs) > 0 {
		s.onKV(kvs)
	}
}

// deliverLocked drains the engine's events into the streams, observes the request metrics, and
// forgets streams that ended. buf is scratch space, returned for reuse.
func (s *Server) deliverLocked(buf []engine.Event) []engine.Event {
	buf = s.eng.Events(buf[:0])
	for _, ev := range buf {
		st := s.streams[ev.ID]
		switch ev.Kind {
		case engine.EventStarted:
			s.queueTime.Observe((ev.At - ev.Arrived).Seconds())
		case engine.EventToken:
			if ev.Tokens == 1 {
				s.ttft.Observe((ev.At - ev.Arrived).Seconds())
			} else if st != nil {
				s.itl.Observe((ev.At - st.lastToken).Seconds())
			}
			if st != nil {
				st.lastToken = ev.At
			}
		case engine.EventFinished:
			s.e2e.Observe((ev.At - ev.Arrived).Seconds())
			reason := "length"
			if st != nil {
				reason = st.reason
			}
			s.success.WithLabelValues(s.model, "0", reason).Inc()
		case engine.EventAborted:
			s.success.WithLabelValues(s.model, "0", "abort").Inc()
		}
		if st == nil {
			continue
		}
		st.evs = append(st.evs, ev)
		select {
		case st.notify <- struct{}{}:
		default:
		}
		if ev.Kind == engine.EventFinished || ev.Kind == engine.EventAborted {
			delete(s.streams, ev.ID)
		}
	}
	return buf
}

// submit enqueues a request in the engine and returns its id and mailbox.
func (s *Server) submit(req engine.Request, reason string) (engine.RequestID, *stream, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil, ErrClosed
	}
	s.nextID++
	req.ID = s.nextID
	st := &stream{notify: make(chan struct{}, 1), reason: reason}
	if err := s.eng.Submit(req, s.now()); err != nil {
		s.mu.Unlock()
		return 0, nil, err
	}
	s.streams[req.ID] = st
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return req.ID, st, nil
}

// abort aborts a request whose client went away.
func (s *Server) abort(id engine.RequestID) {
	s.mu.Lock()
	if _, ok := s.streams[id]; ok {
		s.eng.Abort(id, s.now())
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take waits for events of a stream, appending them to dst. It returns false when the
// client's context ended or the server closed without an event pending.
func (s *Server) take(ctx context.Context, st *stream, dst []engine.Event) ([]engine.Event, bool) {
	for {
		s.mu.Lock()
		if len(st.evs) > 0 {
			dst = append(dst, st.evs...)
			st.evs = st.evs[:0]
			s.mu.Unlock()
			return dst, true
		}
		s.mu.Unlock()
		select {
		case <-st.notify:
		case <-ctx.Done():
			return dst, false
		case <-s.done:
			// Run has returned: its shutdown delivered an abort to every stream.
			select {
			case <-st.notify:
			default:
				return dst, false
			}
		}
	}
}
