package engine

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkStep measures one step (BeginStep, EndStep, draining events) of a server that keeps
// a batch of the given size busy: each finished request (500-token prompt, 2000-token answer)
// is replaced by a new one, so most steps decode and some prefill a new prompt too.
func BenchmarkStep(b *testing.B) {
	for _, batch := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			p := Qwen3_32B_H100
			p.NumBlocks = batch * 200
			e := newEngine(b, p, nil)
			prompt := seq(1, 500)
			submit := func(id RequestID) {
				prompt[0] = uint32(id) // distinct prompts
				must(b, e.Submit(Request{ID: id, Prompt: prompt, OutputTokens: 2000}, 0))
			}
			for i := range batch {
				submit(RequestID(i))
			}
			var evs []Event
			now := time.Duration(0)
			next := RequestID(batch)
			step := func() {
				d, _ := e.BeginStep(now)
				now += d
				e.EndStep(now)
				evs = e.Events(evs[:0])
				for _, ev := range evs {
					if ev.Kind == EventFinished {
						submit(next)
						next++
					}
				}
			}
			for range 3000 {
				step()
			}
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

// BenchmarkWorkload runs a mixed workload to completion on the Qwen profile: 400 requests with
// 2k–10k-token prompts sharing three system prompts, 50–400-token answers, arriving together.
// It reports simulated steps and events per second of CPU.
func BenchmarkWorkload(b *testing.B) {
	bs := Qwen3_32B_H100.BlockSize
	reqs := make([]Request, 400)
	for i := range reqs {
		n := 2000 + (i*7919)%8000
		blocks := make([]BlockHash, n/bs)
		for k := range blocks {
			if k < 64 { // a 1024-token system prompt, one of three
				blocks[k] = BlockHash(1 + i%3*1000 + k)
			} else {
				blocks[k] = BlockHash(uint64(i+1)<<32 | uint64(k))
			}
		}
		reqs[i] = Request{ID: RequestID(i), Blocks: blocks, PromptTokens: n, OutputTokens: 50 + (i*31)%350}
	}
	b.ReportAllocs()
	var steps, events int64
	var evs []Event
	for b.Loop() {
		e := newEngine(b, Qwen3_32B_H100, func(o *Options) { o.OmitTokenEvents = true })
		for _, r := range reqs {
			must(b, e.Submit(r, 0))
		}
		now := time.Duration(0)
		for e.HasWork() {
			d, _ := e.BeginStep(now)
			now += d
			e.EndStep(now)
			evs = e.Events(evs[:0])
			events += int64(len(evs))
		}
		steps += e.Stats().Steps
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
