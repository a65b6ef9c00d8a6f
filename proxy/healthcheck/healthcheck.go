package healthcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
)

// ErrInvalidOptions is wrapped by New's and SetHosts' errors.
var ErrInvalidOptions = errors.New("healthcheck: invalid options")

// ErrStalled is wrapped by the error Options.OnProbe hears for a completion probe that got no
// first byte within Options.FirstByte.
var ErrStalled = errors.New("healthcheck: no first byte within the stall limit")

// UserAgent is the User-Agent of every probe, so that a backend's logs (and a test's
// recorder) tell the checker's requests from clients'.
const UserAgent = "usher-health-check/1"

// Defaults of Options.
const (
	// DefaultProbeInterval is how long a backend in rotation may go without a success before it is
	// probed.
	DefaultProbeInterval = 5 * time.Second
	// DefaultEjectedInterval is the interval between the probes of an ejected backend.
	DefaultEjectedInterval = time.Second
	// DefaultTimeout bounds a whole probe.
	DefaultTimeout = 5 * time.Second
	// DefaultFirstByte bounds a completion probe's wait for its first byte.
	DefaultFirstByte = 2 * time.Second
	// DefaultConcurrency bounds the probes in flight.
	DefaultConcurrency = 16
)

// tick is how often Run looks for probes that are due: it bounds how late a probe starts.
const tick = 50 * time.Millisecond

// Host is one backend to probe. It is a plain value.
type Host struct {
	// Name is the backend's name in the Router (routing.BackendState.Name); probes of a name
	// the Router does not know are not sent.
	Name string
	// URL is the server's base URL, http(s)://host:port with an optional base path: the
	// OpenAI API is under URL/v1 and the health endpoint at URL/health.
	URL string
	// Model is the model the completion probe names. Empty: the first base model the server
	// lists on GET /v1/models (one without a "parent"), asked once.
	Model string
	// Header is added to every probe: a data-parallel rank's pin (X-Data-Parallel-Rank), a
	// credential. Nil: none.
	Header http.Header
}

// Options configures a [Checker] (see [New]). Zero values are the documented defaults.
type Options struct {
	// Router is the router whose backends are probed; its profile must have an
	// [outlier.Detector] (see [outlier.With]), which hears every probe's outcome. Required.
	Router *routing.Router
	// Hosts are the backends to probe (see [Checker.SetHosts] to change them).
	Hosts []Host
	// Interval is how long a backend in rotation with nothing in flight may go without a
	// success (a request's or a probe's) before it is probed with GET /health, ±20%; one with
	// requests in flight gets the completion probe after FirstByte without a success, then
	// every EjectedInterval. Zero: [DefaultProbeInterval] (5 s). Negative: backends in rotation
	// are not probed, only ejected ones.
	Interval time.Duration
	// EjectedInterval is the interval between the probes of an ejected backend, ±20%. Zero:
	// [DefaultEjectedInterval] (1 s).
	EjectedInterval time.Duration
	// Timeout bounds a whole probe (GET /v1/models, when the model is looked up, included).
	// Zero: [DefaultTimeout] (5 s).
	Timeout time.Duration
	// FirstByte bounds a completion probe's wait for its first byte (the response headers):
	// without it the backend counts as stalled. At most Timeout. Zero: [DefaultFirstByte]
	// (2 s).
	FirstByte time.Duration
	// Concurrency bounds the probes in flight at once (one per backend at most). Zero:
	// [DefaultConcurrency] (16).
	Concurrency int
	// Transport sends the probes. Nil: http.DefaultTransport.
	Transport http.RoundTripper
	// OnProbe, if set, hears the outcome of every probe as it ends: err is nil for a
	// success, wraps [ErrStalled] for a completion probe without a first byte in time. It is
	// called from the probe's goroutine and must not block.
	OnProbe func(target string, err error)
}

// Checker probes a Router's backends on a timer (see the package documentation): the ejected
// ones every EjectedInterval, the ones in rotation that had no success for Interval, and reports
// each outcome to the Router's [outlier.Detector]. It is safe for concurrent use; New starts
// nothing, Run does the work. Each tick of Run (every 50 ms) is O(targets), with a lock-free
// look at each backend's passive health.
type Checker struct {
	// Immutable after New.
	router             *routing.Router
	det                *outlier.Detector
	interval, ejected  time.Duration // interval < 0: backends in rotation are not probed
	timeout, firstByte time.Duration
	client             *http.Client
	sem                chan struct{}
	onProbe            func(string, error)
	jitter             func() float64 // in [0.8, 1.2)
	wg                 sync.WaitGroup // the probes in flight
	mu                 sync.Mutex     // guards targets and the targets' state
	targets            []*target
	running            bool
}

// target is one Host and its probing state (guarded by Checker.mu).
type target struct {
	Host
	base     *url.URL
	model    string // the completion probe's model: Host.Model, or looked up
	healthOK bool   // the completion probe cannot judge this server: /health alone
	busy     bool   // a probe is in flight
	last     time.Time
	wait     float64 // the jitter factor of the next interval
}

// New returns a [Checker] configured by o. It fails with [ErrInvalidOptions] when Router is
// nil or has no [outlier.Detector], a duration or Concurrency is negative (Interval may be),
// FirstByte exceeds Timeout, or a Host is invalid (see [Checker.SetHosts]).
func New(o Options) (*Checker, error) {
	if o.Router == nil {
		return nil, fmt.Errorf("%w: no Router", ErrInvalidOptions)
	}
	det := outlier.Of(o.Router)
	if det == nil {
		return nil, fmt.Errorf("%w: the Router's profile has no outlier.Detector", ErrInvalidOptions)
	}
	def := func(d, v time.Duration) time.Duration {
		if d == 0 {
			return v
		}
		return d
	}
	c := &Checker{
		router:    o.Router,
		det:       det,
		interval:  def(o.Interval, DefaultProbeInterval),
		ejected:   def(o.EjectedInterval, DefaultEjectedInterval),
		timeout:   def(o.Timeout, DefaultTimeout),
		firstByte: def(o.FirstByte, DefaultFirstByte),
		onProbe:   o.OnProbe,
		jitter:    func() float64 { return 0.8 + 0.4*rand.Float64() },
	}
	n := o.Concurrency
	if n == 0 {
		n = DefaultConcurrency
	}
	switch {
	case c.ejected < 0 || c.timeout < 0 || c.firstByte < 0 || n < 0:
		return nil, fmt.Errorf("%w: negative EjectedInterval, Timeout, FirstByte or Concurrency", ErrInvalidOptions)
	case c.firstByte > c.timeout:
		return nil, fmt.Errorf("%w: FirstByte %v above Timeout %v", ErrInvalidOptions, c.firstByte, c.timeout)
	}
	c.sem = make(chan struct{}, n)
	tr := o.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	// No redirects: a probe asks this server, not another.
	c.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if err := c.SetHosts(o.Hosts); err != nil {
		return nil, err
	}
	return c, nil
}

// SetHosts replaces the backends to probe; a target kept by name keeps its state (when it was
// last probed, the model looked up, unless its URL or Model changed). It fails, changing
// nothing, with [ErrInvalidOptions] on a target without a name, a name listed twice, or a URL
// that is not http(s)://host[:port][/path]. O(targets).
func (c *Checker) SetHosts(hs []Host) error {
	next := make([]*target, 0, len(hs))
	seen := make(map[string]bool, len(hs))
	for _, t := range hs {
		u, err := url.Parse(t.URL)
		if t.Name == "" || seen[t.Name] || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: target %q at %q: want a distinct name and http(s)://host:port", ErrInvalidOptions, t.Name, t.URL)
		}
		seen[t.Name] = true
		u.Path = strings.TrimRight(u.Path, "/")
		t.Header = t.Header.Clone()
		next = append(next, &target{Host: t, base: u, model: t.Model})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range next {
		for _, old := range c.targets {
			if old.Name == n.Name && old.URL == n.URL && old.Host.Model == n.Host.Model {
				n.model, n.healthOK, n.last, n.wait = old.model, old.healthOK, old.last, old.wait
				n.busy = old.busy
			}
		}
	}
	c.targets = next
	return nil
}

// Run probes the targets until ctx ends, then waits for the probes in flight (each ends within
// Timeout) and returns ctx's error. It fails at once with [ErrInvalidOptions] when Run is
// already running.
func (c *Checker) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return fmt.Errorf("%w: Run is already running", ErrInvalidOptions)
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.wg.Wait()
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		c.probeDue(ctx, time.Now())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// kind is what a probe asks.
type kind uint8

const (
	kindHealth     kind = iota + 1 // GET /health
	kindCompletion                 // a streamed one-token completion
)

// probeDue starts the probes that are due at now. O(targets).
func (c *Checker) probeDue(ctx context.Context, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.targets {
		if t.busy {
			continue
		}
		id, ok := c.router.Lookup(t.Name)
		if !ok {
			continue
		}
		if t.wait == 0 {
			t.wait = c.jitter()
		}
		h := c.det.BackendStats(id)
		var k kind
		switch {
		case h.Ejected:
			if now.Sub(t.last) < time.Duration(t.wait*float64(c.ejected)) {
				continue
			}
			k = kindCompletion
		case c.interval < 0:
			continue
		default:
			every, quiet := time.Duration(t.wait*float64(c.interval)), now.Sub(h.LastSuccess)
			k = kindHealth
			if in, ok := c.router.InFlight(t.Name); ok && in.Requests > 0 {
				// Busy without a success for the stall limit: only serving shows a stall,
				// and requests whose first byte is their end wait on the verdict.
				k, every = kindCompletion, min(every, time.Duration(t.wait*float64(c.ejected)))
				if quiet < c.firstByte {
					continue
				}
			} else if quiet < every {
				continue
			}
			if now.Sub(t.last) < every {
				continue
			}
		}
		if k == kindCompletion && t.healthOK {
			k = kindHealth
		}
		select {
		case c.sem <- struct{}{}:
		default:
			return // Concurrency probes in flight: the rest wait for the next tick
		}
		t.busy = true
		c.wg.Add(1)
		go c.probe(ctx, t, id, k)
	}
}

// probe runs one probe of t and reports its outcome.
func (c *Checker) probe(ctx context.Context, t *target, id routing.BackendID, k kind) {
	defer c.wg.Done()
	defer func() { <-c.sem }()
	c.mu.Lock()
	model := t.model
	c.mu.Unlock()
	started := time.Now()
	var info routing.DoneInfo
	var healthOnly bool
	if k == kindCompletion {
		var found bool
		if model == "" {
			model, found, info = c.lookUpModel(ctx, t)
		}
		switch {
		case info.Err != nil:
		case model == "" && found:
			healthOnly = true // the server lists no model: liveness is all a probe can see
			info = c.health(ctx, t)
		default:
			var unjudged bool
			info, unjudged = c.completion(ctx, t, model)
			if unjudged {
				healthOnly = true
				info = c.health(ctx, t)
			}
		}
	} else {
		info = c.health(ctx, t)
	}
	if ctx.Err() != nil {
		info = routing.DoneInfo{Err: ctx.Err()} // Run is ending: no verdict
	} else {
		c.det.Probed(id, started, info)
	}
	c.mu.Lock()
	t.busy, t.last, t.wait = false, time.Now(), c.jitter()
	if healthOnly {
		t.healthOK = true
	} else if model != "" {
		t.model = model
	}
	c.mu.Unlock()
	if c.onProbe != nil && ctx.Err() == nil {
		c.onProbe(t.Name, info.Err)
	}
}

// request builds a probe of t: method, path under the base URL, body.
func (c *Checker) request(ctx context.Context, t *target, method, path string, body []byte) *http.Request {
	u := *t.base
	u.Path += path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, u.String(), rd) // method and URL are valid
	for k, v := range t.Header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// health is GET /health: a 2xx within Timeout is a success.
func (c *Checker) health(ctx context.Context, t *target) routing.DoneInfo {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.Do(c.request(ctx, t, http.MethodGet, "/health", nil))
	if err != nil {
		return failure(ctx, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		// No health endpoint: nothing to judge by (neutral).
		return routing.DoneInfo{Err: fmt.Errorf("healthcheck: health probe answered %s", resp.Status)}
	}
	return statusInfo(resp, "health")
}

// completion sends a streamed one-token completion and reads it to its end. unjudged reports
// an answer that says nothing of the server's health (a 4xx: the endpoint or the model is not
// served this way).
func (c *Checker) completion(ctx context.Context, t *target, model string) (info routing.DoneInfo, unjudged bool) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ctx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	timer := time.AfterFunc(c.firstByte, func() { stall(ErrStalled) })
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": "Hi", "max_tokens": 1, "stream": true, "temperature": 0})
	resp, err := c.client.Do(c.request(ctx, t, http.MethodPost, "/v1/completions", body))
	if !timer.Stop() && errors.Is(context.Cause(ctx), ErrStalled) {
		if err == nil {
			resp.Body.Close()
		}
		return routing.DoneInfo{Err: fmt.Errorf("%w (%v)", ErrStalled, c.firstByte), Failure: routing.FailureConnect}, false
	}
	if err != nil {
		return failure(ctx, err), false
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return routing.DoneInfo{Err: fmt.Errorf("healthcheck: completion probe answered %s", resp.Status)}, true
	}
	if info := statusInfo(resp, "completion"); info.Err != nil {
		return info, false
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return failure(ctx, err), false // broken, or past Timeout, after it began
	}
	return routing.DoneInfo{}, false
}

// lookUpModel asks GET /v1/models for the first base model. found reports an answer that
// could be read (model is then "" when the server lists none); info is the failure when the
// server could not be asked.
func (c *Checker) lookUpModel(ctx context.Context, t *target) (model string, found bool, info routing.DoneInfo) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.Do(c.request(ctx, t, http.MethodGet, "/v1/models", nil))
	if err != nil {
		return "", false, failure(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		if info := statusInfo(resp, "models"); info.Err != nil && resp.StatusCode >= 500 {
			return "", false, info
		}
		return "", true, routing.DoneInfo{} // no model list: liveness alone
	}
	var list struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", true, routing.DoneInfo{}
	}
	for _, m := range list.Data {
		if m.ID != "" && (m.Parent == "" || m.Parent == m.ID) {
			return m.ID, true, routing.DoneInfo{}
		}
	}
	return "", true, routing.DoneInfo{}
}

// statusInfo classifies an answer's status: 2xx success, 429 (or 503 with Retry-After)
// overload, 5xx a server failure, anything else a failure of no class.
func statusInfo(resp *http.Response, what string) routing.DoneInfo {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return routing.DoneInfo{}
	}
	err := fmt.Errorf("healthcheck: %s probe answered %s", what, resp.Status)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || (resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""):
		return routing.DoneInfo{Err: err, Failure: routing.FailureOverload}
	case resp.StatusCode >= 500:
		return routing.DoneInfo{Err: err, Failure: routing.FailureServer}
	case resp.StatusCode == http.StatusRequestTimeout:
		return routing.DoneInfo{Err: err, Failure: routing.FailureTimeout}
	}
	return routing.DoneInfo{Err: err, Failure: routing.FailureServer}
}

// failure classifies a probe that got no (whole) answer: past its time a timeout, otherwise —
// refused, reset, closed — a connect failure.
func failure(ctx context.Context, err error) routing.DoneInfo {
	var ne net.Error
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout() && !isDial(err)) {
		return routing.DoneInfo{Err: err, Failure: routing.FailureTimeout}
	}
	return routing.DoneInfo{Err: err, Failure: routing.FailureConnect}
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
