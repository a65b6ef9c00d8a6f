package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
)

// TestExactModeUnderLoad: the default router learns at pick time while the index follows the
// engines' KV events (exact mode). Under a few hundred concurrent requests whose prompts share
// long prefixes, on engines small enough that they evict all the time, no event may be lost
// (no apply error, no unknown parent), and at the end the index must equal the engines: each
// backend's named blocks are the blocks its engine caches, and for every prompt sent, the
// index's match on each backend is the prefix that engine really holds, read from the engine's
// own block table. The index's byte budget is far above the fleet's KV, so only the engines'
// evictions and the router's predictions are at play. Before predictions were kept from
// evicting engine-reported blocks, this test lost dozens of events.
func TestExactModeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a few hundred requests")
	}
	const (
		servers   = 3
		kvBlocks  = 192 // 3,072 tokens per engine: a few conversations each
		sessions  = 40
		turns     = 6
		parallel  = 8
		blockSize = 16
	)
	profile := engine.Demo
	profile.NumBlocks = kvBlocks
	profile.MaxNumSeqs = 8
	fleet, backends := startPublishingFleetWith(t, servers, func(_ int, o *simfleet.Options) {
		o.Engine.Profile = profile
		o.MinAnswerTokens, o.MaxAnswerTokens = 8, 40
	})
	opts := testOptions(backends)
	h, base := startHandler(t, opts)
	c := client(base)

	// Sessions share one of three openings (system prompts); each turn appends the answer
	// and a new question, so consecutive turns share everything but the tail.
	openings := []string{
		strings.Repeat("You are a careful code reviewer. Point out bugs first. ", 10),
		strings.Repeat("You answer questions about the deployment runbook. ", 12),
		strings.Repeat("Summarise the log excerpt the user gives you, briefly. ", 9),
	}
	var mu sync.Mutex
	var prompts [][]uint32
	record := func(msgs []simfleet.Message) {
		rendered, err := simfleet.RenderChat(msgs, true)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		prompts = append(prompts, simfleet.AppendTokens(nil, rendered))
		mu.Unlock()
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for s := range work {
				history := []oa.ChatCompletionMessageParamUnion{oa.SystemMessage(openings[s%len(openings)])}
				msgs := []simfleet.Message{message("system", openings[s%len(openings)])}
				for turn := range turns {
					q := fmt.Sprintf("Session %d, question %d: what about file %d?", s, turn, s*turns+turn)
					history = append(history, oa.UserMessage(q))
					msgs = append(msgs, message("user", q))
					record(msgs)
					resp, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{
						Model: model, Messages: history, MaxTokens: oa.Int(40),
					}, option.WithHeader("X-Session-Id", fmt.Sprintf("s%d", s)))
					if err != nil {
						t.Errorf("session %d turn %d: %v", s, turn, err)
						return
					}
					answer := resp.Choices[0].Message.Content
					history = append(history, oa.AssistantMessage(answer))
					msgs = append(msgs, message("assistant", answer))
				}
			}
		})
	}
	for s := range sessions {
		work <- s
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}

	ix := h.Index()
	servers_ := fleet.Servers()
	ids := make([]prefixcache.HolderID, servers)
	for i, u := range fleet.URLs() {
		id, ok := ix.Lookup(u)
		if !ok {
			t.Fatalf("backend %s is not in the index", u)
		}
		ids[i] = id
	}
	// The events are asynchronous: wait until every backend's named blocks are its engine's.
	named := func(i int) (idx int64, eng int) {
		st := ix.Stats()
		for _, b := range st.Backends {
			if b.ID == ids[i] {
				idx = b.Media[prefixcache.GPU].EngineHashes
			}
		}
		return idx, servers_[i].Stats().CachedBlocks
	}
	settled := func() bool {
		for i := range servers {
			if a, b := named(i); a != int64(b) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !settled() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range servers {
		if a, b := named(i); a != int64(b) {
			t.Errorf("backend %d: the index names %d blocks, the engine caches %d", i, a, b)
		}
	}
	st := kvOf(h).Stats()
	if st.ApplyErrors != 0 || st.Lost != 0 || st.DecodeErrors != 0 || st.Unregistered != 0 {
		t.Errorf("subscriber: %d apply errors (unknown parents), %d lost, %d decode errors, %d unregistered; want none (%+v)",
			st.ApplyErrors, st.Lost, st.DecodeErrors, st.Unregistered, st)
	}
	// Evictions happened: the fleet cached far fewer blocks than the prompts hold.
	distinct := map[string]bool{}
	for _, p := range prompts {
		for b := 0; (b+1)*blockSize <= len(p); b++ {
			distinct[fmt.Sprint(p[:(b+1)*blockSize])] = true
		}
	}
	if len(distinct) <= servers*kvBlocks {
		t.Fatalf("%d distinct prompt blocks over %d engines of %d blocks: no eviction forced", len(distinct), servers, kvBlocks)
	}
	mismatches := 0
	for _, p := range prompts {
		req, err := openai.Parse([]byte(fmt.Sprintf(`{"model":%q,"prompt":[%s]}`, model, joinTokens(p))), openai.Completions, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := simfleet.Tokenizer{}.Tokenize(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		got := ix.Match(nil, prompt.Chain)
		for i := range servers {
			want := servers_[i].CachedPrefix(p)
			if int(got[ids[i]]) != want {
				if mismatches++; mismatches <= 5 {
					t.Errorf("prompt of %d blocks on backend %d: the index matches %d blocks, the engine holds %d", len(p)/blockSize, i, got[ids[i]], want)
				}
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of %d (prompt, backend) pairs differ between the index and the engines", mismatches, len(prompts)*servers)
	}
	t.Logf("%d requests, %d distinct prompt blocks over %d engines of %d blocks; %d events applied", len(prompts), len(distinct), servers, kvBlocks, st.Events)
}

func message(role, text string) simfleet.Message {
	content, _ := json.Marshal(text)
	return simfleet.Message{Role: role, Content: content}
}

func joinTokens(p []uint32) string {
	var b strings.Builder
	for i, t := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, t)
	}
	return b.String()
}
