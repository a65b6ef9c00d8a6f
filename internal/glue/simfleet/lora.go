package simfleet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/internal/engine"
)

// DefaultLoRALoadCost is the time a simulated server takes to load a LoRA adapter into a GPU
// slot when LoRAOptions.LoadCost is zero: 50 ms, between two published bounds. The copy itself
// is short: a rank-16 adapter of an 8B model is some 20–40 MB, about 1–2 ms over a 25 GB/s PCIe
// Gen4 link (our arithmetic). A loader that moves it layer by layer from host memory pays a
// cost per layer: LoRAX measured about 20 ms per layer, 0.5 to over 1 s per adapter, on its
// unoptimised path (predibase/lorax issue 433), which the engines that load on demand (Punica,
// S-LoRA, vLLM's CPU-side LRU cache of max_cpu_loras adapters) exist to avoid. vLLM loads
// synchronously at the start of a forward pass, so the whole batch waits. Because the figure is
// uncertain, the bench simulator reports its LoRA comparison at half and twice it too
// (bench/README.md, "LoRA adapters").
const DefaultLoRALoadCost = 50 * time.Millisecond

// DefaultMaxLoRAs is the number of adapter slots when LoRAOptions.MaxLoRAs is zero and adapters
// are given: vLLM's --max-loras default, 1.
const DefaultMaxLoRAs = 1

// LoRAOptions configures the LoRA adapters a Server serves on its base model, as vLLM's
// --enable-lora --lora-modules --max-loras do. The zero value serves no adapter.
type LoRAOptions struct {
	// Adapters names the adapters the server can load (vLLM's --lora-modules names). A
	// request whose model is one of them runs under that adapter; /v1/models lists each with
	// the served model as its parent. Names must be non-empty, distinct, without commas, and
	// differ from the served model.
	Adapters []string
	// MaxLoRAs is the number of adapter slots (vLLM --max-loras): at most that many adapters
	// serve requests in one batch. Zero: DefaultMaxLoRAs.
	MaxLoRAs int
	// LoadCost is the time to load an adapter into a slot, added to the engine step that loads
	// it (the whole batch waits, as in vLLM). Zero: DefaultLoRALoadCost; negative: free.
	LoadCost time.Duration
}

// loraState is a Server's adapter configuration and the history behind its
// vllm:lora_requests_info series.
type loraState struct {
	adapters []string // immutable after New
	maxLoRAs int

	mu   sync.Mutex // guards hist
	hist []loraInfo // the label sets exported, oldest first, at most loraHistory
}

// loraInfo is one label set of vllm:lora_requests_info and the time it was last current.
type loraInfo struct {
	running, waiting string
	at               float64
}

// loraHistory is how many past label sets the server keeps exporting. vLLM keeps every one
// it ever set, each with the time it was last set, which is why readers take the newest; a
// few are enough to exercise that.
const loraHistory = 4

// setupLoRA validates opts.LoRA, configures the engine's slots and returns the adapters.
// Called by New before the engine is built.
func setupLoRA(opts *Options) ([]string, error) {
	l := opts.LoRA
	if len(l.Adapters) == 0 {
		if l.MaxLoRAs != 0 {
			return nil, fmt.Errorf("%w: MaxLoRAs %d without adapters", ErrInvalidOptions, l.MaxLoRAs)
		}
		return nil, nil
	}
	for i, a := range l.Adapters {
		if a == "" || strings.ContainsAny(a, ", \t\n") || slices.Contains(l.Adapters[:i], a) || a == opts.Model {
			return nil, fmt.Errorf("%w: adapter name %q (want distinct names without commas or blanks, other than the model's)", ErrInvalidOptions, a)
		}
	}
	if l.MaxLoRAs == 0 {
		l.MaxLoRAs = DefaultMaxLoRAs
	}
	switch {
	case l.LoadCost == 0:
		l.LoadCost = DefaultLoRALoadCost
	case l.LoadCost < 0:
		l.LoadCost = 0
	}
	if l.MaxLoRAs < 0 {
		return nil, fmt.Errorf("%w: MaxLoRAs %d", ErrInvalidOptions, l.MaxLoRAs)
	}
	opts.Engine.LoRA = engine.LoRA{MaxLoRAs: l.MaxLoRAs, LoadCost: l.LoadCost}
	return slices.Clone(l.Adapters), nil
}

// Adapters returns the LoRA adapters the server serves (LoRAOptions.Adapters).
func (s *Server) Adapters() []string { return slices.Clone(s.lora.adapters) }

// serves reports whether model names the served model, one of its adapters, or nothing (the
// served model, as vLLM allows). O(adapters).
func (s *Server) serves(model string) bool {
	return model == "" || model == s.model || slices.Contains(s.lora.adapters, model)
}

// adapterOf returns the adapter a request for model runs under, "" for the base model.
// O(adapters).
func (s *Server) adapterOf(model string) string {
	if model != s.model && slices.Contains(s.lora.adapters, model) {
		return model
	}
	return ""
}

// modelName is the model an answer names: the adapter the request ran under, or the served
// model.
func (s *Server) modelName(adapter string) string {
	if adapter != "" {
		return adapter
	}
	return s.model
}

// modelCard is one entry of GET /v1/models, as vLLM writes it: adapters have the served model
// as root and parent, the base model a null parent.
type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}

// modelCards lists the served model and its adapters. O(adapters).
func (s *Server) modelCards() []modelCard {
	cards := []modelCard{{ID: s.model, Object: "model", Created: s.epoch.Unix(), OwnedBy: "vllm", Root: s.model, MaxModelLen: s.profile.MaxModelLen}}
	for _, a := range s.lora.adapters {
		parent := s.model
		cards = append(cards, modelCard{ID: a, Object: "model", Created: s.epoch.Unix(), OwnedBy: "vllm", Root: a, Parent: &parent, MaxModelLen: s.profile.MaxModelLen})
	}
	return cards
}

// LoRAStats is the adapter state of a Server: what its vllm:lora_requests_info reports, the
// adapters resident in its slots, and how many loads it made.
type LoRAStats struct {
	Running, Waiting []string // adapters of the running and waiting requests
	Resident         []string // adapters in GPU slots
	MaxLoRAs         int
	Loads            int64
}

// LoRAStats returns the server's adapter state. O(requests · adapters).
func (s *Server) LoRAStats() LoRAStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	run, wait := s.eng.Adapters(nil, nil)
	st := s.eng.Stats()
	return LoRAStats{Running: run, Waiting: wait, Resident: s.eng.Resident(nil), MaxLoRAs: st.MaxLoRAs, Loads: st.LoRALoads}
}

// CachedPrefixFor is CachedPrefix for a prompt run under adapter ("" for the base model):
// blocks cached under another adapter do not count, as on vLLM. O(len(tokens)).
func (s *Server) CachedPrefixFor(adapter string, tokens []uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.profile.BlockSize
	parent, chained := s.eng.PromptRoot(adapter)
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		parent = s.eng.HashBlock(parent, chained, tokens[i*bs:(i+1)*bs])
		chained = true
		if !s.eng.Cached(parent) {
			return i
		}
	}
	return len(tokens) / bs
}

// initLoRA records the adapters and registers vllm:lora_requests_info when the server serves
// some: vLLM exports it only with LoRA enabled.
func (s *Server) initLoRA(adapters []string, slots int) {
	s.lora.adapters, s.lora.maxLoRAs = adapters, slots
	if len(adapters) > 0 {
		s.registry.MustRegister(&loraCollector{s: s})
	}
}

var descLoRAInfo = prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
	[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)

// loraCollector exports vllm:lora_requests_info: one series per label set, valued with the Unix
// time it was last the server's state; the current one is written now.
type loraCollector struct{ s *Server }

// descLoRALoads counts adapter loads (simfleet's own series: vLLM exports none), so that a
// process run can count what routing made the servers load.
var descLoRALoads = prometheus.NewDesc("simfleet:lora_loads_total", "LoRA adapters loaded into a slot.", nil, nil)

func (c *loraCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLoRAInfo
	ch <- descLoRALoads
}

func (c *loraCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.LoRAStats()
	ch <- prometheus.MustNewConstMetric(descLoRALoads, prometheus.CounterValue, float64(st.Loads))
	cur := loraInfo{running: strings.Join(st.Running, ","), waiting: strings.Join(st.Waiting, ","),
		at: float64(time.Now().UnixNano()) / 1e9}
	l := &c.s.lora
	l.mu.Lock()
	i := slices.IndexFunc(l.hist, func(h loraInfo) bool { return h.running == cur.running && h.waiting == cur.waiting })
	if i >= 0 {
		l.hist = slices.Delete(l.hist, i, i+1)
	}
	if len(l.hist) == loraHistory {
		l.hist = slices.Delete(l.hist, 0, 1)
	}
	l.hist = append(l.hist, cur)
	hist := slices.Clone(l.hist)
	l.mu.Unlock()
	slots := strconv.Itoa(l.maxLoRAs)
	for _, h := range hist {
		ch <- prometheus.MustNewConstMetric(descLoRAInfo, prometheus.GaugeValue, h.at, slots, h.running, h.waiting)
	}
}
