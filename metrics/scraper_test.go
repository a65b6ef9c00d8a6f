package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
)

// fakeServer is a model server on a real loopback socket whose exposition, content type and
// health status the test changes between scrapes.
type fakeServer struct {
	*httptest.Server
	body        atomic.Pointer[[]byte]
	contentType atomic.Pointer[string]
	metricsCode atomic.Int32 // 0 means 200
	healthCode  atomic.Int32 // 0 means 200
	hang        atomic.Bool  // block /metrics until the client gives up
	accept      atomic.Pointer[string]
	metricsHits atomic.Int64
	healthHits  atomic.Int64
}

func newFakeServer(t *testing.T, body []byte) *fakeServer {
	t.Helper()
	return newFakeServerPath(t, "/metrics", body)
}

func newFakeServerPath(t *testing.T, path string, body []byte) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.setBody(body, ContentTypeText)
	mux := http.NewServeMux()
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		f.metricsHits.Add(1)
		a := r.Header.Get("Accept")
		f.accept.Store(&a)
		if f.hang.Load() {
			<-r.Context().Done()
			return
		}
		if c := f.metricsCode.Load(); c != 0 {
			http.Error(w, "engine error", int(c))
			return
		}
		w.Header().Set("Content-Type", *f.contentType.Load())
		_, _ = w.Write(*f.body.Load())
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		f.healthHits.Add(1)
		if c := f.healthCode.Load(); c != 0 {
			w.WriteHeader(int(c))
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) setBody(body []byte, contentType string) {
	f.body.Store(&body)
	f.contentType.Store(&contentType)
}

// fakeClock is an injected clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustScraper(t *testing.T, opts Options) *Scraper {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func mustState(t *testing.T, s *Scraper, name string) State {
	t.Helper()
	st, ok := s.State(name)
	if !ok {
		t.Fatalf("State(%q): unknown backend", name)
	}
	return st
}

func vllmBody(t testing.TB, running, waiting int, kv, queries, hits float64) []byte {
	return vllmExposition(t, "vllm.txt", vllmLoad{running: running, waiting: waiting, kv: kv, queries: queries, hits: hits})
}

func TestScrapeOnceAllProfiles(t *testing.T) {
	clock := newFakeClock()
	servers := map[string]*fakeServer{
		"vllm":   newFakeServer(t, vllmBody(t, 5, 2, 0.25, 1000, 300)),
		"sglang": newFakeServer(t, readTestdata(t, "sglang.txt")),
		"trtllm": newFakeServerPath(t, "/prometheus/metrics", readTestdata(t, "trtllm.txt")),
		"triton": newFakeServer(t, readTestdata(t, "triton.txt")),
		"tgi":    newFakeServer(t, readTestdata(t, "tgi.txt")),
	}
	s := mustScraper(t, Options{
		Now: clock.Now,
		Targets: []Target{
			{Name: "vllm", URL: servers["vllm"].URL + "/metrics"},
			{Name: "sglang", URL: servers["sglang"].URL, Engine: engineSGLang},
			{Name: "trtllm", URL: servers["trtllm"].URL, Engine: engineTensorRTLLM, Role: routing.RolePrefill},
			{Name: "triton", URL: servers["triton"].URL + "/metrics", Engine: engineTriton,
				HealthURL: servers["triton"].URL + "/health"},
			{Name: "tgi", URL: servers["tgi"].URL, Engine: engineTGI},
		},
	})
	if err := s.ScrapeOnce(context.Background()); err != nil {
		t.Fatalf("ScrapeOnce: %v", err)
	}
	now := clock.Now()
	want := map[string]routing.BackendState{
		"vllm": {Name: "vllm", Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.AllSignals,
			Queued: 2, Running: 5, KVUtilization: 0.25, KVCapacityBlocks: 27153, BlockSize: 16},
		"sglang": {Name: "sglang", Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.AllSignals,
			Queued: 8, Running: 40, KVUtilization: 0.54, KVCapacityBlocks: 80000, BlockSize: 16},
		"trtllm": {Name: "trtllm", Role: routing.RolePrefill, Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.AllSignals,
			Queued: 2, Running: 30, KVUtilization: 0.375, KVCapacityBlocks: 16384, BlockSize: 32},
		"triton": {Name: "triton", Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.AllSignals,
			Queued: 9, Running: 57, KVUtilization: 0.625, KVCapacityBlocks: 8000, BlockSize: 64},
		"tgi": {Name: "tgi", Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.SignalQueued | routing.SignalRunning,
			Queued: 7, Running: 24},
	}
	got := s.BackendStates(nil)
	if len(got) != len(want) {
		t.Fatalf("BackendStates returned %d states, want %d", len(got), len(want))
	}
	for _, bs := range got {
		w := want[bs.Name]
		if bs.KVUtilization-w.KVUtilization > 1e-9 || w.KVUtilization-bs.KVUtilization > 1e-9 {
			t.Errorf("%s: KVUtilization = %v, want %v", bs.Name, bs.KVUtilization, w.KVUtilization)
		}
		bs.KVUtilization = w.KVUtilization
		if !reflect.DeepEqual(bs, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", bs.Name, bs, w)
		}
	}
	for name, srv := range servers {
		st := mustState(t, s, name)
		if st.Err != nil || st.Stale {
			t.Errorf("%s: Err = %v, Stale = %v; want a fresh good scrape", name, st.Err, st.Stale)
		}
		if srv.metricsHits.Load() != 1 {
			t.Errorf("%s: metrics endpoint hit %d times, want 1", name, srv.metricsHits.Load())
		}
		if srv.healthHits.Load() != 1 && name != "tgi-no-health" {
			t.Errorf("%s: health endpoint hit %d times, want 1", name, srv.healthHits.Load())
		}
	}
	// The vLLM hit rate needs two scrapes; SGLang's gauge stands in on the first.
	if ok := mustState(t, s, "vllm").HasPrefixHitRate; ok {
		t.Error("vllm: a hit rate after one scrape of counters")
	}
	if st := mustState(t, s, "sglang"); !st.HasPrefixHitRate || st.PrefixHitRate != 0.6 {
		r, ok := st.PrefixHitRate, st.HasPrefixHitRate
		t.Errorf("sglang: PrefixHitRate = %v, %v; want the gauge's 0.6", r, ok)
	}
	if st := mustState(t, s, "trtllm"); !st.HasPrefixHitRate || st.PrefixHitRate != 0.61 {
		r, ok := st.PrefixHitRate, st.HasPrefixHitRate
		t.Errorf("trtllm: PrefixHitRate = %v, %v; want the gauge's 0.61", r, ok)
	}
}

func TestScrapeTimeout(t *testing.T) {
	slow := newFakeServer(t, vllmBody(t, 1, 1, 0.1, 0, 0))
	fast := newFakeServer(t, vllmBody(t, 3, 0, 0.2, 0, 0))
	slow.hang.Store(true)
	s := mustScraper(t, Options{
		Timeout: 500 * time.Millisecond, // generous: the fast backend must never time out on a loaded machine
		Targets: []Target{{Name: "slow", URL: slow.URL}, {Name: "fast", URL: fast.URL}},
	})
	err := s.ScrapeOnce(context.Background())
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("ScrapeOnce error = %v, want ErrTimeout", err)
	}
	if st := mustState(t, s, "slow"); !errors.Is(st.Err, ErrTimeout) || st.Reading.Found.Has(HasWaiting) || !st.Stale {
		t.Errorf("slow: Err = %v, Known(Waiting) = %v, Stale = %v; want timeout, nothing known, stale",
			st.Err, st.Reading.Found.Has(HasWaiting), st.Stale)
	}
	if st := mustState(t, s, "fast"); st.Err != nil || toInt(st.Reading.Running) != 3 {
		t.Errorf("fast: Err = %v, Running = %d; the slow backend must not hold it back", st.Err, toInt(st.Reading.Running))
	}
	if got := s.scrapeErrors("slow", reasonTimeout); got != 1 {
		t.Errorf("timeout errors = %d, want 1", got)
	}
	// The health endpoint answered, so the backend is not declared dead for a slow scrape.
	if h := mustState(t, s, "slow").Health; h != routing.Healthy {
		t.Errorf("slow: Health = %v, want healthy (its /health answers)", h)
	}
}

// scrapeErrors reads one error counter; a test helper.
func (s *Scraper) scrapeErrors(name string, r reason) uint64 {
	return s.fleet.Load().byName[name].errs[r].Load()
}

func TestScrapeFailingBackends(t *testing.T) {
	good := newFakeServer(t, vllmBody(t, 1, 0, 0.5, 0, 0))
	broken := newFakeServer(t, vllmBody(t, 1, 0, 0.5, 0, 0))
	broken.metricsCode.Store(http.StatusInternalServerError)
	dead := newFakeServer(t, nil)
	deadURL := dead.URL
	dead.Close()
	garbage := newFakeServer(t, []byte("<html>502 Bad Gateway</html>\n"))
	sick := newFakeServer(t, vllmBody(t, 1, 0, 0.5, 0, 0))
	sick.healthCode.Store(http.StatusServiceUnavailable)

	s := mustScraper(t, Options{
		UnhealthyAfter: 2,
		Targets: []Target{
			{Name: "good", URL: good.URL},
			{Name: "broken", URL: broken.URL},
			{Name: "dead", URL: deadURL},
			{Name: "garbage", URL: garbage.URL},
			{Name: "sick", URL: sick.URL},
		},
	})
	type want struct {
		err    error
		reason reason
		health routing.Health
	}
	steps := []map[string]want{
		{ // first attempt
			"good":    {nil, 0, routing.Healthy},
			"broken":  {ErrStatus, reasonStatus, routing.Healthy},
			"dead":    {errNoAnswer, reasonTransport, routing.HealthUnknown},
			"garbage": {ErrParse, reasonParse, routing.Healthy},
			"sick":    {ErrUnhealthy, reasonHealth, routing.Unhealthy},
		},
		{ // second attempt: the dead backend reaches UnhealthyAfter
			"good":    {nil, 0, routing.Healthy},
			"broken":  {ErrStatus, reasonStatus, routing.Healthy},
			"dead":    {errNoAnswer, reasonTransport, routing.Unhealthy},
			"garbage": {ErrParse, reasonParse, routing.Healthy},
			"sick":    {ErrUnhealthy, reasonHealth, routing.Unhealthy},
		},
	}
	for i, step := range steps {
		err := s.ScrapeOnce(context.Background())
		if err == nil {
			t.Fatalf("step %d: ScrapeOnce succeeded with four failing backends", i)
		}
		for name, w := range step {
			st := mustState(t, s, name)
			if w.err == nil {
				if st.Err != nil {
					t.Errorf("step %d: %s: Err = %v, want nil", i, name, st.Err)
				}
			} else {
				if !errors.Is(st.Err, w.err) {
					t.Errorf("step %d: %s: Err = %v, want %v", i, name, st.Err, w.err)
				}
				if !errors.Is(err, w.err) {
					t.Errorf("step %d: ScrapeOnce error lacks %s's %v", i, name, w.err)
				}
				if got := s.scrapeErrors(name, w.reason); got != uint64(i+1) {
					t.Errorf("step %d: %s: %s errors = %d, want %d", i, name, reasonNames[w.reason], got, i+1)
				}
			}
			if st.Health != w.health {
				t.Errorf("step %d: %s: Health = %v, want %v", i, name, st.Health, w.health)
			}
		}
	}
	// A sick server's metrics are still read: the router decides what to do with them.
	if st := mustState(t, s, "sick"); !st.Reading.Found.Has(HasWaiting) || st.Stale {
		t.Errorf("sick: metrics not read (Known %v, Stale %v)", st.Reading.Found.Has(HasWaiting), st.Stale)
	}
	// Recovery: a good answer makes the dead backend healthy again at once.
	sick.healthCode.Store(0)
	if err := s.ScrapeOnce(context.Background()); err == nil {
		t.Fatal("ScrapeOnce succeeded with three failing backends")
	}
	if h := mustState(t, s, "sick").Health; h != routing.Healthy {
		t.Errorf("sick after recovery: Health = %v, want healthy", h)
	}
}

func TestStaleness(t *testing.T) {
	clock := newFakeClock()
	srv := newFakeServer(t, vllmBody(t, 4, 1, 0.5, 0, 0))
	s := mustScraper(t, Options{
		Now:        clock.Now,
		StaleAfter: 2 * time.Second,
		Targets:    []Target{{Name: "a", URL: srv.URL}},
	})
	st := mustState(t, s, "a")
	if !st.Stale || !errors.Is(st.Err, ErrNotScraped) || st.Health != routing.HealthUnknown || !st.Updated.IsZero() {
		t.Fatalf("before any scrape: Stale %v, Err %v, Health %v, Updated %v; want stale, ErrNotScraped, unknown, zero",
			st.Stale, st.Err, st.Health, st.Updated)
	}
	if bs := st.BackendState(); bs.Known != 0 || !bs.UpdatedAt.IsZero() {
		t.Errorf("before any scrape: BackendState %+v, want nothing known", bs)
	}
	t0 := clock.Now()
	steps := []struct {
		advance   time.Duration
		code      int32
		wantStale bool
		wantErr   error
	}{
		{0, 0, false, nil},
		{time.Second, 500, false, ErrStatus},           // 1s since the good scrape
		{time.Second, 500, false, ErrStatus},           // 2s: at the limit, not beyond
		{500 * time.Millisecond, 500, true, ErrStatus}, // 2.5s: stale
		{time.Second, 0, false, nil},                   // recovered
	}
	lastGood := t0
	for i, step := range steps {
		clock.Advance(step.advance)
		srv.metricsCode.Store(step.code)
		_ = s.ScrapeOnce(context.Background())
		st := mustState(t, s, "a")
		if step.wantErr == nil {
			lastGood = clock.Now()
		}
		if st.Stale != step.wantStale || !errors.Is(st.Err, step.wantErr) && step.wantErr != nil ||
			step.wantErr == nil && st.Err != nil {
			t.Errorf("step %d: Stale %v, Err %v; want %v, %v", i, st.Stale, st.Err, step.wantStale, step.wantErr)
		}
		if !st.Updated.Equal(lastGood) || !st.Attempted.Equal(clock.Now()) {
			t.Errorf("step %d: Updated %v, Attempted %v; want %v, %v", i, st.Updated, st.Attempted, lastGood, clock.Now())
		}
		// Values of the last good scrape survive failures, with their honest time.
		if bs := st.BackendState(); bs.Queued != 1 || bs.Running != 4 || !bs.UpdatedAt.Equal(lastGood) {
			t.Errorf("step %d: BackendState %+v, want the last good values at %v", i, bs, lastGood)
		}
	}
}

func TestOpenMetricsNegotiation(t *testing.T) {
	load := vllmLoad{running: 6, waiting: 3, kv: 0.75, queries: 10, hits: 5}
	text := vllmExposition(t, "vllm.txt", load)
	om := vllmExposition(t, "vllm.om.txt", load)
	for _, prefer := range []bool{false, true} {
		t.Run(fmt.Sprintf("PreferOpenMetrics=%v", prefer), func(t *testing.T) {
			var served atomic.Pointer[string]
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/health" {
					return
				}
				// Serve whichever of the two formats the client ranks first, as
				// prometheus_client does.
				accept := r.Header.Get("Accept")
				ct, body := ContentTypeText, text
				if strings.HasPrefix(accept, "application/openmetrics-text") {
					ct, body = ContentTypeOpenMetrics, om
				}
				served.Store(&ct)
				w.Header().Set("Content-Type", ct)
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			s := mustScraper(t, Options{PreferOpenMetrics: prefer, Targets: []Target{{Name: "a", URL: srv.URL}}})
			if err := s.ScrapeOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			wantCT := ContentTypeText
			if prefer {
				wantCT = ContentTypeOpenMetrics
			}
			if got := *served.Load(); got != wantCT {
				t.Errorf("server chose %q, want %q", got, wantCT)
			}
			st := mustState(t, s, "a")
			if toInt(st.Reading.Waiting) != 3 || toInt(st.Reading.Running) != 6 || st.Reading.KVUtilization != 0.75 || toInt(st.Reading.NumBlocks) != 27153 {
				t.Errorf("reading %+v", st.Reading)
			}
		})
	}
}

func TestPrefixHitRateBetweenScrapes(t *testing.T) {
	srv := newFakeServer(t, nil)
	s := mustScraper(t, Options{Targets: []Target{{Name: "a", URL: srv.URL}}})
	steps := []struct {
		queries, hits float64
		want          float64
		wantOK        bool
		note          string
	}{
		{1000, 400, 0, false, "one reading of the counters: no rate yet"},
		{2000, 1000, 0.6, true, "Δhits 600 / Δqueries 1000"},
		{2000, 1000, 0.6, true, "no new queries: keep the last rate"},
		{2500, 1100, 0.2, true, "Δ100 / Δ500"},
		{400, 300, 0.75, true, "server restarted: the counters count from zero"},
		{1400, 1200, 0.9, true, "after the reset, deltas again"},
		{1400, 1500, 0.9, true, "hits went up without queries: keep the last rate"},
	}
	for i, step := range steps {
		srv.setBody(vllmBody(t, 1, 0, 0.1, step.queries, step.hits), ContentTypeText)
		if err := s.ScrapeOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := mustState(t, s, "a")
		got, ok := st.PrefixHitRate, st.HasPrefixHitRate
		if ok != step.wantOK || (ok && (got-step.want > 1e-9 || step.want-got > 1e-9)) {
			t.Errorf("step %d (%s): PrefixHitRate = %v, %v; want %v, %v", i, step.note, got, ok, step.want, step.wantOK)
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	srv := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	s := mustScraper(t, Options{MaxBodyBytes: 512, Targets: []Target{{Name: "a", URL: srv.URL}}})
	if err := s.ScrapeOnce(context.Background()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ScrapeOnce error = %v, want ErrTooLarge", err)
	}
	if got := s.scrapeErrors("a", reasonTooLarge); got != 1 {
		t.Errorf("too_large errors = %d, want 1", got)
	}
}

func TestScrapeOnceCancelled(t *testing.T) {
	srv := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	srv.hang.Store(true)
	s := mustScraper(t, Options{Timeout: time.Minute, Targets: []Target{{Name: "a", URL: srv.URL}}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for srv.metricsHits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := s.ScrapeOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ScrapeOnce error = %v, want context.Canceled", err)
	}
	// A scrape cut short by the caller publishes nothing and counts no error.
	if st := mustState(t, s, "a"); !errors.Is(st.Err, ErrNotScraped) {
		t.Errorf("Err = %v, want the untouched ErrNotScraped", st.Err)
	}
	for r := range numReasons {
		if got := s.scrapeErrors("a", r); got != 0 {
			t.Errorf("%s errors = %d, want 0", reasonNames[r], got)
		}
	}
}

func TestSetTargets(t *testing.T) {
	a := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	b := newFakeServer(t, vllmBody(t, 2, 0, 0.2, 0, 0))
	s := mustScraper(t, Options{Targets: []Target{{Name: "a", URL: a.URL}, {Name: "b", URL: b.URL}}})
	if err := s.ScrapeOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Keep a, move b to a new URL, add c.
	c := newFakeServer(t, vllmBody(t, 3, 0, 0.3, 0, 0))
	if err := s.SetTargets([]Target{{Name: "c", URL: c.URL}, {Name: "a", URL: a.URL}, {Name: "b", URL: c.URL}}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range s.Snapshot(nil) {
		names = append(names, st.Name)
	}
	if got := strings.Join(names, ","); got != "c,a,b" {
		t.Errorf("Snapshot order %s, want c,a,b", got)
	}
	if st := mustState(t, s, "a"); toInt(st.Reading.Running) != 1 || st.Err != nil {
		t.Errorf("a lost its state across SetTargets: %+v", st.Reading)
	}
	if st := mustState(t, s, "b"); !errors.Is(st.Err, ErrNotScraped) {
		t.Errorf("b moved to a new URL but kept its state: Err = %v", st.Err)
	}
	if _, ok := s.State("gone"); ok {
		t.Error("State of an unknown backend")
	}
	for _, bad := range [][]Target{
		{{Name: "x", URL: a.URL}, {Name: "x", URL: b.URL}},
		{{Name: "", URL: a.URL}},
		{{Name: "x", URL: "ftp://host/metrics"}},
		{{Name: "x", URL: "http://"}},
		{{Name: "x", URL: a.URL, HealthURL: "::bad"}},
		{{Name: "x", URL: a.URL, Engine: &Engine{Name: "empty"}}},
	} {
		if err := s.SetTargets(bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SetTargets(%+v) = %v, want ErrInvalidOptions", bad, err)
		}
	}
	if len(s.Snapshot(nil)) != 3 {
		t.Errorf("a failed SetTargets changed the fleet: Len = %d, want 3", len(s.Snapshot(nil)))
	}
}

func TestNewOptions(t *testing.T) {
	for _, opts := range []Options{
		{Interval: -1}, {Timeout: -1}, {StaleAfter: -1}, {Concurrency: -1}, {MaxBodyBytes: -1},
		{UnhealthyAfter: -1}, {Engine: &Engine{Name: "empty"}},
	} {
		if _, err := New(opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", opts, err)
		}
	}
	s := mustScraper(t, Options{})
	if s.interval != 100*time.Millisecond || s.jitter != 10*time.Millisecond || s.timeout != time.Second ||
		s.staleAfter != 2*time.Second || s.concurrency != 16 || s.unhealthyN != 3 || s.defProfile != engineVLLM {
		t.Errorf("defaults: %+v", s)
	}
	if err := s.ScrapeOnce(context.Background()); err != nil || len(s.Snapshot(nil)) != 0 {
		t.Errorf("empty scraper: ScrapeOnce = %v, Len = %d", err, len(s.Snapshot(nil)))
	}
}

func TestTargetURLs(t *testing.T) {
	s := mustScraper(t, Options{Targets: []Target{
		{Name: "base", URL: "http://10.0.0.7:8000"},
		{Name: "slash", URL: "http://10.0.0.7:8000/"},
		{Name: "full", URL: "http://10.0.0.7:8000/custom/metrics"},
		{Name: "trt", URL: "http://10.0.0.8:8000", Engine: engineTensorRTLLM},
		{Name: "triton", URL: "http://10.0.0.9:8002/metrics", Engine: engineTriton},
		{Name: "triton-health", URL: "http://10.0.0.9:8002/metrics", Engine: engineTriton, HealthURL: "http://10.0.0.9:8000/v2/health/ready"},
	}})
	want := map[string][2]string{
		"base":          {"http://10.0.0.7:8000/metrics", "http://10.0.0.7:8000/health"},
		"slash":         {"http://10.0.0.7:8000/metrics", "http://10.0.0.7:8000/health"},
		"full":          {"http://10.0.0.7:8000/custom/metrics", "http://10.0.0.7:8000/health"},
		"trt":           {"http://10.0.0.8:8000/prometheus/metrics", "http://10.0.0.8:8000/health"},
		"triton":        {"http://10.0.0.9:8002/metrics", ""},
		"triton-health": {"http://10.0.0.9:8002/metrics", "http://10.0.0.9:8000/v2/health/ready"},
	}
	for name, w := range want {
		b := s.fleet.Load().byName[name]
		if b.metricsURL != w[0] || b.healthURL != w[1] {
			t.Errorf("%s: metrics %q health %q, want %q %q", name, b.metricsURL, b.healthURL, w[0], w[1])
		}
	}
}

func TestRun(t *testing.T) {
	a := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	b := newFakeServer(t, vllmBody(t, 2, 0, 0.2, 0, 0))
	var updates atomic.Int64
	var inUpdate, overlapped atomic.Bool
	s := mustScraper(t, Options{
		Interval:    5 * time.Millisecond,
		Concurrency: 1,
		Seed:        7,
		OnUpdate: func() {
			// The single writer of a router: never called concurrently with itself.
			if inUpdate.Swap(true) {
				overlapped.Store(true)
			}
			updates.Add(1)
			inUpdate.Store(false)
		},
		Targets: []Target{{Name: "a", URL: a.URL}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	waitFor(t, "three scrapes of a", func() bool { return a.metricsHits.Load() >= 3 })
	if err := s.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	// A target added while running is picked up; a removed one is no longer scraped.
	if err := s.SetTargets([]Target{{Name: "b", URL: b.URL}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three scrapes of b", func() bool { return b.metricsHits.Load() >= 3 })
	hitsA := a.metricsHits.Load()
	waitFor(t, "three more scrapes of b", func() bool { return b.metricsHits.Load() >= 6 })
	if got := a.metricsHits.Load(); got > hitsA+1 {
		t.Errorf("a scraped %d more times after its removal", got-hitsA)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if updates.Load() == 0 {
		t.Error("OnUpdate never called")
	}
	if overlapped.Load() {
		t.Error("OnUpdate called concurrently with itself")
	}
	if st := mustState(t, s, "b"); toInt(st.Reading.Running) != 2 || st.Err != nil {
		t.Errorf("b: Running %d, Err %v", toInt(st.Reading.Running), st.Err)
	}
	// Run can be called again after it returned.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := s.Run(ctx2); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after Run = %v, want context.Canceled", err)
	}
}

// TestRunSlowBackend checks that a hanging backend holds back only itself.
func TestRunSlowBackend(t *testing.T) {
	slow := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	slow.hang.Store(true)
	fast := newFakeServer(t, vllmBody(t, 2, 0, 0.2, 0, 0))
	s := mustScraper(t, Options{
		Interval: 5 * time.Millisecond,
		Timeout:  time.Minute,
		Targets:  []Target{{Name: "slow", URL: slow.URL}, {Name: "fast", URL: fast.URL}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "ten scrapes of the fast backend", func() bool { return fast.metricsHits.Load() >= 10 })
	if got := slow.metricsHits.Load(); got != 1 {
		t.Errorf("slow backend scraped %d times while its first scrape hangs, want 1", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// waitFor polls cond; the deadline is generous and only catches a hung test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFeedsRouter scrapes real loopback servers and hands the states to a routing.Router.
func TestFeedsRouter(t *testing.T) {
	clock := newFakeClock()
	busy := newFakeServer(t, vllmBody(t, 30, 12, 0.9, 0, 0))
	idle := newFakeServer(t, vllmBody(t, 2, 0, 0.1, 0, 0))
	sick := newFakeServer(t, vllmBody(t, 0, 0, 0.0, 0, 0))
	sick.healthCode.Store(http.StatusServiceUnavailable)
	s := mustScraper(t, Options{Now: clock.Now, Targets: []Target{
		{Name: "busy", URL: busy.URL}, {Name: "idle", URL: idle.URL}, {Name: "sick", URL: sick.URL},
	}})
	r, err := routing.New(routing.Options{
		Profile: routing.Profile{
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: load.QueueDepth(), Weight: 2}, {Scorer: load.KV(), Weight: 2}},
		},
		Now:  clock.Now,
		Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ScrapeOnce(context.Background()); err == nil {
		t.Fatal("ScrapeOnce: the sick backend's health error is missing")
	}
	buf := make([]routing.BackendState, 0, 3)
	if err := r.Update(s.BackendStates(buf)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		res, err := r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Backend.Name != "idle" {
			t.Errorf("pick %d: %s, want idle (sick is unhealthy, busy is loaded)", i, res.Backend.Name)
		}
		res.Done(routing.DoneInfo{})
	}
	// The loads swap; after the next scrape the router follows.
	busy.setBody(vllmBody(t, 1, 0, 0.05, 0, 0), ContentTypeText)
	idle.setBody(vllmBody(t, 40, 20, 0.95, 0, 0), ContentTypeText)
	clock.Advance(100 * time.Millisecond)
	_ = s.ScrapeOnce(context.Background())
	if err := r.Update(s.BackendStates(buf[:0])); err != nil {
		t.Fatal(err)
	}
	res, err := r.Pick(&routing.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Backend.Name != "busy" {
		t.Errorf("after the swap: picked %s, want busy", res.Backend.Name)
	}
	res.Done(routing.DoneInfo{})
}

func TestAllocs(t *testing.T) {
	srv := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	s := mustScraper(t, Options{Targets: []Target{{Name: "a", URL: srv.URL}, {Name: "b", URL: srv.URL}}})
	if err := s.ScrapeOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	states := make([]State, 0, 2)
	bs := make([]routing.BackendState, 0, 2)
	st := mustState(t, s, "a")
	for name, f := range map[string]func(){
		"Snapshot":      func() { states = s.Snapshot(states[:0]) },
		"BackendStates": func() { bs = s.BackendStates(bs[:0]) },
		"BackendState":  func() { bs = append(bs[:0], st.BackendState()) },
		"State":         func() { st, _ = s.State("b") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", name, n)
		}
	}
}

// newBenchServer serves body at /metrics and 200 at /health on a loopback socket.
func newBenchServer(b *testing.B, body []byte) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentTypeText)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return srv.URL
}

// TestScrapeConcurrencyBound holds every metrics request open and releases them one by one:
// never more than Concurrency are in flight.
func TestScrapeConcurrencyBound(t *testing.T) {
	const backends, limit = 6, 2
	body := vllmBody(t, 1, 0, 0.1, 0, 0)
	var inflight, peak, served atomic.Int64
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inflight.Add(-1)
		served.Add(1)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	targets := make([]Target, backends)
	for i := range targets {
		targets[i] = Target{Name: fmt.Sprint("b", i), URL: srv.URL}
	}
	s := mustScraper(t, Options{Concurrency: limit, Timeout: time.Minute, Targets: targets})
	done := make(chan error, 1)
	go func() { done <- s.ScrapeOnce(context.Background()) }()
	for i := range backends {
		waitFor(t, "a blocked scrape", func() bool { return inflight.Load() == min(limit, int64(backends-i)) })
		release <- struct{}{}
		waitFor(t, "the released scrape", func() bool { return served.Load() == int64(i+1) })
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := peak.Load(); got != limit {
		t.Errorf("peak in-flight scrapes = %d, want %d", got, limit)
	}
}

// A vLLM server with two data-parallel engines is scraped as two backends, one per rank: each
// reads its own engine's series, and both read the cache geometry.
func TestScrapeRanks(t *testing.T) {
	body := []byte(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 7
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1
`)
	srv := newFakeServer(t, body)
	clock := newFakeClock()
	s := mustScraper(t, Options{Now: clock.Now, Targets: []Target{
		{Name: "all", URL: srv.URL},
		{Name: "r0", URL: srv.URL, Rank: "0"},
		{Name: "r1", URL: srv.URL, Rank: "1"},
	}})
	if err := s.ScrapeOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]routing.BackendState{}
	for _, st := range s.BackendStates(nil) {
		got[st.Name] = st
	}
	for name, want := range map[string]struct {
		running, queued, blocks int
		kv                      float64
	}{"all": {10, 5, 1000, 0.5}, "r0": {3, 1, 1000, 0.25}, "r1": {7, 4, 1000, 0.75}} {
		st := got[name]
		if st.Running != want.running || st.Queued != want.queued || st.KVCapacityBlocks != want.blocks || st.KVUtilization != want.kv {
			t.Errorf("%s: running %d queued %d blocks %d kv %v, want %+v", name, st.Running, st.Queued, st.KVCapacityBlocks, st.KVUtilization, want)
		}
	}
	if _, err := New(Options{Targets: []Target{{Name: "x", URL: srv.URL, Rank: "0", Engine: engineTGI}}}); err == nil {
		t.Error("a rank on a profile without RankLabel was accepted")
	}
}
