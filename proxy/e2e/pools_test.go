package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
)

// twoModelFleet starts four simulated servers, the first two serving alpha and the others
// beta, and returns their backends with their models configured (or, with discover, left
// for the Handler to learn from each server's GET /v1/models).
func twoModelFleet(t *testing.T, discover bool) []proxy.Backend {
	t.Helper()
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers: 4,
		Configure: func(i int, o *simfleet.Options) {
			o.Model = []string{"alpha", "alpha", "beta", "beta"}[i]
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	var bs []proxy.Backend
	for i, u := range fleet.URLs() {
		b := proxy.Backend{URL: u}
		if !discover {
			b.Models = []string{[]string{"alpha", "alpha", "beta", "beta"}[i]}
		}
		bs = append(bs, b)
	}
	return bs
}

// TestModelPools: two models behind one gateway, each served by two servers. Every request
// reaches a server of its model (a server answers 404 for another model, so a misrouted
// request fails), /v1/models lists both, an unknown model is a 404 naming "model", and — with
// the backends' models configured or learnt from the servers — routing is the same.
func TestModelPools(t *testing.T) {
	for _, discover := range []bool{false, true} {
		t.Run(fmt.Sprintf("discover=%v", discover), func(t *testing.T) {
			h, base := startHandler(t, testOptions(twoModelFleet(t, discover)))
			c := client(base)
			ctx := context.Background()

			list, err := c.Models.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range list.Data {
				ids = append(ids, m.ID)
			}
			if !slices.Equal(ids, []string{"alpha", "beta"}) {
				t.Errorf("GET /v1/models lists %q, want alpha and beta", ids)
			}

			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for i := range 24 {
				model := []string{"alpha", "beta"}[i%2]
				wg.Go(func() {
					resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
						Model: model, MaxTokens: oa.Int(4),
						Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(fmt.Sprintf("request %d for %s", i, model))},
					}, option.WithHeader("X-Session-Id", fmt.Sprint("s", i)))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						errs = append(errs, fmt.Errorf("%s: %w", model, err))
					case resp.Model != model:
						errs = append(errs, fmt.Errorf("asked for %s, answered by %s", model, resp.Model))
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				t.Error(err)
			}

			resp, e := post(t, base+"/v1/chat/completions", `{"model":"gamma","messages":[{"role":"user","content":"hi"}]}`, nil)
			if resp.StatusCode != http.StatusNotFound || e.Code != "model_not_found" || e.Param != "model" {
				t.Errorf("unknown model: %d %+v, want 404 model_not_found on model", resp.StatusCode, e)
			}
			for _, m := range []string{"alpha", "beta"} {
				closedExactlyOnceIn(t, h, proxyseam.PoolQueue(h, m))
			}
		})
	}
}

// TestModelPoolsIsolateAdmission: beta's requests are admitted at once while alpha's pool
// (one request in flight at most) is full and has requests waiting.
func TestModelPoolsIsolateAdmission(t *testing.T) {
	opts := testOptions(twoModelFleet(t, false))
	opts.Pools = map[string]proxy.PoolLimits{"alpha": {MaxInFlight: 1}}
	h, base := startHandler(t, opts)
	if proxyseam.PoolQueue(h, "alpha") == proxyseam.PoolQueue(h, "beta") {
		t.Fatal("alpha and beta share a queue")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := `{"model":"alpha","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"hold %d"}]}`
	var wg sync.WaitGroup
	for i := range 3 { // one in flight, two waiting
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(long, i)))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	alpha := proxyseam.PoolQueue(h, "alpha")
	eventually(t, "alpha's pool to fill", func() bool {
		st := alpha.Stats()
		return st.InFlight == 1 && st.Queued == 2
	})
	c := client(base)
	var slowest time.Duration
	for i := range 6 {
		start := time.Now()
		_, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{
			Model: "beta", MaxTokens: oa.Int(2),
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(fmt.Sprint("beta ", i))},
		})
		if err != nil {
			t.Fatalf("beta while alpha is full: %v", err)
		}
		d := time.Since(start)
		slowest = max(slowest, d)
		if d > 5*time.Second {
			t.Errorf("beta request took %v with alpha's pool full", d)
		}
	}
	t.Logf("beta's slowest request with alpha's pool full (1 in flight, 2 waiting): %v", slowest)
	if st := alpha.Stats(); st.Queued != 2 {
		t.Errorf("alpha's queue holds %d after beta's requests, want the same 2", st.Queued)
	}
	if st := proxyseam.PoolQueue(h, "beta").Stats(); st.Dispatched != 6 || st.Queued != 0 {
		t.Errorf("beta's pool dispatched %d (queued %d), want 6 (0)", st.Dispatched, st.Queued)
	}
	cancel()
	wg.Wait()
	closedExactlyOnceIn(t, h, alpha)
}

// closedExactlyOnceIn is closedExactlyOnce for the queue of one model pool.
func closedExactlyOnceIn(t testing.TB, h *proxy.Handler, q *flowcontrol.Queue) {
	t.Helper()
	eventually(t, "the pool to settle", func() bool {
		st := q.Stats()
		return st.InFlight == 0 && st.Queued == 0
	})
	if st := q.Stats(); st.Completed != st.Dispatched {
		t.Errorf("queue: %d dispatched, %d completed; want equal", st.Dispatched, st.Completed)
	}
	eventually(t, "the router to settle", func() bool {
		rs := h.Router().Stats()
		return rs.Done == rs.Picks
	})
}
