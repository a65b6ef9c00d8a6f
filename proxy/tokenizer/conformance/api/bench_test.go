package api

import (
	"encoding/json"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer"
	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
)

// BenchmarkEncodeCorpus encodes the whole corpus once per op, per family: MB/s over the
// corpus's bytes, ns/token over the reference's token count.
func BenchmarkEncodeCorpus(b *testing.B) {
	ps := golden.Prompts(b)
	var bytes int
	for _, p := range ps {
		bytes += len(p)
	}
	for _, f := range golden.Families {
		b.Run(f.Dir, func(b *testing.B) {
			m := encoder(b, f)
			tokens := 0
			for _, g := range golden.DecodeLines[golden.IDs](b, f.Dir+"/ids.jsonl.gz") {
				tokens += len(g.IDs)
			}
			dst := make([]uint32, 0, 1<<16)
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				for _, p := range ps {
					dst = m.Encode(dst[:0], p)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tokens), "ns/token")
		})
	}
}

// BenchmarkEncodeLong encodes one long prompt (about 16 KiB, some 8k tokens) per op, round robin
// over the corpus's long prompts, into a reused dst: the per-request cost and allocations.
func BenchmarkEncodeLong(b *testing.B) {
	ps := golden.Prompts(b)
	var long []int
	for i, p := range ps {
		if len(p) >= 16<<10 {
			long = append(long, i)
		}
	}
	if len(long) == 0 {
		b.Fatal("no long prompts in the corpus")
	}
	for _, f := range golden.Families {
		b.Run(f.Dir, func(b *testing.B) {
			m := encoder(b, f)
			goldens := golden.DecodeLines[golden.IDs](b, f.Dir+"/ids.jsonl.gz")
			var bytes, tokens int
			for _, i := range long {
				bytes += len(ps[i])
				tokens += len(goldens[i].IDs)
			}
			dst := make([]uint32, 0, 1<<16)
			b.SetBytes(int64(bytes / len(long)))
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				dst = m.Encode(dst[:0], ps[long[k%len(long)]])
				k++
			}
			b.ReportMetric(float64(tokens)/float64(len(long)), "tokens/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(float64(tokens)/float64(len(long))), "ns/token")
		})
	}
}

// BenchmarkRenderChat renders one conversation per op, round robin over the conversations the
// reference rendered that have at least 10 messages.
func BenchmarkRenderChat(b *testing.B) {
	convs := golden.Lines(golden.Gunzip(b, "conversations.jsonl.gz"))
	for _, f := range golden.Families {
		if !f.Template {
			continue
		}
		b.Run(f.Dir, func(b *testing.B) {
			m := encoder(b, f)
			goldens := golden.DecodeLines[golden.Rendering](b, f.Dir+"/templates.jsonl.gz")
			var chats []*tokenizer.Conversation
			msgs := 0
			for i, line := range convs {
				c := new(tokenizer.Conversation)
				if goldens[i].Text == nil || json.Unmarshal(line, c) != nil || len(c.Messages) < 10 {
					continue
				}
				chats = append(chats, c)
				msgs += len(c.Messages)
			}
			if len(chats) == 0 {
				b.Skip("no conversation of 10 messages or more")
			}
			var dst []byte
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				dst, _ = m.RenderChat(dst[:0], chats[k%len(chats)])
				k++
			}
			b.ReportMetric(float64(msgs)/float64(len(chats)), "msgs/op")
		})
	}
}
