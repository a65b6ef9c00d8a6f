//go:build unix

package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/routing/outlier"
)

// userAttempts records the attempts of user requests the Handler sends (the gateway's own
// health probes, which name themselves in their User-Agent, are left out), each with whether
// passive health held its backend out of rotation when it was sent.
type userAttempts struct {
	base    http.RoundTripper
	ejected func(host string) bool // set once the Handler exists

	mu  sync.Mutex
	log []userAttempt
}

type userAttempt struct {
	host    string
	at      time.Time
	ok      bool // answered 200
	ejected bool // sent while its backend was out of rotation: a user request as a probe
}

func (a *userAttempts) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/completions") || r.Header.Get("User-Agent") == healthcheck.UserAgent {
		return a.base.RoundTrip(r)
	}
	x := userAttempt{host: r.URL.Host, at: time.Now()}
	a.mu.Lock()
	if a.ejected != nil {
		x.ejected = a.ejected(r.URL.Host)
	}
	a.mu.Unlock()
	resp, err := a.base.RoundTrip(r)
	x.ok = err == nil && resp.StatusCode == http.StatusOK
	a.mu.Lock()
	a.log = append(a.log, x)
	a.mu.Unlock()
	return resp, err
}

// asProbes counts the user attempts sent to host while it was out of rotation.
func (a *userAttempts) asProbes(host string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, x := range a.log {
		if x.host == host && x.ejected {
			n++
		}
	}
	return n
}

// firstOK returns when the first user attempt to host sent at or after t was answered 200
// (zero if none was).
func (a *userAttempts) firstOK(host string, t time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first time.Time
	for _, x := range a.log {
		if x.host == host && x.ok && !x.at.Before(t) && (first.IsZero() || x.at.Before(first)) {
			first = x.at
		}
	}
	return first
}

// faultRun is one row of the fault-run table.
type faultRun struct {
	scenario     string
	requests     int
	longest      time.Duration
	failed       int
	userProbes   int
	back         time.Duration // from recovery to the healed server's first success; -1: not within the run
	ejectionsOut uint64
}

func (f faultRun) String() string {
	back := "not within the run"
	if f.back >= 0 {
		back = f.back.Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("| %s | %d | %v | %d | %d | %s |", f.scenario, f.requests, f.longest.Round(10*time.Millisecond), f.failed, f.userProbes, back)
}

// faultFleet starts n servers (the first with args) behind a Handler with the defaults (only
// the scrape is faster), recording user attempts.
func faultFleet(t *testing.T, n int, args ...string) ([]*simproc.Proc, *proxy.Handler, string, *userAttempts) {
	procs := []*simproc.Proc{simproc.Start(t, simproc.Options{Args: args})}
	for range n - 1 {
		procs = append(procs, simproc.Start(t, simproc.Options{}))
	}
	var backends []proxy.Backend
	for _, p := range procs {
		backends = append(backends, proxy.Backend{URL: p.URL})
	}
	opts := testOptions(backends)
	opts.ScrapeInterval = 50 * time.Millisecond
	rec := &userAttempts{base: proxyseam.DefaultTransport()}
	opts.Transport = rec
	h, base := startHandler(t, opts)
	out := outlier.Of(h.Router())
	rec.mu.Lock()
	rec.ejected = func(host string) bool {
		for _, p := range procs {
			if hostOf(p.URL) == host {
				id, ok := h.Router().Lookup(p.URL)
				return ok && out != nil && out.BackendStats(id).Ejected
			}
		}
		return false
	}
	rec.mu.Unlock()
	return procs, h, base, rec
}

// heal replaces p's process with a healthy server on the same address.
func heal(t *testing.T, p *simproc.Proc) {
	p.Kill()
	simproc.Start(t, simproc.Options{Listen: hostOf(p.URL)})
}

// collect drains a load run into r.
func (r *faultRun) collect(results <-chan result) {
	for w := range results {
		r.requests++
		r.longest = max(r.longest, w.wait())
		if w.err != nil {
			r.failed++
		}
	}
}

// TestFaultRuns measures the fault runs of the figures (proxy/healthcheck's package doc, "Fault
// runs") with
// the Handler's defaults: for each scenario the longest a client waited (for the answer's
// headers, or between two reads of it), the requests that failed, the user requests sent to
// the faulty server while it was out of rotation (probes made of user requests), and how long
// after it recovered the server served a user request again. It takes about two minutes, so it
// runs only with USHER_FAULT_RUNS=1:
//
//	USHER_FAULT_RUNS=1 go test -run TestFaultRuns -v ./proxy/e2e
func TestFaultRuns(t *testing.T) {
	if os.Getenv("USHER_FAULT_RUNS") == "" {
		t.Skip("set USHER_FAULT_RUNS=1 to measure the fault runs")
	}
	var rows []faultRun

	healWith := func(t *testing.T) func(*simproc.Proc) { return func(p *simproc.Proc) { heal(t, p) } }
	t.Run("stuck", func(t *testing.T) {
		// A server that holds every answer's headers while its metrics and health stay good;
		// healed (replaced by a healthy server on its address) after 20 s.
		rows = append(rows, loadedRun(t, "stuck server (holds headers, healthy metrics), healed after 20 s",
			4, []string{"-fault-hold-headers", "45s"}, 24, 16, 0, 20*time.Second, nil, healWith(t)))
	})
	t.Run("breaker", func(t *testing.T) {
		// A server that resets every stream after 1,500 bytes, healed after 15 s.
		rows = append(rows, loadedRun(t, "mid-stream breaker (RST after 1,500 bytes), healed after 15 s",
			3, []string{"-fault-reset-after", "1500"}, 4, 64, 0, 15*time.Second, nil, healWith(t)))
	})
	t.Run("killed", func(t *testing.T) {
		rows = append(rows, loadedRun(t, "kill -9 under load, restarted after 5 s",
			4, nil, 24, 16, 2*time.Second, 5*time.Second, (*simproc.Proc).Kill, func(p *simproc.Proc) { p.Restart(t) }))
	})
	t.Run("stopped", func(t *testing.T) {
		rows = append(rows, loadedRun(t, "SIGSTOP under load, SIGCONT after 5 s",
			3, nil, 6, 64, 2*time.Second, 5*time.Second, (*simproc.Proc).Stop, (*simproc.Proc).Cont))
	})

	t.Run("idle", func(t *testing.T) {
		// Killed while the fleet is idle; one request finds it dead (and is retried), then
		// nothing; it is restarted 2 s later. Back: when passive health returns it to rotation.
		procs, h, base, rec := faultFleet(t, 2)
		procs[0].Kill()
		out := outlier.Of(h.Router())
		id, _ := h.Router().Lookup(procs[0].URL)
		r := faultRun{scenario: "kill -9 while idle, restarted after 2 s, no traffic", back: -1}
		for i := 0; !out.BackendStats(id).Ejected && i < 50; i++ {
			w := oneStream(http.DefaultClient, base, fmt.Sprintf("idle-%d", i), 4)
			r.requests++
			r.longest = max(r.longest, w.wait())
			if w.err != nil {
				r.failed++
			}
		}
		time.Sleep(2 * time.Second)
		procs[0].Restart(t)
		restarted := time.Now()
		for time.Since(restarted) < 20*time.Second {
			if !out.BackendStats(id).Ejected {
				r.back = time.Since(restarted)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.userProbes = rec.asProbes(hostOf(procs[0].URL))
		t.Logf("%v outlier %+v", r, out.Stats())
		rows = append(rows, r)
	})

	t.Log("| scenario | requests | longest client wait | failed requests | user requests as probes | healed server back after |")
	t.Log("|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Log(r.String())
	}
}

// loadedRun is one fault scenario under load: n servers (the first started with args),
// workers clients streaming maxTokens tokens each; after lead the first server gets fault (if
// any), after hold more it is healed, and the load runs 6 s beyond. "Back after" counts from
// the heal to the server's first successful client request.
func loadedRun(t *testing.T, scenario string, n int, args []string, workers, maxTokens int, lead, hold time.Duration,
	fault, healed func(*simproc.Proc)) faultRun {
	procs, h, base, rec := faultFleet(t, n, args...)
	stop := make(chan struct{})
	results := load(base, workers, maxTokens, stop)
	time.Sleep(lead)
	if fault != nil {
		fault(procs[0])
	}
	time.Sleep(hold)
	healed(procs[0])
	at := time.Now()
	time.Sleep(6 * time.Second)
	close(stop)
	r := faultRun{scenario: scenario, back: -1}
	r.collect(results)
	r.userProbes = rec.asProbes(hostOf(procs[0].URL))
	if ok := rec.firstOK(hostOf(procs[0].URL), at); !ok.IsZero() {
		r.back = ok.Sub(at)
	}
	t.Logf("%v retries %+v outlier %+v", r, proxyseam.Retries(h), outlier.Of(h.Router()).Stats())
	return r
}
