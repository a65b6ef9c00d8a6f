// Command gateway is an OpenAI-compatible gateway assembled from usher's packages: it keys each
// request to a flow (tenant and session), hashes its prompt once, admits it through a
// flowcontrol queue ordered by a fairness policy, picks a model server with a routing profile,
// proxies the answer (streamed or not), and reports the usage back to the policy, the router and
// the prefix index.
//
// With no -backend it starts a simulated vLLM-compatible fleet in process, so it runs on a
// laptop:
//
//	go run ./examples/gateway
//
// In front of real vLLM servers, with their KV events keeping the prefix index exact:
//
//	go run ./examples/gateway -listen :8080 -tokenizer endpoint -block-size 16 \
//	  -backend 'http://10.0.0.7:8000,engine=vllm,kv-events=tcp://10.0.0.7:5557,replay=tcp://10.0.0.7:5558' \
//	  -backend 'http://10.0.0.8:8000,engine=vllm,kv-events=tcp://10.0.0.8:5557,replay=tcp://10.0.0.8:5558'
//
// Run with -h for every flag; -config reads the same settings from a JSON file.
package main

import (
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
	"sync"
	"syscall"
	"time"

	"github.com/usher-llm/usher/examples/simfleet"
	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/prefixcache/kvevents"
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
	if err := run(ctx, cfg, os.Stdout, nil); err != nil {
		log.Fatal("gateway: ", err)
	}
}

// run serves until ctx ends, then shuts down gracefully. If ready is not nil it receives the
// gateway's base URL once it is listening.
func run(ctx context.Context, cfg Config, out io.Writer, ready chan<- string) error {
	backends := cfg.Backends
	if len(backends) == 0 {
		sim, err := startFleet(cfg)
		if err != nil {
			return err
		}
		defer sim.Close()
		backends = sim.backends
		kv := ""
		if cfg.SimKVEvents {
			kv = ", publishing KV events over ZMQ"
		}
		fmt.Fprintf(out, "started a simulated vLLM fleet of %d servers (%s profile%s): %v\n", len(backends), cfg.SimProfile, kv, sim.fleet.URLs())
	}

	g, err := newGateway(cfg, backends)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()

	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	g.Start(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(bg) }()

	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	fmt.Fprintf(out, "usher gateway listening on %s (policy %s, router %s, tokenizer %s)\n", base, cfg.Policy, cfg.Router, cfg.Tokenizer)
	fmt.Fprintf(out, "try:\n  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -H 'X-Session-Id: demo-1' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n", base, modelName(cfg))
	if ready != nil {
		ready <- base
	}

	select {
	case <-ctx.Done():
	case err := <-serveDone:
		return err
	}
	fmt.Fprintln(out, "shutting down: draining in-flight requests")
	// Stop taking connections and wait for the requests in flight; whatever still waits for
	// admission is answered 503 (closing) at once.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	g.queue.Close()
	err = srv.Shutdown(shutdownCtx)
	g.Close()
	cancelBG()
	<-runDone
	return err
}

func modelName(cfg Config) string {
	if len(cfg.Backends) > 0 {
		return "<your model>"
	}
	p, _ := engine.ProfileByName(cfg.SimProfile)
	return p.Model
}

// simFleet is the simulated fleet with, optionally, one KV-event publisher per server (vLLM's
// ZMQ wire format, with a replay endpoint), so the gateway's prefix index runs in exact mode.
type simFleet struct {
	fleet    *simfleet.Fleet
	pubs     []*kvevents.Publisher
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	backends []Backend
}

func startFleet(cfg Config) (*simFleet, error) {
	p, ok := engine.ProfileByName(cfg.SimProfile)
	if !ok {
		return nil, fmt.Errorf("unknown -sim-profile %q (demo, qwen3-32b-h100)", cfg.SimProfile)
	}
	s := &simFleet{}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.SimKVEvents {
		for i := range cfg.SimServers {
			pub, err := kvevents.NewPublisher("tcp://127.0.0.1:0", kvevents.PublisherOptions{
				Topic:          kvevents.Topic(fmt.Sprintf("sim-%d", i), p.Model),
				ReplayEndpoint: "tcp://127.0.0.1:0",
			})
			if err != nil {
				s.Close()
				return nil, err
			}
			s.pubs = append(s.pubs, pub)
			s.wg.Go(func() { _ = pub.Run(ctx) })
		}
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers: cfg.SimServers,
		Options: simfleet.Options{Engine: engine.Options{Profile: p}},
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
		b := Backend{URL: u, Engine: "vllm"}
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
