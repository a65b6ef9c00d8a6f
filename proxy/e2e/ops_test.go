package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// scrapeText GETs a /metrics page over loopback and returns its body and its samples, keyed by
// the series as written ("name{labels}"): the Prometheus text a scraper reads.
func scrapeText(t testing.TB, url string) (string, map[string]float64) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("sample line %q", line)
		}
		samples[line[:i]] = v
	}
	return string(body), samples
}

// okChat answers every chat request with a small completion.
func okChat(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
}

// Backends with names are routed to by their URLs and known by their names everywhere on
// /metrics: no backend address appears in the exposition, and every per-backend series of
// usher's (picks, in flight, passive health, the scraper's health and staleness) carries the
// name.
func TestBackendNamesOnMetrics(t *testing.T) {
	a, b := fakeBackend(t, okChat), fakeBackend(t, okChat)
	h, base := startHandler(t, testOptions([]proxy.Backend{{URL: a.URL, Name: "alpha"}, {URL: b.URL, Name: "beta-2.x"}}))
	for range 20 {
		resp, e := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %+v", resp.StatusCode, e)
		}
	}
	body, samples := scrapeText(t, base+"/metrics")
	for _, srv := range []string{a.URL, b.URL} {
		if host := hostOf(srv); strings.Contains(body, host) {
			t.Errorf("/metrics names the backend address %s", host)
		}
	}
	picks := samples[`usher_picks_total{backend="alpha"}`] + samples[`usher_picks_total{backend="beta-2.x"}`]
	if picks != 20 {
		t.Errorf("picks by name %v, want 20", picks)
	}
	for _, series := range []string{`usher_backend_inflight_requests{backend="alpha"}`, `usher_backend_ejected{backend="beta-2.x"}`,
		`usher_backend_healthy{backend="alpha"}`, `usher_backend_stale{backend="beta-2.x"}`} {
		if _, ok := samples[series]; !ok {
			t.Errorf("/metrics has no %s", series)
		}
	}
	if _, ok := h.Router().Lookup("alpha"); !ok {
		t.Error("the router does not know the backend by its name")
	}
	closedExactlyOnce(t, h)
}

// Names are checked: their syntax, and that two backends do not share one.
func TestBackendNamesRefused(t *testing.T) {
	u1, u2 := "http://127.0.0.1:1", "http://127.0.0.1:2"
	for _, tc := range []struct {
		name     string
		backends []proxy.Backend
	}{
		{"an address", []proxy.Backend{{URL: u1, Name: "10.0.0.7:8000"}}},
		{"a slash", []proxy.Backend{{URL: u1, Name: "pool/a"}}},
		{"leading dash", []proxy.Backend{{URL: u1, Name: "-a"}}},
		{"reserved", []proxy.Backend{{URL: u1, Name: "other"}}},
		{"too long", []proxy.Backend{{URL: u1, Name: strings.Repeat("a", 65)}}},
		{"twice", []proxy.Backend{{URL: u1, Name: "a"}, {URL: u2, Name: "a"}}},
	} {
		if _, err := proxy.New(proxy.Options{Backends: tc.backends}); err == nil || !strings.Contains(err.Error(), "name") {
			t.Errorf("%s: %v, want an error about the name", tc.name, err)
		}
	}
}

// With MetricsElsewhere the API's port answers GET /metrics like any unknown path: a 404 in
// OpenAI's shape, with its request id.
func TestMetricsElsewhere(t *testing.T) {
	opts := testOptions([]proxy.Backend{{URL: fakeBackend(t, okChat).URL}})
	opts.MetricsElsewhere = true
	h, base := startHandler(t, opts)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"unknown_url"`) || resp.Header.Get(proxy.RequestIDHeader) == "" {
		t.Errorf("GET /metrics: %d %s (id %q), want a 404 unknown_url with a request id", resp.StatusCode, body, resp.Header.Get(proxy.RequestIDHeader))
	}
	if fams, err := h.Registry().Gather(); err != nil || len(fams) == 0 {
		t.Errorf("the Registry still gathers for a listener of the program's own: %d families, %v", len(fams), err)
	}
}

// untilRetried sends requests (body, its %d numbered so that no prefix draws them to one
// backend) until the Handler has retried one — the pick is the router's, so the faulty backend
// may take a few requests to be chosen — each answered 200; at most 40.
func untilRetried(t *testing.T, h *proxy.Handler, base, body string) {
	t.Helper()
	for i := range 40 {
		if resp, e := post(t, base+"/v1/chat/completions", fmt.Sprintf(body, i), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %+v, want 200 after a retry", resp.StatusCode, e)
		}
		if proxyseam.Retries(h).Retries > 0 {
			return
		}
	}
	t.Fatal("40 requests and no retry: the faulty backend was never picked")
}

// Retries are on /metrics by reason and outcome, and agree with the Handler's own counts: a
// refused connection retried elsewhere; backends that all answer 502, retried until the budget
// or the attempts run out.
func TestRetriesOnMetrics(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		gone := fakeBackend(t, nil)
		opts := testOptions([]proxy.Backend{{URL: gone.URL}, {URL: fakeBackend(t, okChat).URL}})
		opts.ScrapeInterval = time.Hour // the router keeps what the first scrape saw
		opts.NoHealthChecks = true      // retries are the subject: no probe may eject the backend first
		h, base := startHandler(t, opts)
		gone.Close()
		untilRetried(t, h, base, `{"model":"m","messages":[{"role":"user","content":"hi %d"}]}`)
		_, s := scrapeText(t, base+"/metrics")
		st := proxyseam.Retries(h)
		if got := s[`usher_retries_total{outcome="retried",reason="connect"}`]; got < 1 || got != float64(st.Retries) {
			t.Errorf("retried after a refused connection: %v on /metrics, %d counted by the Handler; want them equal and ≥ 1", got, st.Retries)
		}
	})
	t.Run("no headers", func(t *testing.T) {
		hang := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		})
		opts := testOptions([]proxy.Backend{{URL: hang.URL}, {URL: fakeBackend(t, okChat).URL}})
		opts.Timeouts.ResponseHeader, opts.Timeouts.PerOutputToken = 300*time.Millisecond, time.Millisecond
		opts.ScrapeInterval = time.Hour
		opts.NoHealthChecks = true
		h, base := startHandler(t, opts)
		untilRetried(t, h, base, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi %d"}]}`)
		_, s := scrapeText(t, base+"/metrics")
		if got, st := s[`usher_retries_total{outcome="retried",reason="header_timeout"}`], proxyseam.Retries(h); got < 1 || got != float64(st.Retries) {
			t.Errorf("retried after the header timeout: %v on /metrics, %d counted by the Handler; want them equal and ≥ 1", got, st.Retries)
		}
	})
	t.Run("502 everywhere", func(t *testing.T) {
		var calls atomic.Int64
		failing := func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, `{"error":{"message":"engine dead","type":"server_error"}}`)
		}
		var backends []proxy.Backend
		for range 3 {
			backends = append(backends, proxy.Backend{URL: fakeBackend(t, failing).URL})
		}
		opts := testOptions(backends)
		opts.Retry = proxy.Retry{Attempts: 2, BudgetRatio: 0.2, BudgetMin: 3, BudgetWindow: time.Minute}
		h, base := startHandler(t, opts)
		const requests = 50
		for range requests {
			if resp, _ := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d, want the backend's 502", resp.StatusCode)
			}
		}
		body, s := scrapeText(t, base+"/metrics")
		st := proxyseam.Retries(h)
		retried := s[`usher_retries_total{outcome="retried",reason="server_error"}`]
		attempts := s[`usher_retries_total{outcome="attempts_exhausted",reason="server_error"}`]
		budget := s[`usher_retries_total{outcome="budget_exhausted",reason="server_error"}`]
		t.Logf("handler %+v; /metrics retried %v, attempts_exhausted %v, budget_exhausted %v", st, retried, attempts, budget)
		if retried != float64(st.Retries) || budget != float64(st.Denied) || attempts+budget != float64(st.Exhausted) || attempts+budget != requests {
			t.Errorf("/metrics (retried %v, attempts %v, budget %v) disagrees with the Handler %+v, or the last attempts are not %d", retried, attempts, budget, st, requests)
		}
		if retried == 0 || budget == 0 || attempts == 0 {
			t.Errorf("want some of each outcome: retried %v, attempts_exhausted %v, budget_exhausted %v", retried, attempts, budget)
		}
		// Every reason × outcome exists from the start, at 0 where nothing happened.
		if n := strings.Count(body, "\nusher_retries_total{"); n != 25 {
			t.Errorf("%d usher_retries_total series, want 5 reasons × 5 outcomes", n)
		}
	})
}

// nanScorer is a profile's scorer of the program's own that misbehaves: every score NaN.
type nanScorer struct{}

func (nanScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	for i := range cands {
		dst[i] = math.NaN()
	}
}

// The scores the router clamped are on /metrics per scorer of its profile; the built-in
// scorers' stay 0.
func TestClampedScoresOnMetrics(t *testing.T) {
	opts := testOptions([]proxy.Backend{{URL: fakeBackend(t, okChat).URL}, {URL: fakeBackend(t, okChat).URL}})
	opts.Profile = profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: nanScorer{}, Weight: 1})
	h, base := startHandler(t, opts)
	for range 5 {
		if resp, e := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %+v", resp.StatusCode, e)
		}
	}
	body, s := scrapeText(t, base+"/metrics")
	got, want := s[`usher_clamped_scores_total{scorer="nanScorer"}`], float64(h.Router().Stats().ClampedScores)
	if got != want || got < 5 {
		t.Errorf(`usher_clamped_scores_total{scorer="nanScorer"} = %v, want the router's %v (≥ one per pick)`, got, want)
	}
	var others int
	for series, v := range s {
		if strings.HasPrefix(series, "usher_clamped_scores_total{") && series != `usher_clamped_scores_total{scorer="nanScorer"}` {
			others++
			if v != 0 {
				t.Errorf("%s = %v, want 0 (a built-in scorer)", series, v)
			}
		}
	}
	if others == 0 {
		t.Errorf("no built-in scorer's series:\n%s", body)
	}
	closedExactlyOnce(t, h)
}
