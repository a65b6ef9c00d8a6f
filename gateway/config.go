// Package gateway is the configuration of a complete usher gateway by names and numbers —
// command-line flags and a JSON file — and its translation into [proxy.Options]: the policy,
// router and decider from a [proxy.Registry], the backends in one syntax ([ParseBackend]),
// the tenant keyer, and the extensions the configuration asks for. examples/gateway is a
// main over it; an embedder who builds proxy.Options in code needs none of it.
//
// The package links no ZMQ, Redis, gRPC or Kubernetes client. A configuration that names KV
// events or a Redis server is served by the extensions the program registers in
// [Config].Registry, by explicit calls in its main — kvfeed.Register (package proxy/kvfeed)
// and replicaext.Register (package gateway/replicaext) — so only a program that follows KV
// events links ZMQ, and only one that shares state between replicas links Redis:
//
//	reg := new(proxy.Registry)
//	kvfeed.Register(reg)     // "kv-events": kv_listen, a backend's kv_events or kv_pod
//	replicaext.Register(reg) // "replica": redis, replica_id, cluster
//	cfg.Registry = reg
//
// [Config.Options] refuses a configuration whose extension is not registered, with an error
// wrapping [ErrNoExtension].
package gateway

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/backendspec"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/internal/jsontime"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/session"
)

// ErrNoExtension is wrapped, with [proxy.ErrInvalidOptions], by [Config.Options]' error when
// the configuration names KV events (kv_listen, a backend's kv_events or kv_pod) or a Redis
// server (redis) and [Config].Registry has no extension named "kv-events" or "replica". The
// error names the setting.
var ErrNoExtension = errors.New("gateway: extension not registered")

// Config is a Handler's configuration by names and numbers, as a JSON file or command-line
// flags give it (see RegisterFlags and LoadFile); Options builds the Handler's proxy.Options
// from it. Durations are written as strings in JSON ("60s"). Embedders who build
// proxy.Options in code need none of this. A Config is a plain value, not safe for concurrent
// mutation; Options reads it once.
type Config struct {
	// Backends are the model servers.
	Backends []BackendSpec `json:"backends"`
	// Policy is the fairness policy by its name in the proxy.Registry (the built-ins, and the
	// program's own); BoundedWait is the W of bounded-wait and gittins-bounded-wait.
	Policy      string        `json:"policy"`
	BoundedWait time.Duration `json:"bounded_wait"`
	// Router is the routing profile: a registered profile's name ("usher", "llm-d", ...) or
	// a profile described as data, from the proxy.Registry's filters, scorers and pickers
	// (proxy.ProfileSpec): {"extends": "usher", "scorers": [{"name": "my-scorer", "weight": 1}]}.
	Router proxy.ProfileSpec `json:"router"`
	// Decider decides, when some backend has role prefill, which requests are prefilled on a
	// prefill server (proxy.Options.Decider): a registered decider's name ("prefix", the
	// default; "pool"; "always"; "never"; "planner", the default with kv_both backends; the
	// program's own) or {"name": ..., "params": {...}}.
	Decider proxy.PartSpec `json:"decider"`
	// Registry names the parts Policy, Router and Decider may use, and the extensions that
	// KVListen, a BackendSpec's KVEvents or KVPod, and Redis need ("kv-events" and "replica",
	// see the package doc). Nil: a zero [proxy.Registry], the built-ins, without extensions.
	Registry *proxy.Registry `json:"-"`
	// TTL is the longest wait for admission.
	TTL time.Duration `json:"ttl"`
	// MaxQueue and MaxQueueBytes bound what may wait in total, MaxFlowQueue what one flow
	// (tenant/session) may have waiting (0: no flow limit).
	MaxQueue      int   `json:"max_queue"`
	MaxQueueBytes int64 `json:"max_queue_bytes"`
	MaxFlowQueue  int   `json:"max_flow_queue"`
	// MaxInFlight bounds requests in flight to the fleet; 0: 64 per backend.
	MaxInFlight int `json:"max_inflight"`
	// Saturation, if > 0, also holds admission while llm-d's saturation estimate of the
	// fleet is at or above it.
	Saturation float64 `json:"saturation"`
	// EarlyShed answers 429 at once a request whose estimated wait exceeds its TTL, instead of
	// holding it until the TTL expires (flowcontrol.EarlyShed); off by default.
	EarlyShed bool `json:"early_shed"`
	// SLO are the latency targets of priority bands, keyed by band (proxy.Options.SLO); a
	// zero target sets none. In JSON durations are strings and unknown keys are an error:
	// {"1": {"ttft": "500ms", "tpot": "50ms"}}. TrustSLOHeaders lets a trusted proxy in front
	// loosen them per request with the x-slo-ttft-ms and x-slo-tpot-ms headers
	// (proxy.Options.TrustSLOHeaders).
	SLO             map[int]routing.Latency `json:"slo"`
	TrustSLOHeaders bool                    `json:"trust_slo_headers"`
	// SLOShedAbove refuses at once a request that the router predicts no backend can serve
	// within this many times its TTFT target (proxy.Options.SLOShedAbove). Zero: off.
	SLOShedAbove float64 `json:"slo_shed_above"`
	// Tokenizer is "bytes" (hash the prompt's bytes: approximate index), "endpoint" (the
	// servers' POST /tokenize: exact token ids, needed to match KV events) or "local:DIR"
	// (the model's tokenizer.json and tokenizer_config.json in DIR, run in process by package
	// proxy/tokenizer: exact token ids without the round trip).
	Tokenizer string `json:"tokenizer"`
	// Tokenizers are the tokenizers of base models whose requests are not tokenized by
	// Tokenizer, keyed by the model (a request for a LoRA adapter goes by its base model), in
	// Tokenizer's syntax; "endpoint" asks the backends that serve the model. A JSON config
	// sets them with a pool's "tokenizer" key, -pool with tokenizer=SPEC.
	Tokenizers map[string]string `json:"-"`
	// BlockSize is tokens per block (the engines' block size); ByteBlock bytes per block in
	// bytes mode.
	BlockSize int `json:"block_size"`
	ByteBlock int `json:"byte_block"`
	// TenantHeader, SessionHeader, TenantBands, DefaultBand and MaxTenants are the Keyer's
	// options; TenantSecretFile names a file whose content is its Secret.
	TenantHeader     string         `json:"tenant_header"`
	SessionHeader    string         `json:"session_header"`
	TenantBands      map[string]int `json:"tenant_bands"`
	DefaultBand      int            `json:"default_band"`
	MaxTenants       int            `json:"max_tenants"`
	TenantSecretFile string         `json:"tenant_secret_file"`
	// KVListen is an endpoint the gateway binds for KV events from servers that connect
	// (the "listen" param of the "kv-events" extension; package proxy/kvfeed).
	KVListen string `json:"kv_listen"`
	// Redis, if set, is the Redis (or Valkey) server through which this gateway shares its
	// state with the other replicas of its Cluster (the "replica" extension; package
	// gateway/replicaext): host:port, or a redis:// or rediss:// URL.
	Redis string `json:"redis"`
	// ReplicaID names this replica among its peers (replica.Options.ID; empty: host name,
	// process id and a random suffix); Cluster names the group of replicas that share state
	// (empty: "usher").
	ReplicaID string `json:"replica_id"`
	Cluster   string `json:"cluster"`
	// Models restricts the model names requests may ask for; empty: the backends' lists.
	Models []string `json:"models"`
	// Pools sets the admission limits of a base model's pool, keyed by the model, when the
	// backends serve different models (proxy.Options.Pools). In JSON a pool is
	// {"MaxInFlight": 8, "Saturation": 0.8, "tokenizer": "local:/models/qwen3"}; a pool
	// that names only a tokenizer sets no limits (it goes to Tokenizers alone).
	Pools map[string]proxy.PoolLimits `json:"pools"`
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// ScrapeInterval is how often backend metrics are scraped.
	ScrapeInterval time.Duration `json:"scrape_interval"`
	// HeaderTimeout, IdleTimeout and RequestTimeout are proxy.Timeouts.ResponseHeader,
	// StreamIdle and Request; RetryAttempts is proxy.Retry.Attempts (zero: their defaults).
	HeaderTimeout  time.Duration `json:"header_timeout"`
	IdleTimeout    time.Duration `json:"idle_timeout"`
	RequestTimeout time.Duration `json:"request_timeout"`
	RetryAttempts  int           `json:"retry_attempts"`
	// StallTimeout is proxy.Timeouts.Stall: how long a streamed request (or a health probe)
	// may wait for its first byte before its backend counts as stalled and the requests
	// waiting there move (zero: 2 s; negative: off).
	StallTimeout time.Duration `json:"stall_timeout"`
	// NoHealthChecks turns the active health checks off (proxy.Options.NoHealthChecks), and
	// HealthInterval is how long a backend in rotation may go without a success before it is
	// probed (healthcheck.Options.Interval; zero: 5 s). Ejected backends are probed every second.
	NoHealthChecks bool          `json:"no_health_checks"`
	HealthInterval time.Duration `json:"health_interval"`
	// MetricsListen, if set, is the address of a listener of the program's own for GET
	// /metrics (examples/gateway serves it with metrics.Exporter); Options then sets
	// proxy.Options.MetricsElsewhere, so that the API's port does not serve it. Empty: /metrics
	// on the API's port, without authentication. MetricsTokenFile is that listener's file of
	// bearer tokens (metrics.ExporterOptions.TokenFile; empty: none asked for); it needs
	// MetricsListen.
	MetricsListen    string `json:"metrics_listen"`
	MetricsTokenFile string `json:"metrics_token_file"`
	// Quota are the tenants' quotas (proxy.Options.Quota, package proxy/quota): Limits, token
	// costs, and the Shared store a replication layer may set. No limits: no quotas. In
	// JSON, with unknown keys an error and windows as duration strings:
	//
	//	"quota": {"input_cost": 1, "cached_cost": 0.1, "output_cost": 4, "limits": [
	//	  {"window": "1m", "requests": 600, "tokens": 2000000},
	//	  {"window": "24h", "requests": 50000},
	//	  {"tenant": "team-a", "model": "llama-3-8b", "bands": [0, 1], "window": "1m",
	//	   "tokens": 5000000, "input_tokens": 4000000, "output_tokens": 1000000}]}
	//
	// A limit without "tenant" is the default, which every tenant no limit names gets.
	Quota quota.Options `json:"-"`
}

// quotaJSON is Config.Quota as LoadFile reads it: keys in snake case, windows as strings.
type quotaJSON struct {
	Limits     []quotaLimitJSON  `json:"limits"`
	InputCost  float64           `json:"input_cost"`
	CachedCost float64           `json:"cached_cost"`
	OutputCost float64           `json:"output_cost"`
	Interval   jsontime.Duration `json:"sync_interval"`
}

// quotaLimitJSON is a quota.Limit as LoadFile reads it.
type quotaLimitJSON struct {
	Tenant       string            `json:"tenant"`
	Model        string            `json:"model"`
	Bands        []int             `json:"bands"`
	Window       jsontime.Duration `json:"window"`
	Requests     int64             `json:"requests"`
	Tokens       int64             `json:"tokens"`
	InputTokens  int64             `json:"input_tokens"`
	OutputTokens int64             `json:"output_tokens"`
}

// BackendSpec is a proxy.Backend by names. In the JSON config it is an object with these keys,
// or a string in the syntax of -backend (ParseBackend).
type BackendSpec struct {
	URL string `json:"url"`
	// Name is the backend's name in the router, the logs and the backend label of /metrics
	// (proxy.Backend.Name: letters, digits, '.', '_', '-'; unique); empty: its URL.
	Name string `json:"name"`
	// Engine is vllm (the default), sglang, trtllm, triton or tgi: the metric names to
	// scrape (metrics.EngineOf).
	Engine   string `json:"engine"`
	KVEvents string `json:"kv_events"`
	Replay   string `json:"replay"`
	Ranks    int    `json:"ranks"`  // data-parallel ranks behind the URL (proxy.Backend.Ranks)
	KVPod    string `json:"kv_pod"` // the pod of its KV events when it connects to kv_listen
	// Role is prefill, decode, both (the default) or kv_both: the part of inference the
	// server serves (proxy.Backend.Role); kv_both is both for a server whose KV connector
	// sends and receives (vLLM's kv_role kv_both), whose role the gateway's role planner sets
	// (proxy.Backend.KVBoth; the decider defaults to the planner).
	Role string `json:"role"`
	// Models are the base models the server serves (proxy.Backend.Models); empty: what it
	// lists on GET /v1/models.
	Models []string `json:"models"`
	// Adapters are the LoRA adapters it serves on Models[0] (proxy.Backend.Adapters).
	Adapters []string `json:"adapters"`
}

// backendKeys are ParseBackend's options; true marks a list.
var backendKeys = backendspec.Keys{"name": false, "engine": false, "kv-events": false, "kv-pod": false, "replay": false, "ranks": false, "role": false, "models": true, "adapters": true}

// UnmarshalJSON reads a backend as an object (unknown keys are an error) or as a string in
// ParseBackend's syntax.
func (b *BackendSpec) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		nb, err := ParseBackend(s)
		if err != nil {
			return err
		}
		*b = nb
		return nil
	}
	type plain BackendSpec
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	*b = BackendSpec(p)
	return nil
}

// sloTargets is a band's entry of Config.SLO as LoadFile reads it: {"ttft": "500ms",
// "tpot": "50ms"}, durations as strings, unknown keys an error.
type sloTargets routing.Latency

// UnmarshalJSON reads the targets strictly, durations as strings.
func (t *sloTargets) UnmarshalJSON(data []byte) error {
	var raw struct {
		TTFT jsontime.Duration `json:"ttft"`
		TPOT jsontime.Duration `json:"tpot"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("slo: %w", err)
	}
	*t = sloTargets{TTFT: time.Duration(raw.TTFT), TPOT: time.Duration(raw.TPOT)}
	return nil
}

// parseSLO parses -slo: the band, then ttft=DURATION and tpot=DURATION.
func parseSLO(s string) (int, routing.Latency, error) {
	return slo.ParseFlag(s, bands, proxy.ErrInvalidOptions)
}

// bands is the number of priority bands a Config configures.
const bands = 4

// DefaultConfig returns the defaults: bounded wait (W 10 s) under a 60 s TTL, usher's router,
// byte hashing, 8 MiB bodies, a 100 ms scrape.
func DefaultConfig() Config {
	return Config{
		Policy:         "bounded-wait",
		BoundedWait:    10 * time.Second,
		Router:         proxy.ProfileSpec{Extends: "usher"},
		TTL:            60 * time.Second,
		MaxQueue:       10000,
		MaxQueueBytes:  1 << 30,
		MaxFlowQueue:   64,
		Tokenizer:      "bytes",
		BlockSize:      16,
		ByteBlock:      64,
		SessionHeader:  "X-Session-Id",
		MaxBodyBytes:   8 << 20,
		ScrapeInterval: 100 * time.Millisecond,
	}
}

// RegisterFlags defines a flag for each field of c on fs, with c's values as defaults.
// -backend may be repeated, in ParseBackend's syntax.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("backend", "model server: URL[,name=NAME][,engine=vllm|sglang|trtllm|triton|tgi][,role=prefill|decode|both][,models=A,B...][,adapters=L1,L2...][,kv-events=tcp://host:5557][,kv-pod=POD][,replay=tcp://host:5558][,ranks=N] (repeat; name: its name in the logs and the backend label of /metrics instead of the URL; kv-events: the server binds it, the gateway connects; kv-pod: the server connects to -kv-listen with this pod in its topic; ranks: data-parallel ranks behind the URL)", func(s string) error {
		b, err := ParseBackend(s)
		c.Backends = append(c.Backends, b)
		return err
	})
	fs.Func("pool", "one base model's pool, when backends serve different models: MODEL[,max-inflight=N][,saturation=X][,tokenizer=bytes|endpoint|local:DIR] (repeat; admission limits, and the model's own tokenizer instead of -tokenizer's; with only a tokenizer, no limits)", func(s string) error {
		model, lim, tok, err := parsePool(s)
		if err != nil {
			return err
		}
		_, dupPool := c.Pools[model]
		_, dupTok := c.Tokenizers[model]
		if dupPool || dupTok {
			return fmt.Errorf("-pool %q: the pool is given twice", model)
		}
		if tok != "" {
			if c.Tokenizers == nil {
				c.Tokenizers = map[string]string{}
			}
			c.Tokenizers[model] = tok
			if lim == (proxy.PoolLimits{}) {
				return nil
			}
		}
		if c.Pools == nil {
			c.Pools = map[string]proxy.PoolLimits{}
		}
		c.Pools[model] = lim
		return nil
	})
	fs.Func("slo", "latency targets of a priority band: BAND,ttft=DURATION,tpot=DURATION (repeat; either target may be left out): requests of the band go to a backend predicted to meet them (with the predicted-latency scorer, e.g. -router usher-latency) and, with a TTFT target, are dispatched in time to meet it or refused (see -early-shed)", func(s string) error {
		band, t, err := parseSLO(s)
		if err != nil {
			return err
		}
		if c.SLO == nil {
			c.SLO = map[int]routing.Latency{}
		}
		if _, dup := c.SLO[band]; dup {
			return fmt.Errorf("-slo: band %d is given twice", band)
		}
		c.SLO[band] = t
		return nil
	})
	fs.Float64Var(&c.SLOShedAbove, "slo-shed-above", c.SLOShedAbove, "refuse at once (429) a request with a TTFT target that the router's latency model predicts no backend can serve within this many times the target (0: off; 2 is measured)")
	fs.BoolVar(&c.TrustSLOHeaders, "trust-slo-headers", c.TrustSLOHeaders, "read x-slo-ttft-ms and x-slo-tpot-ms from requests (set by a trusted proxy, which removes the clients' own): they may loosen a band's -slo targets, never tighten them")
	fs.StringVar(&c.Policy, "policy", c.Policy, "fairness policy: "+strings.Join(builtin.PolicyNames(), ", "))
	fs.StringVar(&c.Decider.Name, "decider", c.Decider.Name, "with prefill backends (role=prefill): which requests are prefilled there — prefix (default: when the decode server lacks ≥ 512 tokens of the prompt), pool (the same while some prefill server is no busier than the decode server), always, never, planner (the default with role=kv_both backends: disagg.Planner sets their roles), or a registered decider")
	fs.Func("decider-params", `the decider's parameters as JSON, e.g. {"min_uncached_tokens":256,"busy_decodes":4}`, func(s string) error {
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("-decider-params: not JSON: %q", s)
		}
		c.Decider.Params = json.RawMessage(s)
		return nil
	})
	fs.DurationVar(&c.BoundedWait, "bounded-wait", c.BoundedWait, "W for -policy bounded-wait and gittins-bounded-wait: no request waits longer (below -ttl)")
	fs.Func("router", "routing profile: "+strings.Join(builtin.ProfileNames(), ", ")+", or one described in -config (default "+c.Router.Extends+")", func(s string) error {
		c.Router = proxy.ProfileSpec{Extends: s}
		return nil
	})
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "longest wait for admission")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "requests that may wait in total")
	fs.Int64Var(&c.MaxQueueBytes, "max-queue-bytes", c.MaxQueueBytes, "bytes that may wait in total")
	fs.IntVar(&c.MaxFlowQueue, "max-flow-queue", c.MaxFlowQueue, "requests one flow (tenant/session) may have waiting; 0: no limit")
	fs.IntVar(&c.MaxInFlight, "max-inflight", c.MaxInFlight, "requests in flight to the fleet at once; 0: 64 per backend")
	fs.Float64Var(&c.Saturation, "saturation", c.Saturation, "also hold admission while the fleet's saturation (llm-d's estimate) reaches this; 0: off")
	fs.BoolVar(&c.EarlyShed, "early-shed", c.EarlyShed, "answer 429 at once when a request's estimated wait exceeds -ttl, instead of after waiting it")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "prompt tokenization: bytes (approximate index), endpoint (the servers' POST /tokenize: exact, needed for KV events) or local:DIR (the model's tokenizer.json and tokenizer_config.json in DIR, in process: exact)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per block: the engines' block size")
	fs.IntVar(&c.ByteBlock, "byte-block", c.ByteBlock, "bytes per block in -tokenizer bytes")
	fs.StringVar(&c.Redis, "redis", c.Redis, "Redis (or Valkey) to share prefix, load, session and fairness state with the other gateway replicas: host:port or redis://...; empty: this gateway alone")
	fs.StringVar(&c.ReplicaID, "replica-id", c.ReplicaID, "this replica's name among its peers (with -redis); empty: host-pid-random")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "the replicas sharing state through -redis (key namespace); empty: usher")
	fs.StringVar(&c.KVListen, "kv-listen", c.KVListen, "endpoint to bind for KV events from servers that connect to the gateway (vLLM with endpoint tcp://GATEWAY:PORT), e.g. tcp://0.0.0.0:5557; their -backend names kv-pod")
	fs.StringVar(&c.TenantHeader, "tenant-header", c.TenantHeader, "trusted header naming the tenant (set by an auth proxy); empty: a keyed digest of the API key")
	fs.StringVar(&c.SessionHeader, "session-header", c.SessionHeader, "header naming the session (the OpenAI user field is the fallback)")
	fs.IntVar(&c.DefaultBand, "default-band", c.DefaultBand, "priority band of tenants not in tenant_bands (config file)")
	fs.IntVar(&c.MaxTenants, "max-tenants", c.MaxTenants, "unlisted tenants with a flow of their own at once; beyond: anonymous (0: 10000, -1: no bound)")
	fs.StringVar(&c.TenantSecretFile, "tenant-secret-file", c.TenantSecretFile, "file holding the secret that keys API-key digests (same on every replica); empty: random per process")
	fs.Int64Var(&c.MaxBodyBytes, "max-body", c.MaxBodyBytes, "largest request body accepted (413 above)")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "backend metrics scrape interval")
	fs.DurationVar(&c.HeaderTimeout, "header-timeout", c.HeaderTimeout, "longest wait for a backend's response headers (non-streamed requests get 100ms more per output token); 0: 30s")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "longest silence of a backend's answer before it is cut; 0: 60s")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "cap on a request from sending to the end of its answer; 0: 10m")
	fs.IntVar(&c.RetryAttempts, "retry-attempts", c.RetryAttempts, "tries per request before any byte reached the client (1: no retry); 0: 3")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", c.StallTimeout, "a streamed request (or health probe) without a first byte this long marks its backend stalled: no new picks, and its waiting requests move elsewhere (independent of -header-timeout); 0: 2s, negative: off")
	fs.BoolVar(&c.NoHealthChecks, "no-health-checks", c.NoHealthChecks, "no active health checks: the gateway's own probes (GET /health, a streamed one-token completion) of ejected and idle backends; without them a client's request is an ejected backend's probe")
	fs.DurationVar(&c.HealthInterval, "health-interval", c.HealthInterval, "probe a backend in rotation that had no success this long (ejected ones: every second); 0: 5s")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "address to serve GET /metrics on, instead of the API's port (e.g. :9090); empty: the API's port, without authentication")
	fs.StringVar(&c.MetricsTokenFile, "metrics-token-file", c.MetricsTokenFile, "with -metrics-listen: file of bearer tokens that may read /metrics, one a line (# comments); re-read when it changes")
}

// ParseBackend parses usher's backend syntax, as -backend, the JSON config's backend strings
// and the endpoint picker's endpoint lists write it: the URL, then options separated by
// commas (or white space), a list's values continuing it:
//
//	http://10.0.0.7:8000,name=decode-0,engine=vllm,role=decode,models=llama-3-8b,qwen-2.5-7b,kv-events=tcp://10.0.0.7:5557
//
// Options: name (the backend's name in the router, the logs and the backend label of
// /metrics instead of its URL: letters, digits, '.', '_', '-'), engine (vllm, sglang, trtllm,
// triton, tgi), kv-events (the server's publisher,
// which it binds), kv-pod (its pod when it connects to -kv-listen instead), replay, ranks
// (data-parallel ranks behind the URL, 0..1024), role (prefill, decode, both, kv_both), models (a
// list of base models), adapters (a list of LoRA adapters on the first model). An unknown or
// repeated option is an error naming it.
func ParseBackend(s string) (BackendSpec, error) {
	sp, err := backendspec.Parse(s, backendKeys)
	if err != nil {
		return BackendSpec{}, fmt.Errorf("%w: %w", proxy.ErrInvalidOptions, err)
	}
	b := BackendSpec{URL: sp.Target, Name: sp.Get("name"), Engine: "vllm", KVEvents: sp.Get("kv-events"), Replay: sp.Get("replay"),
		KVPod: sp.Get("kv-pod"), Role: sp.Get("role"), Models: sp.List("models"), Adapters: sp.List("adapters")}
	if e := sp.Get("engine"); e != "" {
		b.Engine = e
	}
	if v := sp.Get("ranks"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1024 {
			return b, fmt.Errorf("%w: backend %q: ranks=%q: want 0..1024", proxy.ErrInvalidOptions, s, v)
		}
		b.Ranks = n
	}
	if _, err := backendspec.Role(b.Role); err != nil {
		return b, fmt.Errorf("%w: backend %q: %w", proxy.ErrInvalidOptions, s, err)
	}
	return b, nil
}

// poolKeys are parsePool's options.
var poolKeys = backendspec.Keys{"max-inflight": false, "saturation": false, "tokenizer": false}

// parsePool parses -pool: the base model, then max-inflight=N (requests in flight in the
// pool), saturation=X (llm-d's saturation level that holds the pool's admission) and
// tokenizer=SPEC (the model's tokenizer, checked by Options).
func parsePool(s string) (string, proxy.PoolLimits, string, error) {
	var lim proxy.PoolLimits
	sp, err := backendspec.Parse(s, poolKeys)
	if err != nil {
		return "", lim, "", fmt.Errorf("%w: -pool: %w", proxy.ErrInvalidOptions, err)
	}
	if sp.Target == "" || len(sp.Target) > 256 {
		return "", lim, "", fmt.Errorf("%w: -pool %q: want MODEL[,max-inflight=N][,saturation=X][,tokenizer=SPEC]", proxy.ErrInvalidOptions, s)
	}
	if v := sp.Get("max-inflight"); v != "" {
		if lim.MaxInFlight, err = strconv.Atoi(v); err != nil || lim.MaxInFlight < 1 {
			return "", lim, "", fmt.Errorf("%w: -pool %q: max-inflight=%q: want a positive integer", proxy.ErrInvalidOptions, s, v)
		}
	}
	if v := sp.Get("saturation"); v != "" {
		if lim.Saturation, err = strconv.ParseFloat(v, 64); err != nil || !(lim.Saturation > 0) || math.IsInf(lim.Saturation, 0) {
			return "", lim, "", fmt.Errorf("%w: -pool %q: saturation=%q: want a positive number", proxy.ErrInvalidOptions, s, v)
		}
	}
	return sp.Target, lim, sp.Get("tokenizer"), nil
}

// poolJSON is a pool of the JSON config: proxy.PoolLimits' fields (by their Go names, as
// before pools had tokenizers) and the model's tokenizer.
type poolJSON struct {
	MaxInFlight int
	Saturation  float64
	Tokenizer   string `json:"tokenizer"`
}

// LoadFile reads a JSON config file over c: keys are the JSON names of Config's fields
// (unknown keys are an error), durations strings such as "60s".
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	type plain Config
	var raw struct {
		plain
		BoundedWait    jsontime.Duration   `json:"bounded_wait"`
		TTL            jsontime.Duration   `json:"ttl"`
		ScrapeInterval jsontime.Duration   `json:"scrape_interval"`
		HeaderTimeout  jsontime.Duration   `json:"header_timeout"`
		IdleTimeout    jsontime.Duration   `json:"idle_timeout"`
		RequestTimeout jsontime.Duration   `json:"request_timeout"`
		StallTimeout   jsontime.Duration   `json:"stall_timeout"`
		HealthInterval jsontime.Duration   `json:"health_interval"`
		SLO            map[int]sloTargets  `json:"slo"`
		Pools          map[string]poolJSON `json:"pools"`
		Quota          *quotaJSON          `json:"quota"`
	}
	raw.plain = plain(*c)
	if c.SLO != nil {
		raw.SLO = make(map[int]sloTargets, len(c.SLO))
		for b, t := range c.SLO {
			raw.SLO[b] = sloTargets(t)
		}
	}
	durations := []struct {
		raw *jsontime.Duration
		dst *time.Duration
	}{
		{&raw.BoundedWait, &c.BoundedWait}, {&raw.TTL, &c.TTL}, {&raw.ScrapeInterval, &c.ScrapeInterval},
		{&raw.HeaderTimeout, &c.HeaderTimeout}, {&raw.IdleTimeout, &c.IdleTimeout}, {&raw.RequestTimeout, &c.RequestTimeout},
		{&raw.StallTimeout, &c.StallTimeout}, {&raw.HealthInterval, &c.HealthInterval},
	}
	for _, d := range durations {
		*d.raw = jsontime.Duration(*d.dst)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	quotaOpts := c.Quota
	*c = Config(raw.plain)
	c.Quota = quotaOpts
	if q := raw.Quota; q != nil {
		c.Quota = quota.Options{InputCost: q.InputCost, CachedCost: q.CachedCost, OutputCost: q.OutputCost,
			Interval: time.Duration(q.Interval), Shared: c.Quota.Shared, Now: c.Quota.Now}
		for _, l := range q.Limits {
			c.Quota.Limits = append(c.Quota.Limits, quota.Limit{Tenant: l.Tenant, Model: l.Model, Bands: l.Bands, Window: time.Duration(l.Window),
				Requests: l.Requests, Tokens: l.Tokens, InputTokens: l.InputTokens, OutputTokens: l.OutputTokens})
		}
	}
	for _, d := range durations {
		*d.dst = time.Duration(*d.raw)
	}
	c.SLO = nil
	if raw.SLO != nil {
		c.SLO = make(map[int]routing.Latency, len(raw.SLO))
		for b, t := range raw.SLO {
			c.SLO[b] = routing.Latency(t)
		}
	}
	for m, p := range raw.Pools {
		lim := proxy.PoolLimits{MaxInFlight: p.MaxInFlight, Saturation: p.Saturation}
		if p.Tokenizer != "" {
			if c.Tokenizers == nil {
				c.Tokenizers = map[string]string{}
			}
			c.Tokenizers[m] = p.Tokenizer
			if lim == (proxy.PoolLimits{}) {
				continue
			}
		}
		if c.Pools == nil {
			c.Pools = map[string]proxy.PoolLimits{}
		}
		c.Pools[m] = lim
	}
	for i := range c.Backends {
		if c.Backends[i].Engine == "" {
			c.Backends[i].Engine = "vllm"
		}
	}
	return nil
}

// Options validates c and builds the Handler options it describes: the index, the router
// and the queue made here, the tokenizer and keyer it names, and the extensions its KV-event
// and Redis settings need, from c.Registry (an error wrapping [ErrNoExtension] names the
// setting whose extension is missing), and the quota Limiter of c.Quota. Each extension's
// Prepare adjusts the index, session table, keyer and quota options built here, as [proxy.New] lets it adjust its defaults; with the "replica"
// extension and no TenantSecretFile that is one Redis round trip, bounded by 2 s. A caller
// may still replace any part (Tokenizer, say) before calling proxy.New.
func (c Config) Options() (proxy.Options, error) {
	bad := func(format string, args ...any) (proxy.Options, error) {
		return proxy.Options{}, fmt.Errorf("%w: %s", proxy.ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case c.TTL <= 0:
		return bad("ttl %v: want > 0", c.TTL)
	case (c.Policy == "bounded-wait" || c.Policy == "gittins-bounded-wait") && (c.BoundedWait <= 0 || c.BoundedWait >= c.TTL):
		return bad("bounded-wait %v: want 0 < W < ttl (%v)", c.BoundedWait, c.TTL)
	case c.MaxQueue < 1 || c.MaxQueueBytes < 1:
		return bad("max-queue and max-queue-bytes must be positive")
	case c.MaxFlowQueue < 0 || c.MaxInFlight < 0 || c.Saturation < 0:
		return bad("max-flow-queue, max-inflight and saturation must not be negative")
	case c.BlockSize < 1 || c.ByteBlock < 1:
		return bad("block sizes must be positive")
	case c.MaxBodyBytes < 1024:
		return bad("max-body %d: want at least 1024", c.MaxBodyBytes)
	case c.ScrapeInterval <= 0:
		return bad("scrape-interval must be positive")
	case c.HeaderTimeout < 0 || c.IdleTimeout < 0 || c.RequestTimeout < 0 || c.RetryAttempts < 0 || c.HealthInterval < 0:
		return bad("timeouts, health-interval and retry-attempts must not be negative")
	case c.StallTimeout > healthcheck.DefaultTimeout:
		return bad("stall-timeout %v: at most %v (a health probe's whole time)", c.StallTimeout, healthcheck.DefaultTimeout)
	case c.DefaultBand < 0 || c.DefaultBand >= bands:
		return bad("default-band %d: want 0..%d", c.DefaultBand, bands-1)
	case c.MetricsTokenFile != "" && c.MetricsListen == "":
		return bad("metrics-token-file needs metrics-listen: the API's port serves /metrics without authentication")
	}
	for t, b := range c.TenantBands {
		if b < 0 || b >= bands {
			return bad("tenant %q band %d: want 0..%d", t, b, bands-1)
		}
	}
	for i, l := range c.Quota.Limits {
		for _, b := range l.Bands {
			if b < 0 || b >= bands {
				return bad("quota.limits[%d].bands: band %d: want 0..%d", i, b, bands-1)
			}
		}
	}
	var slo map[int]routing.Latency
	for b, t := range c.SLO {
		if b < 0 || b >= bands || t.TTFT < 0 || t.TPOT < 0 {
			return bad("slo of band %d (%v, %v): want a band 0..%d and targets ≥ 0", b, t.TTFT, t.TPOT, bands-1)
		}
		if slo == nil {
			slo = make(map[int]routing.Latency, len(c.SLO))
		}
		slo[b] = t
	}
	o := proxy.Options{
		Models: c.Models, Pools: c.Pools, MaxBodyBytes: c.MaxBodyBytes, Bands: bands, BlockSize: c.BlockSize,
		ScrapeInterval: c.ScrapeInterval, MaxInFlight: c.MaxInFlight, Saturation: c.Saturation, EarlyShed: flowcontrol.EarlyShed{Enabled: c.EarlyShed}, TTL: c.TTL,
		QueueCapacity:   flowcontrol.Limits{Requests: c.MaxQueue, Bytes: c.MaxQueueBytes},
		FlowCapacity:    flowcontrol.Limits{Requests: c.MaxFlowQueue},
		Timeouts:        proxy.Timeouts{ResponseHeader: c.HeaderTimeout, StreamIdle: c.IdleTimeout, Request: c.RequestTimeout, Stall: c.StallTimeout},
		NoHealthChecks:  c.NoHealthChecks,
		HealthChecks:    healthcheck.Options{Interval: c.HealthInterval},
		Retry:           proxy.Retry{Attempts: c.RetryAttempts},
		SLO:             slo,
		TrustSLOHeaders: c.TrustSLOHeaders,
		SLOShedAbove:    c.SLOShedAbove,

		MetricsElsewhere: c.MetricsListen != "",
	}
	if len(c.Quota.Limits) == 0 && c.Quota.Shared != nil {
		return bad("quota: a Shared store without limits")
	} else if len(c.Quota.Limits) > 0 {
		if _, err := quota.New(c.Quota); err != nil { // validated before any extension's Prepare
			return proxy.Options{}, fmt.Errorf("%w: %w", proxy.ErrInvalidOptions, err)
		}
	}
	urls := make([]string, len(c.Backends))
	names := make(map[string]bool, len(c.Backends))
	kv := "" // the first setting that names KV events
	if c.KVListen != "" {
		kv = "kv_listen"
	}
	for i, b := range c.Backends {
		p, ok := metrics.EngineOf(b.Engine)
		if !ok {
			return bad("backend %q: unknown engine %q", b.URL, b.Engine)
		}
		role, err := backendspec.Role(b.Role)
		if err != nil {
			return bad("backend %q: %v", b.URL, err)
		}
		be := proxy.Backend{URL: b.URL, Name: b.Name, Engine: p, Role: role, KVBoth: backendspec.KVBoth(b.Role), Models: b.Models, Adapters: b.Adapters, KVEvents: b.KVEvents, Replay: b.Replay, Ranks: b.Ranks, KVPod: b.KVPod,
			SharedKVPublisher: b.Engine == "sglang"} // SGLang publishes every rank's events on one endpoint
		if err := be.Validate(); err != nil {
			return proxy.Options{}, err
		}
		if b.Name != "" && names[b.Name] {
			return bad("backend name %q is given twice", b.Name)
		}
		names[b.Name] = true
		if kv == "" && (b.KVEvents != "" || b.KVPod != "") {
			kv = fmt.Sprintf("backend %q kv_events or kv_pod", b.URL)
		}
		o.Backends = append(o.Backends, be)
		urls[i] = b.URL
	}
	var err error
	if o.Tokenizer, err = c.tokenizers(urls); err != nil {
		return proxy.Options{}, err
	}
	var secret []byte
	if c.TenantSecretFile != "" {
		s, err := os.ReadFile(c.TenantSecretFile)
		if err != nil {
			return bad("tenant-secret-file: %v", err)
		}
		if secret = []byte(strings.TrimSpace(string(s))); len(secret) < 16 {
			return bad("tenant-secret-file: want a secret of at least 16 bytes")
		}
	}
	reg := c.Registry
	if reg == nil {
		reg = new(proxy.Registry)
	}
	// The extensions the settings name, from the program's Registry.
	extension := func(setting, name, register string, params map[string]string) error {
		if !slices.Contains(reg.Names("extension"), name) {
			return fmt.Errorf("%w: %s is set, but %w: the program must register %q in Config.Registry (%s)",
				proxy.ErrInvalidOptions, setting, ErrNoExtension, name, register)
		}
		spec := proxy.PartSpec{Name: name}
		spec.Params, _ = json.Marshal(params)
		e, err := proxy.Build[proxy.Extension](reg, spec)
		if err != nil {
			return err
		}
		o.Extensions = append(o.Extensions, e)
		return nil
	}
	if kv != "" {
		if err := extension(kv, "kv-events", "kvfeed.Register", map[string]string{"listen": c.KVListen}); err != nil {
			return proxy.Options{}, err
		}
	}
	if c.Redis != "" {
		if err := extension("redis", "replica", "replicaext.Register", map[string]string{"redis": c.Redis, "replica_id": c.ReplicaID, "cluster": c.Cluster}); err != nil {
			return proxy.Options{}, err
		}
	}
	// The index, the session table and the keyer are built here, so the extensions adjust
	// their options as they would the Handler's defaults (a replica sets its feeds and the
	// cluster's tenant secret).
	var io prefixcache.Options
	var sess session.AffinityOptions
	ko := proxy.KeyerOptions{
		Secret: secret, TenantHeader: c.TenantHeader, SessionHeader: c.SessionHeader,
		TenantBands: c.TenantBands, DefaultBand: c.DefaultBand, MaxTenants: c.MaxTenants,
	}
	var qo *quota.Options // the extensions may set its Shared store
	if len(c.Quota.Limits) > 0 {
		q := c.Quota
		qo = &q
	}
	for _, e := range o.Extensions {
		if err := e.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Keyer: &ko, Quota: qo}); err != nil {
			return proxy.Options{}, err
		}
	}
	if qo != nil {
		if o.Quota, err = quota.New(*qo); err != nil {
			return proxy.Options{}, fmt.Errorf("%w: %w", proxy.ErrInvalidOptions, err)
		}
	}
	keyer, err := proxy.NewKeyer(ko)
	if err != nil {
		return proxy.Options{}, err
	}
	o.Keyer = keyer
	policy := proxy.PartSpec{Name: c.Policy}
	if c.Policy == "bounded-wait" || c.Policy == "gittins-bounded-wait" {
		policy.Params, _ = json.Marshal(map[string]string{"bounded_wait": c.BoundedWait.String()})
	}
	if o.Policy, err = proxy.Build[flowcontrol.Policy](reg, policy); err != nil {
		return proxy.Options{}, err
	}
	switch {
	case c.Decider.Name != "":
		if o.Decider, err = proxy.Build[disagg.Decider](reg, c.Decider); err != nil {
			return proxy.Options{}, err
		}
	case len(c.Decider.Params) > 0:
		return proxy.Options{}, fmt.Errorf("%w: decider parameters without a decider name", proxy.ErrInvalidOptions)
	}
	profile, err := reg.Profile(c.Router, sess)
	if err != nil {
		return proxy.Options{}, err
	}
	// Passive health as the Handler's default router has it (stall detection off with
	// -stall-timeout negative); the Handler's health checks report to it.
	var ph outlier.Options
	if c.StallTimeout < 0 {
		ph.StallAfter = -1
	}
	out, err := outlier.New(ph)
	if err != nil {
		return proxy.Options{}, err
	}
	profile = outlier.With(profile, out, 1)
	if o.Index, err = prefixcache.New(io); err != nil {
		return proxy.Options{}, err
	}
	if o.Router, err = routing.New(routing.Options{Profile: profile, Index: o.Index, BlockSize: c.BlockSize}); err != nil {
		return proxy.Options{}, err
	}
	return o, nil
}
