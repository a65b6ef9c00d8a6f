//go:build unix

package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
)

// TestPlannerKVBoth runs three kv_both server processes behind a Handler whose decider is the
// role planner: a long document, prefilled where it is decoded while no server is in prefill,
// makes the planner move servers into prefill at the next scrapes (exported as
// usher_pd_planned_role); the next document, decoded on a server in both that is producing
// answers, is prefilled on a server in prefill, and its decode server pulls the KV.
func TestPlannerKVBoth(t *testing.T) {
	var backends []proxy.Backend
	nameOf := map[string]string{}
	for i := range 3 {
		p := simproc.Start(t, simproc.Options{})
		name := fmt.Sprintf("kv-%d", i)
		backends = append(backends, proxy.Backend{URL: p.URL, Name: name, KVBoth: true})
		nameOf[hostOf(p.URL)] = name
	}
	// MinUncachedTokens: the answers' short prompts are not prefill demand (with the default of
	// 1 they would open a prefill pool before the first document at this rate).
	planner, err := disagg.NewPlanner(disagg.PlannerOptions{PrefillRate: 2000, Window: 200 * time.Millisecond, MinUncachedTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	rec := &wire{base: proxyseam.DefaultTransport()}
	opts := testOptions(backends)
	opts.ScrapeInterval = 50 * time.Millisecond
	opts.Timeouts = proxy.Timeouts{ResponseHeader: 5 * time.Second, StreamIdle: 5 * time.Second, Dial: time.Second}
	opts.Transport = rec
	opts.Decider = planner
	h, base := startHandler(t, opts)
	c := client(base)
	ctx := context.Background()

	// Answers running on every server, so that a local prefill would stall one.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{Model: model, MaxTokens: oa.Int(1200),
				Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(fmt.Sprintf("talk %d", i))}}, option.WithJSONSet("ignore_eos", true))
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				t.Error(err)
			}
		}()
	}
	defer wg.Wait()
	eventually(t, "the answers to run", func() bool {
		return metric(t, base, `usher_role_inflight_requests{role="both"}`) >= 6
	})

	// No server in prefill yet: the first document is prefilled where it is decoded, and its
	// uncached tokens are the demand that opens a prefill pool.
	ask := func(topic string) []sent {
		t.Helper()
		var hdr http.Header
		_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model, MaxTokens: oa.Int(8),
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document(topic))}}, captureHeaders(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		return rec.of(ridOf(hdr))
	}
	if steps := ask("ledger"); len(steps) != 1 {
		t.Fatalf("first document: %d steps, want 1 (no server in prefill)", len(steps))
	}
	var inPrefill string
	eventually(t, "a server in prefill", func() bool {
		for _, b := range backends {
			if metric(t, base, fmt.Sprintf(`usher_pd_planned_role{backend=%q,role="prefill"}`, b.Name)) == 1 {
				inPrefill = b.Name
				return true
			}
		}
		return false
	})
	if got := planner.Stats().Roles[inPrefill]; got != routing.RolePrefill {
		t.Fatalf("%s exported in prefill, planner says %v", inPrefill, got)
	}
	steps := ask("survey")
	if len(steps) != 2 || !steps[0].prefill() || !steps[1].decode() {
		t.Fatalf("second document: %d steps, want a prefill then a decode", len(steps))
	}
	roles := planner.Stats().Roles // the dwell keeps them as they were for the request
	if p, d := nameOf[steps[0].host], nameOf[steps[1].host]; roles[p] != routing.RolePrefill || roles[d] != routing.RoleBoth {
		t.Errorf("prefill on %s (%v), decode on %s (%v); want the prefill on a server in prefill, the decode on one in both", p, roles[p], d, roles[d])
	}
	if got := metric(t, base, `usher_pd_role_changes_total`); got < 1 {
		t.Errorf("usher_pd_role_changes_total = %v, want ≥ 1", got)
	}
	wg.Wait()
	closedExactlyOnce(t, h)
}
