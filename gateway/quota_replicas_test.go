package gateway

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/quota"
)

// quotaStub is a chat backend that holds each answer 20–60 ms and reports as usage a fixed
// prompt and an answer of 20–100 tokens (max_tokens 100), summing what it reported.
type quotaStub struct {
	used    atomic.Int64
	answers atomic.Int64
}

const stubPrompt = 50

func (s *quotaStub) serve(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n")
	})
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		out := 20 + rand.IntN(81)
		s.used.Add(int64(stubPrompt + out))
		s.answers.Add(1)
		time.Sleep(time.Duration(20+rand.IntN(41)) * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			stubPrompt, out, stubPrompt+out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestQuotaAcrossReplicas: 3 gateways configured with -redis and one quota, each sent the same
// number of requests of one API key by 8 clients as fast as it answers (one window holds the
// run), with a token limit of half the tokens they use: the tokens the backend reports used
// for the admitted requests pass the limit by at most 1%. The over-grant is a few
// reservations whatever the limit (admissions on totals up to a sync interval old), hence
// 1000 requests a gateway, a limit of 165 000 tokens, and 1% of it about 9 reservations.
// USHER_QUOTA_LONG=1 sends 10 times as many.
func TestQuotaAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds of real time")
	}
	const replicas, clients = 3, 8
	perReplica := 1000
	if os.Getenv("USHER_QUOTA_LONG") != "" {
		perReplica = 10000
	}
	addr := redistest.Start(t).Addr
	cluster := fmt.Sprint("quota-", time.Now().UnixNano())

	// An hour's window holds the run (the Handler admits on its own clock, so the window is
	// the wall clock's).
	span := time.Hour
	stub := &quotaStub{}
	backend := stub.serve(t)
	// The request body estimates to more than stubPrompt tokens, so a reservation (its
	// estimate and max_tokens) is never below its use.
	body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 60) + `"}]}`
	meanUsed := float64(stubPrompt) + 60
	parsed, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
	noError(t, err, "Parse")
	p, _ := proxy.BytesTokenizer{}.Tokenize(context.Background(), nil, parsed)
	reservation := int64(p.Tokens) + 100
	if p.Tokens < stubPrompt {
		t.Fatalf("the body estimates to %d tokens, fewer than the %d the backend reports", p.Tokens, stubPrompt)
	}
	limit := int64(0.5 * replicas * float64(perReplica) * meanUsed)

	var urls []string
	for i := range replicas {
		c := DefaultConfig()
		c.Registry = replicaRegistry(t)
		c.Backends = []BackendSpec{{URL: backend, Engine: "vllm"}}
		c.Redis, c.ReplicaID, c.Cluster = addr, fmt.Sprint("gw", i), cluster
		c.MaxInFlight = 1000
		c.NoHealthChecks = true
		c.Quota = quota.Options{Limits: []quota.Limit{{Window: span, Tokens: limit}}}
		o, err := c.Options()
		noError(t, err, "Options")
		h, err := proxy.New(o)
		noError(t, err, "proxy.New")
		ctx, cancel := context.WithCancel(context.Background())
		h.Start(ctx)
		done := make(chan struct{})
		go func() { defer close(done); h.Run(ctx) }()
		srv := httptest.NewUnstartedServer(h)
		srv.Listener = h.Listener(srv.Listener)
		srv.Start()
		t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); h.Close(); cancel(); <-done })
		urls = append(urls, srv.URL)
	}

	if left := time.Until(time.Now().Truncate(span).Add(span)); left < 2*time.Minute {
		time.Sleep(left + 10*time.Millisecond)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	began := time.Now()
	for _, u := range urls {
		next := make(chan struct{})
		for range clients {
			wg.Go(func() {
				for range next {
					req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer sk-one-tenant")
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					code := 0
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			for range perReplica {
				next <- struct{}{}
			}
			close(next)
		})
	}
	wg.Wait()
	took := time.Since(began)
	used := stub.used.Load()
	over := float64(used-limit) / float64(limit)
	bound := limit / 100
	t.Logf("%d requests in %v: limit %d tokens, used %d (over-grant %+.3f%%, %.1f reservations of %d); answers %v",
		replicas*perReplica, took.Round(time.Millisecond), limit, used, 100*over, float64(used-limit)/float64(reservation), reservation, codes)
	if used-limit > bound {
		t.Errorf("over-grant %d tokens (%.3f%% of the limit), want ≤ %d", used-limit, 100*over, bound)
	}
	if codes[http.StatusOK] == 0 || codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK]+codes[http.StatusTooManyRequests] != replicas*perReplica {
		t.Errorf("answers %v: want 200s and 429s only, some of each", codes)
	}
}
