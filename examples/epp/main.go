// Command epp is usher as an endpoint picker for Envoy-based gateways (the Kubernetes
// Gateway API Inference Extension's EPP): a thin main over proxy/extproc, serving Envoy's
// ext_proc v3 gRPC protocol and the gRPC health service on one port — over TLS by default, as
// the reference picker does (a self-signed certificate, or -cert-path's tls.crt and tls.key,
// read again when they change; -secure-serving=false for plaintext) — the health service
// alone, in plaintext, on another (-health-listen, :9003, the port the Inference Extension's
// probes use), and Prometheus metrics on a third (metrics.Exporter, with bearer tokens from
// -metrics-token-file and, with -metrics-endpoint-auth, any token the Kubernetes API server
// authenticates and authorises to get /metrics, as the reference picker checks them).
//
// It is ready once its endpoints have synced (an InferencePool's pods listed, even none: an
// empty pool answers each request 503 with Retry-After). With -redis, every replica is
// active and they share their prefix index, session placements, in-flight load and fairness
// usage through Redis (gateway/replicaext, as gateway replicas do), splitting the limit on
// requests in flight among the live ones (and, with -quota, each tenant's quota: the
// gateway configuration's "quota" object, see README.md). Without Redis, with -ha-enable-leader-election,
// replicas campaign for a Lease (client-go's leaderelection, the reference picker's lease
// name) and only its holder is ready; the others serve what reaches them and stay warm, and
// one that loses the lease stands by and campaigns again. On SIGTERM it drains: health turns
// NOT_SERVING, a held lease is released, the ext_proc port takes no new streams (gRPC's
// graceful stop), and the streams in flight finish within -shutdown-grace (130s, as the
// reference picker gives); what remains after it is cut. The health port answers throughout.
//
//	go run ./examples/epp -listen :9002 -metrics-listen :9090 -metrics-token-file /etc/usher/metrics-tokens \
//	  -endpoints 10.0.0.7:8000,10.0.0.8:8000 -policy bounded-wait -router usher
//
// Endpoints come from -endpoints (repeatable, comma-separated ip:port) or -endpoints-file
// (one per line, re-read on change; see extproc.ParseEndpoints), or from an InferencePool
// (-pool-name, -pool-namespace, -kubeconfig). See README.md for pointing an
// InferencePool at it. Run with -h for every flag.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/usher-llm/usher/examples/internal/metricsserve"
	"github.com/usher-llm/usher/examples/internal/quotafile"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/extproc"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/proxy/tokenizer"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/session"
)

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "epp:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, nil); err != nil {
		log.Fatal("epp: ", err)
	}
}

// defaultShutdownGrace is how long streams in flight may take to finish on SIGTERM: as long
// as the reference picker gives, enough for long generations; the Deployment's
// terminationGracePeriodSeconds is above it.
const defaultShutdownGrace = 130 * time.Second

// config is what the flags say.
type config struct {
	Listen, MetricsListen string
	HealthListen          string
	MetricsTokenFile      string
	MetricsEndpointAuth   bool
	Endpoints             []extproc.Endpoint
	EndpointsFile         string
	EndpointsInterval     time.Duration
	Policy                string
	Router                proxy.ProfileSpec
	Decider               proxy.PartSpec
	BoundedWait, TTL      time.Duration
	MaxQueue, MaxFlow     int
	MaxInFlight           int
	EarlyShed             bool
	SLO                   map[int]routing.Latency
	TrustSLOHeaders       bool
	TrustObjectiveHeader  bool
	SLOShedAbove          float64
	BlockSize, ByteBlock  int
	Tokenizer             string // bytes or local:DIR
	TenantHeader          string
	SessionHeader         string
	Fallbacks             int
	Engine                string
	ScrapeInterval        time.Duration
	NoScrape              bool
	NoHealthChecks        bool
	HealthInterval        time.Duration
	StallTimeout          time.Duration
	KVListen              string
	StreamIdle            time.Duration
	MaxBody               int64
	Models                string
	ShutdownGrace         time.Duration
	SecureServing         bool
	CertPath              string
	PoolName              string
	PoolNamespace         string
	PoolGroup             string
	Kubeconfig            string
	Redis                 string
	QuotaFile             string
	ReplicaID, Cluster    string
	LeaderElection        bool
	LeaseName             string
	LeaseNamespace        string
	// connect builds the API clients of the pool watch; nil: inferencepool.Connect.
	connect func(kubeconfig string) (inferencepool.Clients, error)
	// connectReview builds the client of -metrics-endpoint-auth's reviews; nil:
	// metricsauth.Connect.
	connectReview func(kubeconfig string) (kubernetes.Interface, error)
	// leases builds the client of the leader election, with a request timeout; nil:
	// leaseClient.
	leases func(kubeconfig string, timeout time.Duration) (kubernetes.Interface, error)
	// The leader election's timing; all zero: 15s, 10s and 2s (defaultLeaseDuration...).
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// identity is this picker's name in the lease; empty: leaderIdentity().
	identity string
	// tok is -tokenizer's tokenizer, loaded once by parseConfig; nil: options builds it.
	tok proxy.Tokenizer
}

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultNamespace is the pod's namespace, or "default" outside a cluster.
func defaultNamespace() string {
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

func parseConfig(args []string) (config, error) {
	c := config{Listen: ":9002", Policy: "bounded-wait", Router: proxy.ProfileSpec{Extends: "usher"}, BoundedWait: 10 * time.Second, TTL: 60 * time.Second,
		MaxQueue: 10000, MaxFlow: 64, BlockSize: 16, ByteBlock: 64, SessionHeader: "X-Session-Id", Engine: "vllm",
		ScrapeInterval: 100 * time.Millisecond, EndpointsInterval: time.Second, StreamIdle: 10 * time.Minute, MaxBody: 8 << 20, Tokenizer: "bytes",
		ShutdownGrace: defaultShutdownGrace, HealthListen: ":9003", SecureServing: true}
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", c.Listen, "address of the ext_proc gRPC server (and its grpc.health.v1)")
	fs.StringVar(&c.HealthListen, "health-listen", c.HealthListen, "address of the gRPC health service alone (services liveness, readiness, inference-extension), kept up while draining; empty: none")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "address to serve Prometheus metrics on (/metrics); empty: none")
	fs.StringVar(&c.MetricsTokenFile, "metrics-token-file", "", "with -metrics-listen: file of bearer tokens that may read /metrics, one a line (# comments); re-read when it changes; empty: no authentication")
	fs.BoolVar(&c.MetricsEndpointAuth, "metrics-endpoint-auth", false, "with -metrics-listen: /metrics serves a bearer token that the Kubernetes API server authenticates (TokenReview) and whose user may get the non-resource URL /metrics (SubjectAccessReview), as the reference picker's flag of that name (default true there); after -metrics-token-file's tokens; judgments cached (allowed 1m, refused 10s); needs create on tokenreviews and subjectaccessreviews")
	fs.Func("endpoints", "model servers: ip:port[,ip:port...] (repeatable)", func(s string) error {
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			e, err := extproc.ParseEndpoint(part)
			if err != nil {
				return err
			}
			c.Endpoints = append(c.Endpoints, e)
		}
		return nil
	})
	fs.StringVar(&c.EndpointsFile, "endpoints-file", "", "file of endpoints, one per line: ip:port [metrics=URL] [kv-events=tcp://...] [replay=tcp://...]; re-read on change")
	fs.DurationVar(&c.EndpointsInterval, "endpoints-interval", c.EndpointsInterval, "poll interval of -endpoints-file")
	fs.StringVar(&c.Policy, "policy", c.Policy, "fairness policy: "+strings.Join(builtin.PolicyNames(), ", "))
	fs.DurationVar(&c.BoundedWait, "bounded-wait", c.BoundedWait, "W for -policy bounded-wait (below -ttl)")
	fs.StringVar(&c.Decider.Name, "decider", "prefix", "with prefill endpoints (role=prefill): which requests get a prefill endpoint in x-prefiller-host-port — prefix, pool, always, never")
	fs.Func("decider-params", `the decider's parameters as JSON, e.g. {"min_uncached_tokens":256}`, func(s string) error {
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("not JSON: %q", s)
		}
		c.Decider.Params = json.RawMessage(s)
		return nil
	})
	fs.Func("router", "routing profile: "+strings.Join(builtin.ProfileNames(), ", ")+
		`, or one described as JSON (proxy.ProfileSpec), e.g. {"extends":"usher","scorers":[{"name":"kv-utilization","weight":1}]} (default usher)`,
		func(s string) error {
			if strings.HasPrefix(strings.TrimSpace(s), "{") {
				return json.Unmarshal([]byte(s), &c.Router)
			}
			c.Router = proxy.ProfileSpec{Extends: s}
			return nil
		})
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "longest wait for admission (set Envoy's ext_proc message_timeout above it)")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "requests that may wait in total")
	fs.IntVar(&c.MaxFlow, "max-flow-queue", c.MaxFlow, "requests one flow may have waiting; 0: no limit")
	fs.IntVar(&c.MaxInFlight, "max-inflight", 0, "requests in flight at once; 0: 64 per endpoint")
	fs.BoolVar(&c.EarlyShed, "early-shed", false, "answer 429 at once when a request's estimated wait exceeds -ttl")
	fs.Func("slo", "latency targets of a priority band: BAND,ttft=DURATION,tpot=DURATION (repeat): requests of the band go to an endpoint predicted to meet them (with the predicted-latency scorer in -router) and, with a TTFT target, are dispatched in time to meet it or refused (see -early-shed)", func(v string) error {
		band, t, err := slo.ParseFlag(v, 4, extproc.ErrInvalidOptions)
		if err != nil {
			return err
		}
		if c.SLO == nil {
			c.SLO = map[int]routing.Latency{}
		}
		if _, dup := c.SLO[band]; dup {
			return fmt.Errorf("%w: -slo: band %d given twice", extproc.ErrInvalidOptions, band)
		}
		c.SLO[band] = t
		return nil
	})
	fs.BoolVar(&c.TrustSLOHeaders, "trust-slo-headers", false, "read x-slo-ttft-ms and x-slo-tpot-ms from requests (set by a trusted proxy, which removes the clients' own): they may loosen a band's -slo targets, never tighten them")
	fs.BoolVar(&c.TrustObjectiveHeader, "trust-objective-header", false, "with -pool-name: read "+inferencepool.ObjectiveHeader+" (set by a trusted proxy, which removes the clients' own) naming an InferenceObjective of the pool, whose priority picks the band: positive priorities, highest first, bands 0.."+strconv.Itoa(objectiveDefaultBand-1)+", priority 0 and requests naming none or an unknown one band "+strconv.Itoa(objectiveDefaultBand)+", negative ones the bands after it; without it the header is ignored")
	fs.Float64Var(&c.SLOShedAbove, "slo-shed-above", 0, "refuse at once (429) a request with a TTFT target that the latency model predicts no endpoint can serve within this many times the target (0: off)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per block (the engines' block size)")
	fs.IntVar(&c.ByteBlock, "byte-block", c.ByteBlock, "bytes per block of the prompt hash (-tokenizer bytes)")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "prompt tokenization: bytes (the prompt's bytes in blocks of -byte-block: approximate index) or local:DIR (the model's tokenizer.json and tokenizer_config.json in DIR, in process: the engine's token ids in blocks of -block-size, which match KV events)")
	fs.StringVar(&c.TenantHeader, "tenant-header", "", "trusted header naming the tenant; empty: a keyed digest of the API key")
	fs.StringVar(&c.SessionHeader, "session-header", c.SessionHeader, "header naming the session")
	fs.IntVar(&c.Fallbacks, "fallbacks", 0, "endpoints listed after the pick for Envoy to retry on (0..16)")
	fs.StringVar(&c.Engine, "engine", c.Engine, "metrics of the model servers: vllm, sglang, trtllm, triton, tgi")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "metrics scrape interval")
	fs.BoolVar(&c.NoScrape, "no-scrape", false, "do not scrape the endpoints' metrics")
	fs.BoolVar(&c.NoHealthChecks, "no-health-checks", false, "no active health checks: the picker's own probes (GET /health, a streamed one-token completion) of ejected and idle endpoints; without them a client's request is an ejected endpoint's probe")
	fs.DurationVar(&c.HealthInterval, "health-interval", 0, "probe an endpoint in rotation that had no success this long (ejected ones: every second); 0: 5s")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", 0, "a health probe without a first byte this long ejects its endpoint as stalled; 0: 2s")
	fs.StringVar(&c.KVListen, "kv-listen", "", "endpoint to bind for KV events from servers that connect (topic kv@<ip:port>@<model>), e.g. tcp://0.0.0.0:5557")
	fs.DurationVar(&c.StreamIdle, "stream-idle", c.StreamIdle, "longest silence of an ext_proc stream")
	fs.Int64Var(&c.MaxBody, "max-body", c.MaxBody, "largest request body accepted (413 above)")
	fs.StringVar(&c.Models, "models", "", "comma-separated model names requests may ask for; empty: any")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "on SIGTERM, how long streams in flight may take to finish (a generation streams through the picker; give the pod's terminationGracePeriodSeconds more)")
	fs.BoolVar(&c.SecureServing, "secure-serving", c.SecureServing, "serve ext_proc over TLS (with -cert-path, or a self-signed certificate generated at start); false: plaintext")
	fs.StringVar(&c.CertPath, "cert-path", "", "with -secure-serving: directory holding tls.crt and tls.key (a Kubernetes TLS Secret), read again when they change; empty: a self-signed certificate")
	fs.StringVar(&c.PoolName, "pool-name", "", "InferencePool to follow (its ready pods on its target ports); instead of -endpoints and -endpoints-file")
	fs.StringVar(&c.PoolNamespace, "pool-namespace", defaultNamespace(), "namespace of -pool-name (default: the pod's own, else default)")
	fs.StringVar(&c.PoolGroup, "pool-group", inferencepool.Group, "API group of -pool-name: "+inferencepool.Group+" (InferencePool v1) or "+inferencepool.AlphaGroup+" (v1alpha2); the Role must grant it")
	fs.StringVar(&c.Redis, "redis", "", "Redis (or Valkey) shared by the pickers of one pool, host:port or a redis:// or rediss:// URL: every picker is active and they share prefixes, session placements, load and fairness usage, and split -max-inflight; empty: this picker alone")
	fs.StringVar(&c.QuotaFile, "quota", "", `tenants' quotas: a JSON file holding the gateway configuration's "quota" object, {"quota": {"limits": [...], ...}} (requests and tokens per tenant per window; a request that does not fit is refused at once with 429, answers carry the rate-limit headers); with -redis the pickers hold each tenant's quota together; empty: no quotas`)
	fs.StringVar(&c.ReplicaID, "replica-id", "", "with -redis: this picker's name among its peers; empty: host name, process id and a random suffix")
	fs.StringVar(&c.Cluster, "cluster", "", "with -redis: pickers with the same cluster share state; empty: usher-epp, or usher-epp.NAMESPACE.POOL with -pool-name")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file for -pool-name, -metrics-endpoint-auth and -ha-enable-leader-election; empty: the pod's service account (in-cluster)")
	fs.BoolVar(&c.LeaderElection, "ha-enable-leader-election", false, "run several replicas active-standby: they campaign for a Lease and only its holder reports ready (readiness, inference-extension); the others serve whatever reaches them and stay warm; needs -pool-name or -kubeconfig, and the Role's leases and events rules")
	fs.StringVar(&c.LeaseName, "ha-lease-name", "", "with -ha-enable-leader-election: the Lease's name; empty: the reference picker's, epp-<pool-namespace>-<pool-name>.gateway-api-inference-extension.sigs.k8s.io")
	fs.StringVar(&c.LeaseNamespace, "ha-lease-namespace", "", "with -ha-enable-leader-election: the Lease's namespace; empty: -pool-namespace's")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if len(c.Endpoints) > 0 && c.EndpointsFile != "" {
		return c, errors.New("give -endpoints or -endpoints-file, not both")
	}
	if c.PoolName != "" && (len(c.Endpoints) > 0 || c.EndpointsFile != "") {
		return c, errors.New("-pool-name follows the pool's pods: give it without -endpoints and -endpoints-file")
	}
	if c.PoolGroup != inferencepool.Group && c.PoolGroup != inferencepool.AlphaGroup {
		return c, fmt.Errorf("-pool-group %q: want %s or %s", c.PoolGroup, inferencepool.Group, inferencepool.AlphaGroup)
	}
	if c.TrustObjectiveHeader && c.PoolName == "" {
		return c, errors.New("-trust-objective-header needs -pool-name (InferenceObjectives name their pool)")
	}
	if c.CertPath != "" && !c.SecureServing {
		return c, errors.New("-cert-path needs -secure-serving")
	}
	if c.MetricsTokenFile != "" && c.MetricsListen == "" {
		return c, errors.New("-metrics-token-file needs -metrics-listen")
	}
	if c.Redis == "" && (c.ReplicaID != "" || c.Cluster != "") {
		return c, errors.New("-replica-id and -cluster need -redis")
	}
	if c.Redis != "" && c.LeaderElection {
		return c, errors.New("-redis makes every picker active and -ha-enable-leader-election one of them: give one")
	}
	if c.MetricsEndpointAuth && c.MetricsListen == "" {
		return c, errors.New("-metrics-endpoint-auth needs -metrics-listen")
	}
	if err := c.checkLeaderElection(); err != nil {
		return c, err
	}
	tok, err := c.tokenizer()
	if err != nil {
		return c, err
	}
	c.tok = tok
	_, err = c.options(false)
	return c, err
}

// tokenizer builds -tokenizer's tokenizer. A local tokenizer that cannot be loaded is an
// error naming the directory and, when one is at fault, the file.
func (c config) tokenizer() (proxy.Tokenizer, error) {
	if c.Tokenizer == "bytes" || c.Tokenizer == "" {
		return proxy.BytesTokenizer{BlockBytes: c.ByteBlock}, nil
	}
	dir, ok := strings.CutPrefix(c.Tokenizer, "local:")
	if !ok || dir == "" {
		return nil, fmt.Errorf("-tokenizer %q: want bytes or local:DIR", c.Tokenizer)
	}
	e, err := tokenizer.New(tokenizer.Options{Dir: dir, BlockSize: c.BlockSize})
	if err != nil {
		return nil, fmt.Errorf("-tokenizer %q: %w", c.Tokenizer, err)
	}
	return e, nil
}

// options builds the picker's options. With live false (checking the flags) it reaches no
// Redis server: the replica extension is built but not prepared.
func (c config) options(live bool) (extproc.Options, error) {
	bad := func(format string, args ...any) (extproc.Options, error) {
		return extproc.Options{}, fmt.Errorf(format, args...)
	}
	switch {
	case c.TTL <= 0:
		return bad("-ttl %v: want > 0", c.TTL)
	case c.Policy == "bounded-wait" && (c.BoundedWait <= 0 || c.BoundedWait >= c.TTL):
		return bad("-bounded-wait %v: want 0 < W < -ttl (%v)", c.BoundedWait, c.TTL)
	case c.MaxQueue < 1 || c.MaxFlow < 0 || c.MaxInFlight < 0:
		return bad("-max-queue must be positive, -max-flow-queue and -max-inflight not negative")
	case c.BlockSize < 1 || c.ByteBlock < 1:
		return bad("block sizes must be positive")
	case c.MaxBody < 1024:
		return bad("-max-body %d: want at least 1024", c.MaxBody)
	case c.ShutdownGrace < 0:
		return bad("-shutdown-grace %v: want >= 0", c.ShutdownGrace)
	case c.ScrapeInterval <= 0 || c.EndpointsInterval <= 0 || c.StreamIdle <= 0:
		return bad("intervals and -stream-idle must be positive")
	case c.HealthInterval < 0 || c.StallTimeout < 0 || c.StallTimeout > healthcheck.DefaultTimeout:
		return bad("-health-interval and -stall-timeout must not be negative, -stall-timeout at most %v", healthcheck.DefaultTimeout)
	}
	profile, ok := metrics.EngineOf(c.Engine)
	if !ok {
		return bad("-engine %q: want vllm, sglang, trtllm, triton or tgi", c.Engine)
	}
	reg := new(proxy.Registry)
	// The parts the pickers share are built as the replica extension prepares them: the
	// prefix index and the session table with its feeds, the keyer with the cluster's secret.
	var io prefixcache.Options
	var sess session.AffinityOptions
	ko := proxy.KeyerOptions{TenantHeader: c.TenantHeader, SessionHeader: c.SessionHeader}
	var exts []proxy.Extension
	var qo *quota.Options // -quota's; the replica extension gives it its Shared store
	if c.QuotaFile != "" {
		q, err := quotafile.Read(c.QuotaFile)
		if err != nil {
			return extproc.Options{}, err
		}
		qo = &q
	}
	if c.Redis != "" {
		ext, err := c.replica(reg)
		if err != nil {
			return extproc.Options{}, err
		}
		if live {
			if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Keyer: &ko, Quota: qo}); err != nil {
				return extproc.Options{}, err
			}
		}
		exts = append(exts, ext)
	}
	policy, err := builtin.Policy(c.Policy, builtin.PolicyOptions{BoundedWait: c.BoundedWait})
	if err != nil {
		return extproc.Options{}, err
	}
	rp, err := reg.Profile(c.Router, sess)
	if err != nil {
		return extproc.Options{}, err
	}
	decider, err := proxy.Build[disagg.Decider](reg, c.Decider)
	if err != nil {
		return extproc.Options{}, err
	}
	out, err := outlier.New(outlier.Options{})
	if err != nil {
		return extproc.Options{}, err
	}
	rp = outlier.With(rp, out, 1)
	if c.TrustObjectiveHeader {
		ko.DefaultBand = objectiveDefaultBand // room above it for positive priorities
	}
	var keyer proxy.FlowKeyer
	if keyer, err = proxy.NewKeyer(ko); err != nil {
		return extproc.Options{}, err
	}
	tok := c.tok
	if tok == nil {
		if tok, err = c.tokenizer(); err != nil {
			return extproc.Options{}, err
		}
	}
	o := extproc.Options{
		Endpoints: c.Endpoints, Policy: policy, TTL: c.TTL, MaxInFlight: c.MaxInFlight,
		QueueCapacity: flowcontrol.Limits{Requests: c.MaxQueue}, FlowCapacity: flowcontrol.Limits{Requests: c.MaxFlow},
		EarlyShed: flowcontrol.EarlyShed{Enabled: c.EarlyShed}, SLO: c.SLO, TrustSLOHeaders: c.TrustSLOHeaders, SLOShedAbove: c.SLOShedAbove, Tokenizer: tok,
		Keyer: keyer, MaxBodyBytes: c.MaxBody, Fallbacks: c.Fallbacks, StreamIdle: c.StreamIdle,
		NoScrape: c.NoScrape, Engine: profile, ScrapeInterval: c.ScrapeInterval, KVListen: c.KVListen,
		BlockSize: c.BlockSize, Decider: decider,
		NoHealthChecks: c.NoHealthChecks,
		HealthChecks:   healthcheck.Options{Interval: c.HealthInterval, FirstByte: c.StallTimeout},
		Extensions:     exts,
	}
	if c.Models != "" {
		for m := range strings.SplitSeq(c.Models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				o.Models = append(o.Models, m)
			}
		}
	}
	if c.EndpointsFile != "" {
		data, err := os.ReadFile(c.EndpointsFile)
		if err != nil {
			return extproc.Options{}, fmt.Errorf("endpoints file: %w", err)
		}
		if o.Endpoints, err = extproc.ParseEndpoints(data); err != nil {
			return extproc.Options{}, fmt.Errorf("endpoints file %s: %w", c.EndpointsFile, err)
		}
		o.Source = extproc.FileSource{Path: c.EndpointsFile, Interval: c.EndpointsInterval,
			OnError: func(err error) { log.Print("epp: ", err) }}
	}
	if c.PoolName != "" {
		connect := c.connect
		if connect == nil {
			connect = inferencepool.Connect
		}
		clients, err := connect(c.Kubeconfig)
		if err != nil {
			return extproc.Options{}, err
		}
		if o.Source, err = inferencepool.New(inferencepool.Options{Clients: clients, Name: c.PoolName, Namespace: c.PoolNamespace,
			Alpha: c.PoolGroup == inferencepool.AlphaGroup}); err != nil {
			return extproc.Options{}, err
		}
		if c.TrustObjectiveHeader {
			objs, err := inferencepool.NewObjectives(inferencepool.ObjectivesOptions{Clients: clients, PoolName: c.PoolName,
				Namespace: c.PoolNamespace, PoolGroup: c.PoolGroup, Bands: objectiveBands, DefaultBand: objectiveDefaultBand})
			if err != nil {
				return extproc.Options{}, err
			}
			o.Bands = objectiveBands
			o.Keyer = &objectiveKeyer{inner: o.Keyer, objs: objs}
		}
	}
	if qo != nil {
		bands := o.Bands
		if bands == 0 {
			bands = 4 // extproc's default
		}
		for i, l := range qo.Limits {
			for _, b := range l.Bands {
				if b < 0 || b >= bands {
					return extproc.Options{}, fmt.Errorf("-quota %s: limits[%d]: band %d: want 0..%d", c.QuotaFile, i, b, bands-1)
				}
			}
		}
		if o.Quota, err = quota.New(*qo); err != nil {
			return extproc.Options{}, fmt.Errorf("-quota %s: %w", c.QuotaFile, err)
		}
	}
	// The router is the profile's; its index is made here so both share it.
	o.Router, o.Index, err = newRouter(rp, c.BlockSize, io)
	return o, err
}

// replica builds the extension of -redis, through the same factory as a gateway
// configuration's "replica" (replicaext.Register): nothing is dialled until it is prepared
// or run.
func (c config) replica(reg *proxy.Registry) (proxy.Extension, error) {
	if err := replicaext.Register(reg); err != nil {
		return nil, err
	}
	cluster := c.Cluster
	if cluster == "" {
		cluster = "usher-epp"
		if c.PoolName != "" {
			cluster += "." + c.PoolNamespace + "." + c.PoolName
		}
	}
	params, err := json.Marshal(map[string]string{"redis": c.Redis, "replica_id": c.ReplicaID, "cluster": cluster})
	if err != nil {
		return nil, err
	}
	ext, err := proxy.Build[proxy.Extension](reg, proxy.PartSpec{Name: "replica", Params: params})
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	return ext, nil
}

// run serves until ctx ends. If ready is not nil it receives the gRPC address (and then the
// metrics address, when there is one) once listening.
func run(ctx context.Context, c config, out io.Writer, ready chan<- string) error {
	opts, err := c.options(true)
	if err != nil {
		return err
	}
	epp, err := extproc.New(opts)
	if err != nil {
		return err
	}
	if src, ok := opts.Source.(*inferencepool.Source); ok {
		epp.Registry().MustRegister(src.Collector()) // usher_epp_pool_*
	}
	var elect *election
	if c.LeaderElection {
		if elect, err = newElection(c, epp); err != nil { // on standby from here on
			return err
		}
	}
	// A buffered body is one message: let it be as large as the picker accepts, and more.
	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(max(c.MaxBody, 8<<20)) + 1<<20)}
	serving := "plaintext"
	if c.SecureServing {
		to := extproc.TLSOptions{}
		serving = "TLS, self-signed certificate"
		if c.CertPath != "" {
			to.CertFile, to.KeyFile = filepath.Join(c.CertPath, "tls.crt"), filepath.Join(c.CertPath, "tls.key")
			serving = "TLS, certificate from " + c.CertPath
		}
		cfg, err := extproc.TLSConfig(to)
		if err != nil {
			if c.CertPath != "" {
				return fmt.Errorf("-cert-path %s: %w", c.CertPath, err)
			}
			return err
		}
		if c.CertPath == "" {
			if cert, err := cfg.GetCertificate(nil); err == nil {
				serving += fmt.Sprintf(" sha256:%x", sha256.Sum256(cert.Certificate[0]))
			}
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	g := grpc.NewServer(gopts...)
	epp.Register(g)
	var hg *grpc.Server
	var hln net.Listener
	if c.HealthListen != "" {
		if hln, err = net.Listen("tcp", c.HealthListen); err != nil {
			_ = ln.Close()
			return err
		}
		hg = grpc.NewServer()
		epp.RegisterHealth(hg)
	}
	ms, mln, err := metricsserve.Server(c.metrics(), epp.Registry())
	if err != nil {
		_ = ln.Close()
		if hln != nil {
			_ = hln.Close()
		}
		return err
	}

	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	if ok, isObj := opts.Keyer.(*objectiveKeyer); isObj {
		objDone := make(chan struct{})
		go func() { _ = ok.objs.Run(bg); close(objDone) }()
		defer func() { cancelBG(); <-objDone }()
	}
	runDone := make(chan error, 1)
	go func() { runDone <- epp.Run(bg) }()
	// The campaign ends with the serving, before the drain, so that a leader hands the lease
	// over at once (and another replica turns ready) while its own streams finish.
	electCtx, endCampaign := context.WithCancel(ctx)
	defer endCampaign()
	electDone := make(chan struct{})
	if elect != nil {
		go func() { elect.run(electCtx); close(electDone) }()
	} else {
		close(electDone)
	}
	serveDone := make(chan error, 3)
	go func() { serveDone <- g.Serve(ln) }()
	if hg != nil {
		go func() {
			if err := hg.Serve(hln); err != nil {
				serveDone <- err
			}
		}()
	}
	if ms != nil {
		go func() {
			if err := ms.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				serveDone <- err
			}
		}()
	}
	healthAddr := "none"
	if hln != nil {
		healthAddr = hln.Addr().String()
	}
	shared := "alone"
	if c.Redis != "" {
		shared = "sharing state through Redis"
	}
	election := ""
	if elect != nil {
		election = fmt.Sprintf(", leader election on (lease %s, identity %s): standby until elected", elect.lease, elect.identity)
	}
	fmt.Fprintf(out, "usher endpoint picker: ext_proc on %s (%s), health on %s (policy %s, router %s, %s), %d endpoints%s\n", ln.Addr(), serving, healthAddr, c.Policy, routerName(c.Router), shared, len(opts.Endpoints), election)
	if mln != nil {
		fmt.Fprintf(out, "metrics on http://%s/metrics (%s)\n", mln.Addr(), metricsserve.Describe(c.metrics()))
	}
	if ready != nil {
		ready <- ln.Addr().String()
		if mln != nil {
			ready <- mln.Addr().String()
		}
		if hln != nil {
			ready <- hln.Addr().String()
		}
	}
	select {
	case <-ctx.Done():
	case err = <-serveDone:
	}
	// Drain: health NOT_SERVING first (and requests still waiting for admission answered
	// 503 with Retry-After, to be retried on another picker), then no new streams (the
	// listener closes, connections get GOAWAY), and the streams in flight finish within
	// the grace; the health port keeps answering until the end.
	start, active := time.Now(), epp.Stats().Active
	fmt.Fprintf(out, "shutting down: not ready, draining %d streams (grace %v)\n", active, c.ShutdownGrace)
	endCampaign() // standby, and the lease released if held
	epp.Close()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	grace := time.NewTimer(c.ShutdownGrace)
	select {
	case <-stopped:
		fmt.Fprintf(out, "drained in %v\n", time.Since(start).Round(time.Millisecond))
	case <-grace.C:
		fmt.Fprintf(out, "grace of %v over: cutting %d streams\n", c.ShutdownGrace, epp.Stats().Active)
		g.Stop()
		<-stopped
	}
	grace.Stop()
	if hg != nil {
		hg.Stop()
	}
	if ms != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = ms.Shutdown(sctx)
		cancel()
	}
	cancelBG()
	<-electDone
	if rerr := <-runDone; err == nil {
		err = rerr
	}
	return err
}

// metrics is the metrics listener's configuration.
func (c config) metrics() metricsserve.Config {
	return metricsserve.Config{Listen: c.MetricsListen, TokenFile: c.MetricsTokenFile, EndpointAuth: c.MetricsEndpointAuth,
		Kubeconfig: c.Kubeconfig, Connect: c.connectReview}
}

// checkLeaderElection checks the leader election's flags.
func (c config) checkLeaderElection() error {
	if !c.LeaderElection {
		if c.LeaseName != "" || c.LeaseNamespace != "" {
			return errors.New("-ha-lease-name and -ha-lease-namespace need -ha-enable-leader-election")
		}
		return nil
	}
	switch {
	case c.PoolName == "" && c.Kubeconfig == "":
		return errors.New("-ha-enable-leader-election campaigns for a Lease on the API server: give -pool-name (in cluster, or with -kubeconfig) or -kubeconfig")
	case c.PoolName == "" && c.LeaseName == "":
		return errors.New("-ha-enable-leader-election without -pool-name: name the Lease with -ha-lease-name (its default is derived from the pool's name)")
	}
	name, ns := c.LeaseName, c.LeaseNamespace
	if name == "" {
		name = leaseName(c.PoolNamespace, c.PoolName)
	}
	if ns == "" {
		ns = c.PoolNamespace
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("leader election: Lease name %q: %s (name it with -ha-lease-name)", name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("leader election: Lease namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// newRouter builds a router over a prefix index of its own for profile p.
func newRouter(p routing.Profile, blockSize int, io prefixcache.Options) (*routing.Router, *prefixcache.Index, error) {
	ix, err := prefixcache.New(io)
	if err != nil {
		return nil, nil, err
	}
	r, err := routing.New(routing.Options{Profile: p, Index: ix, BlockSize: blockSize})
	return r, ix, err
}

// routerName names a profile spec for the startup line.
func routerName(s proxy.ProfileSpec) string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Extends != "":
		return s.Extends
	}
	return "custom"
}
