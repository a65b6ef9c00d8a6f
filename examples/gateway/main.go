// Command gateway is an OpenAI-compatible gateway: a thin main over usher's proxy.Handler,
// which keys each request to a flow (tenant and session), hashes its prompt once, admits it
// through a flowcontrol queue ordered by a fairness policy, picks a model server with a
// routing profile, relays the answer (streamed or not), and reports the usage back to the
// policy, the router and the prefix index.
//
// With no -backend it starts a simulated vLLM-compatible fleet in process, so it runs on a
// laptop:
//
//	go run ./examples/gateway
//
// -sim-prefill N makes N of its servers prefill servers and the rest decode servers;
// -sim-kv-both makes every one a kv_both server, whose role the gateway's role planner sets
// from the load (usher_pd_planned_role):
//
//	go run ./examples/gateway -sim-servers 8 -sim-profile qwen3-32b-h100 -sim-kv-both
//
// In front of real vLLM servers, with their KV events keeping the prefix index exact:
//
//	go run ./examples/gateway -listen :8080 -tokenizer endpoint -block-size 16 \
//	  -backend 'http://10.0.0.7:8000,engine=vllm,kv-events=tcp://10.0.0.7:5557,replay=tcp://10.0.0.7:5558' \
//	  -backend 'http://10.0.0.8:8000,engine=vllm,kv-events=tcp://10.0.0.8:5557,replay=tcp://10.0.0.8:5558'
//
// Run with -h for every flag; -config reads the proxy's settings from a JSON file (the JSON
// names of gateway.Config). With -metrics-listen, /metrics moves to a listener of its own,
// which -metrics-token-file and -metrics-endpoint-auth (Kubernetes TokenReview and
// SubjectAccessReview, as the endpoint picker's) guard.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/kubernetes"

	"github.com/usher-llm/usher/examples/internal/metricsserve"
	"github.com/usher-llm/usher/examples/internal/quotafile"
	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/gateway"
	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
)

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			log.Fatal("gateway: ", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal("gateway: ", err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile() // runs first: the profile is complete before the file closes
	}
	if cfg.Redis != "" {
		// The replica logs one line per Redis outage and one per recovery; go-redis's own
		// log (process-wide) would add a line for every failed dial of its pool.
		redis.SetLogger(quietRedis{})
	}
	if err := run(ctx, cfg, os.Stdout, nil); err != nil {
		pprof.StopCPUProfile()
		log.Fatal("gateway: ", err)
	}
}

// config is the proxy's configuration and what only this program needs.
type config struct {
	gateway.Config
	Listen        string        // address to serve on
	SimServers    int           // size of the simulated fleet started when there is no backend
	SimProfile    string        // its engine profile (internal/engine)
	SimKVEvents   bool          // its servers publish KV events, which the gateway follows
	SimPrefill    int           // of its servers, how many are prefill servers (the rest decode); 0: aggregated
	SimKVBoth     bool          // every server declares role=kv_both: the role planner sets their roles
	SimLoRA       string        // LoRA adapters its servers serve, comma-separated ("": none)
	SimMaxLoRAs   int           // adapter slots per server (0: simfleet's default)
	ShutdownGrace time.Duration // how long shutdown waits for requests in flight
	CPUProfile    string        // file to write a CPU profile of the whole run to ("": none)
	// GittinsIdle and GittinsMinSessions, when set, replace the Gittins policies' idle limit
	// (fairness.GittinsOptions.Memory.Forget: a session idle this long has ended) and the
	// ended sessions they learn from before leaving their prior (MinSessions), and how many
	// end between rebuilds of the index table (RebuildEvery).
	GittinsIdle         time.Duration
	GittinsMinSessions  int
	GittinsRebuildEvery int
	// MetricsEndpointAuth: the metrics listener also serves tokens that the API server of
	// Kubeconfig (in-cluster when empty) authenticates and authorises to get /metrics.
	MetricsEndpointAuth bool
	Kubeconfig          string
	// connectReview builds the client of those reviews; nil: metricsauth.Connect.
	connectReview func(kubeconfig string) (kubernetes.Interface, error)
}

func parseConfig(args []string) (config, error) {
	c := config{Config: gateway.DefaultConfig(), Listen: "127.0.0.1:8080", SimServers: 4, SimProfile: "demo",
		SimKVEvents: true, ShutdownGrace: 30 * time.Second}
	c.Tokenizer = "" // default: local with the simulated fleet, bytes otherwise
	// The built-in parts and the extensions this gateway can run, each built only when the
	// configuration asks for it: the KV-event feed (-kv-listen, a backend's kv-events or
	// kv-pod) and the replica (-redis).
	c.Registry = new(proxy.Registry)
	if err := errors.Join(kvfeed.Register(c.Registry), replicaext.Register(c.Registry)); err != nil {
		return c, err
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.Func("config", "JSON config file (flags given after it override it)", func(path string) error { return c.LoadFile(path) })
	fs.Func("quota", `tenants' quotas: a JSON file holding the configuration's "quota" object alone, {"quota": {"limits": [...], ...}}, as -config would read it (a request that does not fit is refused at once with 429; answers carry the rate-limit headers)`, func(path string) error {
		q, err := quotafile.Read(path)
		if err != nil {
			return err
		}
		q.Shared, q.Now = c.Quota.Shared, c.Quota.Now
		c.Quota = q
		return nil
	})
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve the OpenAI API on")
	fs.IntVar(&c.SimServers, "sim-servers", c.SimServers, "servers in the simulated fleet (when no -backend)")
	fs.StringVar(&c.SimProfile, "sim-profile", c.SimProfile, "engine profile of the simulated fleet: demo or qwen3-32b-h100")
	fs.BoolVar(&c.SimKVEvents, "sim-kv-events", c.SimKVEvents, "simulated servers publish KV events over ZMQ (vLLM's wire format) and the gateway follows them")
	fs.IntVar(&c.SimPrefill, "sim-prefill", 0, "disaggregate the simulated fleet: this many of its servers are prefill servers, the rest decode servers (0: every server serves both)")
	fs.BoolVar(&c.SimKVBoth, "sim-kv-both", false, "every simulated server declares role=kv_both (KV transfer both ways, vLLM's kv_role kv_both): it prefills or decodes per request, pulling the KV over its side channel, and the role planner (the decider unless -decider names another) moves servers between prefill and both")
	fs.StringVar(&c.SimLoRA, "sim-lora", "", "LoRA adapters the simulated servers serve, comma-separated (vLLM's --lora-modules); requests name one as their model")
	fs.IntVar(&c.SimMaxLoRAs, "sim-max-loras", 0, "adapter slots of each simulated server (vLLM's --max-loras; 0: 1)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long shutdown waits for in-flight requests")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof), finished at shutdown")
	fs.BoolVar(&c.MetricsEndpointAuth, "metrics-endpoint-auth", false, "with -metrics-listen: /metrics serves a bearer token that the Kubernetes API server authenticates (TokenReview) and whose user may get the non-resource URL /metrics (SubjectAccessReview), as the endpoint picker's flag; after -metrics-token-file's tokens; judgments cached (allowed 1m, refused 10s); needs create on tokenreviews and subjectaccessreviews")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file for -metrics-endpoint-auth; empty: the pod's service account (in-cluster)")
	fs.DurationVar(&c.GittinsIdle, "gittins-idle", 0, "with -policy gittins or gittins-bounded-wait: a session idle this long has ended and its service is learned from (0: the policy's default, 120s)")
	fs.IntVar(&c.GittinsMinSessions, "gittins-min-sessions", 0, "with -policy gittins or gittins-bounded-wait: sessions that must end before the learned index replaces the prior's first come, first served (0: the policy's default, 200)")
	fs.IntVar(&c.GittinsRebuildEvery, "gittins-rebuild-every", 0, "with -policy gittins or gittins-bounded-wait: sessions that end between rebuilds of the index table, the first included (0: the policy's default, 64)")
	c.RegisterFlags(fs)
	fs.Lookup("tokenizer").Usage += "; local (without a DIR): the simulated fleet's tokenizer (default with it, bytes otherwise)"
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.Tokenizer == "" {
		c.Tokenizer = "bytes"
		if len(c.Backends) == 0 {
			c.Tokenizer = "local"
		}
	}
	if len(c.Backends) == 0 && (c.SimServers < 1 || c.SimServers > 64) {
		return c, fmt.Errorf("sim-servers %d: want 1..64", c.SimServers)
	}
	if c.MetricsEndpointAuth && c.MetricsListen == "" {
		return c, errors.New("-metrics-endpoint-auth needs -metrics-listen")
	}
	if c.SimPrefill < 0 || (c.SimPrefill > 0 && c.SimPrefill >= c.SimServers) {
		return c, fmt.Errorf("sim-prefill %d: want 0, or 1..sim-servers-1 (%d) so that some server decodes", c.SimPrefill, c.SimServers-1)
	}
	if c.SimKVBoth && c.SimPrefill > 0 {
		return c, errors.New("-sim-kv-both and -sim-prefill exclude each other: kv_both servers have no fixed role")
	}
	_, err := c.options()
	return c, err
}

// simLoRA is the simulated servers' LoRA configuration.
func (c config) simLoRA() simfleet.LoRAOptions {
	var o simfleet.LoRAOptions
	for _, a := range strings.Split(c.SimLoRA, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Adapters = append(o.Adapters, a)
		}
	}
	o.MaxLoRAs = c.SimMaxLoRAs
	return o
}

// options builds the Handler's options; "local" is the simulated fleet's tokenizer.
func (c config) options() (proxy.Options, error) {
	pc := c.Config
	if pc.Tokenizer == "local" {
		pc.Tokenizer = "bytes"
	}
	o, err := pc.Options()
	if c.Tokenizer == "local" {
		o.Tokenizer = simfleet.Tokenizer{BlockSize: c.BlockSize}
	}
	if err == nil && (c.GittinsIdle != 0 || c.GittinsMinSessions != 0 || c.GittinsRebuildEvery != 0) {
		// The registry's Gittins takes W only; these settings are this program's, so the
		// policy is built here, as the registry would, with them.
		g := fairness.GittinsOptions{MinSessions: c.GittinsMinSessions, RebuildEvery: c.GittinsRebuildEvery, Memory: fairness.Memory{Forget: c.GittinsIdle}}
		switch c.Policy {
		case "gittins-bounded-wait":
			g.Wait = c.BoundedWait
		case "gittins":
		default:
			return o, fmt.Errorf("-gittins-idle, -gittins-min-sessions and -gittins-rebuild-every need -policy gittins or gittins-bounded-wait, not %q", c.Policy)
		}
		if c.GittinsIdle < 0 || c.GittinsMinSessions < 0 || c.GittinsRebuildEvery < 0 {
			return o, errors.New("-gittins-idle, -gittins-min-sessions and -gittins-rebuild-every must not be negative")
		}
		o.Policy, err = fairness.NewGittins(g)
	}
	return o, err
}

// run serves until ctx ends, then shuts down gracefully. If ready is not nil it receives the
// gateway's base URL once it is listening.
func run(ctx context.Context, c config, out io.Writer, ready chan<- string) error {
	model := "<your model>"
	if len(c.Backends) == 0 {
		sim, err := startFleet(c)
		if err != nil {
			return err
		}
		defer sim.Close()
		c.Backends, model = sim.backends, sim.model
		fmt.Fprintf(out, "started a simulated vLLM fleet of %d servers (%s profile, KV events %v): %v\n", len(sim.backends), c.SimProfile, c.SimKVEvents, sim.fleet.URLs())
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	h, err := proxy.New(opts)
	if err != nil {
		return err
	}
	ms, mln, err := metricsserve.Server(c.metrics(), h.Registry())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		if mln != nil {
			_ = mln.Close()
		}
		return err
	}
	base := "http://" + ln.Addr().String()

	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	h.Start(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- h.Run(bg) }()
	// Bounds on slow clients that cut no stream: no ReadTimeout or WriteTimeout (the Handler
	// bounds the body read and every wait on a backend itself).
	srv := &http.Server{
		Addr:              c.Listen,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	serveDone := make(chan error, 2)
	go func() { serveDone <- srv.Serve(h.Listener(ln)) }()
	if ms != nil {
		go func() {
			if err := ms.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				serveDone <- err
			}
		}()
		fmt.Fprintf(out, "metrics on http://%s/metrics (%s)\n", mln.Addr(), metricsserve.Describe(c.metrics()))
	}

	fmt.Fprintf(out, "usher gateway listening on %s (policy %s, router %s, tokenizer %s)\n", base, c.Policy, cmp.Or(c.Router.Name, c.Router.Extends), c.Tokenizer)
	fmt.Fprintf(out, "try:\n  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -H 'X-Session-Id: demo-1' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n", base, model)
	if ready != nil {
		ready <- base
		if mln != nil {
			ready <- "http://" + mln.Addr().String()
		}
	}
	select {
	case <-ctx.Done():
	case err := <-serveDone:
		if ms != nil {
			_ = ms.Close()
		}
		return err
	}
	fmt.Fprintln(out, "shutting down: draining in-flight requests")
	// Whatever still waits for admission is answered 503 at once; requests in flight finish.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownGrace)
	defer cancel()
	h.Queue().Close()
	err = srv.Shutdown(shutdownCtx)
	if ms != nil {
		_ = ms.Shutdown(shutdownCtx) // scrapes are short; after the API, so its drain is seen
	}
	h.Close()
	cancelBG()
	<-runDone
	return err
}

// metrics is the metrics listener's configuration.
func (c config) metrics() metricsserve.Config {
	return metricsserve.Config{Listen: c.MetricsListen, TokenFile: c.MetricsTokenFile, EndpointAuth: c.MetricsEndpointAuth,
		Kubeconfig: c.Kubeconfig, Connect: c.connectReview}
}

// simFleet is the simulated fleet with, optionally, one KV-event publisher per server (vLLM's
// ZMQ wire format, with a replay endpoint), so the gateway's prefix index runs in exact mode.
type simFleet struct {
	fleet    *simfleet.Fleet
	pubs     []*kvpub.Publisher
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	backends []gateway.BackendSpec
	model    string
}

func startFleet(c config) (*simFleet, error) {
	p, ok := engine.ProfileByName(c.SimProfile)
	if !ok {
		return nil, fmt.Errorf("unknown -sim-profile %q (demo, qwen3-32b-h100)", c.SimProfile)
	}
	s := &simFleet{model: p.Model}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for i := range c.SimServers {
		if !c.SimKVEvents {
			break
		}
		pub, err := kvpub.New(kvpub.Options{
			Endpoint: "tcp://127.0.0.1:0",
			Topic:    kvpub.Topic(fmt.Sprintf("sim-%d", i), p.Model), ReplayEndpoint: "tcp://127.0.0.1:0",
		})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.pubs = append(s.pubs, pub)
		s.wg.Go(func() { _ = pub.Run(ctx) })
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers: c.SimServers,
		Options: simfleet.Options{Engine: engine.Options{Profile: p}, LoRA: c.simLoRA()},
		Configure: func(i int, o *simfleet.Options) {
			if i < len(s.pubs) {
				o.OnKVEvents = simfleet.PublishKVEvents(s.pubs[i], nil)
			}
		},
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.fleet = fleet
	for i, u := range fleet.URLs() {
		// Named as their KV events' pods are: /metrics then lists no address.
		b := gateway.BackendSpec{URL: u, Name: fmt.Sprintf("sim-%d", i), Engine: "vllm"}
		switch {
		case c.SimKVBoth:
			b.Role = "kv_both"
		case i < c.SimPrefill:
			b.Role = "prefill"
		case c.SimPrefill > 0:
			b.Role = "decode"
		}
		if i < len(s.pubs) {
			b.KVEvents, b.Replay = s.pubs[i].Endpoint(), s.pubs[i].ReplayEndpoint()
		}
		s.backends = append(s.backends, b)
	}
	return s, nil
}

// Close stops the servers, then the publishers.
func (s *simFleet) Close() {
	if s.fleet != nil {
		s.fleet.Close()
	}
	s.cancel()
	for _, p := range s.pubs {
		_ = p.Close()
	}
	s.wg.Wait()
}

// quietRedis discards go-redis's log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
