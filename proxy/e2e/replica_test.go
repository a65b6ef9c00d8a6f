package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/replica"
)

func init() { redistest.QuietLog() }

// gatewaySet is K gateways over the same servers, each with its own Replica when addr is set.
type gatewaySet struct {
	urls     []string
	replicas []*replica.Replica
}

func startGateways(t *testing.T, procs []*simproc.Proc, k int, addr, cluster string) gatewaySet {
	t.Helper()
	var backends []proxy.Backend
	for _, p := range procs {
		backends = append(backends, proxy.Backend{URL: p.URL})
	}
	var gs gatewaySet
	for i := range k {
		opts := testOptions(backends)
		opts.ScrapeInterval = 50 * time.Millisecond
		// Replicas derive the same tenant from an API key only with the same secret (and the
		// router's session key is tenant/session).
		keyer, err := proxy.NewKeyer(proxy.KeyerOptions{Secret: []byte("the replicas' shared tenant secret")})
		if err != nil {
			t.Fatal(err)
		}
		opts.Keyer = keyer
		opts.Transport = &homes
		homes.setBase(proxyseam.DefaultTransport())
		if addr != "" {
			c := redis.NewClient(&redis.Options{
				Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
				WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { c.Close() })
			rep, err := replica.New(replica.Options{
				ID: fmt.Sprint("gw", i), Cluster: cluster, Client: c, Interval: 20 * time.Millisecond,
				PeerTTL: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			opts.Extensions = append(opts.Extensions, replicaext.Wrap(rep))
			gs.replicas = append(gs.replicas, rep)
		}
		_, url := startHandler(t, opts)
		gs.urls = append(gs.urls, url)
	}
	return gs
}

// homeLog records which backend served each session's turns.
type homeLog struct {
	base         http.RoundTripper
	mu           sync.Mutex
	last         map[string]string
	moves, turns int
}

var homes homeLog

// setBase sets the transport under the log, once: the gateways of earlier runs, whose health
// checks may still be probing, keep using it.
func (h *homeLog) setBase(rt http.RoundTripper) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.base == nil {
		h.base = rt
	}
}

// RoundTrip records the backend of a request of a session (the gateways' own health probes
// have none) and sends it.
func (h *homeLog) RoundTrip(r *http.Request) (*http.Response, error) {
	s := r.Header.Get("X-Session-Id")
	h.mu.Lock()
	base := h.base
	if h.last == nil {
		h.last = map[string]string{}
	}
	if prev, ok := h.last[s]; ok && s != "" {
		h.turns++
		if prev != r.URL.Host {
			h.moves++
		}
	}
	if s != "" {
		h.last[s] = r.URL.Host
	}
	h.mu.Unlock()
	return base.RoundTrip(r)
}

func (h *homeLog) take() (moves, turns int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, t := h.moves, h.turns
	h.moves, h.turns = 0, 0
	return m, t
}

// think is the pause between a turn's answer and the next turn: a user reading, an agent's
// tool call. The replicas' sync (every 20 ms here) must beat it.
const think = 200 * time.Millisecond

// conversations runs sessions of turns, turn t of session s sent to gateway (s+t) mod K as a
// Service without affinity would, and returns the share of later turns' prompt tokens the
// servers had cached, and every error.
func conversations(ctx context.Context, urls []string, tag string, sessions, turns int) (hit float64, errs []error) {
	var mu sync.Mutex
	var cached, prompt int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for s := range sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			session := fmt.Sprintf("%s-%d", tag, s)
			system := fmt.Sprintf("Session %s. ", session) + strings.Repeat("You are a careful coding agent; read the repository before you change it. ", 40)
			history := []oa.ChatCompletionMessageParamUnion{oa.SystemMessage(system)}
			for turn := range turns {
				history = append(history, oa.UserMessage(fmt.Sprintf("turn %d of %s: change file %d", turn, session, turn)))
				c := client(urls[(s+turn)%len(urls)])
				resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
					Model: model, Messages: history, MaxTokens: oa.Int(8),
				}, option.WithHeader("X-Session-Id", session))
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s turn %d: %w", session, turn, err))
					mu.Unlock()
					return
				}
				if turn > 0 {
					mu.Lock()
					cached += resp.Usage.PromptTokensDetails.CachedTokens
					prompt += resp.Usage.PromptTokens
					mu.Unlock()
				}
				history = append(history, oa.AssistantMessage(resp.Choices[0].Message.Content))
				time.Sleep(think) // the user (or the agent's tool call) before the next turn
			}
		})
	}
	wg.Wait()
	if prompt > 0 {
		hit = float64(cached) / float64(prompt)
	}
	return hit, errs
}

// TestReplicas: four server processes; one gateway, then three gateways sharing nothing,
// then three sharing through a real Redis, each serving conversations whose turns go round
// the gateways. Synced, the three keep the single gateway's hit rate; alone, they lose it.
// Then Redis is killed mid-run (no request fails) and restarted (the replicas resync and
// share again).
func TestReplicas(t *testing.T) {
	srv := redistest.Start(t)
	var procs []*simproc.Proc
	for range 4 {
		procs = append(procs, simproc.Start(t, simproc.Options{}))
	}
	ctx := context.Background()
	const sessions, turns = 24, 4

	one := startGateways(t, procs, 1, "", "")
	hitOne, errs := conversations(ctx, one.urls, "one", sessions, turns)
	if len(errs) > 0 {
		t.Fatalf("one gateway: %v", errs)
	}
	movedOne, later := homes.take()
	alone := startGateways(t, procs, 3, "", "")
	hitAlone, errs := conversations(ctx, alone.urls, "alone", sessions, turns)
	if len(errs) > 0 {
		t.Fatalf("three gateways alone: %v", errs)
	}
	movedAlone, _ := homes.take()
	synced := startGateways(t, procs, 3, srv.Addr, "test-replicas")
	waitFor(t, "the replicas to see each other", func() bool {
		for _, r := range synced.replicas {
			if r.Stats().Peers != 2 {
				return false
			}
		}
		return true
	})
	hitSynced, errs := conversations(ctx, synced.urls, "synced", sessions, turns)
	if len(errs) > 0 {
		t.Fatalf("three gateways synced: %v", errs)
	}
	movedSynced, _ := homes.take()
	t.Logf("later turns' cached share of prompt tokens: one gateway %.3f, three alone %.3f, three synced %.3f", hitOne, hitAlone, hitSynced)
	t.Logf("later turns sent to another server than the turn before, of %d: one gateway %d, three alone %d, three synced %d", later, movedOne, movedAlone, movedSynced)
	if 2*movedSynced > movedAlone {
		t.Errorf("three synced gateways moved %d of %d later turns, alone %d: want under half", movedSynced, later, movedAlone)
	}
	// Without the race detector the synced gateways cache 0.95–0.96 against one gateway's
	// 0.96; under it (everything several times slower, the peers' counts staler) 0.90–0.93,
	// and down to 0.87 with the cores shared with other packages' tests.
	if hitSynced < 0.8*hitOne {
		t.Errorf("three synced gateways cached %.3f of later turns' prompts, want ≥ 80%% of one gateway's %.3f", hitSynced, hitOne)
	}
	if hitAlone > hitSynced-0.1 {
		t.Errorf("three gateways alone cached %.3f, synced %.3f: want the sync to matter", hitAlone, hitSynced)
	}

	// Redis dies while conversations run: nothing fails.
	done := make(chan struct{})
	var outage []error
	var hitOutage float64
	go func() {
		defer close(done)
		hitOutage, outage = conversations(ctx, synced.urls, "outage", 2*sessions, turns)
	}()
	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	<-done
	if len(outage) > 0 {
		t.Fatalf("%d requests failed with Redis down: %v", len(outage), outage)
	}
	waitFor(t, "the replicas to notice", func() bool {
		for _, r := range synced.replicas {
			if r.Stats().Connected {
				return false
			}
		}
		return true
	})
	srv.Restart()
	waitFor(t, "the replicas to resync", func() bool {
		for _, r := range synced.replicas {
			st := r.Stats()
			if !st.Connected || st.Resyncs < 1 || st.Peers != 2 {
				return false
			}
		}
		return true
	})
	// The readers are back once each replica applies its peers' changes again: a few
	// conversations, then every replica's Applied must have grown.
	var applied []uint64
	for _, r := range synced.replicas {
		applied = append(applied, r.Stats().Applied)
	}
	if _, errs := conversations(ctx, synced.urls, "resync", 6, 2); len(errs) > 0 {
		t.Fatalf("after the restart: %v", errs)
	}
	waitFor(t, "every replica to apply its peers' changes again", func() bool {
		for i, r := range synced.replicas {
			if r.Stats().Applied <= applied[i] {
				return false
			}
		}
		return true
	})
	homes.take()
	var errsBefore []uint64
	for _, r := range synced.replicas {
		errsBefore = append(errsBefore, r.Stats().Errors)
	}
	hitAfter, errs := conversations(ctx, synced.urls, "after", sessions, turns)
	movedAfter, _ := homes.take()
	for i, r := range synced.replicas {
		t.Logf("replica %d: %d sync errors during the last run", i, r.Stats().Errors-errsBefore[i])
	}
	t.Logf("after the restart, later turns moved %d of %d", movedAfter, later)
	if len(errs) > 0 {
		t.Fatalf("after the restart: %v", errs)
	}
	t.Logf("during the outage %.3f, after the restart %.3f", hitOutage, hitAfter)
	// Sharing is back when the turns stay home as they did before the outage. The cached
	// share follows, less tightly: on two cores shared with other packages' race-detector
	// tests it has measured 0.76–0.96 of one gateway's, against 0.45–0.6 for gateways alone.
	if 2*movedAfter > movedAlone {
		t.Errorf("after Redis came back the gateways moved %d of %d later turns, alone %d: want under half", movedAfter, later, movedAlone)
	}
	if hitAfter < 0.7*hitOne || hitAfter < hitAlone+0.1 {
		t.Errorf("after Redis came back the gateways cached %.3f, want ≥ 70%% of one gateway's %.3f and 0.1 above the %.3f of gateways alone", hitAfter, hitOne, hitAlone)
	}
	for i, r := range synced.replicas {
		st := r.Stats()
		t.Logf("replica %d: %+v", i, st)
		if st.Rejected != 0 || st.Unknown != 0 {
			t.Errorf("replica %d rejected %d entries, %d unknown backends", i, st.Rejected, st.Unknown)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
