package healthcheck_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
)

// engine is a model server's probe endpoints, with switches a test flips.
type engine struct {
	health, completions, models atomic.Int64 // requests seen
	down                        atomic.Bool  // close every connection at once
	hold                        atomic.Bool  // hold completions' headers until the client leaves
	noCompletions               atomic.Bool  // answer completions 404
	userAgent                   atomic.Value
	srv                         *httptest.Server
}

func newEngine(t *testing.T) *engine {
	e := &engine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.userAgent.Store(r.Header.Get("User-Agent"))
		if e.down.Load() {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		switch r.URL.Path {
		case "/health":
			e.health.Add(1)
		case "/v1/models":
			e.models.Add(1)
			fmt.Fprint(w, `{"object":"list","data":[{"id":"lora-a","parent":"base"},{"id":"base"}]}`)
		case "/v1/completions":
			e.completions.Add(1)
			body := readAll(r) // then the server notices the client leave
			if e.noCompletions.Load() {
				http.Error(w, `{"error":{"message":"no"}}`, http.StatusNotFound)
				return
			}
			if e.hold.Load() {
				<-r.Context().Done()
				return
			}
			if !strings.Contains(body, `"model":"base"`) {
				http.Error(w, "wrong model", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"!\"}]}\n\ndata: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func readAll(r *http.Request) string {
	var b strings.Builder
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// fixture is a router over the engines with a Detector, and a running Checker.
type fixture struct {
	r      *routing.Router
	det    *outlier.Detector
	names  []string
	mu     sync.Mutex
	probes map[string][]error
}

func start(t *testing.T, engines []*engine, o healthcheck.Options) *fixture {
	t.Helper()
	det, err := outlier.New(outlier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := routing.New(routing.Options{Profile: outlier.With(routing.Profile{
		Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}},
	}, det, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{r: r, det: det, probes: map[string][]error{}}
	var states []routing.BackendState
	for _, e := range engines {
		f.names = append(f.names, e.srv.URL)
		states = append(states, routing.BackendState{Name: e.srv.URL, Health: routing.Healthy, UpdatedAt: time.Now()})
		o.Hosts = append(o.Hosts, healthcheck.Host{Name: e.srv.URL, URL: e.srv.URL})
	}
	if err := r.Update(states); err != nil {
		t.Fatal(err)
	}
	o.Router = r
	o.OnProbe = func(name string, err error) {
		f.mu.Lock()
		f.probes[name] = append(f.probes[name], err)
		f.mu.Unlock()
	}
	c, err := healthcheck.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want context.Canceled", err)
		}
	})
	return f
}

func (f *fixture) id(i int) routing.BackendID {
	id, _ := f.r.Lookup(f.names[i])
	return id
}

func (f *fixture) outcomes(i int) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.probes[f.names[i]]...)
}

// eventually polls cond every 5 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Idle backends in rotation get /health, never a completion; a backend with requests in flight
// and no success gets the completion (only serving shows a stall), with the model it lists.
func TestIdleAndBusy(t *testing.T) {
	idle, busy := newEngine(t), newEngine(t)
	f := start(t, []*engine{idle, busy}, healthcheck.Options{Interval: 100 * time.Millisecond})
	// A request in flight on busy, never finished while the test looks.
	var held routing.Result
	for {
		p, err := f.r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Backend.Name == busy.srv.URL {
			held = p
			break
		}
		p.Done(routing.DoneInfo{})
	}
	defer held.Done(routing.DoneInfo{})
	eventually(t, "probes of both", func() bool { return idle.health.Load() >= 3 && busy.completions.Load() >= 3 })
	if n := idle.completions.Load(); n != 0 {
		t.Errorf("the idle backend got %d completion probes, want /health only", n)
	}
	if ua, _ := idle.userAgent.Load().(string); ua != healthcheck.UserAgent {
		t.Errorf("User-Agent %q, want %q", ua, healthcheck.UserAgent)
	}
	if busy.models.Load() != 1 {
		t.Errorf("GET /v1/models %d times, want once (the model is kept)", busy.models.Load())
	}
	for _, err := range f.outcomes(1) {
		if err != nil {
			t.Errorf("busy backend's probe: %v", err)
		}
	}
}

// An ejected backend is probed every EjectedInterval with the completion, and restored at its
// first successful probe once it serves again; a user request is never its probe.
func TestEjectedRestored(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	a.down.Store(true)
	f := start(t, []*engine{a, b}, healthcheck.Options{Interval: -1, EjectedInterval: 100 * time.Millisecond})
	f.det.Completed(f.id(0), time.Now(), routing.DoneInfo{Err: errors.New("refused"), Failure: routing.FailureConnect})
	if !f.det.BackendStats(f.id(0)).Ejected {
		t.Fatal("not ejected")
	}
	eventually(t, "failed probes of the dead backend", func() bool { return len(f.outcomes(0)) >= 5 })
	// Meanwhile no pick chooses it.
	for range 100 {
		p, err := f.r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Backend.Name == a.srv.URL {
			t.Fatal("a user request was sent to the ejected backend")
		}
		p.Done(routing.DoneInfo{})
	}
	a.down.Store(false)
	back := time.Now()
	eventually(t, "the restoration", func() bool { return !f.det.BackendStats(f.id(0)).Ejected })
	t.Logf("restored %v after the server came back", time.Since(back))
	h := f.det.BackendStats(f.id(0))
	if h.Restored != 1 || h.Probes != 0 || a.completions.Load() == 0 {
		t.Errorf("backend %+v, %d completion probes: want one restoration by a completion probe, no user probe", h, a.completions.Load())
	}
	if b.completions.Load()+b.health.Load() != 0 {
		t.Errorf("the backend in rotation was probed with Interval < 0")
	}
}

// A server whose completions stall (headers held) while /health answers is ejected by the
// stalled probe and never restored by /health: OnProbe hears ErrStalled.
func TestStalledStaysOut(t *testing.T) {
	a := newEngine(t)
	a.hold.Store(true)
	f := start(t, []*engine{a, newEngine(t)}, healthcheck.Options{
		Interval: 50 * time.Millisecond, EjectedInterval: 50 * time.Millisecond, FirstByte: 200 * time.Millisecond, Timeout: time.Second,
	})
	// Busy without success: the completion probe finds the stall.
	p, _ := f.r.Pick(&routing.Request{Exclude: []routing.BackendID{f.id(1)}})
	defer p.Done(routing.DoneInfo{})
	eventually(t, "a stalled probe", func() bool {
		for _, err := range f.outcomes(0) {
			if errors.Is(err, healthcheck.ErrStalled) {
				return true
			}
		}
		return false
	})
	eventually(t, "the ejection", func() bool { return f.det.BackendStats(f.id(0)).Ejected })
	n := len(f.outcomes(0))
	eventually(t, "three more probes", func() bool { return len(f.outcomes(0)) >= n+3 })
	if !f.det.BackendStats(f.id(0)).Ejected {
		t.Fatal("the stalled server was restored")
	}
	a.hold.Store(false)
	eventually(t, "the restoration", func() bool { return !f.det.BackendStats(f.id(0)).Ejected })
}

// A server that answers the completion with a 4xx is judged by /health alone.
func TestCompletionUnjudgedFallsBackToHealth(t *testing.T) {
	a := newEngine(t)
	a.noCompletions.Store(true)
	a.down.Store(true)
	f := start(t, []*engine{a, newEngine(t)}, healthcheck.Options{Interval: -1, EjectedInterval: 50 * time.Millisecond})
	f.det.Completed(f.id(0), time.Now(), routing.DoneInfo{Err: errors.New("refused"), Failure: routing.FailureConnect})
	time.Sleep(100 * time.Millisecond)
	a.down.Store(false)
	eventually(t, "the restoration", func() bool { return !f.det.BackendStats(f.id(0)).Ejected })
	if a.completions.Load() != 1 || a.health.Load() == 0 {
		t.Errorf("%d completions, %d health probes: want one completion (404), then /health", a.completions.Load(), a.health.Load())
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	det, _ := outlier.New(outlier.Options{})
	r, _ := routing.New(routing.Options{Profile: outlier.With(routing.Profile{}, det, 0)})
	plain, _ := routing.New(routing.Options{})
	for _, o := range []healthcheck.Options{
		{},
		{Router: plain},
		{Router: r, Timeout: time.Second, FirstByte: 2 * time.Second},
		{Router: r, Concurrency: -1},
		{Router: r, Hosts: []healthcheck.Host{{Name: "a", URL: "ftp://x"}}},
		{Router: r, Hosts: []healthcheck.Host{{Name: "a", URL: "http://x"}, {Name: "a", URL: "http://y"}}},
		{Router: r, Hosts: []healthcheck.Host{{URL: "http://x"}}},
	} {
		if _, err := healthcheck.New(o); !errors.Is(err, healthcheck.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
}
