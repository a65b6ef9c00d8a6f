package metrics

import (
	"context"
	"strconv"
	"testing"

	"github.com/usher-llm/usher/internal/benchcpu"
	"github.com/usher-llm/usher/routing"
)

// BenchmarkScrapeParse parses a realistic vLLM V1 exposition of 195 series (testdata/vllm.txt:
// the engine's gauges, counters with _created samples, latency and token histograms, the
// cache_config_info gauge and the Python process collector) and extracts the VLLM profile's
// signals, as one scrape does after the body is read.
func BenchmarkScrapeParse(b *testing.B) {
	load := vllmLoad{running: 17, waiting: 4, kv: 0.8125, queries: 120000, hits: 45000}
	for _, bc := range []struct {
		name, file, contentType string
		whole                   bool
		extra                   string // appended to the exposition
	}{
		{"text", "vllm.txt", ContentTypeText, false, ""},
		{"openmetrics", "vllm.om.txt", ContentTypeOpenMetrics, false, ""},
		// The same exposition handed to expfmt whole, without skipping the families
		// the profile does not read: what the filter saves.
		{"text-whole", "vllm.txt", ContentTypeText, true, ""},
		// With LoRA's info gauge, stamped in whole seconds as a simulator stamps it: the
		// newest two series tie and are told apart by content.
		{"text-lora-ties", "vllm.txt", ContentTypeText, false, loraTies},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := append(vllmExposition(b, bc.file, load), bc.extra...)
			p := mustParser(b, engineVLLM)
			r, err := p.Parse(body, bc.contentType)
			if err != nil {
				b.Fatal(err)
			}
			series := r.Series
			parse := p.Parse
			if bc.whole {
				parse = func(body []byte, contentType string) (Reading, error) {
					return referenceParse(p, body, contentType)
				}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			// The loop runs on one locked thread so that its CPU time can be read: on
			// a shared machine wall-clock time also counts waiting for a CPU.
			cpu := benchcpu.StartThread()
			for b.Loop() {
				if _, err := parse(body, bc.contentType); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "series/s")
			b.ReportMetric(float64(series), "series/op")
			if perOp, ok := cpu.Stop(b); ok && perOp > 0 {
				b.ReportMetric(float64(series)*1e9/perOp, "cpu-series/s")
			}
		})
	}
}

// loraTies is vLLM's LoRA info gauge with four series, the newest two written in the same
// second.
const loraTies = `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.764424929e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.76442493e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters="tax-lora"} 1.764424931e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="chat-lora",waiting_lora_adapters=""} 1.764424931e+09
`

// BenchmarkScrapeOnce scrapes vLLM-like loopback servers end to end (HTTP request, body,
// parse, health probe, publish) and builds the router's view of them.
func BenchmarkScrapeOnce(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			body := vllmExposition(b, "vllm.txt", vllmLoad{running: 3, waiting: 1, kv: 0.5, queries: 10, hits: 5})
			targets := make([]Target, n)
			for i := range targets {
				srv := newBenchServer(b, body)
				targets[i] = Target{Name: "b" + strconv.Itoa(i), URL: srv}
			}
			s, err := New(Options{Targets: targets})
			if err != nil {
				b.Fatal(err)
			}
			states := make([]routing.BackendState, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.ScrapeOnce(context.Background()); err != nil {
					b.Fatal(err)
				}
				states = s.BackendStates(states[:0])
			}
		})
	}
}
