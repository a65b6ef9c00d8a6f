package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/routing/outlier"
)

// newChecker builds the active health checks of opts.HealthChecks over the Handler's members,
// when there are members and the router has an outlier.Detector to report to. A probe that
// finds a backend stalled moves the requests waiting there for their first byte.
func (h *Handler) newChecker(opts Options) error {
	hc := opts.HealthChecks
	if hc.Router != nil || hc.Hosts != nil || hc.OnProbe != nil {
		return fmt.Errorf("%w: HealthChecks' Router, Hosts and OnProbe are the Handler's to set", ErrInvalidOptions)
	}
	if opts.NoHealthChecks || len(h.members) == 0 || outlier.Of(h.router) == nil {
		return nil
	}
	if hc.FirstByte == 0 && h.timeouts.Stall > 0 {
		hc.FirstByte = h.timeouts.Stall
		if hc.Timeout == 0 {
			hc.Timeout = max(healthcheck.DefaultTimeout, hc.FirstByte)
		}
	}
	hc.Router = h.router
	hc.Transport = h.transport
	for _, m := range h.members {
		t := healthcheck.Host{Name: m.name, URL: m.url}
		if b := h.backends[h.backendOf(m)]; len(b.Models) > 0 {
			t.Model = b.Models[0]
		}
		if m.rank >= 0 {
			t.Header = http.Header{rankHeader: {strconv.Itoa(m.rank)}}
		}
		hc.Hosts = append(hc.Hosts, t)
	}
	hc.OnProbe = func(name string, err error) {
		h.usher.ObserveProbe(name, err == nil)
		if errors.Is(err, healthcheck.ErrStalled) && h.timeouts.Stall > 0 {
			h.moveStalled(name)
		}
	}
	var err error
	if h.checker, err = healthcheck.New(hc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// backendOf returns the index in Options.Backends of the server m is (a rank of).
func (h *Handler) backendOf(m member) int {
	for i, b := range h.backends {
		if b.URL == m.url {
			return i
		}
	}
	return 0
}
