package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/routing"
)

// Config is everything the gateway can be told, by flags or by a JSON file (-config) whose
// keys are the JSON names below. Flags given on the command line override the file.
type Config struct {
	// Listen is the address the gateway serves the OpenAI API on.
	Listen string `json:"listen"`
	// Backends are the model servers. Empty: start a simulated vLLM fleet in process.
	Backends []Backend `json:"backends"`
	// SimServers is the size of the simulated fleet started when Backends is empty.
	SimServers int `json:"sim_servers"`
	// SimProfile is the engine profile of the simulated fleet (see internal/engine).
	SimProfile string `json:"sim_profile"`
	// SimKVEvents makes the simulated servers publish KV events over ZMQ, which the gateway
	// follows to keep its prefix index exact.
	SimKVEvents bool `json:"sim_kv_events"`

	// Policy is the fairness policy: fcfs, priority, round-robin, turn-priority, las,
	// las-llmd, vtc, edf, slo, bounded-wait, hierarchy.
	Policy string `json:"policy"`
	// BoundedWait is W for the bounded-wait policy.
	BoundedWait time.Duration `json:"bounded_wait"`
	// Router is the routing profile: usher, llmd, llmd-sticky, sglang, dynamo, aibrix,
	// round-robin, least-request.
	Router string `json:"router"`

	// TTL is how long a request may wait for admission.
	TTL time.Duration `json:"ttl"`
	// MaxQueue and MaxQueueBytes bound what may wait in total; MaxFlowQueue what one flow
	// (tenant/session) may have waiting.
	MaxQueue      int   `json:"max_queue"`
	MaxQueueBytes int64 `json:"max_queue_bytes"`
	MaxFlowQueue  int   `json:"max_flow_queue"`
	// MaxInFlight bounds the requests dispatched to the fleet at once; 0 means 64 per backend.
	MaxInFlight int `json:"max_inflight"`
	// Saturation, if > 0, also holds admission while llm-d's saturation estimate (mean over
	// backends of max(queued/5, kv/0.8)) is at or above this level.
	Saturation float64 `json:"saturation"`

	// Tokenizer chooses how prompts become block hashes: bytes, endpoint or local.
	Tokenizer string `json:"tokenizer"`
	// BlockSize is tokens per block (the engine's block size, for exact KV-event matches).
	BlockSize int `json:"block_size"`
	// ByteBlock is bytes per block in bytes mode.
	ByteBlock int `json:"byte_block"`

	// TenantHeader, if set, names a header carrying the tenant, set by a trusted proxy in front
	// of the gateway. Without it the tenant is derived from the API key.
	TenantHeader string `json:"tenant_header"`
	// SessionHeader names the header carrying the session id (the OpenAI user field is the
	// fallback).
	SessionHeader string `json:"session_header"`
	// TenantBands maps a tenant to its priority band; every other tenant gets DefaultBand.
	// Clients cannot choose their band.
	TenantBands map[string]int `json:"tenant_bands"`
	DefaultBand int            `json:"default_band"`

	// MaxBodyBytes caps a request body (413 above it).
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// ScrapeInterval is how often backend metrics are scraped.
	ScrapeInterval time.Duration `json:"scrape_interval"`
	// ShutdownGrace is how long a graceful shutdown waits for in-flight requests.
	ShutdownGrace time.Duration `json:"shutdown_grace"`
}

// Backend is one model server behind the gateway.
type Backend struct {
	// URL is the server's base URL (http://host:port); the OpenAI API is under /v1.
	URL string `json:"url"`
	// Engine is vllm (default), sglang, trtllm, triton or tgi: which metric names to scrape.
	Engine string `json:"engine"`
	// KVEvents is the server's KV-event ZMQ endpoint (vLLM --kv-events-config endpoint), and
	// Replay its replay endpoint; both optional.
	KVEvents string `json:"kv_events"`
	Replay   string `json:"replay"`
}

func defaultConfig() Config {
	return Config{
		Listen:         "127.0.0.1:8080",
		SimServers:     4,
		SimProfile:     "demo",
		SimKVEvents:    true,
		Policy:         "bounded-wait",
		BoundedWait:    10 * time.Second,
		Router:         "usher",
		TTL:            60 * time.Second,
		MaxQueue:       10000,
		MaxQueueBytes:  1 << 30,
		MaxFlowQueue:   64,
		Tokenizer:      "",
		BlockSize:      16,
		ByteBlock:      64,
		SessionHeader:  "X-Session-Id",
		MaxBodyBytes:   8 << 20,
		ScrapeInterval: 100 * time.Millisecond,
		ShutdownGrace:  30 * time.Second,
	}
}

// backendFlag parses repeated -backend values:
//
//	-backend 'http://10.0.0.7:8000,engine=vllm,kv-events=tcp://10.0.0.7:5557,replay=tcp://10.0.0.7:5558'
type backendFlag struct{ list *[]Backend }

func (f backendFlag) String() string {
	if f.list == nil {
		return ""
	}
	parts := make([]string, 0, len(*f.list))
	for _, b := range *f.list {
		parts = append(parts, b.URL)
	}
	return strings.Join(parts, " ")
}

func (f backendFlag) Set(s string) error {
	b, err := parseBackend(s)
	if err != nil {
		return err
	}
	*f.list = append(*f.list, b)
	return nil
}

func parseBackend(s string) (Backend, error) {
	fields := strings.Split(s, ",")
	b := Backend{URL: strings.TrimSpace(fields[0]), Engine: "vllm"}
	for _, kv := range fields[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return b, fmt.Errorf("backend %q: option %q is not key=value", s, kv)
		}
		switch k {
		case "engine":
			b.Engine = v
		case "kv-events":
			b.KVEvents = v
		case "replay":
			b.Replay = v
		default:
			return b, fmt.Errorf("backend %q: unknown option %q (engine, kv-events, replay)", s, k)
		}
	}
	return b, nil
}

// parseConfig reads the command line (and the -config file it may name) into a Config.
func parseConfig(args []string) (Config, error) {
	cfg := defaultConfig()
	// A config file is read first so that flags override it.
	for i, a := range args {
		var path string
		switch {
		case a == "-config" || a == "--config":
			if i+1 < len(args) {
				path = args[i+1]
			}
		case strings.HasPrefix(a, "-config=") || strings.HasPrefix(a, "--config="):
			_, path, _ = strings.Cut(a, "=")
		}
		if path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				return cfg, fmt.Errorf("config: %w", err)
			}
			if err := decodeConfigFile(data, &cfg); err != nil {
				return cfg, fmt.Errorf("config %s: %w", path, err)
			}
		}
	}

	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.String("config", "", "JSON config file (flags override it)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to serve the OpenAI API on")
	fs.Var(backendFlag{&cfg.Backends}, "backend", "model server: URL[,engine=vllm|sglang|trtllm|triton|tgi][,kv-events=tcp://host:5557][,replay=tcp://host:5558] (repeat; none: simulated fleet)")
	fs.IntVar(&cfg.SimServers, "sim-servers", cfg.SimServers, "servers in the simulated fleet (when no -backend)")
	fs.StringVar(&cfg.SimProfile, "sim-profile", cfg.SimProfile, "engine profile of the simulated fleet: demo or qwen3-32b-h100")
	fs.BoolVar(&cfg.SimKVEvents, "sim-kv-events", cfg.SimKVEvents, "simulated servers publish KV events over ZMQ (vLLM's wire format) and the gateway follows them")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "fairness policy: "+strings.Join(policyNames, ", "))
	fs.DurationVar(&cfg.BoundedWait, "bounded-wait", cfg.BoundedWait, "W for -policy bounded-wait: no request waits longer (must be below -ttl)")
	fs.StringVar(&cfg.Router, "router", cfg.Router, "routing profile: "+strings.Join(routerNames, ", "))
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "longest wait for admission")
	fs.IntVar(&cfg.MaxQueue, "max-queue", cfg.MaxQueue, "requests that may wait in total")
	fs.Int64Var(&cfg.MaxQueueBytes, "max-queue-bytes", cfg.MaxQueueBytes, "bytes that may wait in total")
	fs.IntVar(&cfg.MaxFlowQueue, "max-flow-queue", cfg.MaxFlowQueue, "requests one flow (tenant/session) may have waiting; 0: no limit")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "requests in flight to the fleet at once; 0: 64 per backend")
	fs.Float64Var(&cfg.Saturation, "saturation", cfg.Saturation, "also hold admission while the fleet's saturation (llm-d's estimate) reaches this; 0: off")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", cfg.Tokenizer, "prompt tokenization: bytes (approximate index), endpoint (the server's POST /tokenize: exact, needed for KV events), local (the simulated fleet's tokenizer); default: local with the simulated fleet, bytes otherwise")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per block: the engine's block size")
	fs.IntVar(&cfg.ByteBlock, "byte-block", cfg.ByteBlock, "bytes per block in -tokenizer bytes")
	fs.StringVar(&cfg.TenantHeader, "tenant-header", cfg.TenantHeader, "trusted header naming the tenant (set by an auth proxy); empty: the tenant is the API key")
	fs.StringVar(&cfg.SessionHeader, "session-header", cfg.SessionHeader, "header naming the session (the OpenAI user field is the fallback)")
	fs.IntVar(&cfg.DefaultBand, "default-band", cfg.DefaultBand, "priority band of tenants not in tenant_bands (config file)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body", cfg.MaxBodyBytes, "largest request body accepted (413 above)")
	fs.DurationVar(&cfg.ScrapeInterval, "scrape-interval", cfg.ScrapeInterval, "backend metrics scrape interval")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "how long shutdown waits for in-flight requests")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = "bytes"
		if len(cfg.Backends) == 0 {
			cfg.Tokenizer = "local"
		}
	}
	return cfg, cfg.validate()
}

// decodeConfigFile reads JSON with durations written as strings ("60s").
func decodeConfigFile(data []byte, cfg *Config) error {
	type alias Config
	var raw struct {
		alias
		BoundedWait    string `json:"bounded_wait"`
		TTL            string `json:"ttl"`
		ScrapeInterval string `json:"scrape_interval"`
		ShutdownGrace  string `json:"shutdown_grace"`
	}
	raw.alias = alias(*cfg)
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	*cfg = Config(raw.alias)
	for _, d := range []struct {
		s   string
		dst *time.Duration
	}{{raw.BoundedWait, &cfg.BoundedWait}, {raw.TTL, &cfg.TTL}, {raw.ScrapeInterval, &cfg.ScrapeInterval}, {raw.ShutdownGrace, &cfg.ShutdownGrace}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return err
		}
		*d.dst = v
	}
	for i := range cfg.Backends {
		if cfg.Backends[i].Engine == "" {
			cfg.Backends[i].Engine = "vllm"
		}
	}
	return nil
}

var errConfig = errors.New("invalid configuration")

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, b := range c.Backends {
		u, err := url.Parse(b.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("backend URL %q: want http(s)://host:port", b.URL)
		}
		if seen[b.URL] {
			return bad("backend %q listed twice", b.URL)
		}
		seen[b.URL] = true
		if _, ok := engineProfiles[b.Engine]; !ok {
			return bad("backend %q: unknown engine %q", b.URL, b.Engine)
		}
		if b.Replay != "" && b.KVEvents == "" {
			return bad("backend %q: replay endpoint without kv-events endpoint", b.URL)
		}
	}
	switch {
	case len(c.Backends) == 0 && (c.SimServers < 1 || c.SimServers > 64):
		return bad("sim-servers %d: want 1..64", c.SimServers)
	case c.TTL <= 0:
		return bad("ttl %v: want > 0", c.TTL)
	case c.Policy == "bounded-wait" && (c.BoundedWait <= 0 || c.BoundedWait >= c.TTL):
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
	case c.DefaultBand < 0 || c.DefaultBand >= maxBands:
		return bad("default-band %d: want 0..%d", c.DefaultBand, maxBands-1)
	}
	for t, b := range c.TenantBands {
		if b < 0 || b >= maxBands {
			return bad("tenant %q band %d: want 0..%d", t, b, maxBands-1)
		}
	}
	switch c.Tokenizer {
	case "bytes", "endpoint", "local":
	default:
		return bad("tokenizer %q: want bytes, endpoint or local", c.Tokenizer)
	}
	if _, err := newPolicy(c); err != nil {
		return err
	}
	if _, err := newRouterProfile(c.Router); err != nil {
		return err
	}
	return nil
}

const maxBands = 4

var engineProfiles = map[string]*metrics.Profile{
	"vllm":   metrics.VLLM,
	"sglang": metrics.SGLang,
	"trtllm": metrics.TensorRTLLM,
	"triton": metrics.Triton,
	"tgi":    metrics.TGI,
}

var policyNames = []string{"fcfs", "priority", "round-robin", "turn-priority", "las", "las-llmd", "vtc", "edf", "slo", "bounded-wait", "hierarchy"}

// newPolicy builds the fairness policy the configuration names.
func newPolicy(c *Config) (flowcontrol.Policy, error) {
	switch c.Policy {
	case "fcfs":
		return flowcontrol.FCFS{}, nil
	case "priority":
		return flowcontrol.StrictPriority{}, nil
	case "round-robin":
		return fairness.NewRoundRobin(), nil
	case "turn-priority":
		return fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	case "las":
		return fairness.NewLAS(fairness.LASOptions{})
	case "las-llmd":
		return fairness.NewLASReference(fairness.LASReferenceOptions{})
	case "vtc":
		return fairness.NewVTC(fairness.VTCOptions{})
	case "edf":
		return fairness.EDF{}, nil
	case "slo":
		return fairness.NewSLODeadline(fairness.SLODeadlineOptions{TTFT: 2 * time.Second})
	case "bounded-wait":
		return fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: c.BoundedWait})
	case "hierarchy":
		return fairness.NewHierarchy(fairness.HierarchyOptions{})
	}
	return nil, fmt.Errorf("%w: policy %q: want one of %s", errConfig, c.Policy, strings.Join(policyNames, ", "))
}

var routerNames = []string{"usher", "llmd", "llmd-sticky", "sglang", "dynamo", "aibrix", "round-robin", "least-request"}

// newRouterProfile builds the routing profile the configuration names.
func newRouterProfile(name string) (routing.Profile, error) {
	switch name {
	case "usher":
		return routing.Usher(routing.UsherOptions{}), nil
	case "llmd":
		return routing.LLMDDefault(), nil
	case "llmd-sticky":
		return routing.LLMDSticky(routing.LLMDStickyOptions{}), nil
	case "sglang":
		return routing.SGLang(routing.SGLangOptions{}), nil
	case "dynamo":
		return routing.Dynamo(routing.DynamoOptions{}), nil
	case "aibrix":
		return routing.AIBrix(), nil
	case "round-robin":
		return routing.RoundRobinProfile(), nil
	case "least-request":
		return routing.LeastRequest(), nil
	}
	return routing.Profile{}, fmt.Errorf("%w: router %q: want one of %s", errConfig, name, strings.Join(routerNames, ", "))
}
