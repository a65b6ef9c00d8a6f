package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// newBareProxy is the floor -overhead -floor measures: net/http's reverse proxy and nothing
// else — no parsing, hashing, admission or routing — flushing every write as a streaming
// gateway must, over a transport set up as the gateway's (connection reuse, no compression).
// Like the gateway, which must see a request's body before it can route it, it reads the body
// whole and forwards it with its length. What any Go gateway built on net/http spends per
// request on this machine is at least what this spends.
func newBareProxy(backend *url.URL) http.Handler {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	p := httputil.NewSingleHostReverseProxy(backend)
	p.Transport = tr
	p.FlushInterval = -1
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBareBody))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		p.ServeHTTP(w, r)
	})
}

// maxBareBody bounds a request body the bare proxy reads, as the gateway's MaxBodyBytes does.
const maxBareBody = 8 << 20

// runBareProxy serves newBareProxy to backend on a loopback port until ctx ends, after
// printing "listening on http://ADDR" (the line startGateway waits for).
func runBareProxy(ctx context.Context, backend string, stdout io.Writer) error {
	u, err := url.Parse(backend)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-bare-proxy %q: want an http(s) URL", backend)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newBareProxy(u), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "bare reverse proxy listening on http://%s to %s\n", ln.Addr(), u)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
