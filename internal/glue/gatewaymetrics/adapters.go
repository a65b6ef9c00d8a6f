package gatewaymetrics

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxAdapterLabels bounds the adapter label values of one backend in [Adapters]: the
// adapters configured for it, then the ones its readings name, in the order first seen; any
// adapter past the bound is counted under "other".
const MaxAdapterLabels = 32

// Adapters is the gauge of the LoRA adapters each backend runs and queues, as its metrics
// last listed them (vLLM's vllm:lora_requests_info, read by package metrics):
//
//	usher_backend_lora_adapters{backend,adapter,state}   gauge   state: running, waiting
//
// The value is 1 for an adapter the backend's last reading lists in that state and 0 for one
// it listed before (a series, once created, stays); adapter="other" counts the adapters the
// reading lists beyond the backend's MaxAdapterLabels label values. Every backend has its two
// "other" series from the start, at 0, so the family exists before the first reading. Backends are the
// configured set: a reading of another backend is ignored. The number of series is bounded
// by backends × (MaxAdapterLabels + 1) × 2, whatever the servers report.
//
// A gauge on /metrics rather than a debug view: it is where the other per-backend signals
// are, it is scraped and kept with them (when an adapter was running where), and a label
// value is an adapter's name, which the configuration (or the server's model list) names.
//
// Its methods are safe for concurrent use (one mutex; Set is called per scrape, not per
// request). A nil *Adapters is a no-op.
type Adapters struct {
	desc *prometheus.Desc

	mu       sync.Mutex
	backends map[string]*adapterSeries // immutable keys after NewAdapters
}

// adapterSeries is one backend's adapter label values and, for each, whether the last
// reading listed it running and waiting; other is the count of the ones past the bound.
type adapterSeries struct {
	names            []string
	running, waiting []float64 // parallel to names
	other            [2]float64
}

// NewAdapters returns the gauge of backends, each with the adapters configured for it
// (configured[backend], may be nil) as its first label values, with constLabels added. It
// fails with [ErrInvalidOptions] if a backend is empty, "other" or repeated.
func NewAdapters(backends []string, configured map[string][]string, constLabels prometheus.Labels) (*Adapters, error) {
	if err := distinctLabels("backend", backends); err != nil {
		return nil, err
	}
	a := &Adapters{
		desc: prometheus.NewDesc("usher_backend_lora_adapters",
			"1 if the backend's last metrics reading lists the LoRA adapter among its running (state=running) or waiting (state=waiting) requests, 0 if not; adapter=\"other\" counts the adapters past the backend's label bound.",
			[]string{"backend", "adapter", "state"}, constLabels),
		backends: make(map[string]*adapterSeries, len(backends)),
	}
	for _, b := range backends {
		s := new(adapterSeries)
		for _, name := range configured[b] {
			s.index(name)
		}
		a.backends[b] = s
	}
	return a, nil
}

// index returns the position of name's label value, adding it while there is room; -1 when
// name is counted under "other". O(MaxAdapterLabels).
func (s *adapterSeries) index(name string) int {
	if i := slices.Index(s.names, name); i >= 0 {
		return i
	}
	if name == "" || name == OtherLabel || len(s.names) >= MaxAdapterLabels {
		return -1
	}
	s.names = append(s.names, name)
	s.running, s.waiting = append(s.running, 0), append(s.waiting, 0)
	return len(s.names) - 1
}

// Set records the adapters of backend's last reading: running and waiting as the reading
// lists them (routing.BackendState's RunningAdapters and WaitingAdapters). O((running +
// waiting) × MaxAdapterLabels); it allocates only when a new label value is added.
func (a *Adapters) Set(backend string, running, waiting []string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.backends[backend]
	if s == nil {
		return
	}
	clear(s.running)
	clear(s.waiting)
	s.other = [2]float64{}
	for _, name := range running {
		if i := s.index(name); i >= 0 {
			s.running[i] = 1
		} else {
			s.other[0]++
		}
	}
	for _, name := range waiting {
		if i := s.index(name); i >= 0 {
			s.waiting[i] = 1
		} else {
			s.other[1]++
		}
	}
}

// Describe implements prometheus.Collector.
func (a *Adapters) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

// Collect implements prometheus.Collector. O(series).
func (a *Adapters) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for b, s := range a.backends {
		for i, name := range s.names {
			ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, s.running[i], b, name, "running")
			ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, s.waiting[i], b, name, "waiting")
		}
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, s.other[0], b, OtherLabel, "running")
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, s.other[1], b, OtherLabel, "waiting")
	}
}

var _ prometheus.Collector = (*Adapters)(nil)
