package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/internal/homes"
	"github.com/usher-llm/usher/internal/lograte"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

// ErrInvalidOptions is returned (wrapped) by New and NewKeyer for options they cannot use.
var ErrInvalidOptions = errors.New("proxy: invalid options")

// Backend is one model server behind the Handler.
type Backend struct {
	// URL is the server's base URL (http://host:port); the OpenAI API is under /v1.
	URL string
	// Name is the backend's name in the router, the prefix index, the logs and the backend
	// label of every usher_* series on /metrics: 1 to 64 letters, digits, '.', '_' or '-',
	// starting with a letter or digit, so that no address shows there (a data-parallel
	// rank's is Name + "#dp=" + the rank). Names must be unique; gateway replicas that share
	// state (package replica) must name a server alike. Empty: URL, as before names existed.
	Name string
	// Engine names the server's metrics (for example metrics.EngineOf("sglang")). Nil:
	// vLLM's.
	Engine *metrics.Engine
	// KVEvents is the server's KV-event ZMQ endpoint (vLLM's --kv-events-config endpoint,
	// which the server binds when it is a wildcard such as tcp://*:5557), and Replay its
	// replay endpoint; both optional. With them the prefix index is exact.
	KVEvents, Replay string
	// KVPod is the pod name in the topics of the server's KV events (kv@<pod>@<model>) when
	// the server connects to the Handler's Options.KVListen instead (vLLM connects when its
	// endpoint names a host, tcp://gateway:5557). Replay may still name its replay endpoint.
	KVPod string
	// Ranks is the number of data-parallel ranks the server runs behind its one address
	// (vLLM --data-parallel-size with its internal load balancer, SGLang --dp-size); 0 or 1:
	// none. Each rank is then a backend of its own, named URL + "#dp=" + the rank: the router
	// places requests on a rank and the Handler pins them there with the
	// X-Data-Parallel-Rank header (both engines honour it); each rank's metrics are the
	// series labelled with its rank (Profile.RankLabel); its KV events come from its own
	// publisher, on KVEvents' (and Replay's) port plus the rank, as vLLM publishes them —
	// or, with SharedKVPublisher, from one publisher for all ranks.
	Ranks int
	// SharedKVPublisher says the server publishes the KV events of all its ranks on the one
	// KVEvents endpoint, each batch naming its rank (SGLang's attn_dp_rank).
	SharedKVPublisher bool
	// Role is the part of inference the server serves (routing.BackendState.Role): both
	// (the zero value), prefill or decode. A fleet with a prefill server is disaggregated
	// (see Options.Decider): chat and completions requests go to decode (or both) servers,
	// and their prefill, when the Decider says so, to a prefill (or both) server first.
	Role routing.Role
	// KVBoth says the server's KV connector sends and receives (vLLM's kv_role kv_both;
	// routing.BackendState.KVBoth): with Role both, a role planner (Options.Decider a
	// *disagg.Planner, the default when some backend is KVBoth) moves it between prefill and
	// both as the load changes, at every scrape.
	KVBoth bool
	// Models are the base models the server serves. Nil: what the server lists on GET
	// /v1/models (adapters included), refreshed by Start and Run. A request is routed only to
	// the backends that serve the model it names; when backends list different models, each
	// base model's backends are a pool with a queue of their own (Options.Pools).
	Models []string
	// Adapters are the LoRA adapters the server serves on Models[0] (vLLM --lora-modules).
	// Nil: none, or what the server lists on GET /v1/models when Models is nil.
	Adapters []string
}

// sameModels reports whether two model lists name the same set.
func sameModels(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	set := make(map[string]bool, len(a))
	for _, m := range a {
		set[m] = true
	}
	for _, m := range b {
		if !set[m] {
			return false
		}
	}
	return true
}

// rankName is the name of data-parallel rank rank of the backend named name, in the router,
// the prefix index and the metrics: name + "#dp=" + rank.
func rankName(name string, rank int) string { return name + "#dp=" + strconv.Itoa(rank) }

// name is the backend's name: Name, or its URL.
func (b Backend) name() string { return cmp.Or(b.Name, b.URL) }

// member is one backend as the router knows it: a server, or one rank of a server.
type member struct {
	name             string // the router's and the index's name
	url              string // the server's base URL
	rank             int    // -1: the server has no ranks
	engine           *metrics.Engine
	role             routing.Role
	kvBoth           bool
	kvEvents, replay string   // this member's publisher
	kvPod            string   // its pod, when it connects to KVListen
	rankBackends     []string // a shared publisher's ranks (on rank 0's member)
}

// members expands backends into what the router sees: one member per server, or per rank.
func members(backends []Backend) ([]member, error) {
	var out []member
	for _, b := range backends {
		if b.Ranks <= 1 {
			out = append(out, member{name: b.name(), url: b.URL, rank: -1, engine: b.Engine, role: b.Role, kvBoth: b.KVBoth, kvEvents: b.KVEvents, replay: b.Replay, kvPod: b.KVPod})
			continue
		}
		for r := range b.Ranks {
			m := member{name: rankName(b.name(), r), url: b.URL, rank: r, engine: b.Engine, role: b.Role, kvBoth: b.KVBoth}
			if b.SharedKVPublisher {
				if r == 0 && b.KVEvents != "" {
					m.kvEvents, m.replay = b.KVEvents, b.Replay
					for k := range b.Ranks {
						m.rankBackends = append(m.rankBackends, rankName(b.name(), k))
					}
				}
				out = append(out, m)
				continue
			}
			var err error
			if m.kvEvents, err = offsetPort(b.KVEvents, r); err != nil {
				return nil, err
			}
			if m.replay, err = offsetPort(b.Replay, r); err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// configuredAdapters maps each member's name to the adapters its Backend names (the first
// label values of usher_backend_lora_adapters).
func configuredAdapters(backends []Backend, ms []member) map[string][]string {
	byURL := make(map[string][]string, len(backends))
	for _, b := range backends {
		byURL[b.URL] = b.Adapters
	}
	out := make(map[string][]string, len(ms))
	for _, m := range ms {
		out[m.name] = byURL[m.url]
	}
	return out
}

// newTarget is where a member's name points (backendURL, for a name that is not its URL).
func newTarget(m member) *target {
	u, err := url.Parse(m.url)
	if err != nil {
		return nil // Validate refused it
	}
	t := &target{URL: u}
	if m.rank >= 0 {
		t.rank = strconv.Itoa(m.rank)
	}
	u.Path, u.Fragment, u.RawFragment = trimSlash(u.Path), "", ""
	return t
}

// offsetPort adds off to the port of a tcp:// endpoint ("" stays "").
func offsetPort(endpoint string, off int) (string, error) {
	if endpoint == "" || off == 0 {
		return endpoint, nil
	}
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	host, port, err := net.SplitHostPort(rest)
	n, perr := strconv.Atoi(port)
	if !ok || err != nil || perr != nil || n+off > 65535 {
		return "", fmt.Errorf("%w: KV-event endpoint %q: a backend with ranks needs tcp://host:port", ErrInvalidOptions, endpoint)
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n+off)), nil
}

// Validate reports what makes b unusable (an error wrapping ErrInvalidOptions), or nil; New
// validates every backend this way.
func (b Backend) Validate() error {
	u, err := url.Parse(b.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: backend URL %q: want http(s)://host:port", ErrInvalidOptions, b.URL)
	}
	if b.Name != "" && !validName(b.Name) {
		return fmt.Errorf("%w: backend %q: name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidOptions, b.URL, b.Name)
	}
	if b.Ranks < 0 || b.Ranks > 1024 {
		return fmt.Errorf("%w: backend %q: %d ranks, want 0..1024", ErrInvalidOptions, b.URL, b.Ranks)
	}
	if b.Replay != "" && b.KVEvents == "" && b.KVPod == "" {
		return fmt.Errorf("%w: backend %q: a replay endpoint without a KV-event endpoint or pod", ErrInvalidOptions, b.URL)
	}
	if b.Role > routing.RoleDecode {
		return fmt.Errorf("%w: backend %q: role %v", ErrInvalidOptions, b.URL, b.Role)
	}
	for _, m := range slices.Concat(b.Models, b.Adapters) {
		if m == "" || len(m) > 256 {
			return fmt.Errorf("%w: backend %q: a model or adapter name must have 1 to 256 bytes", ErrInvalidOptions, b.URL)
		}
	}
	if len(b.Adapters) > 0 && len(b.Models) == 0 {
		return fmt.Errorf("%w: backend %q: adapters need Models, whose first is their base model", ErrInvalidOptions, b.URL)
	}
	if b.KVPod != "" && (b.KVEvents != "" || b.Ranks > 1) {
		return fmt.Errorf("%w: backend %q: KVPod (the server connects to KVListen) excludes KVEvents and ranks", ErrInvalidOptions, b.URL)
	}
	return nil
}

// validName reports whether s may name a backend (Backend.Name): 1 to 64 letters, digits,
// '.', '_' or '-', the first a letter or digit; "other" is the metrics' label for what is
// outside the configured set.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 || s == "other" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// Options configures a Handler. Every part can be swapped; the zero value of each field is
// the documented default, so Options{Backends: ...} is a working gateway.
type Options struct {
	// Backends are the model servers. Run scrapes their metrics into the router (and follows
	// their KV events); GET /v1/models lists their models. Empty: the caller keeps the
	// Router's backend set up to date itself (Router.Update), naming each backend by its
	// base URL.
	Backends []Backend

	// Index is the prefix index. Nil: prefixcache.New(prefixcache.Options{}).
	Index *prefixcache.Index
	// Router picks backends. Nil: a router of Profile over Index, with passive health
	// (outlier.Detector with PassiveHealth) in front.
	Router *routing.Router
	// Profile is the default router's profile. Zero: profiles.Usher, its session table fed by
	// the Extensions (replicas share placements through it). Extending the default is one
	// assignment, say a scorer of your own at weight 1:
	//
	//	opts.Profile = profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: mine, Weight: 1})
	Profile routing.Profile
	// PassiveHealth configures the default router's outlier detection: backends whose
	// requests fail are ejected for a while and probed back. Zero fields: routing's defaults.
	PassiveHealth outlier.Options
	// HealthChecks configures the active health checks Run performs (package
	// proxy/healthcheck) when the router's profile has an outlier.Detector (the default
	// router's has): the Handler's own probes, never a client's request, bring ejected
	// backends back within about two seconds of their recovery and find backends that died
	// or stalled while idle or busy with whole answers. Router, Hosts and OnProbe are the
	// Handler's to set and must be zero; FirstByte defaults to Timeouts.Stall. Zero fields:
	// healthcheck's defaults.
	HealthChecks healthcheck.Options
	// NoHealthChecks turns the active health checks off: passive health alone, whose
	// half-open state lets one client request at a time through to an ejected backend as its
	// probe.
	NoHealthChecks bool
	// Queue admits requests. Nil: a queue of Bands bands ordered by Policy, with TTL,
	// QueueCapacity and FlowCapacity, at most MaxInFlight requests in flight and, if
	// Saturation is set, llm-d's saturation gate. Either way the Handler counts the
	// admission outcome of each request it admits in Metrics. A Queue of your own brings its
	// own gate, and the fields below that configure the default
	// queue must be zero.
	Queue *flowcontrol.Queue
	// Policy orders the default queue. Nil: fairness.NewBoundedWait with W 10 s.
	Policy flowcontrol.Policy
	// TTL is the default queue's longest wait for admission. Zero: 60 s.
	TTL time.Duration
	// QueueCapacity and FlowCapacity bound what waits in the default queue in all and per
	// flow (flowcontrol.Options.Capacity and FlowCapacity; zero fields: their defaults).
	QueueCapacity, FlowCapacity flowcontrol.Limits
	// Tokenizer turns prompts into block hashes. Nil: BytesTokenizer{}. When it fails, the
	// request is hashed by BytesTokenizer instead (never rejected for it).
	Tokenizer Tokenizer
	// Keyer derives each request's tenant, session and band. Nil: NewKeyer(KeyerOptions{}).
	Keyer FlowKeyer
	// Transport sends requests to backends. Nil: keep-alive connections (256 idle per
	// backend, closed after 90 s idle), no compression (the Handler reads the streams it
	// relays), HTTP/1.1 as model servers speak it.
	Transport http.RoundTripper
	// Models are the model names requests may ask for (404 model_not_found otherwise). Nil:
	// what the Backends serve (their Models and Adapters, or what they list on GET
	// /v1/models, refreshed by Start and Run); until one of those is known, any model is
	// accepted and the backend judges.
	Models []string
	// Pools sets the admission limits of a base model's pool, keyed by the model (one of
	// the Backends' Models). Pools exist when backends list different models: each base
	// model's backends get a queue of their own, like the default queue (Policy, TTL,
	// capacities, EarlyShed) but with these limits, so that a flood of one model never holds
	// another's requests. Zero limits: 64 in flight per backend of the pool, Saturation.
	Pools map[string]PoolLimits
	// Limits bound what a request body may ask for (max_tokens, n, nesting, messages).
	Limits openai.ParseLimits
	// ResponseHomes bounds how many Responses API response ids the Handler remembers, with
	// the backend that stored each, so that a request naming one as previous_response_id
	// goes to that backend (the least recently used are forgotten first). Zero: 100000;
	// negative: none are remembered, and such requests are routed like any other.
	ResponseHomes int
	// MaxBodyBytes bounds a request body (413 above it). Zero: 8 MiB.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds the request's header fields, names and values summed (431 above
	// it). Zero: 64 KiB. (The http.Server's own MaxHeaderBytes, 1 MiB by default, applies
	// before the Handler is called.)
	MaxHeaderBytes int
	// Bands is the number of priority bands of the default queue and of the metrics' band
	// labels. Zero: 4.
	Bands int
	// BlockSize is the default router's tokens per block. Zero: routing.DefaultBlockSize.
	BlockSize int
	// MaxInFlight bounds the default queue's requests in flight. Zero: 64 per backend (64
	// when Backends is empty).
	MaxInFlight int
	// Saturation, if positive, makes the default queue also hold admission while llm-d's
	// saturation estimate of the fleet (mean over backends of max(queued/5, kv/0.8), a
	// backend without fresh signals counting 1) is at or above it.
	Saturation float64
	// EarlyShed configures the default queue's early shedding (flowcontrol.EarlyShed): a
	// request that the queue estimates cannot be dispatched before its TTL (or, with a TTFT
	// target, its SLO deadline) is answered 429 with Retry-After at once instead of after
	// waiting. Zero: off.
	EarlyShed flowcontrol.EarlyShed
	// SLO are the latency targets of the requests of each priority band (routing.Latency:
	// time to first token and per output token), keyed by band; a band not listed, or a zero
	// field, sets none. A request with targets is routed to a backend predicted to meet them
	// (routing.Request.Targets, with a PredictedLatency scorer in the profile), ordered by
	// its TTFT target under the slo policy and, when the router predicts latency,
	// must be dispatched in time to meet its TTFT target (see "Service-level objectives" in
	// the package documentation).
	SLO map[int]routing.Latency
	// TrustSLOHeaders makes the Handler read targets from the x-slo-ttft-ms and
	// x-slo-tpot-ms request headers (whole milliseconds, 1 to 3600000; anything else is a 400
	// naming the header), as set by a trusted proxy in front of the gateway that removes them
	// from client requests. A header may only loosen its band's target in SLO, never tighten
	// it, and sets nothing where the band has no target. False: the headers are ignored.
	TrustSLOHeaders bool
	// SLOShedAbove, when not zero, refuses on arrival (429 with Retry-After, as early
	// shedding does) a request with a TTFT target T that the router predicts no backend can
	// serve within SLOShedAbove·T, even when it could be dispatched at once: above the knee
	// the queue is inside the model servers, where admission's wait estimate does not see it,
	// and a request sent to miss its target only delays the ones that could meet theirs. It
	// acts once the router has taught its latency model latency.ColdOutcomes (routing/latency)
	// observations (Stats.LatencyOutcomes), never on the prior alone. The factor leaves room
	// for the model's error: 2 is measured in bench/README.md ("SLO attainment"). Zero: off;
	// otherwise at least 1.
	SLOShedAbove float64
	// Timeouts bound every wait: dial, TLS, response headers, stream silence, the whole
	// request, the request body. Zero fields are their defaults.
	Timeouts Timeouts
	// Retry configures retries before the first byte and their budget.
	Retry Retry
	// Decider decides per request whether a disaggregated fleet (one with a Backend of
	// RolePrefill) prefills it on a prefill server and has the decode server pull its KV
	// (vLLM's KV-transfer protocol), or lets the decode server serve it whole. Nil:
	// disagg.NewPrefix with its defaults when the fleet is disaggregated. Setting it
	// makes the Handler disaggregate even without Backends (a Router kept up to date by the
	// caller, with roles in its BackendStates). See the package doc, "Disaggregated serving".
	// The prefill step is run by the Handler's transport: a ReverseProxy of your own that
	// uses the Handler's hooks must use Handler.Transport() too, or its decode servers serve
	// every request whole.
	Decider disagg.Decider
	// MaxBodyBytesReading bounds the bytes of request bodies being read at once, over all
	// requests; a body that does not fit is answered 503 with Retry-After. Zero: 256 MiB
	// (and at least 4 × MaxBodyBytes, the most one body of unknown length can hold while its
	// buffer grows).
	MaxBodyBytesReading int64
	// ScrapeInterval is how often Run scrapes the backends. Zero: 100 ms.
	ScrapeInterval time.Duration
	// MetricsElsewhere makes ServeHTTP answer GET /metrics with a 404, like any path it does
	// not serve, because the program serves Registry on a listener of its own, where the API's
	// clients cannot reach it (metrics.Exporter, with bearer tokens if it wants them), as
	// examples/gateway does with -metrics-listen. False: GET /metrics on the Handler's own
	// port serves Registry to anyone.
	MetricsElsewhere bool
	// Logger receives what goes wrong in the background (KV events, scrapes). Nil:
	// slog.Default().
	Logger *slog.Logger
	// Quota, if set, holds the tenants' quotas (package proxy/quota): every request of the
	// pipeline reserves its expected tokens at admission, before the queue, and settles to
	// what it used when it ends; a request that does not fit is answered 429 at once, naming
	// the limit, with Retry-After the time until its window refills (Anthropic's error shape
	// on /v1/messages). Answers carry the rate-limit headers of their API: OpenAI's
	// x-ratelimit-limit-requests, -limit-tokens, -remaining-requests, -remaining-tokens,
	// -reset-requests and -reset-tokens (durations such as 1s or 6m0s), Anthropic's
	// anthropic-ratelimit-requests-*, -tokens-*, -input-tokens-* and -output-tokens-*
	// (-limit, -remaining, -reset as an RFC 3339 time) on /v1/messages. Run runs the
	// Limiter's Run. Nil: no quotas, no headers.
	Quota *quota.Limiter
	// Extensions run beside the Handler and feed it: proxy/kvfeed follows the backends'
	// KV events (required when a Backend names KVEvents or KVPod), gateway/replicaext keeps
	// the gateway in step with its peers through Redis (package replica). New calls each
	// one's Prepare (before it builds the default Index, Router and Keyer) and Attach
	// (after); Run runs them; Close closes them. Their heavy clients (ZMQ, Redis) are linked
	// only by a program that imports them.
	Extensions []Extension
}

// Handler is an OpenAI-compatible gateway over a fleet of model servers: for POST
// /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings and Anthropic's
// /v1/messages it parses and validates the body, keys the request to a flow, hashes its
// prompt once, admits it through the queue, picks a backend, relays the answer (streamed or
// whole) and closes the queue's Ticket and the router's Result exactly once with the usage
// the backend reported. It also serves GET /v1/models and /v1/models/{id}, Anthropic's POST
// /v1/messages/count_tokens, GET /health and GET /metrics (unless Options.MetricsElsewhere);
// everything else is a 404 in OpenAI's error format (see [Handler.ServeHTTP]).
//
// The same pipeline is available as hooks for an httputil.ReverseProxy of your own: Rewrite,
// ModifyResponse and ErrorHandler.
//
// New starts nothing; Start scrapes the fleet once, Run does the background work (scraping,
// KV events, model lists) until its context ends, Close releases everything. A Handler is
// safe for concurrent use; its fields are set by New and never change.
type Handler struct {
	backends  []Backend
	members   []member // the router's backends: servers, or their ranks
	index     *prefixcache.Index
	router    *routing.Router
	queue     *flowcontrol.Queue
	tok       Tokenizer
	keyer     FlowKeyer
	transport http.RoundTripper
	usher     *gatewaymetrics.Recorder
	adapters  *gatewaymetrics.Adapters // the adapters each backend runs and queues
	registry  *prometheus.Registry
	scraper   *metrics.Scraper // nil without Backends
	exts      []Extension
	quota     *quota.Limiter // nil: no quotas
	// kvFollowed is set by proxyseam.FollowKVEvents, from an extension's Attach.
	kvFollowed atomic.Bool
	limit      int // the default queue's MaxInFlight; 0 with Options.Queue
	log        *slog.Logger
	errLog     *lograte.Logger // backend errors handed on (backenderr.go)
	ids        *requestIDs
	limits     openai.ParseLimits
	maxBody    int64
	maxHeader  int
	bands      int
	rp         *httputil.ReverseProxy
	metricsH   http.Handler
	timeouts   Timeouts
	retry      Retry
	retrier    *retryTransport
	budget     *budget
	reading    bodyLimiter
	decider    disagg.Decider  // nil: the fleet is not disaggregated
	planner    *disagg.Planner // decider, when it is a role planner (ticked at every scrape)
	kvBoth     map[string]bool // the members of role both with a KV connector both ways; nil: none
	planned    bool            // planRoles exported the planner's roles once (under statesMu)
	slo        slo.Config      // Options.SLO, TrustSLOHeaders, SLOShedAbove
	ttl        time.Duration   // the default queue's (and pools') TTL; 0 with Options.Queue

	metricsElsewhere bool // Options.MetricsElsewhere: GET /metrics is a 404 here

	sent, retried, exhausted atomic.Uint64 // retryStats

	checker *healthcheck.Checker // nil: no active health checks
	waiting waitList             // requests waiting for their first byte (stall moves)

	catalog       atomic.Pointer[catalog] // what the backends serve
	modelsMu      sync.Mutex              // one refresh of the catalog at a time
	allowedModels []string                // Options.Models
	memberIndex   map[string]int          // member name → index in members
	pools         map[string]*pool        // base model → its admission; nil: one queue
	saturation    atomic.Uint64           // math.Float64bits of llm-d's saturation estimate

	statesMu sync.Mutex // guards states (publishStates may run from Start and Run)
	states   []routing.BackendState

	scraped atomic.Bool // the first scrape was published
	urls    sync.Map    // backend name → *url.URL
	chains  sync.Pool   // *[]prefixcache.BlockHash

	homes *homes.Store // Responses API: response id → the backend that stored it (apis.go)

	countLacking countTokensLacking // backends without /v1/messages/count_tokens (counttokens.go)
}

// New assembles a Handler from opts. It starts nothing.
func New(opts Options) (*Handler, error) {
	h := &Handler{
		backends:  opts.Backends,
		index:     opts.Index,
		router:    opts.Router,
		queue:     opts.Queue,
		tok:       opts.Tokenizer,
		keyer:     opts.Keyer,
		transport: opts.Transport,
		log:       opts.Logger,
		ids:       newRequestIDs(),
		limits:    opts.Limits,
		homes:     homes.New(opts.ResponseHomes),
		maxBody:   opts.MaxBodyBytes,
		maxHeader: opts.MaxHeaderBytes,
		bands:     opts.Bands,
		quota:     opts.Quota,

		metricsElsewhere: opts.MetricsElsewhere,
	}
	h.chains.New = func() any { s := make([]prefixcache.BlockHash, 0, 1024); return &s }
	if h.maxBody == 0 {
		h.maxBody = 8 << 20
	}
	if h.maxHeader == 0 {
		h.maxHeader = 64 << 10
	}
	if h.bands == 0 {
		h.bands = 4
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.errLog = lograte.New(h.log, 10*time.Second)
	h.timeouts, h.retry = opts.Timeouts.withDefaults(), opts.Retry.withDefaults()
	h.budget = newBudget(h.retry)
	h.reading.limit = opts.MaxBodyBytesReading
	if h.reading.limit == 0 {
		h.reading.limit = max(256<<20, 4*h.maxBody)
	}
	switch {
	case !opts.Timeouts.valid() || opts.Retry.Attempts < 0 || opts.Retry.BudgetRatio < 0 || opts.Retry.BudgetMin < 0 ||
		opts.Retry.BudgetWindow < 0 || opts.MaxBodyBytesReading < 0:
		return nil, fmt.Errorf("%w: negative timeout, retry or body setting", ErrInvalidOptions)
	case opts.MaxBodyBytesReading > 0 && opts.MaxBodyBytesReading < 4*h.maxBody:
		return nil, fmt.Errorf("%w: MaxBodyBytesReading %d is below 4 × MaxBodyBytes (%d): a large body could never be read", ErrInvalidOptions, opts.MaxBodyBytesReading, h.maxBody)
	case h.maxBody < 0 || h.maxHeader < 0 || h.bands < 0 || opts.MaxInFlight < 0 || opts.BlockSize < 0 ||
		opts.ScrapeInterval < 0 || opts.Saturation < 0 || math.IsNaN(opts.Saturation):
		return nil, fmt.Errorf("%w: negative size, count, interval or level", ErrInvalidOptions)
	case opts.Queue != nil && (opts.Saturation > 0 || opts.EarlyShed != (flowcontrol.EarlyShed{}) || opts.Policy != nil || opts.TTL != 0 || opts.MaxInFlight != 0 ||
		opts.QueueCapacity != (flowcontrol.Limits{}) || opts.FlowCapacity != (flowcontrol.Limits{})):
		return nil, fmt.Errorf("%w: Policy, TTL, capacities, MaxInFlight, Saturation and EarlyShed configure the default queue; configure your Queue itself", ErrInvalidOptions)
	}
	seen, named := make(map[string]bool, len(opts.Backends)), make(map[string]bool)
	for _, b := range opts.Backends {
		if err := b.Validate(); err != nil {
			return nil, err
		}
		if seen[b.URL] {
			return nil, fmt.Errorf("%w: backend %q listed twice", ErrInvalidOptions, b.URL)
		}
		seen[b.URL] = true
		if b.Name != "" {
			if named[b.Name] {
				return nil, fmt.Errorf("%w: backend name %q given twice", ErrInvalidOptions, b.Name)
			}
			named[b.Name] = true
		}
	}
	var err error
	if h.members, err = members(opts.Backends); err != nil {
		return nil, err
	}
	h.decider = opts.Decider
	for _, m := range h.members {
		if m.kvBoth && m.role == routing.RoleBoth {
			if h.kvBoth == nil {
				h.kvBoth = map[string]bool{}
			}
			h.kvBoth[m.name] = true
		}
	}
	switch {
	case h.decider != nil:
	case h.kvBoth != nil:
		if h.decider, err = disagg.NewPlanner(disagg.PlannerOptions{}); err != nil {
			return nil, err
		}
	case slices.ContainsFunc(h.members, func(m member) bool { return m.role == routing.RolePrefill }):
		if h.decider, err = disagg.NewPrefix(disagg.PrefixOptions{}); err != nil {
			return nil, err
		}
	}
	h.planner, _ = h.decider.(*disagg.Planner)
	names := make([]string, len(h.members))
	for i, m := range h.members {
		names[i] = m.name
	}
	h.memberIndex = make(map[string]int, len(h.members))
	for i, m := range h.members {
		h.memberIndex[m.name] = i
		if m.name != m.url {
			h.urls.Store(m.name, newTarget(m))
		}
	}
	if len(opts.Models) > 0 {
		h.allowedModels = slices.Clone(opts.Models)
	}
	h.catalog.Store(newCatalog(staticLists(opts.Backends), h.allowedModels, opts.Backends, h.members))

	if err := h.setSLO(opts); err != nil {
		return nil, err
	}

	h.exts = opts.Extensions
	var io prefixcache.Options
	var sess session.AffinityOptions
	var ko *KeyerOptions // the default keyer's, when there is one to build
	if h.keyer == nil {
		ko = new(KeyerOptions)
	}
	for i, e := range h.exts {
		if e == nil {
			return nil, fmt.Errorf("%w: Extensions[%d] is nil", ErrInvalidOptions, i)
		}
		if err := e.Prepare(&Defaults{Index: &io, Session: &sess, Keyer: ko}); err != nil {
			return nil, err
		}
	}
	if h.index == nil {
		if h.index, err = prefixcache.New(io); err != nil {
			return nil, err
		}
	}
	if h.router == nil {
		profile := opts.Profile
		if profile.Picker == nil && len(profile.Filters) == 0 && len(profile.Scorers) == 0 {
			var uo profiles.UsherOptions
			uo.Session.AffinityOptions = sess
			uo.AdapterWeight = builtin.GatewayAdapterWeight // inert without adapters
			profile = profiles.Usher(uo)
		}
		ph := opts.PassiveHealth
		if ph.StallAfter == 0 && h.timeouts.Stall < 0 {
			ph.StallAfter = -1 // stall detection off
		}
		profile, err := withPassiveHealth(profile, ph)
		if err != nil {
			return nil, err
		}
		if h.router, err = routing.New(routing.Options{Profile: profile, Index: h.index, BlockSize: opts.BlockSize}); err != nil {
			return nil, err
		}
	}
	if h.tok == nil {
		h.tok = BytesTokenizer{}
	}
	if h.keyer == nil {
		if h.keyer, err = NewKeyer(*ko); err != nil {
			return nil, err
		}
	}
	if h.transport == nil {
		h.transport = defaultTransport(h.timeouts)
	}
	if err := h.newChecker(opts); err != nil {
		return nil, err
	}
	h.retrier = &retryTransport{h: h, base: h.transport}
	bands := make([]int, h.bands)
	for i := range bands {
		bands[i] = i
	}
	if h.usher, err = gatewaymetrics.New(gatewaymetrics.Options{Bands: bands, Backends: names}); err != nil {
		return nil, err
	}
	// The planner's servers start in both; their series exist from the start, as every
	// usher_ series does, rather than from the first scrape.
	for name := range h.kvBoth {
		if h.planner != nil {
			h.usher.SetPlannedRole(name, routing.RoleBoth)
		}
	}
	if h.adapters, err = gatewaymetrics.NewAdapters(names, configuredAdapters(opts.Backends, h.members), nil); err != nil {
		return nil, err
	}
	if len(opts.Backends) > 0 {
		if h.pools, err = h.newPools(opts); err != nil {
			return nil, err
		}
	} else if len(opts.Pools) > 0 {
		return nil, fmt.Errorf("%w: Pools need Backends that list their models", ErrInvalidOptions)
	}
	if h.queue == nil {
		if h.queue, h.limit, err = h.newQueue(opts, h.saturationLevel); err != nil {
			return nil, err
		}
	}
	if len(opts.Backends) > 0 {
		targets := make([]metrics.Target, len(h.members))
		for i, m := range h.members {
			targets[i] = metrics.Target{Name: m.name, URL: m.url, Engine: m.engine, Role: m.role}
			if m.rank >= 0 {
				targets[i].Rank = strconv.Itoa(m.rank)
			}
		}
		h.scraper, err = metrics.New(metrics.Options{Targets: targets, Interval: opts.ScrapeInterval, OnUpdate: h.publishStates})
		if err != nil {
			return nil, err
		}
	}

	h.registry = prometheus.NewRegistry()
	// The Go runtime's and the process's series (go_*, process_*: goroutines, heap, RSS, open
	// files), as every Go service exports them.
	h.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h.registry.MustRegister(h.usher, h.adapters, gatewaymetrics.ClampedScores(h.router, nil))
	if h.scraper != nil {
		h.registry.MustRegister(h.scraper)
	}
	if h.quota != nil {
		h.registry.MustRegister(quotaseam.Collector(h.quota))
	}
	for _, e := range h.exts {
		if err := e.Attach(h); err != nil {
			return nil, err
		}
	}
	if err := h.checkKVFollowed(); err != nil {
		return nil, err
	}
	h.metricsH = promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{})
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.Rewrite,
		ModifyResponse: h.ModifyResponse,
		ErrorHandler:   h.ErrorHandler,
		Transport:      h.retrier,
		FlushInterval:  -1,
		BufferPool:     copyBufs{},
		ErrorLog:       slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	return h, nil
}

// copyBufs is the ReverseProxy's pool of copy buffers (32 KiB, its own default size), so that
// relaying an answer allocates none in steady state.
type copyBufs struct{}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBufs) Get() []byte { return *copyBufPool.Get().(*[]byte) }

func (copyBufs) Put(b []byte) {
	if cap(b) == 32<<10 {
		copyBufPool.Put(&b) // one small allocation (the slice header) instead of 32 KiB
	}
}

// withPassiveHealth returns p behind a outlier.Detector made from o, its failure score at
// weight 1 (routing.WithOutlier).
func withPassiveHealth(p routing.Profile, o outlier.Options) (routing.Profile, error) {
	out, err := outlier.New(o)
	if err != nil {
		return routing.Profile{}, err
	}
	return outlier.With(p, out, 1), nil
}

// newQueue is the queue Options.Queue nil stands for, with its limit on requests in flight,
// its saturation limit (if opts.Saturation is set) reading level.
func (h *Handler) newQueue(opts Options, level func() float64) (*flowcontrol.Queue, int, error) {
	policy := opts.Policy
	if policy == nil {
		var err error
		if policy, err = fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Second}); err != nil {
			return nil, 0, err
		}
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = 60 * time.Second
	}
	h.ttl = ttl
	limit := opts.MaxInFlight
	if limit == 0 {
		limit = 64 * max(1, len(opts.Backends))
	}
	var saturation []flowcontrol.Pool
	if opts.Saturation > 0 {
		threshold := opts.Saturation
		saturation = []flowcontrol.Pool{{Level: func() float64 { return level() / threshold }}}
	}
	q, err := flowcontrol.New(flowcontrol.Options{
		Bands:        h.bands,
		Policy:       policy,
		MaxInFlight:  limit,
		Saturation:   saturation,
		TTL:          ttl,
		Capacity:     opts.QueueCapacity,
		FlowCapacity: opts.FlowCapacity,
		EarlyShed:    opts.EarlyShed,
	})
	return q, limit, err
}

func defaultTransport(t Timeouts) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: t.Dial, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: t.TLS,
		DisableCompression:  true,
	}
}

// Queue, Router and Index return the Handler's parts (the ones given in Options, or the
// defaults it made), for inspection and tests. When backends serve different models, Queue
// admits the requests of models no pool holds, and each pool has a queue of its own.
func (h *Handler) Queue() *flowcontrol.Queue { return h.queue }

// Router returns the Handler's router.
func (h *Handler) Router() *routing.Router { return h.router }

// Index returns the Handler's prefix index.
func (h *Handler) Index() *prefixcache.Index { return h.index }

// Registry returns the registry GET /metrics serves (usher's own series, the scraper's and the
// extensions'); add your own collectors to it.
func (h *Handler) Registry() *prometheus.Registry { return h.registry }

// saturationLevel returns llm-d's saturation estimate of the fleet as last scraped: the mean
// over backends of max(queued/5, kv/0.8), a backend without fresh signals counting 1; 1
// before the first scrape.
func (h *Handler) saturationLevel() float64 {
	if !h.scraped.Load() {
		return 1
	}
	return math.Float64frombits(h.saturation.Load())
}

// ServeHTTP serves the OpenAI API — POST /v1/chat/completions, /v1/completions,
// /v1/responses and /v1/embeddings — and Anthropic's POST /v1/messages through the pipeline,
// GET /v1/models and /v1/models/{id}, Anthropic's POST /v1/messages/count_tokens, GET
// /health, GET /metrics; errors in each API's format (Anthropic's for /v1/messages and its
// count_tokens, OpenAI's otherwise).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = h.withRequestID(w, r)
	path := r.URL.Path
	var allow string
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/v1/embeddings":
		if r.Method == http.MethodPost {
			h.serveCompletion(w, r)
			return
		}
		allow = http.MethodPost
	case "/v1/models":
		if r.Method == http.MethodGet {
			h.serveModels(w, r)
			return
		}
		allow = http.MethodGet
	case "/health":
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			return
		}
		allow = http.MethodGet
	case "/metrics":
		if h.metricsElsewhere {
			h.notFound(w, r)
			return
		}
		if r.Method == http.MethodGet {
			h.metricsH.ServeHTTP(w, r)
			return
		}
		allow = http.MethodGet
	case countTokensPath:
		if r.Method == http.MethodPost {
			h.serveCountTokens(w, r)
			return
		}
		allow = http.MethodPost
	default:
		if id, ok := strings.CutPrefix(path, modelsPrefix); ok && id != "" {
			if r.Method == http.MethodGet {
				h.serveModel(w, r, id)
				return
			}
			allow = http.MethodGet
			break
		}
		h.notFound(w, r)
		return
	}
	w.Header().Set("Allow", allow)
	ep, _ := openai.APIOf(path) // each API's errors in its own shape
	if path == countTokensPath {
		ep = openai.Messages
	}
	openaiwire.WriteErrorFor(w, ep, &openai.Error{Status: http.StatusMethodNotAllowed, Type: openai.TypeInvalidRequest, Code: "method_not_allowed",
		Message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, path, allow)})
}

// notFound answers a path the Handler does not serve: 404 in OpenAI's format.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	openaiwire.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeNotFound, Code: "unknown_url",
		Message: fmt.Sprintf("no route for %s %s", clip(r.Method), clip(r.URL.Path))})
}

// serveCompletion relays a chat or completions request, bounding the body's read with the
// connection's read deadline (lifted once the body is read, so the answer's stream is not cut).
func (h *Handler) serveCompletion(w http.ResponseWriter, r *http.Request) {
	r = withContinue(w, r) // one 100 Continue, with the id (Rewrite reads the body here)
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(h.timeouts.Body)) == nil && r.Body != nil {
		// A copy: the server must keep seeing its own body, to decide about the connection.
		r = r.WithContext(r.Context())
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
	h.rp.ServeHTTP(w, r)
}

// deadlineBody lifts the connection's read deadline when the body has been read.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		if errors.Is(err, io.EOF) {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// Start scrapes every backend and asks for their models once, so the router knows the fleet
// before the first request. Failures are recorded per backend as health and staleness.
func (h *Handler) Start(ctx context.Context) {
	if h.scraper == nil {
		return
	}
	h.refreshModels(ctx)
	_ = h.scraper.ScrapeOnce(ctx)
	h.publishStates()
}

// Run scrapes the backends, follows their KV events, refreshes their model lists, runs the
// active health checks (Options.HealthChecks) and the quota Limiter's Run until ctx ends. It returns the first error of a background task that failed for another reason
// than ctx ending; nil otherwise. Call it once.
func (h *Handler) Run(ctx context.Context) error {
	errc := make(chan error, 4+len(h.exts))
	n := 0
	if h.quota != nil {
		n++
		go func() { errc <- h.quota.Run(ctx) }()
	}
	if h.scraper != nil {
		n += 2
		go func() { errc <- h.scraper.Run(ctx) }()
		go func() { errc <- h.refreshModelsEvery(ctx, 30*time.Second) }()
	}
	if h.checker != nil {
		n++
		go func() { errc <- h.checker.Run(ctx) }()
	}
	for _, e := range h.exts {
		n++
		go func() { errc <- e.Run(ctx) }()
	}
	if n == 0 {
		<-ctx.Done()
		return nil
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	return first
}

// Close rejects everything still waiting for admission (503), stops following KV events and
// closes idle backend connections. Requests in flight finish normally; wait for them (with
// http.Server.Shutdown) before closing if you want them to. Close is idempotent.
func (h *Handler) Close() {
	h.queue.Close()
	for _, p := range h.pools {
		p.queue.Close()
	}
	for _, e := range h.exts {
		_ = e.Close()
	}
	if c, ok := h.transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// publishStates hands the scraped states to the router (the one writer), refreshes the
// saturation estimate and usher's gauges, and wakes the queue if the fleet has room again.
func (h *Handler) publishStates() {
	h.statesMu.Lock()
	defer h.statesMu.Unlock()
	h.states = h.scraper.BackendStates(h.states[:0])
	h.setServed(h.states)
	if h.kvBoth != nil {
		for i := range h.states {
			h.states[i].KVBoth = h.kvBoth[h.states[i].Name]
		}
	}
	if err := h.router.Update(h.states); err != nil {
		h.log.Warn("router update", "err", err)
	}
	if h.planner != nil {
		h.planRoles(time.Now())
	}
	h.publishPools(h.states, time.Now())
	for i := range h.states {
		if st := &h.states[i]; st.Known.Has(routing.SignalAdapters) {
			h.adapters.Set(st.Name, st.RunningAdapters, st.WaitingAdapters)
		}
	}
	level := fleetSaturation(h.states, time.Now())
	old := math.Float64frombits(h.saturation.Swap(math.Float64bits(level)))
	first := !h.scraped.Swap(true)
	if first || level < old {
		h.queue.Notify()
	}
	h.publishGauges()
}

// fleetSaturation is llm-d's saturation estimate: mean over backends of max(queued/5,
// kv/0.8); a backend without signals fresher than saturationFresh counts as saturated (1).
func fleetSaturation(states []routing.BackendState, now time.Time) float64 {
	if len(states) == 0 {
		return 1
	}
	sum := 0.0
	for i := range states {
		s := &states[i]
		level := 1.0
		if s.Known&routing.SignalQueued != 0 && now.Sub(s.UpdatedAt) < saturationFresh {
			level = float64(s.Queued) / 5
			if s.Known&routing.SignalKVUtilization != 0 {
				level = max(level, s.KVUtilization/0.8)
			}
		}
		sum += level
	}
	return sum / float64(len(states))
}

// saturationFresh is the age below which scraped signals count in the saturation estimate:
// the scraper's own staleness limit (2 s), not llm-d's 200 ms, which a 100 ms scrape with
// jitter would often miss.
const saturationFresh = 2 * time.Second

// publishGauges refreshes usher's gauges from the queue, the router and the index.
// O(bands + backends).
func (h *Handler) publishGauges() {
	for b := range h.bands {
		bs := h.queue.BandStats(b)
		for _, p := range h.pools {
			ps := p.queue.BandStats(b)
			bs.Queued, bs.QueuedBytes = bs.Queued+ps.Queued, bs.QueuedBytes+ps.QueuedBytes
		}
		h.usher.SetQueue(b, bs.Queued, bs.QueuedBytes)
	}
	qs := h.queue.Stats()
	for _, p := range h.pools {
		ps := p.queue.Stats()
		qs.InFlight, qs.Flows = qs.InFlight+ps.InFlight, qs.Flows+ps.Flows
	}
	h.usher.SetInFlightTotal(qs.InFlight)
	h.usher.SetFlows(qs.Flows)
	out := outlier.Of(h.router)
	var byRole [3]int64
	for _, m := range h.members {
		if in, ok := h.router.InFlight(m.name); ok {
			h.usher.SetInFlight(m.name, in.Requests)
			if m.role <= routing.RoleDecode {
				byRole[m.role] += in.Requests
			}
		}
		if id, ok := h.router.Lookup(m.name); ok && out != nil {
			st := out.BackendStats(id)
			h.usher.SetPassiveHealth(m.name, gatewaymetrics.PassiveHealth{
				Ejections: st.Ejections, Probes: st.Probes, Restorations: st.Restored, Ejected: st.Ejected,
			})
		}
	}
	if h.decider != nil {
		for r, n := range byRole {
			h.usher.SetRoleInFlight(routing.Role(r), n)
		}
	}
	st := h.index.Stats()
	h.usher.SetIndexStats(gatewaymetrics.IndexStats{
		Blocks: st.Blocks, Bytes: st.Bytes, Evictions: uint64(st.Evictions),
		QueriedBlocks: uint64(st.Hits + st.Misses), MatchedBlocks: uint64(st.Hits),
	})
}
