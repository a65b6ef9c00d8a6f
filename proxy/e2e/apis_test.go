//go:build unix

package e2e_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// procHandler serves a Handler over n simserver processes.
func procHandler(t *testing.T, n int) (*proxy.Handler, string) {
	t.Helper()
	var backends []proxy.Backend
	for range n {
		p := simproc.Start(t, simproc.Options{})
		backends = append(backends, proxy.Backend{URL: p.URL})
	}
	opts := testOptions(backends)
	opts.ScrapeInterval = 50 * time.Millisecond
	return startHandler(t, opts)
}

// A long opening, so that a second turn has whole blocks to find in the cache.
var opening = strings.Repeat("You review Go code for a team that values small, clear packages. ", 12)

func TestAnthropicClientMessages(t *testing.T) {
	h, base := procHandler(t, 2)
	c := anthropic.NewClient(aoption.WithBaseURL(base+"/"), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
	ctx := context.Background()
	meta := anthropic.MetadataParam{UserID: anthropic.String("session-a")}
	turn1 := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Review this: func f() {}"))}
	params := anthropic.MessageNewParams{
		Model: model, MaxTokens: 12, Metadata: meta, Messages: turn1,
		System: []anthropic.TextBlockParam{{Text: opening}},
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatalf("messages: %v", err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.Role != "assistant" {
		t.Fatalf("messages: got %+v, want one text block", msg.Content)
	}
	if msg.Usage.InputTokens == 0 || msg.Usage.OutputTokens == 0 || msg.Usage.OutputTokens > 12 {
		t.Errorf("messages usage = %+v, want input > 0 and 0 < output ≤ 12", msg.Usage)
	}

	// Turn 2, streamed: the history comes back with the answer; the prefix is cached.
	params.Messages = append(turn1, anthropic.NewAssistantMessage(anthropic.NewTextBlock(msg.Content[0].Text)),
		anthropic.NewUserMessage(anthropic.NewTextBlock("And this: func g() {}")))
	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	deltas := 0
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
		if ev.Type == "content_block_delta" {
			deltas++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if deltas < 1 || len(acc.Content) != 1 || acc.Content[0].Text == "" {
		t.Fatalf("stream: %d deltas, content %+v; want text", deltas, acc.Content)
	}
	if acc.Usage.OutputTokens == 0 || acc.Usage.CacheReadInputTokens == 0 {
		t.Errorf("turn 2 usage = %+v, want output tokens and cache reads > 0", acc.Usage)
	}

	// An error of the gateway's own, in Anthropic's shape, as the SDK reads it.
	_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "no-such-model", MaxTokens: 4, Messages: turn1})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || !strings.Contains(ae.RawJSON(), `"type":"not_found_error"`) {
		t.Errorf("unknown model: %v, want a 404 not_found_error", err)
	}
	closedExactlyOnce(t, h)
}

func TestOpenAIClientResponses(t *testing.T) {
	h, base := procHandler(t, 3)
	c := client(base)
	ctx := context.Background()

	first, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: model, Instructions: oa.String(opening), MaxOutputTokens: oa.Int(10),
		Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("Review this: func f() {}")},
	})
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	if first.ID == "" || first.OutputText() == "" || first.Usage.InputTokens == 0 || first.Usage.OutputTokens == 0 {
		t.Fatalf("responses: id %q, text %q, usage %+v; want all", first.ID, first.OutputText(), first.Usage)
	}

	// Turns that continue the stored response reach the server that stored it (another
	// would answer 404), and find the conversation cached there. Several, from several
	// sessions' worth of traffic, so that a lucky pick would not do.
	var second *responses.Response
	for i := range 4 {
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: model, PreviousResponseID: oa.String(first.ID), MaxOutputTokens: oa.Int(6),
			Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("And this: func g() {} #" + string(rune('a'+i)))},
		})
		if err != nil {
			t.Fatalf("turn 2 (%d): %v", i, err)
		}
		if r.Usage.InputTokensDetails.CachedTokens == 0 {
			t.Errorf("turn 2 (%d) usage = %+v, want cached tokens > 0", i, r.Usage)
		}
		second = r
	}

	// Streamed, continuing the second.
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: model, PreviousResponseID: oa.String(second.ID), MaxOutputTokens: oa.Int(8),
		Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("Summarise.")},
	})
	var text strings.Builder
	var done responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			done = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if text.Len() == 0 || done.ID == "" || done.Usage.OutputTokens == 0 || done.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("stream: text %q, response %q, usage %+v; want text, an id and cached tokens", text.String(), done.ID, done.Usage)
	}

	// A response this gateway never saw stored goes wherever the router sends it, and the
	// server answers for it: 404 in OpenAI's shape, naming the field.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{
		Model: model, PreviousResponseID: oa.String("resp_unknown"),
		Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("hi")},
	})
	var oe *oa.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound || oe.Param != "previous_response_id" {
		t.Errorf("unknown previous response: %v, want 404 naming previous_response_id", err)
	}

	// Embeddings, routed by load.
	emb, err := c.Embeddings.New(ctx, oa.EmbeddingNewParams{
		Model: model, Input: oa.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b c"}},
	})
	if err != nil {
		t.Fatalf("embeddings: %v", err)
	}
	if len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 || emb.Usage.PromptTokens == 0 {
		t.Errorf("embeddings: %d vectors, usage %+v; want 2 and usage", len(emb.Data), emb.Usage)
	}
	closedExactlyOnce(t, h)
}

// A Messages stream that breaks ends with Anthropic's error event; a Responses one with the
// Responses API's.
func TestAPIStreamErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/messages", `{"model":"` + model + `","max_tokens":2000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`"type":"error","error":{"type":"api_error"`},
		{"/v1/responses", `{"model":"` + model + `","max_output_tokens":2000,"stream":true,"input":"hi"}`,
			`{"type":"error","code":"stream_broken"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			p := simproc.Start(t, simproc.Options{})
			_, base := startHandler(t, testOptions([]proxy.Backend{{URL: p.URL}}))
			resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			buf := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatalf("first byte: %v", err)
			}
			p.Kill() // mid-stream
			rest, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(rest), "event: error\ndata: ") || !strings.Contains(string(rest), tc.want) {
				t.Errorf("stream ends %q, want an error event with %s", tail(rest), tc.want)
			}
		})
	}
}

func tail(b []byte) string {
	if len(b) > 400 {
		b = b[len(b)-400:]
	}
	return string(b)
}

// A request continuing a response whose backend has left the fleet is answered 404 by the
// gateway, naming previous_response_id, rather than sent to a server that cannot know it.
func TestPreviousResponseBackendGone(t *testing.T) {
	fleet := startFleet(t, 2)
	urls := fleet.URLs()
	r, err := routing.New(routing.Options{Profile: profiles.Usher(profiles.UsherOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	update := func(names ...string) {
		var states []routing.BackendState
		for _, n := range names {
			states = append(states, routing.BackendState{Name: n, Health: routing.Healthy, UpdatedAt: time.Now()})
		}
		if err := r.Update(states); err != nil {
			t.Fatal(err)
		}
	}
	update(urls...)
	opts := testOptions(nil)
	opts.Router, opts.Models = r, []string{model}
	_, base := startHandler(t, opts)
	c := client(base)
	ctx := context.Background()
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: model, MaxOutputTokens: oa.Int(4), Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var home string
	for i, s := range fleet.Servers() {
		if s.Stats().Submitted == 1 {
			home = urls[i]
		}
	}
	var others []string
	for _, u := range urls {
		if u != home {
			others = append(others, u)
		}
	}
	update(others...) // the home leaves
	body := `{"model":"` + model + `","previous_response_id":"` + first.ID + `","input":"again"}`
	resp, e := post(t, base+"/v1/responses", body, nil)
	if resp.StatusCode != http.StatusNotFound || e.Param != "previous_response_id" || e.Code != "previous_response_not_found" {
		t.Errorf("continuing a response of a backend gone: %d %+v, want 404 previous_response_not_found naming previous_response_id", resp.StatusCode, e)
	}
	for i, s := range fleet.Servers() {
		if urls[i] != home && s.Stats().Submitted != 0 {
			t.Errorf("server %s got the request", urls[i])
		}
	}
}
