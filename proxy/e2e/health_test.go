//go:build unix

package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/routing/outlier"
)

// metricValue reads one series' value from the Handler's /metrics (0 when absent).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// With the defaults (a 30 s header timeout), a server that holds every answer's headers while
// its metrics and /health stay good: no client waits more than 3 s — its streamed requests
// are moved after the 2 s stall limit, whole answers once the health check's streamed probe
// finds the stall — none waits for the header timeout, none fails, and once ejected it gets no
// user request (only the gateway's probes, which keep it out).
func TestStallWithDefaults(t *testing.T) {
	procs, h, base, rec := faultFleet(t, 4, "-fault-hold-headers", "45s")
	stuck := hostOf(procs[0].URL)
	stop := make(chan struct{})
	results := load(base, 24, 16, stop)
	// Whole answers too, from a few clients.
	whole := make(chan result, 1<<12)
	go func() {
		defer close(whole)
		client := &http.Client{Timeout: 60 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			resp, err := client.Post(base+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"usher/demo","max_tokens":8,"messages":[{"role":"user","content":"whole %d"}]}`, i)))
			w := result{start: start, err: err}
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					w.err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			w.headers, w.end = time.Since(start), time.Now()
			whole <- w
		}
	}()
	time.Sleep(faultScale(8 * time.Second))
	close(stop)
	var r faultRun
	r.collect(results)
	var wholeN int
	var wholeWorst time.Duration
	for w := range whole {
		wholeN++
		wholeWorst = max(wholeWorst, w.wait())
		if w.err != nil {
			t.Errorf("whole answer failed: %v", w.err)
		}
	}
	moves := metricValue(t, base, fmt.Sprintf("usher_stall_moves_total{backend=%q}", procs[0].URL))
	t.Logf("streamed: %d requests, longest wait %v, %d failed; whole: %d, longest %v; user requests to the stuck server while ejected %d; stall moves %v; retries %+v; outlier %+v",
		r.requests, r.longest.Round(time.Millisecond), r.failed, wholeN, wholeWorst.Round(time.Millisecond), rec.asProbes(stuck), moves, proxyseam.Retries(h), outlier.Of(h.Router()).Stats())
	if r.failed != 0 {
		t.Errorf("%d streamed requests failed", r.failed)
	}
	if r.longest > 3*time.Second || wholeWorst > 3*time.Second+time.Second {
		t.Errorf("longest wait: streamed %v, whole %v; want at most 3 s (whole answers: 4 s, the probe's own interval)", r.longest, wholeWorst)
	}
	if n := rec.asProbes(stuck); n != 0 {
		t.Errorf("%d user requests were sent to the stuck server while it was ejected, want 0", n)
	}
	if moves == 0 {
		t.Error("no stall move counted in usher_stall_moves_total")
	}
	closedExactlyOnce(t, h)
}

// A server that breaks every stream mid-answer passes the gateway's one-token probes, which
// bring it back after each back-off; but no user request is ever sent to it while it is
// ejected, and the probes are on /metrics.
func TestBreakerProbedByGatewayOnly(t *testing.T) {
	procs, h, base, rec := faultFleet(t, 3, "-fault-reset-after", "1500")
	stop := make(chan struct{})
	results := load(base, 4, 64, stop)
	time.Sleep(faultScale(6 * time.Second))
	close(stop)
	var r faultRun
	r.collect(results)
	out := outlier.Of(h.Router())
	id, _ := h.Router().Lookup(procs[0].URL)
	bh := out.BackendStats(id)
	ok := metricValue(t, base, fmt.Sprintf("usher_health_probes_total{backend=%q,result=\"ok\"}", procs[0].URL))
	t.Logf("%d requests, %d broke; breaker %+v; user requests to it while ejected %d; its probes ok %v", r.requests, r.failed, bh, rec.asProbes(hostOf(procs[0].URL)), ok)
	if n := rec.asProbes(hostOf(procs[0].URL)); n != 0 || bh.Probes != 0 {
		t.Errorf("user requests sent to the ejected breaker: %d (detector: %d), want 0", n, bh.Probes)
	}
	if bh.Ejections == 0 || ok == 0 {
		t.Errorf("breaker %+v, %v successful probes: want it ejected and probed by the gateway", bh, ok)
	}
	closedExactlyOnce(t, h)
}

// A server killed while the fleet is idle — one request finds it dead and is retried — is
// back in rotation within about 2 s of its restart, with no traffic to probe it.
func TestKilledWhileIdleComesBack(t *testing.T) {
	procs, h, base, rec := faultFleet(t, 2)
	procs[0].Kill()
	out := outlier.Of(h.Router())
	id, _ := h.Router().Lookup(procs[0].URL)
	for i := 0; !out.BackendStats(id).Ejected; i++ {
		if i == 50 {
			t.Fatal("50 requests and the dead server is not ejected")
		}
		if w := oneStream(http.DefaultClient, base, fmt.Sprintf("idle-%d", i), 4); w.err != nil {
			t.Errorf("request %d: %v", i, w.err)
		}
	}
	time.Sleep(faultScale(2 * time.Second))
	procs[0].Restart(t)
	restarted := time.Now()
	eventually(t, "the restarted server back in rotation", func() bool { return !out.BackendStats(id).Ejected })
	back := time.Since(restarted)
	t.Logf("back %v after the restart; %+v", back, out.BackendStats(id))
	// 2 s: a probe a second (±20%) and the first ejection's 1 s back-off; 1 s of slack for CI.
	if back > 3*time.Second {
		t.Errorf("back %v after the restart, want about 2 s", back)
	}
	if n := rec.asProbes(hostOf(procs[0].URL)); n != 0 {
		t.Errorf("%d user requests sent to the dead server while ejected", n)
	}
}

// SIGSTOP then SIGCONT under load: the stopped server's streams stall, it is ejected and its
// waiting requests move; after SIGCONT it serves user requests again within about 2 s.
func TestStoppedComesBack(t *testing.T) {
	procs, h, base, rec := faultFleet(t, 3)
	stop := make(chan struct{})
	results := load(base, 6, 64, stop)
	time.Sleep(faultScale(time.Second))
	procs[0].Stop()
	time.Sleep(faultScale(4 * time.Second))
	procs[0].Cont()
	resumed := time.Now()
	time.Sleep(faultScale(4 * time.Second))
	close(stop)
	var r faultRun
	r.collect(results)
	first := rec.firstOK(hostOf(procs[0].URL), resumed)
	id, _ := h.Router().Lookup(procs[0].URL)
	t.Logf("%d requests, %d failed, longest wait %v; first user success on the resumed server %v after SIGCONT; retries %+v; stopped server %+v, probes failed %v",
		r.requests, r.failed, r.longest.Round(time.Millisecond), first.Sub(resumed), proxyseam.Retries(h), outlier.Of(h.Router()).BackendStats(id),
		metricValue(t, base, fmt.Sprintf("usher_health_probes_total{backend=%q,result=\"failed\"}", procs[0].URL)))
	if first.IsZero() || first.Sub(resumed) > 3*time.Second {
		t.Errorf("the resumed server served its first user request %v after SIGCONT, want about 2 s", first.Sub(resumed))
	}
	if n := rec.asProbes(hostOf(procs[0].URL)); n != 0 {
		t.Errorf("%d user requests sent to the stopped server while ejected", n)
	}
	closedExactlyOnce(t, h)
}
