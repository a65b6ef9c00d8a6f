package simfleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// FleetOptions configures a Fleet.
type FleetOptions struct {
	// Servers is the number of servers; 0 means 1.
	Servers int
	// Options configures every server.
	Options Options
	// Configure, if set, adjusts the options of server i (0-based) before it is created, e.g.
	// to give servers different profiles or KV-event hooks.
	Configure func(i int, o *Options)
	// Host is the address servers listen on, each on a port of its own chosen by the system;
	// empty means 127.0.0.1.
	Host string
}

// Fleet is a set of simulated servers in one process, each listening on its own loopback port
// with its engine running. Close stops them all. Its fields are immutable after StartFleet, so
// its methods are safe for concurrent use.
type Fleet struct {
	servers []*Server
	urls    []string
	https   []*http.Server
}

// StartFleet creates the servers, starts their engines and serves each on its own port. On
// error nothing is left running.
func StartFleet(opts FleetOptions) (*Fleet, error) {
	n := opts.Servers
	if n == 0 {
		n = 1
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: %d servers", ErrInvalidOptions, n)
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	f := &Fleet{}
	for i := range n {
		o := opts.Options
		if opts.Configure != nil {
			opts.Configure(i, &o)
		}
		s, err := New(o)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			_ = s.Close()
			_ = f.Close()
			return nil, fmt.Errorf("simfleet: server %d: %w", i, err)
		}
		hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
		s.Start()
		go func() { _ = hs.Serve(ln) }()
		f.servers = append(f.servers, s)
		f.https = append(f.https, hs)
		f.urls = append(f.urls, "http://"+ln.Addr().String())
	}
	return f, nil
}

// URLs returns the servers' base URLs (http://127.0.0.1:port), in server order. The OpenAI API
// is under /v1.
func (f *Fleet) URLs() []string { return append([]string(nil), f.urls...) }

// Servers returns the servers, in the order of URLs.
func (f *Fleet) Servers() []*Server { return append([]*Server(nil), f.servers...) }

// Close stops every engine, aborting the requests in flight (their clients get an error), then
// shuts the HTTP servers down: handlers get a grace period to write their last bytes, after
// which remaining connections (including ones a client dialled but never used) are closed.
func (f *Fleet) Close() error {
	var errs []error
	for _, s := range f.servers {
		errs = append(errs, s.Close())
	}
	var wg sync.WaitGroup
	for _, hs := range f.https {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
			defer cancel()
			if err := hs.Shutdown(ctx); err != nil {
				_ = hs.Close()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Kill stops server i abruptly, as a crashed process would: its connections are closed at once,
// mid-stream, without a final error event or [DONE], and its engine stops. Other servers keep
// running; Close still works afterwards. For fault-injection tests.
func (f *Fleet) Kill(i int) error {
	if i < 0 || i >= len(f.servers) {
		return fmt.Errorf("%w: no server %d", ErrInvalidOptions, i)
	}
	err := f.https[i].Close()
	_ = f.servers[i].Close()
	return err
}

// closeGrace bounds how long Close waits for connections to go idle.
const closeGrace = 300 * time.Millisecond
