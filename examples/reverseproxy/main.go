// Command reverseproxy puts usher into a stock httputil.ReverseProxy: the proxy you already
// run keeps its own server, middleware and logging, and usher's Handler lends it three hooks
// (admit and pick in Rewrite, first token and usage in ModifyResponse, OpenAI errors in
// ErrorHandler) and its Transport, which retries a request that failed before any byte reached
// the client on another backend and times out a backend that stops answering. Without that
// Transport the hooks still work, but nothing is retried.
//
// The Handler still serves what the hooks do not: GET /metrics (usher's Prometheus series),
// GET /health and GET /v1/models, mounted beside the proxy below.
//
// With no -backend it starts a simulated vLLM-compatible fleet in process:
//
//	go run ./examples/reverseproxy
//	go run ./examples/reverseproxy -listen :8080 -backend http://10.0.0.7:8000 -backend http://10.0.0.8:8000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	var backends []string
	flag.Func("backend", "model server base URL (repeat); none: a simulated fleet of 4 in process", func(s string) error {
		backends = append(backends, s)
		return nil
	})
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal("reverseproxy: ", err)
	}
	if err := run(ctx, ln, backends); err != nil {
		log.Fatal("reverseproxy: ", err)
	}
}

// run serves on ln until ctx ends.
func run(ctx context.Context, ln net.Listener, backends []string) error {
	opts := proxy.Options{}
	if len(backends) == 0 {
		fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 4})
		if err != nil {
			return err
		}
		defer fleet.Close()
		backends = fleet.URLs()
		opts.Tokenizer = simfleet.Tokenizer{} // the simulated model's own tokens
	}
	for _, u := range backends {
		opts.Backends = append(opts.Backends, proxy.Backend{URL: u})
	}
	h, err := proxy.New(opts)
	if err != nil {
		return err
	}
	defer h.Close()
	h.Start(ctx)  // scrape the fleet once before the first request
	go h.Run(ctx) // keep scraping it

	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h.Rewrite(pr) // admit, pick, point pr.Out at the chosen backend
			pr.SetXForwarded()
		},
		Transport:      h.Transport(),    // retries before the first byte, backend timeouts
		ModifyResponse: h.ModifyResponse, // first token, usage, the books closed exactly once
		ErrorHandler:   h.ErrorHandler,   // errors as OpenAI JSON
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", rp)
	mux.Handle("POST /v1/completions", rp)
	mux.Handle("/", h) // GET /metrics, /health, /v1/models, and OpenAI 404s for the rest

	// Bounds on slow clients that cut no stream: no ReadTimeout or WriteTimeout (the Handler
	// bounds the body read and every wait on a backend itself).
	srv := &http.Server{
		Addr:              ln.Addr().String(),
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	fmt.Printf("reverse proxy with usher on http://%s over %s\n", ln.Addr(), strings.Join(backends, ", "))
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(h.Listener(ln)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
