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
