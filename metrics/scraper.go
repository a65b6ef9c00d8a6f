package metrics

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/routing"
)

// Target is one model server to scrape.
type Target struct {
	// Name identifies the backend: the State's name and the "backend" label value of the
	// Scraper's own metrics. Names must be unique and non-empty.
	Name string
	// URL is the metrics endpoint, e.g. "http://10.0.0.7:8000/metrics". A URL without a
	// path (or with "/") gets the engine's MetricsPath ("/metrics" by default).
	URL string
	// HealthURL is the health endpoint. Empty means the engine's HealthPath on the
	// metrics endpoint's host; if that is empty too, health is not checked separately.
	HealthURL string
	// Engine says where the signals are; nil means Options.Engine.
	Engine *Engine
	// Rank, if set, restricts the target to the series of one data-parallel rank of the
	// server (those whose Engine.RankLabel has this value), so that each rank behind one
	// address is a backend of its own. The engine must name its RankLabel.
	Rank string
	// Role is the part of inference the backend serves, passed through to
	// routing.BackendState. Zero: routing.RoleBoth.
	Role routing.Role
}

// Options configures a Scraper. The zero value of every field is a documented default.
type Options struct {
	// Targets are the backends to scrape. They can be replaced later with SetTargets.
	Targets []Target
	// Engine is the engine of targets that name none. Nil: EngineOf("vllm").
	Engine *Engine
	// Interval is the time between the starts of two scrapes of one backend in Run.
	// Zero means 100ms.
	Interval time.Duration
	// Jitter adds a uniformly random delay in [0, Jitter) to every scheduled scrape, and
	// Run spreads the first scrapes uniformly over one Interval, so backends are not
	// scraped in lockstep. Zero means Interval/10; negative means no jitter.
	Jitter time.Duration
	// Timeout bounds each request of a scrape: the metrics request, and the health request
	// (which has its own deadline, so a server slow to render its metrics can still report
	// itself alive). Zero means 1s.
	Timeout time.Duration
	// StaleAfter marks a backend stale when its last good metrics scrape is older than
	// this. Zero means 2s (llm-d's limit).
	StaleAfter time.Duration
	// UnhealthyAfter marks a backend unhealthy after this many scrape attempts in a row got
	// no answer (timeout, refused connection) from its health endpoint, or from its
	// metrics endpoint when it has none. An error status from a health endpoint marks it
	// unhealthy at once. Zero means 3.
	UnhealthyAfter int
	// OnUpdate, if set, is called by Run's own goroutine (never concurrently with itself)
	// after one or more scrapes completed, so that a single writer can hand the new states
	// to a router: router.Update(scraper.BackendStates(buf[:0])). It must not block for
	// long. ScrapeOnce does not call it.
	OnUpdate func()
	// Concurrency bounds the scrapes in flight at once. Zero means 16.
	Concurrency int
	// MaxBodyBytes bounds one exposition. Zero means 8 MiB.
	MaxBodyBytes int64
	// PreferOpenMetrics asks servers for OpenMetrics rather than the classic text format.
	// Either is parsed, whatever the server sends; the classic format parses faster.
	PreferOpenMetrics bool
	// Client sends the requests. Nil means a client with keep-alive connections sized to
	// Concurrency; its per-request timeout comes from Timeout, not from the client.
	Client *http.Client
	// Now stamps scrapes and decides staleness. Nil means time.Now. Run schedules with
	// real timers regardless; tests drive ScrapeOnce with a fake Now.
	Now func() time.Time
	// Seed seeds the jitter; zero means a random seed.
	Seed uint64
}

const (
	acceptText        = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
	acceptOpenMetrics = "application/openmetrics-text;version=1.0.0;q=1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)

// Scraper scrapes the Prometheus endpoints and health endpoints of many model servers and
// publishes a State per backend after every scrape attempt.
//
// Run scrapes every backend once per Interval (with jitter), at most Concurrency at once,
// each bounded by Timeout; ScrapeOnce scrapes every backend once and returns, for tests and
// for callers with their own loop. Neither leaves a goroutine behind. Scrapes of one backend
// are serialised, so counter rates are taken in order.
//
// A Scraper is safe for concurrent use: Snapshot, State and Collect read published snapshots
// without locking while Run scrapes. It is also a prometheus.Collector exporting its own
// scrape errors, backend staleness and health (see Describe).
type Scraper struct {
	// Immutable after New.
	defProfile  *Engine
	interval    time.Duration
	jitter      time.Duration
	timeout     time.Duration
	staleAfter  time.Duration
	unhealthyN  int
	onUpdate    func()
	concurrency int
	maxBody     int64
	accept      string
	client      *http.Client
	ownClient   bool // client was made by New; Close closes its idle connections
	now         func() time.Time
	seed        uint64
	durations   prometheus.Histogram

	fleet   atomic.Pointer[fleet]
	changed chan struct{} // signals Run that SetTargets replaced the fleet; buffered 1
	running atomic.Bool

	mu sync.Mutex // serialises SetTargets
}

// fleet is an immutable set of backends, replaced as a whole by SetTargets.
type fleet struct {
	list   []*backend
	byName map[string]*backend
}

// backend is one scraped server. Fields above mu are immutable; the rest is guarded by mu,
// which is held for the whole of one scrape, except state and the error counters, which are
// atomics read by Snapshot and Collect.
type backend struct {
	name       string
	role       routing.Role
	metricsURL string
	healthURL  string
	profile    *Engine
	rank       string // Target.Rank

	state   atomic.Pointer[State]
	errs    [numReasons]atomic.Uint64
	scrapes atomic.Uint64

	mu          sync.Mutex
	parser      *Parser
	buf         bytes.Buffer
	last        Reading // last good reading
	lastGood    time.Time
	hitRate     float64
	hasHitRate  bool
	prevHits    float64 // counters of the last good scrape that had both
	prevQueries float64
	hasPrev     bool
	health      routing.Health
	misses      int // attempts in a row that got no answer
}

// reason classifies scrape errors for the usher_scrape_errors_total label; a closed set.
type reason uint8

const (
	reasonTimeout reason = iota
	reasonTransport
	reasonStatus
	reasonTooLarge
	reasonParse
	reasonHealth
	numReasons
)

var reasonNames = [numReasons]string{"timeout", "transport", "status", "too_large", "parse", "health"}

// New validates opts and returns a Scraper. It starts nothing: call Run or ScrapeOnce.
// Until a backend's first scrape its State is stale, of unknown health, and carries ErrNotScraped.
func New(opts Options) (*Scraper, error) {
	s := &Scraper{
		defProfile:  opts.Engine,
		interval:    opts.Interval,
		jitter:      opts.Jitter,
		timeout:     opts.Timeout,
		staleAfter:  opts.StaleAfter,
		unhealthyN:  opts.UnhealthyAfter,
		onUpdate:    opts.OnUpdate,
		concurrency: opts.Concurrency,
		maxBody:     opts.MaxBodyBytes,
		accept:      acceptText,
		client:      opts.Client,
		now:         opts.Now,
		seed:        opts.Seed,
		changed:     make(chan struct{}, 1),
	}
	if s.defProfile == nil {
		s.defProfile = engineVLLM
	}
	if s.interval == 0 {
		s.interval = 100 * time.Millisecond
	}
	if s.jitter == 0 {
		s.jitter = s.interval / 10
	}
	if s.jitter < 0 {
		s.jitter = 0
	}
	if s.timeout == 0 {
		s.timeout = time.Second
	}
	if s.staleAfter == 0 {
		s.staleAfter = 2 * time.Second
	}
	if s.unhealthyN == 0 {
		s.unhealthyN = 3
	}
	if s.concurrency == 0 {
		s.concurrency = 16
	}
	if s.maxBody == 0 {
		s.maxBody = 8 << 20
	}
	if opts.PreferOpenMetrics {
		s.accept = acceptOpenMetrics
	}
	if s.now == nil {
		s.now = time.Now
	}
	switch {
	case s.interval < 0:
		return nil, fmt.Errorf("%w: negative Interval %v", ErrInvalidOptions, s.interval)
	case s.timeout < 0:
		return nil, fmt.Errorf("%w: negative Timeout %v", ErrInvalidOptions, s.timeout)
	case s.staleAfter < 0:
		return nil, fmt.Errorf("%w: negative StaleAfter %v", ErrInvalidOptions, s.staleAfter)
	case s.unhealthyN < 0:
		return nil, fmt.Errorf("%w: negative UnhealthyAfter %d", ErrInvalidOptions, s.unhealthyN)
	case s.concurrency < 0:
		return nil, fmt.Errorf("%w: negative Concurrency %d", ErrInvalidOptions, s.concurrency)
	case s.maxBody < 0:
		return nil, fmt.Errorf("%w: negative MaxBodyBytes %d", ErrInvalidOptions, s.maxBody)
	}
	if err := s.defProfile.validate(); err != nil {
		return nil, err
	}
	if s.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2
		tr.MaxIdleConns = 2 * s.concurrency
		s.client = &http.Client{Transport: tr}
		s.ownClient = true
	}
	s.durations = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "usher_scrape_duration_seconds",
		Help:    "Duration of one scrape of one model server (metrics and health).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	s.fleet.Store(&fleet{byName: map[string]*backend{}})
	if err := s.SetTargets(opts.Targets); err != nil {
		return nil, err
	}
	return s, nil
}

// SetTargets replaces the set of backends. A backend whose Name, URLs and engine are
// unchanged keeps its state and counters; others start unscraped. A running Run picks the
// new set up at once; scrapes of removed backends in flight finish and are discarded.
// O(targets).
func (s *Scraper) SetTargets(targets []Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.fleet.Load()
	next := &fleet{list: make([]*backend, 0, len(targets)), byName: make(map[string]*backend, len(targets))}
	for i, t := range targets {
		b, err := s.newBackend(t)
		if err != nil {
			return fmt.Errorf("target %d: %w", i, err)
		}
		if _, dup := next.byName[b.name]; dup {
			return fmt.Errorf("%w: duplicate target name %q", ErrInvalidOptions, b.name)
		}
		if prev, ok := old.byName[b.name]; ok && prev.metricsURL == b.metricsURL &&
			prev.healthURL == b.healthURL && prev.profile == b.profile && prev.rank == b.rank && prev.role == b.role {
			b = prev
		}
		next.list = append(next.list, b)
		next.byName[b.name] = b
	}
	s.fleet.Store(next)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}

func (s *Scraper) newBackend(t Target) (*backend, error) {
	if t.Name == "" {
		return nil, fmt.Errorf("%w: target without a name", ErrInvalidOptions)
	}
	prof := t.Engine
	if prof == nil {
		prof = s.defProfile
	}
	parsed := prof
	if t.Rank != "" {
		if prof.RankLabel == "" {
			return nil, fmt.Errorf("%w: target %q: rank %q, but profile %s has no RankLabel", ErrInvalidOptions, t.Name, t.Rank, prof.Name)
		}
		parsed = prof.forRank(t.Rank)
	}
	parser, err := NewParser(ParserOptions{Engine: parsed})
	if err != nil {
		return nil, err
	}
	mu, err := url.Parse(t.URL)
	if err != nil || (mu.Scheme != "http" && mu.Scheme != "https") || mu.Host == "" {
		return nil, fmt.Errorf("%w: target %q: bad URL %q", ErrInvalidOptions, t.Name, t.URL)
	}
	if mu.Path == "" || mu.Path == "/" {
		mu.Path = prof.MetricsPath
		if mu.Path == "" {
			mu.Path = "/metrics"
		}
	}
	health := t.HealthURL
	if health == "" && prof.HealthPath != "" {
		hu := url.URL{Scheme: mu.Scheme, Host: mu.Host, Path: prof.HealthPath}
		health = hu.String()
	} else if health != "" {
		hu, err := url.Parse(health)
		if err != nil || (hu.Scheme != "http" && hu.Scheme != "https") || hu.Host == "" {
			return nil, fmt.Errorf("%w: target %q: bad health URL %q", ErrInvalidOptions, t.Name, health)
		}
	}
	b := &backend{
		name:       t.Name,
		role:       t.Role,
		metricsURL: mu.String(),
		healthURL:  health,
		profile:    prof,
		rank:       t.Rank,
		parser:     parser,
	}
	b.state.Store(&State{Name: t.Name, Role: t.Role, Stale: true, Err: fmt.Errorf("%s: %w", t.Name, ErrNotScraped)})
	return b, nil
}

// Snapshot appends the current State of every backend to dst, in target order, and returns
// the extended slice. It does not lock and does not allocate when dst has room. O(backends).
func (s *Scraper) Snapshot(dst []State) []State {
	for _, b := range s.fleet.Load().list {
		dst = append(dst, *b.state.Load())
	}
	return dst
}

// State returns the current State of the named backend. O(1).
func (s *Scraper) State(name string) (State, bool) {
	b, ok := s.fleet.Load().byName[name]
	if !ok {
		return State{}, false
	}
	return *b.state.Load(), true
}

// BackendStates appends every backend's routing.BackendState to dst, in target order, and
// returns the extended slice: the argument of routing.Router.Update. It does not lock and
// does not allocate when dst has room. O(backends).
func (s *Scraper) BackendStates(dst []routing.BackendState) []routing.BackendState {
	for _, b := range s.fleet.Load().list {
		dst = append(dst, b.state.Load().BackendState())
	}
	return dst
}

// Close releases the idle keep-alive connections of the Scraper's own HTTP client (not of an
// Options.Client). Call it after Run has returned; a later scrape opens new connections.
func (s *Scraper) Close() {
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
}

// ScrapeOnce scrapes every backend once, at most Concurrency at a time, and returns when all
// are done: O(backends) requests and parses. It returns the scrape errors joined (each also
// recorded in its backend's State), or ctx.Err() if ctx ended first, in which case the
// backends not yet scraped keep their previous State. It does not call Options.OnUpdate.
func (s *Scraper) ScrapeOnce(ctx context.Context) error {
	list := s.fleet.Load().list
	errs := make([]error, len(list))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i, b := range list {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.scrape(ctx, b)
			<-sem
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// Run scrapes every backend once per Interval until ctx ends, then waits for the scrapes in
// flight and returns ctx.Err(). The first scrape of each backend happens at a random moment
// within the first Interval; each next one Interval plus a random jitter after the previous
// one started (at once if that moment has passed). At most Concurrency scrapes run at once;
// a slow or hanging backend delays only itself. Run returns ErrRunning if another Run is in
// progress.
//
// Scheduling is a heap of due times served by Run's own goroutine, O(log backends) per
// scrape; the only other goroutines are the scrapes themselves, all finished when Run
// returns.
func (s *Scraper) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)

	seed := s.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	randDur := func(d time.Duration) time.Duration {
		if d <= 0 {
			return 0
		}
		return time.Duration(rng.Int64N(int64(d)))
	}

	var (
		wg       sync.WaitGroup
		done     = make(chan *backend, s.concurrency)
		inflight = make(map[*backend]time.Time) // backend → start of its scrape
		h        dueHeap
		current  *fleet
		timer    = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	rebuild := func() {
		current = s.fleet.Load()
		old := make(map[*backend]time.Time, len(h))
		for _, e := range h {
			old[e.b] = e.due
		}
		h = h[:0]
		now := time.Now()
		for _, b := range current.list {
			if _, busy := inflight[b]; busy {
				continue // rescheduled when it completes
			}
			due, ok := old[b]
			if !ok {
				due = now.Add(randDur(s.interval))
			}
			h = append(h, dueEntry{b: b, due: due})
		}
		heap.Init(&h)
	}
	finish := func(b *backend) {
		start := inflight[b]
		delete(inflight, b)
		if current.byName[b.name] == b {
			heap.Push(&h, dueEntry{b: b, due: start.Add(s.interval + randDur(s.jitter))})
		}
	}
	select {
	case <-s.changed:
	default:
	}
	rebuild()

	for {
		now := time.Now()
		for len(inflight) < s.concurrency && len(h) > 0 && !h[0].due.After(now) {
			b := heap.Pop(&h).(dueEntry).b
			inflight[b] = now
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.scrape(ctx, b)
				done <- b // never blocks: at most Concurrency scrapes are in flight
			}()
		}
		var wake <-chan time.Time
		if len(inflight) < s.concurrency && len(h) > 0 {
			timer.Reset(h[0].due.Sub(now))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case b := <-done:
			finish(b)
			for drained := false; !drained; {
				select {
				case b := <-done:
					finish(b)
				default:
					drained = true
				}
			}
			if s.onUpdate != nil {
				s.onUpdate()
			}
		case <-wake:
		case <-s.changed:
			rebuild()
		}
	}
}

// scrape scrapes one backend and publishes its new State. A scrape cut short because ctx
// ended (not because of Timeout) publishes nothing.
func (s *Scraper) scrape(ctx context.Context, b *backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := s.now()
	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	reading, err := s.fetchMetrics(sctx, b)
	// answered: the liveness source (health endpoint, else the metrics endpoint) answered
	// at all; up: it answered that the server is fine.
	answered, up := err == nil || !errors.Is(err, errNoAnswer), err == nil
	var herr error
	if b.healthURL != "" {
		// Its own deadline: a server slow to render metrics can still say it is alive.
		hctx, hcancel := context.WithTimeout(ctx, s.timeout)
		herr = s.checkHealth(hctx, b)
		hcancel()
		answered, up = herr == nil || !errors.Is(herr, errNoAnswer), herr == nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	end := s.now()
	s.durations.Observe(end.Sub(start).Seconds())
	b.scrapes.Add(1)
	if err != nil {
		b.errs[classify(err)].Add(1)
	}
	if herr != nil {
		b.errs[reasonHealth].Add(1)
	}

	if err == nil {
		b.updateLocked(reading, end)
	}
	switch {
	case up:
		b.probeLocked(probeUp, s.unhealthyN)
	case answered:
		b.probeLocked(probeDown, s.unhealthyN)
	default:
		b.probeLocked(probeSilent, s.unhealthyN)
	}
	st := &State{
		Name:             b.name,
		Role:             b.role,
		Reading:          b.last,
		PrefixHitRate:    b.hitRate,
		HasPrefixHitRate: b.hasHitRate,
		Health:           b.health,
		Updated:          b.lastGood,
		Attempted:        end,
		Stale:            b.lastGood.IsZero() || end.Sub(b.lastGood) > s.staleAfter,
	}
	switch {
	case err != nil:
		st.Err = fmt.Errorf("%s: %w", b.name, err)
	case herr != nil:
		st.Err = fmt.Errorf("%s: %w", b.name, herr)
	}
	b.state.Store(st) // published: never modified again, Snapshot and State copy it
	return st.Err
}

// probe is what one liveness check learned.
type probe uint8

const (
	probeUp     probe = iota // the server answered that it is fine
	probeDown                // the server answered with an error
	probeSilent              // no answer at all (refused, reset, timed out)
)

// probeLocked updates the health verdict: an answer decides at once; silence makes the
// backend unhealthy only after unhealthyAfter silent probes in a row, and until then keeps
// the previous verdict (unknown if there was none).
func (b *backend) probeLocked(p probe, unhealthyAfter int) {
	switch p {
	case probeUp:
		b.health, b.misses = routing.Healthy, 0
	case probeDown:
		b.health, b.misses = routing.Unhealthy, 0
	default:
		b.misses++
		if b.misses >= unhealthyAfter {
			b.health = routing.Unhealthy
		}
	}
}

// updateLocked records a good reading taken at now and updates the prefix hit rate.
func (b *backend) updateLocked(r Reading, now time.Time) {
	b.last = r
	b.lastGood = now
	if r.Found.Has(HasPrefixHits | HasPrefixQueries) {
		if b.hasPrev {
			dh, dq := r.PrefixHits-b.prevHits, r.PrefixQueries-b.prevQueries
			if dh < 0 || dq < 0 {
				// A counter went down: the server restarted and its counters
				// began again at zero, so everything they hold is new.
				dh, dq = r.PrefixHits, r.PrefixQueries
			}
			if dq > 0 {
				b.hitRate = min(max(dh/dq, 0), 1)
				b.hasHitRate = true
			}
			// No new queries: keep the rate of the last interval that had some.
		} else if r.Found.Has(HasPrefixHitRate) {
			// First sight of the counters: no rate yet, the server's gauge stands in.
			b.hitRate, b.hasHitRate = r.PrefixHitRate, true
		}
		b.prevHits, b.prevQueries, b.hasPrev = r.PrefixHits, r.PrefixQueries, true
		return
	}
	b.hasPrev = false
	if r.Found.Has(HasPrefixHitRate) {
		b.hitRate, b.hasHitRate = r.PrefixHitRate, true
		return
	}
	b.hitRate, b.hasHitRate = 0, false
}

// fetchMetrics GETs and parses the metrics endpoint.
func (s *Scraper) fetchMetrics(ctx context.Context, b *backend) (Reading, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.metricsURL, nil)
	if err != nil {
		return Reading{}, fmt.Errorf("metrics: bad request: %w", err)
	}
	req.Header.Set("Accept", s.accept)
	req.Header.Set("User-Agent", "usher-metrics")
	resp, err := s.client.Do(req)
	if err != nil {
		return Reading{}, requestError(ctx, err)
	}
	defer closeBody(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Reading{}, fmt.Errorf("%w: metrics endpoint answered %d", ErrStatus, resp.StatusCode)
	}
	b.buf.Reset()
	if _, err := b.buf.ReadFrom(io.LimitReader(resp.Body, s.maxBody+1)); err != nil {
		return Reading{}, requestError(ctx, err)
	}
	if int64(b.buf.Len()) > s.maxBody {
		return Reading{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, s.maxBody)
	}
	return b.parser.Parse(b.buf.Bytes(), resp.Header.Get("Content-Type"))
}

// checkHealth GETs the health endpoint; any 2xx is healthy.
func (s *Scraper) checkHealth(ctx context.Context, b *backend) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.healthURL, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	req.Header.Set("User-Agent", "usher-metrics")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnhealthy, requestError(ctx, err))
	}
	defer closeBody(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: health endpoint answered %d", ErrUnhealthy, resp.StatusCode)
	}
	return nil
}

// errNoAnswer marks errors where the server gave no answer at all (refused connection,
// timeout, broken transfer), as opposed to an answer that was an error.
var errNoAnswer = errors.New("no answer")

// requestError wraps a client error as ErrTimeout when the scrape's deadline passed; both
// kinds are errNoAnswer.
func requestError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w): %w", ErrTimeout, errNoAnswer, err)
	}
	return fmt.Errorf("metrics: request failed (%w): %w", errNoAnswer, err)
}

func classify(err error) reason {
	switch {
	case errors.Is(err, ErrTimeout):
		return reasonTimeout
	case errors.Is(err, ErrStatus):
		return reasonStatus
	case errors.Is(err, ErrTooLarge):
		return reasonTooLarge
	case errors.Is(err, ErrParse):
		return reasonParse
	}
	return reasonTransport
}

// closeBody drains a little of the body so the connection can be reused, then closes it.
func closeBody(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 4<<10)
	_ = body.Close()
}

// dueHeap orders backends by their next scrape time; used only by Run's goroutine.
type dueEntry struct {
	b   *backend
	due time.Time
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
