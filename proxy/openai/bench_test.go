package openai_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

func BenchmarkParse(b *testing.B) {
	for _, tc := range []struct {
		messages, size int
	}{{1, 100}, {14, 1200}, {200, 1200}} {
		body := chatBody(tc.messages, tc.size)
		b.Run(fmt.Sprintf("messages=%d/bytes=%d", tc.messages, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := openai.Parse(body, openai.Chat, openai.ParseLimits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// What an SDK sends beside the messages: the sampling parameters the gateway checks.
	sampled := []byte(strings.Replace(string(chatBody(14, 1200)), `"temperature":0.7,`, samplingFields, 1))
	b.Run(fmt.Sprintf("sampling/bytes=%d", len(sampled)), func(b *testing.B) {
		b.SetBytes(int64(len(sampled)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := openai.Parse(sampled, openai.Chat, openai.ParseLimits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		ep   openai.API
		body string
	}{
		{openai.Messages, `{"model":"claude","max_tokens":256,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["\n\n"],` +
			`"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":[{"type":"text","text":"Look."},` +
			`{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}]},{"role":"assistant","content":"A cat."},` +
			`{"role":"user","content":"Sure?"}]}`},
		{openai.Responses, `{"model":"gpt","temperature":0.5,"top_p":0.9,"max_output_tokens":256,"input":[{"role":"user","content":[` +
			`{"type":"input_text","text":"Look."},{"type":"input_image","image_url":"https://example.com/cat.png","detail":"auto"}]}]}`},
	} {
		body := []byte(tc.body)
		b.Run(fmt.Sprintf("%v/bytes=%d", tc.ep, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := openai.Parse(body, tc.ep, openai.ParseLimits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	prompt := strings.Repeat(`Once upon a time, \"there\" was a parser.\n`, 100)
	body := []byte(`{"model":"m","prompt":"` + prompt + `","max_tokens":16,"stream":true}`)
	b.Run(fmt.Sprintf("completions/bytes=%d", len(body)), func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := openai.Parse(body, openai.Completions, openai.ParseLimits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkParseParallel(b *testing.B) {
	body := chatBody(14, 1200)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := openai.Parse(body, openai.Chat, openai.ParseLimits{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkAppendUpstream(b *testing.B) {
	body := chatBody(14, 1200) // streaming without usage, with a priority: two splices
	r, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 2*len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		dst = openaiwire.AppendUpstream(r, dst[:0])
	}
}

func BenchmarkAppendPrompt(b *testing.B) {
	body := chatBody(14, 1200)
	r, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 2*len(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		dst = r.AppendPrompt(dst[:0])
	}
}

// samplingFields are the sampling parameters of a typical SDK request, with vLLM's own.
const samplingFields = `"temperature":0.7,"top_p":0.95,"top_k":50,"min_p":0.05,"repetition_penalty":1.1,` +
	`"frequency_penalty":0.2,"presence_penalty":-0.1,"seed":1234567,"stop":["\n\n","</s>"],"logprobs":true,` +
	`"top_logprobs":5,"logit_bias":{"50256":-100},"response_format":{"type":"json_object"},"skip_special_tokens":true,`
