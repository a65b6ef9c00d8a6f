package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/internal/homes"
	"github.com/usher-llm/usher/internal/lograte"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/prefixcache/kvevents"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
)

// ErrInvalidOptions is returned (wrapped) by New for options it cannot use.
var ErrInvalidOptions = errors.New("extproc: invalid options")

// Options configures a Server. The zero value of every field is its documented default, so
// Options{Endpoints: ...} is a working picker. It is plain data, read once by New.
type Options struct {
	// Endpoints is the initial set of endpoints; Source, when set, replaces it as it
	// reports. SetEndpoints replaces it at any time.
	Endpoints []Endpoint
	// Source, if set, is run by Run and feeds SetEndpoints (a FileSource, or an
	// InferencePool watch of your own).
	Source EndpointSource

	// Index is the prefix index. Nil: prefixcache.New(prefixcache.Options{}).
	Index *prefixcache.Index
	// Router picks endpoints; it names them by Endpoint.Address. Nil: profiles.Usher over
	// Index with passive health (routing.WithOutlier).
	Router *routing.Router
	// BlockSize is the default router's tokens per block. Zero: routing.DefaultBlockSize.
	BlockSize int
	// Queue admits requests. Nil: a queue of Bands bands ordered by Policy, with TTL,
	// QueueCapacity, FlowCapacity and EarlyShed, at most MaxInFlight requests in flight.
	// A Queue of your own brings its own gate; the fields that configure the default queue
	// must then be zero.
	Queue *flowcontrol.Queue
	// Policy orders the default queue. Nil: fairness.NewBoundedWait with W 10 s.
	Policy flowcontrol.Policy
	// TTL is the default queue's longest wait for admission. Zero: 60 s. Envoy's ext_proc
	// message_timeout must allow it (see the package documentation).
	TTL time.Duration
	// QueueCapacity and FlowCapacity bound what waits, in all and per flow.
	QueueCapacity, FlowCapacity flowcontrol.Limits
	// MaxInFlight bounds the default queue's requests in flight. Zero: 64 per endpoint
	// currently known (at least 64).
	MaxInFlight int
	// EarlyShed configures the default queue's early shedding (429 at once).
	EarlyShed flowcontrol.EarlyShed
	// SLO, TrustSLOHeaders and SLOShedAbove are the gateway's (proxy.Options): latency
	// targets by band, read also from x-slo-ttft-ms / x-slo-tpot-ms when a trusted proxy sets
	// them (a header may only loosen its band's target), which route a request by the
	// profile's PredictedLatency scorer, set its admission deadline from the router's
	// prediction (arrival + target − best predicted TTFT, at least 50 ms from now, capped by
	// TTL) and order it under the slo policy; SLOShedAbove refuses at once what no endpoint is
	// predicted to serve within that many times its TTFT target. See "Service-level
	// objectives" in the proxy package documentation.
	SLO             map[int]routing.Latency
	TrustSLOHeaders bool
	SLOShedAbove    float64
	// Bands is the number of priority bands of the default queue. Zero: 4.
	Bands int

	// Tokenizer hashes prompts. Nil: proxy.BytesTokenizer{}. A failing tokenizer falls back
	// to BytesTokenizer.
	Tokenizer proxy.Tokenizer
	// Keyer derives a request's tenant, session and band from its headers and body. Nil:
	// proxy.NewKeyer(proxy.KeyerOptions{}). It sees an *http.Request carrying the method,
	// path, authority and headers Envoy forwarded (no body, no TLS state).
	Keyer proxy.FlowKeyer
	// Limits bound what a request body may ask for.
	Limits openai.ParseLimits
	// MaxBodyBytes bounds a request body (413 above it). Zero: 8 MiB. Envoy's own buffer
	// limit (per_connection_buffer_limit_bytes) applies first in BUFFERED mode.
	MaxBodyBytes int64
	// Models are the model names requests may ask for (404 model_not_found otherwise). Nil:
	// any.
	Models []string

	// Decider decides per request, while the endpoint set has a prefill endpoint
	// (Endpoint.Role), whether its prefill runs on a prefill endpoint: the destination is
	// then a decode endpoint and the prefill endpoint goes to the decode pod's routing
	// sidecar in PrefillerHeader, llm-d's protocol. Nil: disagg.NewPrefix with its
	// defaults.
	Decider disagg.Decider
	// Fallbacks is how many endpoints to list after the chosen one, for Envoy to try in
	// order when it fails. Zero: none. A Responses request continuing a stored response gets
	// none: only the endpoint that stored it can serve it.
	Fallbacks int
	// ResponseHomes bounds how many Responses API response ids the picker remembers, with
	// the endpoint that stored each, so that a request naming one as previous_response_id
	// goes there (and is answered 404 when that endpoint has left the set). Zero: 100,000;
	// negative: none are remembered, and such requests are routed like any other.
	ResponseHomes int
	// MetadataNamespace is the dynamic-metadata namespace of the destination and of the
	// served endpoint. Empty: MetadataNamespace ("envoy.lb").
	MetadataNamespace string
	// SubsetNamespace is the filter-metadata namespace of the subset hint. Empty:
	// SubsetNamespace ("envoy.lb.subset_hint").
	SubsetNamespace string
	// ClearRouteCache asks Envoy to recompute the route after the destination header is set
	// (for routes that match on it). Default false: the override-host load balancer reads the
	// header without it.
	ClearRouteCache bool
	// StreamIdle bounds the silence of one ext_proc stream between two messages: a stream
	// silent this long is closed and its request's handles freed. It includes the model
	// server's time to its response headers. Zero: 10 min.
	StreamIdle time.Duration

	// HealthChecks configures the active health checks Run performs (package
	// proxy/healthcheck) when the router's profile has an outlier.Detector (the default
	// router's has): the picker's own probes of the endpoints (http://Address/health and a
	// streamed one-token completion), never a client's request, bring ejected endpoints back
	// within about two seconds of their recovery and eject endpoints that died or stalled
	// while idle (Envoy relays the requests, so the picker cannot see their first byte: the
	// probes are how it finds a stalled endpoint). Router, Hosts and OnProbe are the
	// picker's to set and must be zero. Zero fields: healthcheck's defaults.
	HealthChecks healthcheck.Options
	// NoHealthChecks turns the active health checks off: passive health alone, whose
	// half-open state lets one client request at a time through to an ejected endpoint.
	NoHealthChecks bool

	// NoScrape turns metrics scraping off: the router then works on its own counters and
	// the prefix index alone.
	NoScrape bool
	// Engine names the servers' metrics (for example metrics.EngineOf("sglang")). Nil:
	// vLLM's.
	Engine *metrics.Engine
	// ScrapeInterval is how often Run scrapes each endpoint. Zero: 100 ms.
	ScrapeInterval time.Duration
	// KVListen, if set, is an endpoint the KV-event subscriber binds for servers that
	// connect (vLLM with a concrete host in its endpoint); a pod's events go to the endpoint
	// named after the pod in the topic kv@<pod>@<model>, so publish with <pod> = ip:port.
	// Bind it where only model servers reach it.
	KVListen string
	// Logger receives what goes wrong in the background. Nil: slog.Default().
	Logger *slog.Logger

	// Quota, if set, holds the tenants' quotas as proxy.Options.Quota does for the gateway: a
	// completion request reserves its expected tokens in its tenant's quota (the tenant the
	// Keyer derives) once its prompt is hashed, before the queue, and settles at the stream's
	// end to what it used (the answer's usage, else the streamed chunks counted, else — a
	// request cancelled or failed after its pick — its prompt); one that does not fit is
	// answered at once with an immediate 429 naming the limit, with Retry-After the time
	// until its window refills (Anthropic's error shape on /v1/messages). The answer's
	// headers gain the rate-limit headers of its API, the same names and formats as the
	// gateway's (see "Quotas" in the proxy package documentation). Run runs the Limiter's
	// Run; with gateway/replicaext, build the Limiter with the replica's Shared store
	// (replicaext.Quota) so that the pickers hold each tenant's quota together. Nil: no
	// quotas, no headers.
	Quota *quota.Limiter

	// Extensions run beside the Server as they run beside a proxy.Handler (see
	// proxy.Extension): New calls each one's Prepare on the options of the parts it builds
	// when Index, Router (its session table) and Keyer are nil, then Attach with the Server
	// (a proxy.Core); Run runs each Run; Close calls each Close. gateway/replicaext's makes
	// several pickers share their prefix index, load, sessions and fairness usage through
	// Redis, with the default queue's limit on requests in flight shared among the live
	// pickers; the Server itself links no Redis client. A part given in Options must be built
	// alike (Prepare it yourself) or what it learns stays local.
	Extensions []proxy.Extension
}

// Server is an ext_proc v3 ExternalProcessor that picks the endpoint of each request Envoy
// asks about: it parses the body, keys the request to a flow, hashes its prompt, admits it
// through the queue, picks an endpoint, answers with the destination header and metadata,
// then watches the response for the first token and the usage, and closes the router's
// Result and the queue's Ticket exactly once.
//
// New starts nothing: Register the Server on a grpc.Server (ext_proc and health), and Run
// the background work (the EndpointSource, scraping, KV events). A Server is safe for
// concurrent use: every stream is served by its own goroutine, SetEndpoints may be called
// from any goroutine, and Stats reads atomics.
type Server struct {
	// Immutable after New.
	index      *prefixcache.Index
	router     *routing.Router
	queue      *flowcontrol.Queue
	tok        proxy.Tokenizer
	keyer      proxy.FlowKeyer
	limits     openai.ParseLimits
	maxBody    int64
	bands      int
	slo        slo.Config    // Options.SLO, TrustSLOHeaders, SLOShedAbove
	ttl        time.Duration // the default queue's TTL; 0 with Options.Queue
	models     map[string]bool
	fallbacks  int
	homes      *homes.Store // Responses API: response id → the endpoint that stored it
	ns, subNS  string
	clearRoute bool
	idle       time.Duration
	source     EndpointSource
	scraper    *metrics.Scraper // nil with NoScrape
	kvListen   string
	usher      *gatewaymetrics.Recorder
	registry   *prometheus.Registry
	health     *health.Server
	log        *slog.Logger
	kvLog      *lograte.Logger
	perLimit   int // MaxInFlight per endpoint for the default gate; 0: fixed or foreign gate
	decider    disagg.Decider
	exts       []proxy.Extension
	gate       *inflightGate
	checker    *healthcheck.Checker // nil: no active health checks
	quota      *quota.Limiter       // nil: no quotas

	eps    atomic.Pointer[endpointSet]
	chains sync.Pool // *[]prefixcache.BlockHash
	stats  counters

	mu      sync.Mutex // serialises SetEndpoints and publishing states; guards below
	states  []routing.BackendState
	kv      *kvevents.Subscriber // the current subscriber, rebuilt when KV sources change
	kvKey   string               // what kv was built for
	kvStop  context.CancelFunc
	kvDone  chan struct{}
	kvCtx   context.Context // Run's context, for subscribers started by SetEndpoints; nil before Run
	closed  bool
	running bool
	// awaiting: a Source was given and has not reported its first set yet (not ready).
	awaiting bool
	standby  bool // SetStandby(true): not ready whatever the endpoints
}

// endpointSet is a published, immutable set of endpoints.
type endpointSet struct {
	list   []Endpoint
	ids    []routing.BackendID // by index in list
	byAddr map[string]int
	// disagg: some endpoint is a prefill endpoint, so completions go to decode endpoints
	// and the Decider may add a prefill endpoint.
	disagg bool
	// adapters maps each LoRA adapter an endpoint lists to its base model.
	adapters map[string]string
}

// inflightGate bounds requests in flight by a limit that follows the endpoint count, shared
// among the live pickers when a replication extension tells it how many there are.
type inflightGate struct{ limit, replicas atomic.Int64 }

// Open implements flowcontrol.Gate.
func (g *inflightGate) Open(_ *flowcontrol.Request, l flowcontrol.Load) bool {
	return int64(l.InFlight) < g.share()
}

// share is the limit over the live replicas, rounded up.
func (g *inflightGate) share() int64 {
	n := max(g.replicas.Load(), 1)
	return (g.limit.Load() + n - 1) / n
}

// counters are the Server's cumulative statistics.
type counters struct {
	streams, active, picks, passed, rejected, shed, unavailable, bad, servedElsewhere,
	completed, failed, cancelled, idleTimeouts atomic.Int64
}

// Stats are a Server's counters, read one by one (each accurate, not mutually consistent).
type Stats struct {
	// Streams is the ext_proc streams served; Active those open now.
	Streams, Active int64
	// Picks is the requests admitted and given an endpoint; Passed those routed without
	// admission (no body, or not a completion).
	Picks, Passed int64
	// Rejected is the requests answered with an ImmediateResponse; of them Shed 429s,
	// Unavailable 503s, BadRequest 4xx for the request's own fault.
	Rejected, Shed, Unavailable, BadRequest int64
	// ServedElsewhere is the requests Envoy reported served by another endpoint than the
	// one picked (a fallback); the charge moved there.
	ServedElsewhere int64
	// Completed is the picked requests closed with success, Failed with an error, of which
	// Cancelled by the stream ending early (client or Envoy gone, reset) and IdleTimeouts
	// by StreamIdle.
	Completed, Failed, Cancelled, IdleTimeouts int64
}

// Stats returns the Server's counters. O(1).
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		Streams: c.streams.Load(), Active: c.active.Load(), Picks: c.picks.Load(), Passed: c.passed.Load(),
		Rejected: c.rejected.Load(), Shed: c.shed.Load(), Unavailable: c.unavailable.Load(), BadRequest: c.bad.Load(),
		ServedElsewhere: c.servedElsewhere.Load(), Completed: c.completed.Load(), Failed: c.failed.Load(),
		Cancelled: c.cancelled.Load(), IdleTimeouts: c.idleTimeouts.Load(),
	}
}

// New validates opts and assembles a Server. It starts nothing and binds nothing.
func New(opts Options) (*Server, error) {
	bad := func(format string, args ...any) (*Server, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case opts.MaxBodyBytes < 0 || opts.Fallbacks < 0 || opts.StreamIdle < 0 || opts.ScrapeInterval < 0 ||
		opts.MaxInFlight < 0 || opts.Bands < 0 || opts.TTL < 0 || opts.BlockSize < 0:
		return bad("negative MaxBodyBytes, Fallbacks, StreamIdle, ScrapeInterval, MaxInFlight, Bands, TTL or BlockSize")
	case opts.Fallbacks > 16:
		return bad("Fallbacks %d: want at most 16", opts.Fallbacks)
	case opts.Queue != nil && (opts.Policy != nil || opts.TTL != 0 || opts.MaxInFlight != 0 || opts.Bands != 0 ||
		opts.QueueCapacity != (flowcontrol.Limits{}) || opts.FlowCapacity != (flowcontrol.Limits{}) || opts.EarlyShed != (flowcontrol.EarlyShed{})):
		return bad("Queue given together with options of the default queue")
	case len(opts.Endpoints) > MaxEndpoints:
		return bad("%d endpoints: at most %d", len(opts.Endpoints), MaxEndpoints)
	}
	s := &Server{
		index: opts.Index, router: opts.Router, queue: opts.Queue, tok: opts.Tokenizer, keyer: opts.Keyer,
		limits: opts.Limits, maxBody: opts.MaxBodyBytes, bands: opts.Bands, fallbacks: opts.Fallbacks, homes: homes.New(opts.ResponseHomes),
		ns: opts.MetadataNamespace, subNS: opts.SubsetNamespace, clearRoute: opts.ClearRouteCache,
		idle: opts.StreamIdle, source: opts.Source, kvListen: opts.KVListen, log: opts.Logger, quota: opts.Quota,
	}
	s.chains.New = func() any { b := make([]prefixcache.BlockHash, 0, 1024); return &b }
	if s.decider = opts.Decider; s.decider == nil {
		s.decider, _ = disagg.NewPrefix(disagg.PrefixOptions{}) // valid options
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&s.idle, 10*time.Minute)
	if s.maxBody == 0 {
		s.maxBody = 8 << 20
	}
	if s.bands == 0 {
		s.bands = 4
	}
	if s.ns == "" {
		s.ns = MetadataNamespace
	}
	if s.subNS == "" {
		s.subNS = SubsetNamespace
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.kvLog = lograte.New(s.log, 0)
	if s.tok == nil {
		s.tok = proxy.BytesTokenizer{}
	}
	if len(opts.Models) > 0 {
		s.models = make(map[string]bool, len(opts.Models))
		for _, m := range opts.Models {
			s.models[m] = true
		}
	}
	var io prefixcache.Options
	var uo profiles.UsherOptions
	var ko *proxy.KeyerOptions // the default keyer's, when there is one to build
	if s.keyer == nil {
		ko = new(proxy.KeyerOptions)
	}
	s.exts = slices.Clone(opts.Extensions)
	for i, e := range s.exts {
		if e == nil {
			return bad("Extensions[%d] is nil", i)
		}
		if err := e.Prepare(&proxy.Defaults{Index: &io, Session: &uo.Session.AffinityOptions, Keyer: ko}); err != nil {
			return nil, err
		}
	}
	var err error
	if s.keyer == nil {
		if s.keyer, err = proxy.NewKeyer(*ko); err != nil {
			return nil, err
		}
	}
	if s.index == nil {
		if s.index, err = prefixcache.New(io); err != nil {
			return nil, err
		}
	}
	if s.router == nil {
		out, err := outlier.New(outlier.Options{})
		if err != nil {
			return nil, err
		}
		p := outlier.With(profiles.Usher(uo), out, 1)
		if s.router, err = routing.New(routing.Options{Profile: p, Index: s.index, BlockSize: opts.BlockSize}); err != nil {
			return nil, err
		}
	}
	bands := make([]int, s.bands)
	for i := range bands {
		bands[i] = i
	}
	if s.usher, err = gatewaymetrics.New(gatewaymetrics.Options{Bands: bands}); err != nil {
		return nil, err
	}
	if s.queue == nil {
		if err := s.defaultQueue(opts); err != nil {
			return nil, err
		}
	}
	if s.slo, err = slo.New(opts.SLO, opts.TrustSLOHeaders, opts.SLOShedAbove, s.bands, ErrInvalidOptions); err != nil {
		return nil, err
	}
	if !opts.NoScrape {
		if s.scraper, err = metrics.New(metrics.Options{
			Engine: opts.Engine, Interval: opts.ScrapeInterval, OnUpdate: s.publish,
		}); err != nil {
			return nil, err
		}
	}
	s.registry = prometheus.NewRegistry()
	// The Go runtime's and the process's series (go_*, process_*: goroutines, heap, RSS, open
	// files), as every Go service exports them.
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(s.usher, gatewaymetrics.ClampedScores(s.router, nil))
	if s.scraper != nil {
		s.registry.MustRegister(s.scraper)
	}
	if s.quota != nil {
		s.registry.MustRegister(quotaseam.Collector(s.quota)) // usher_quota_*
	}
	if hc := opts.HealthChecks; hc.Router != nil || hc.Hosts != nil || hc.OnProbe != nil {
		return bad("HealthChecks' Router, Hosts and OnProbe are the picker's to set")
	} else if !opts.NoHealthChecks && outlier.Of(s.router) != nil {
		hc.Router = s.router
		hc.OnProbe = func(name string, err error) { s.usher.ObserveProbe(name, err == nil) }
		if s.checker, err = healthcheck.New(hc); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	s.health = health.NewServer()
	s.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	s.setReady(false)
	s.eps.Store(&endpointSet{byAddr: map[string]int{}})
	s.awaiting = opts.Source != nil
	if err := s.SetEndpoints(opts.Endpoints); err != nil {
		return nil, err
	}
	for _, e := range s.exts {
		if err := e.Attach(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// defaultQueue builds the queue Options.Queue nil stands for.
func (s *Server) defaultQueue(opts Options) error {
	policy := opts.Policy
	if policy == nil {
		var err error
		if policy, err = fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Second}); err != nil {
			return err
		}
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = 60 * time.Second
	}
	s.ttl = ttl
	s.gate = &inflightGate{}
	if opts.MaxInFlight > 0 {
		s.gate.limit.Store(int64(opts.MaxInFlight))
	} else {
		s.perLimit = 64
		s.gate.limit.Store(64)
	}
	q, err := flowcontrol.New(flowcontrol.Options{
		Bands: s.bands, Policy: policy, Gate: s.gate, TTL: ttl,
		Capacity: opts.QueueCapacity, FlowCapacity: opts.FlowCapacity, EarlyShed: opts.EarlyShed,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			s.usher.ObserveAdmission(r.Outcome, r.Request.Band, r.Wait)
		}},
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	s.queue = q
	return nil
}

// Register registers the Server's ext_proc service and its gRPC health service on g. A
// buffered request body arrives as one message, so give g a receive limit above
// Options.MaxBodyBytes (grpc.MaxRecvMsgSize; grpc-go's default is 4 MiB, below the default
// MaxBodyBytes of 8 MiB): a larger message fails the stream before the picker can answer 413.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, processor{s: s})
	healthpb.RegisterHealthServer(g, s.health)
}

// RegisterHealth registers only the Server's gRPC health service on g: a health port of its
// own, as the Inference Extension's probes expect (9003, HealthInferenceExtension), kept
// serving while the ext_proc port drains so that liveness probes pass and readiness ones
// see NOT_SERVING. Register and RegisterHealth share one health state.
func (s *Server) RegisterHealth(g *grpc.Server) {
	healthpb.RegisterHealthServer(g, s.health)
}

// readyLocked reports whether the readiness services should be SERVING: the endpoints have
// synced, the Server is not closed and not on standby. s.mu is held.
func (s *Server) readyLocked() bool { return !s.awaiting && !s.closed && !s.standby }

// SetStandby puts the Server on standby (true) or takes it off (false). On standby, readiness
// ([HealthReadiness], [HealthExtProc], [HealthInferenceExtension] and "") is NOT_SERVING
// whatever the endpoints, so that probes and the gateway turn to another replica, while
// [HealthLiveness] stays SERVING. Nothing else changes: a stream that reaches the Server is
// still served, and [Server.Run] keeps following the endpoints, scraping and probing them, so
// a Server taken off standby is ready at once, its state warm. Readiness is thus: synced, not
// closed, not on standby. A Server starts off standby; a replica that has not won a leader
// election, or lost one, steps aside this way. Safe for concurrent use; O(1).
func (s *Server) SetStandby(standby bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.standby = standby
	s.setReady(s.readyLocked())
}

func (s *Server) setReady(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", HealthReadiness, HealthExtProc, HealthInferenceExtension} {
		s.health.SetServingStatus(name, st)
	}
}

// SetEndpoints replaces the pool's endpoints: the router's backend set, the scraper's
// targets and the KV-event sources. The set may be empty: requests are then answered 503
// with Retry-After. Requests in flight to an endpoint
// that left finish normally. It fails, changing nothing, on an invalid or repeated endpoint.
// O(endpoints); not for the request path.
func (s *Server) SetEndpoints(eps []Endpoint) error {
	if len(eps) > MaxEndpoints {
		return fmt.Errorf("%w: %d endpoints: at most %d", ErrInvalidEndpoint, len(eps), MaxEndpoints)
	}
	set := &endpointSet{list: slices.Clone(eps), byAddr: make(map[string]int, len(eps))}
	for i, e := range set.list {
		if err := e.validate(); err != nil {
			return err
		}
		if _, dup := set.byAddr[e.Address]; dup {
			return fmt.Errorf("%w: %s listed twice", ErrInvalidEndpoint, e.Address)
		}
		set.byAddr[e.Address] = i
		set.disagg = set.disagg || e.Role == routing.RolePrefill
		for _, a := range e.Adapters {
			if set.adapters == nil {
				set.adapters = map[string]string{}
			}
			set.adapters[a] = e.Models[0]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scraper != nil {
		targets := make([]metrics.Target, len(set.list))
		for i, e := range set.list {
			targets[i] = metrics.Target{Name: e.Address, URL: e.metricsURL(), Role: e.Role}
		}
		if err := s.scraper.SetTargets(targets); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
		}
	}
	if err := s.publishLocked(set.list); err != nil {
		return err
	}
	set.ids = make([]routing.BackendID, len(set.list))
	for i, e := range set.list {
		set.ids[i], _ = s.router.Lookup(e.Address)
	}
	if s.checker != nil {
		targets := make([]healthcheck.Host, len(set.list))
		for i, e := range set.list {
			targets[i] = healthcheck.Host{Name: e.Address, URL: "http://" + e.Address}
			if len(e.Models) > 0 {
				targets[i].Model = e.Models[0]
			}
		}
		if err := s.checker.SetHosts(targets); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
		}
	}
	s.eps.Store(set)
	names := make([]string, len(set.list))
	for i, e := range set.list {
		names[i] = e.Address
	}
	s.usher.SetBackends(names)
	if s.perLimit > 0 {
		s.gate.limit.Store(int64(max(1, len(set.list)) * s.perLimit))
	}
	s.queue.Notify()
	s.setReady(s.readyLocked())
	if s.kvCtx != nil && !s.closed {
		s.followKVLocked()
	}
	return nil
}

// publish hands the scraped states to the router (the scraper's OnUpdate).
func (s *Server) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.publishLocked(s.eps.Load().list); err != nil {
		s.log.Warn("router update", "err", err)
	}
	s.queue.Notify()
	s.publishGaugesLocked()
}

// publishLocked updates the router with the scraped states of eps, or their bare names
// without a scraper.
func (s *Server) publishLocked(eps []Endpoint) error {
	s.states = s.states[:0]
	if s.scraper != nil {
		s.states = s.scraper.BackendStates(s.states)
		for i := range s.states {
			j := i // the scraper keeps the targets' order; look further only if it did not
			if j >= len(eps) || eps[j].Address != s.states[i].Name {
				j = slices.IndexFunc(eps, func(e Endpoint) bool { return e.Address == s.states[i].Name })
			}
			if j >= 0 {
				s.states[i].Models = eps[j].served()
			}
		}
	} else {
		for _, e := range eps {
			s.states = append(s.states, routing.BackendState{Name: e.Address, Role: e.Role, Models: e.served()})
		}
	}
	if err := s.router.Update(s.states); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
	}
	return nil
}

// publishGaugesLocked refreshes usher's gauges. O(bands + endpoints).
func (s *Server) publishGaugesLocked() {
	for b := range s.bands {
		bs := s.queue.BandStats(b)
		s.usher.SetQueue(b, bs.Queued, bs.QueuedBytes)
	}
	qs := s.queue.Stats()
	s.usher.SetInFlightTotal(qs.InFlight)
	s.usher.SetFlows(qs.Flows)
	if out := outlier.Of(s.router); out != nil {
		set := s.eps.Load()
		for i, e := range set.list {
			st := out.BackendStats(set.ids[i])
			s.usher.SetPassiveHealth(e.Address, gatewaymetrics.PassiveHealth{
				Ejections: st.Ejections, Probes: st.Probes, Restorations: st.Restored, Ejected: st.Ejected,
			})
		}
	}
	st := s.index.Stats()
	s.usher.SetIndexStats(gatewaymetrics.IndexStats{
		Blocks: st.Blocks, Bytes: st.Bytes, Evictions: uint64(st.Evictions),
		QueriedBlocks: uint64(st.Hits + st.Misses), MatchedBlocks: uint64(st.Hits),
	})
}

// followKVLocked (re)starts the KV-event subscriber when the set of sources changed.
func (s *Server) followKVLocked() {
	var sources []kvevents.Source
	key := s.kvListen
	for _, e := range s.eps.Load().list {
		if e.KVEvents != "" {
			sources = append(sources, kvevents.Source{Endpoint: e.KVEvents, ReplayEndpoint: e.Replay, Backend: e.Address})
			key += "|" + e.Address + "=" + e.KVEvents + "," + e.Replay
		}
	}
	if s.kv != nil && key == s.kvKey {
		return
	}
	s.stopKVLocked()
	s.kvKey = key
	if len(sources) == 0 && s.kvListen == "" {
		return
	}
	o := kvevents.Options{
		Index:   s.index,
		Sources: sources,
		// One line per kind of problem, backend and interval, with a count.
		OnError: func(backend string, err error) { s.kvLog.Warn("kv events", backend, err) },
	}
	if s.kvListen != "" {
		o.Listen, o.AcceptUnknown = s.kvListen, true
	}
	sub, err := kvevents.New(o)
	if err != nil {
		s.log.Warn("kv events", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(s.kvCtx)
	done := make(chan struct{})
	s.kv, s.kvStop, s.kvDone = sub, cancel, done
	go func() {
		defer close(done)
		if err := sub.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("kv events", "err", err)
		}
	}()
}

// stopKVLocked stops the current subscriber and waits for it.
func (s *Server) stopKVLocked() {
	if s.kv == nil {
		return
	}
	s.kvStop()
	_ = s.kv.Close()
	<-s.kvDone
	s.kv, s.kvStop, s.kvDone = nil, nil, nil
}

// Run does the background work until ctx ends: it runs the EndpointSource, scrapes the
// endpoints, follows their KV events, runs the active health checks (Options.HealthChecks)
// and the quota Limiter's Run (Options.Quota). It returns nil when ctx ends, the EndpointSource's error
// if it failed otherwise, ErrRunning if Run is already running. Call it once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running || s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%w: Run called twice or after Close", ErrInvalidOptions)
	}
	s.running, s.kvCtx = true, ctx
	s.followKVLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stopKVLocked()
		s.kvCtx = nil
		s.mu.Unlock()
	}()

	errc := make(chan error, 4+len(s.exts))
	n := 0
	if s.quota != nil {
		n++
		go func() { errc <- s.quota.Run(ctx) }()
	}
	for _, e := range s.exts {
		n++
		go func() { errc <- e.Run(ctx) }()
	}
	if s.scraper != nil {
		n++
		go func() { errc <- s.scraper.Run(ctx) }()
	}
	if s.checker != nil {
		n++
		go func() { errc <- s.checker.Run(ctx) }()
	}
	if s.source != nil {
		n++
		go func() {
			errc <- s.source.Run(ctx, func(eps []Endpoint) {
				if err := s.SetEndpoints(eps); err != nil {
					s.log.Warn("endpoints", "err", err)
					return
				}
				s.mu.Lock()
				if s.awaiting { // the Source has synced: ready, even with no endpoints
					s.awaiting = false
					s.setReady(s.readyLocked())
				}
				s.mu.Unlock()
			})
		}()
	}
	var first error
	if n == 0 {
		<-ctx.Done()
	}
	for range n {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			first = err
		}
	}
	if s.scraper != nil {
		s.scraper.Close()
	}
	return first
}

// Close marks the server not ready (health NOT_SERVING, so Envoy stops sending), rejects
// what still waits for admission (503) and stops the KV events. Requests in flight finish
// normally. Idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.setReady(false)
	s.stopKVLocked()
	s.mu.Unlock()
	s.queue.Close()
	if first {
		for _, e := range s.exts {
			if err := e.Close(); err != nil {
				s.log.Warn("closing an extension", "err", err)
			}
		}
	}
}

var _ proxy.Core = (*Server)(nil)

func init() {
	proxyseam.AddLimitSharer(func(host any) (proxyseam.LimitShare, bool) {
		s, ok := host.(*Server)
		if !ok || s.gate == nil {
			return nil, ok
		}
		return func(replicas int) int {
			if int64(replicas) != s.gate.replicas.Swap(int64(replicas)) {
				s.queue.Notify() // a share that grew admits what waits
			}
			return int(s.gate.share())
		}, true
	})
}

// Router returns the Server's router.
func (s *Server) Router() *routing.Router { return s.router }

// Queue returns the Server's admission queue.
func (s *Server) Queue() *flowcontrol.Queue { return s.queue }

// Index returns the Server's prefix index.
func (s *Server) Index() *prefixcache.Index { return s.index }

// Registry returns a registry of usher's metrics and the scraper's, for a Prometheus
// handler (promhttp.HandlerFor).
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// processor is the Server as gRPC's ext_proc service, the value Register registers, so that
// the service's method stays off the Server's API.
type processor struct {
	extprocv3.UnimplementedExternalProcessorServer
	s *Server
}

// Process serves one ext_proc stream (see Server.process).
func (p processor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	return p.s.process(stream)
}

var _ extprocv3.ExternalProcessorServer = processor{}
