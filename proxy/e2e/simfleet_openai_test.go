package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
)

// The official OpenAI Go client talks to a simulated server (package simfleet): whole and streamed chat
// completions, the stream accumulated by the client's own accumulator, usage with
// cached_tokens, and a streamed legacy completion.
func TestSimfleetOpenAIClient(t *testing.T) {
	p := engine.Demo
	p.StepBase = 100 * time.Microsecond
	p.PrefillPerToken = 100 * time.Nanosecond
	p.DecodePerSeq = time.Microsecond
	f, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 1, Options: simfleet.Options{Engine: engine.Options{Profile: p}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	client := openai.NewClient(option.WithBaseURL(f.URLs()[0]+"/v1/"), option.WithAPIKey("sk-sim"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: f.Servers()[0].Model(),
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a careful assistant. Follow the house rules: answer briefly, cite sources, and never invent facts. "),
			openai.UserMessage("How do routers use prefix caches?"),
		},
		MaxTokens: openai.Int(10),
	}
	whole, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Choices) != 1 || whole.Choices[0].Message.Content == "" || whole.Usage.CompletionTokens == 0 {
		t.Fatalf("completion %+v", whole)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator rejected chunk %d: %s", chunks, stream.Current().RawJSON())
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, whole.Choices[0].Message.Content; got != want {
		t.Errorf("streamed %q, whole %q", got, want)
	}
	if acc.Choices[0].FinishReason != whole.Choices[0].FinishReason {
		t.Errorf("finish reason streamed %q, whole %q", acc.Choices[0].FinishReason, whole.Choices[0].FinishReason)
	}
	if acc.Usage.CompletionTokens != whole.Usage.CompletionTokens || acc.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("streamed usage %+v, want %d completion tokens and a cache hit", acc.Usage, whole.Usage.CompletionTokens)
	}

	cs := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(f.Servers()[0].Model()),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(4),
	})
	var text strings.Builder
	for cs.Next() {
		for _, c := range cs.Current().Choices {
			text.WriteString(c.Text)
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if simfleet.TokenCount(text.String()) != 4 { // the natural answer is at least 16 tokens: cut at 4
		t.Errorf("completion stream %q", text.String())
	}
}
