package gatewaymetrics

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/promtest"
)

func countSeries(fams []*dto.MetricFamily) int {
	n := 0
	for _, mf := range fams {
		n += len(mf.GetMetric())
	}
	return n
}

func mustUsher(t *testing.T, opts Options) *Recorder {
	t.Helper()
	u, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func mustKV(t *testing.T, sources []string) *KVEvents {
	t.Helper()
	k, err := NewKVEvents(sources, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestUsherCounters(t *testing.T) {
	u := mustUsher(t, Options{Bands: []int{0, 1}, Outcomes: []string{"dispatched", "expired"}, Backends: []string{"a", "b"}})
	u.ObserveAdmission(flowcontrol.Dispatched, 0, 10*time.Millisecond)
	u.ObserveAdmission(flowcontrol.Dispatched, 0, 30*time.Millisecond)
	u.ObserveAdmission(flowcontrol.Expired, 1, 2*time.Second)
	u.ObserveAdmission(flowcontrol.Cancelled, 0, time.Millisecond)     // not a configured outcome: "other"
	u.ObserveAdmission(flowcontrol.Dispatched, 1234, time.Millisecond) // not a band: "other"
	u.SetQueue(0, 5, 5000)
	u.SetQueue(1, 2, 100)
	u.SetQueue(77, 1, 10)
	u.ObservePick("a")
	u.ObservePick("a")
	u.ObservePick("b")
	u.ObservePick("10.9.9.9:8000")

	got := promtest.Text(t, u, "usher_admissions_total", "usher_queue_requests", "usher_queue_bytes", "usher_picks_total")
	want := `# HELP usher_admissions_total Admission decisions by priority band and outcome.
# TYPE usher_admissions_total counter
usher_admissions_total{band="0",outcome="dispatched"} 2
usher_admissions_total{band="0",outcome="expired"} 0
usher_admissions_total{band="0",outcome="other"} 1
usher_admissions_total{band="1",outcome="dispatched"} 0
usher_admissions_total{band="1",outcome="expired"} 1
usher_admissions_total{band="1",outcome="other"} 0
usher_admissions_total{band="other",outcome="dispatched"} 1
usher_admissions_total{band="other",outcome="expired"} 0
usher_admissions_total{band="other",outcome="other"} 0
# HELP usher_picks_total Requests routed to each backend.
# TYPE usher_picks_total counter
usher_picks_total{backend="a"} 2
usher_picks_total{backend="b"} 1
usher_picks_total{backend="other"} 1
# HELP usher_queue_bytes Bytes of requests waiting for admission, by priority band.
# TYPE usher_queue_bytes gauge
usher_queue_bytes{band="0"} 5000
usher_queue_bytes{band="1"} 100
usher_queue_bytes{band="other"} 10
# HELP usher_queue_requests Requests waiting for admission, by priority band.
# TYPE usher_queue_requests gauge
usher_queue_requests{band="0"} 5
usher_queue_requests{band="1"} 2
usher_queue_requests{band="other"} 1
`
	if got != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, want)
	}

	// The wait histogram: two dispatched waits in band 0, 10 ms and 30 ms.
	for _, mf := range promtest.Gather(t, u) {
		if mf.GetName() != "usher_admission_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := labelString(m)
			if labels != `band="0",outcome="dispatched"` {
				continue
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-0.04) > 1e-12 {
				t.Errorf("wait histogram %s: count %d sum %v, want 2 and 0.04", labels, h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+`="`+lp.GetValue()+`"`)
	}
	return strings.Join(parts, ",")
}

func TestUsherBoundedLabels(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a"}})
	kv := mustKV(t, nil)
	before := countSeries(promtest.Gather(t, u, kv))
	// Twenty thousand distinct flows, sessions, bands and backends must not add one series.
	for i := range 20000 {
		id := "flow-" + strconv.Itoa(i)
		u.ObserveAdmission(flowcontrol.Outcome(i), i, time.Duration(i))
		u.SetQueue(i, i, int64(i))
		u.ObservePick(id)
		u.SetInFlight(id, int64(i))
		kv.Set(id, KVStatus{Connected: true, Batches: uint64(i)})
	}
	if after := countSeries(promtest.Gather(t, u, kv)); after != before {
		t.Errorf("series grew from %d to %d with per-flow input", before, after)
	}
	for _, mf := range promtest.Gather(t, u, kv) {
		if !strings.HasPrefix(mf.GetName(), "usher_") {
			t.Errorf("metric %s lacks the usher_ prefix", mf.GetName())
		}
	}
}

func TestUsherSetBackends(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a", "b"}})
	u.ObservePick("a")
	u.ObservePick("b")
	u.SetBackends([]string{"b", "c", "", OtherLabel, "c"})
	u.ObservePick("a") // gone: other
	u.ObservePick("c")
	got := promtest.Text(t, u, "usher_picks_total")
	want := `# HELP usher_picks_total Requests routed to each backend.
# TYPE usher_picks_total counter
usher_picks_total{backend="b"} 1
usher_picks_total{backend="c"} 1
usher_picks_total{backend="other"} 1
`
	if got != want {
		t.Errorf("after SetBackends:\n%s\nwant:\n%s", got, want)
	}
}

func TestUsherInFlight(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a", "b"}})
	names := []string{"usher_backend_inflight_requests", "usher_backend_inflight_dropped_total", "usher_inflight_requests", "usher_flows"}
	u.SetInFlight("a", 3)
	u.SetInFlight("b", 9)
	u.SetInFlight("b", 5)
	u.SetInFlight("10.9.9.9:8000", 7) // not a backend: dropped, counted
	u.SetInFlightTotal(15)
	u.SetFlows(4)
	want := `# HELP usher_backend_inflight_dropped_total In-flight updates dropped because their backend is not in the configured set.
# TYPE usher_backend_inflight_dropped_total counter
usher_backend_inflight_dropped_total 1
# HELP usher_backend_inflight_requests Requests routed to each backend and not finished.
# TYPE usher_backend_inflight_requests gauge
usher_backend_inflight_requests{backend="a"} 3
usher_backend_inflight_requests{backend="b"} 5
# HELP usher_flows Live flows (with requests waiting or in flight) in the admission queue.
# TYPE usher_flows gauge
usher_flows 4
# HELP usher_inflight_requests Requests routed to a backend and not finished.
# TYPE usher_inflight_requests gauge
usher_inflight_requests 15
`
	if got := promtest.Text(t, u, names...); got != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, want)
	}

	// a leaves: its series goes and its requests, still draining, are dropped; b keeps its
	// value; c starts at 0.
	u.SetBackends([]string{"b", "c"})
	u.SetInFlight("a", 2)
	want = `# HELP usher_backend_inflight_dropped_total In-flight updates dropped because their backend is not in the configured set.
# TYPE usher_backend_inflight_dropped_total counter
usher_backend_inflight_dropped_total 2
# HELP usher_backend_inflight_requests Requests routed to each backend and not finished.
# TYPE usher_backend_inflight_requests gauge
usher_backend_inflight_requests{backend="b"} 5
usher_backend_inflight_requests{backend="c"} 0
`
	if got := promtest.Text(t, u, names[:2]...); got != want {
		t.Errorf("after SetBackends:\n%s\nwant:\n%s", got, want)
	}
}

func TestUsherKVSources(t *testing.T) {
	u := mustKV(t, []string{"pod-a", "pod-b"})
	names := []string{"usher_kvevents_connected", "usher_kvevents_batches_total", "usher_kvevents_lost_batches_total",
		"usher_kvevents_resets_total", "usher_kvevents_reconnects_total"}
	type row struct{ conn, batches, lost, resets, reconnects string } // for pod-a, pod-b, other
	steps := []struct {
		name   string
		source string
		set    KVStatus
		want   [3]row
	}{
		{"pod-a connects", "pod-a", KVStatus{Connected: true, Batches: 10, Lost: 1, Resets: 0, Reconnects: 2},
			[3]row{{"1", "10", "1", "0", "2"}, {"0", "0", "0", "0", "0"}, {"0", "0", "0", "0", "0"}}},
		{"pod-b, disconnected", "pod-b", KVStatus{Batches: 3, Resets: 1, Reconnects: 4},
			[3]row{{"1", "10", "1", "0", "2"}, {"0", "3", "0", "1", "4"}, {"0", "0", "0", "0", "0"}}},
		{"unknown source: other", "pod-z", KVStatus{Connected: true, Batches: 7, Lost: 2},
			[3]row{{"1", "10", "1", "0", "2"}, {"0", "3", "0", "1", "4"}, {"1", "7", "2", "0", "0"}}},
		{"second unknown source: other keeps the highest, connected the last", "pod-y", KVStatus{Batches: 4, Lost: 5},
			[3]row{{"1", "10", "1", "0", "2"}, {"0", "3", "0", "1", "4"}, {"0", "7", "5", "0", "0"}}},
		{"pod-a counts from zero again: counters keep the higher", "pod-a", KVStatus{Connected: true, Batches: 2, Reconnects: 3},
			[3]row{{"1", "10", "1", "0", "3"}, {"0", "3", "0", "1", "4"}, {"0", "7", "5", "0", "0"}}},
		{"pod-a passes its old count", "pod-a", KVStatus{Batches: 12, Lost: 1, Reconnects: 3},
			[3]row{{"0", "12", "1", "0", "3"}, {"0", "3", "0", "1", "4"}, {"0", "7", "5", "0", "0"}}},
	}
	labels := [3]string{"pod-a", "pod-b", "other"}
	for _, step := range steps {
		u.Set(step.source, step.set)
		var want strings.Builder
		for _, m := range []struct {
			name, help, typ string
			val             func(row) string
		}{
			{"usher_kvevents_batches_total", "KV-event batches applied from the source, live and replayed.", "counter", func(r row) string { return r.batches }},
			{"usher_kvevents_connected", "1 if the KV-event subscriber is connected to the source, 0 if not.", "gauge", func(r row) string { return r.conn }},
			{"usher_kvevents_lost_batches_total", "KV-event batches of the source that no replay recovered.", "counter", func(r row) string { return r.lost }},
			{"usher_kvevents_reconnects_total", "Connections to the source after the first.", "counter", func(r row) string { return r.reconnects }},
			{"usher_kvevents_resets_total", "Restarts of the source's publisher detected, each clearing its backend.", "counter", func(r row) string { return r.resets }},
		} {
			want.WriteString("# HELP " + m.name + " " + m.help + "\n# TYPE " + m.name + " " + m.typ + "\n")
			for _, i := range []int{2, 0, 1} { // sorted by label value: other, pod-a, pod-b
				want.WriteString(m.name + `{source="` + labels[i] + `"} ` + m.val(step.want[i]) + "\n")
			}
		}
		if got := promtest.Text(t, u, names...); got != want.String() {
			t.Errorf("%s:\n%s\nwant:\n%s", step.name, got, want.String())
		}
	}
}

// TestUsherConcurrent sets every new series from several goroutines while a registry
// gathers (run it with -race): the KV-event counters end at the highest value any goroutine
// set.
func TestUsherConcurrent(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a"}})
	kv := mustKV(t, []string{"pod-a"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(u, kv)
	const writers, n = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range uint64(n) {
				v := i*writers + uint64(w)
				kv.Set("pod-a", KVStatus{Connected: i%2 == 0, Batches: v, Lost: v / 2, Resets: v / 3, Reconnects: v / 4})
				kv.Set("pod-z", KVStatus{Batches: v})
				u.SetInFlight("a", int64(i))
				u.SetInFlight("b", int64(i))
				u.SetInFlightTotal(int(i))
				u.SetFlows(int(i))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	top := float64(n*writers - 1)
	want := map[string]float64{
		`usher_kvevents_batches_total{source="pod-a"}`:      top,
		`usher_kvevents_lost_batches_total{source="pod-a"}`: float64(uint64(top) / 2),
		`usher_kvevents_resets_total{source="pod-a"}`:       float64(uint64(top) / 3),
		`usher_kvevents_reconnects_total{source="pod-a"}`:   float64(uint64(top) / 4),
		`usher_kvevents_batches_total{source="other"}`:      top,
		`usher_backend_inflight_dropped_total`:              n * writers,
	}
	for _, mf := range promtest.Gather(t, u, kv) {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if l := labelString(m); l != "" {
				key += "{" + l + "}"
			}
			if w, ok := want[key]; ok {
				if got := m.GetCounter().GetValue(); got != w {
					t.Errorf("%s = %v, want %v", key, got, w)
				}
				delete(want, key)
			}
		}
	}
	for key := range want {
		t.Errorf("%s missing", key)
	}
}

func TestUsherIndexStats(t *testing.T) {
	u := mustUsher(t, Options{})
	names := []string{"usher_prefix_index_blocks", "usher_prefix_index_bytes", "usher_prefix_index_evictions_total",
		"usher_prefix_index_matched_blocks_total", "usher_prefix_index_queried_blocks_total"}
	steps := []struct{ stats IndexStats }{
		{IndexStats{Blocks: 10, Bytes: 640, QueriedBlocks: 100, MatchedBlocks: 25}},
		{IndexStats{Blocks: 12, Bytes: 768, Evictions: 3, QueriedBlocks: 200, MatchedBlocks: 100}},
		{IndexStats{Blocks: 1, Bytes: 64, QueriedBlocks: 10, MatchedBlocks: 1}}, // index rebuilt
	}
	for i, step := range steps {
		u.SetIndexStats(step.stats)
		got := promtest.Text(t, u, names...)
		s := step.stats
		want := `# HELP usher_prefix_index_blocks Blocks stored in the prefix index.
# TYPE usher_prefix_index_blocks gauge
usher_prefix_index_blocks ` + strconv.FormatInt(s.Blocks, 10) + `
# HELP usher_prefix_index_bytes Bytes used by the prefix index.
# TYPE usher_prefix_index_bytes gauge
usher_prefix_index_bytes ` + strconv.FormatInt(s.Bytes, 10) + `
# HELP usher_prefix_index_evictions_total Blocks evicted from the prefix index.
# TYPE usher_prefix_index_evictions_total counter
usher_prefix_index_evictions_total ` + strconv.FormatUint(s.Evictions, 10) + `
# HELP usher_prefix_index_matched_blocks_total Prompt blocks found in the prefix index.
# TYPE usher_prefix_index_matched_blocks_total counter
usher_prefix_index_matched_blocks_total ` + strconv.FormatUint(s.MatchedBlocks, 10) + `
# HELP usher_prefix_index_queried_blocks_total Prompt blocks looked up in the prefix index.
# TYPE usher_prefix_index_queried_blocks_total counter
usher_prefix_index_queried_blocks_total ` + strconv.FormatUint(s.QueriedBlocks, 10) + `
`
		if got != want {
			t.Errorf("step %d:\n%s\nwant:\n%s", i, got, want)
		}
	}
}

// TestUsherNil: every Observe and Set method of a nil *Recorder is a no-op; the test fails if
// any of them panics.
func TestUsherNil(t *testing.T) {
	var u *Recorder
	u.ObserveAdmission(flowcontrol.Dispatched, 0, time.Second)
	u.SetQueue(0, 1, 1)
	u.ObservePick("a")
	u.SetBackends([]string{"a"})
	u.SetIndexStats(IndexStats{Blocks: 1})
	u.SetFlows(1)
	u.SetInFlight("a", 1)
	u.SetInFlightTotal(1)
	u.ObserveRetry(RetryConnect, Retried)
	var kv *KVEvents
	kv.Set("a", KVStatus{Connected: true, Batches: 1})
}

func TestUsherOptions(t *testing.T) {
	for _, opts := range []Options{
		{Bands: []int{1, 1}},
		{Outcomes: []string{"ok", "ok"}},
		{Outcomes: []string{OtherLabel}},
		{Outcomes: []string{""}},
		{Backends: []string{"a", "a"}},
		{WaitBuckets: []float64{1, 0.5}},
		{WaitBuckets: []float64{math.NaN()}},
	} {
		if _, err := New(opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", opts, err)
		}
	}
	for _, sources := range [][]string{{"a", "a"}, {OtherLabel}, {""}} {
		if _, err := NewKVEvents(sources, nil); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewKVEvents(%q) = %v, want ErrInvalidOptions", sources, err)
		}
	}
	u := mustUsher(t, Options{Backends: []string{"a"}, ConstLabels: prometheus.Labels{"gateway": "g1"}})
	kv, err := NewKVEvents([]string{"a"}, prometheus.Labels{"gateway": "g1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range promtest.Gather(t, u, kv) {
		for _, m := range mf.GetMetric() {
			if !strings.Contains(labelString(m), `gateway="g1"`) {
				t.Errorf("%s{%s} lacks the constant label", mf.GetName(), labelString(m))
			}
		}
	}
}

func TestUsherAllocs(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a", "b"}})
	k := mustKV(t, []string{"pod-a", "pod-b"})
	stats := IndexStats{Blocks: 1, QueriedBlocks: 1}
	kv := KVStatus{Connected: true}
	for name, f := range map[string]func(){
		"SetFlows":         func() { u.SetFlows(7) },
		"SetInFlight":      func() { u.SetInFlight("b", 3) },
		"SetInFlightOther": func() { u.SetInFlight("zz", 3) },
		"SetInFlightTotal": func() { u.SetInFlightTotal(9) },
		"KVEventsSet":      func() { kv.Batches++; k.Set("pod-b", kv) },
		"KVEventsSetOther": func() { kv.Batches++; k.Set("pod-z", kv) },
		"ObserveAdmission": func() { u.ObserveAdmission(flowcontrol.Expired, 3, time.Millisecond) },
		"ObservePick":      func() { u.ObservePick("b") },
		"ObservePickOther": func() { u.ObservePick("zz") },
		"SetQueue":         func() { u.SetQueue(2, 10, 100) },
		"SetIndexStats":    func() { stats.QueriedBlocks++; u.SetIndexStats(stats) },
		"ObserveRetry":     func() { u.ObserveRetry(RetryStalled, Retried) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", name, n)
		}
	}
}

// The rest of a source's state: events, stale probes, batches live and by replay, errors, the
// time of its last batch.
func TestUsherKVSourceDetails(t *testing.T) {
	u := mustKV(t, []string{"pod-a"})
	last := time.Unix(1_700_000_000, 500_000_000)
	u.Set("pod-a", KVStatus{Events: 40, Stale: 2, Live: 1500, ReplayOnly: 4, Late: 1, DecodeErrors: 1, ApplyErrors: 3, LastBatch: last})
	u.Set("pod-a", KVStatus{Events: 10, Live: 9, LastBatch: last.Add(-time.Hour)}) // lower: kept
	got := promtest.Text(t, u, "usher_kvevents_events_total", "usher_kvevents_stale_probes_total",
		"usher_kvevents_delivered_batches_total", "usher_kvevents_late_batches_total",
		"usher_kvevents_decode_errors_total", "usher_kvevents_apply_errors_total", "usher_kvevents_last_batch_timestamp_seconds")
	for _, want := range []string{
		`usher_kvevents_events_total{source="pod-a"} 40`,
		`usher_kvevents_stale_probes_total{source="pod-a"} 2`,
		`usher_kvevents_delivered_batches_total{source="pod-a",via="live"} 1500`,
		`usher_kvevents_delivered_batches_total{source="pod-a",via="replay"} 4`,
		`usher_kvevents_delivered_batches_total{source="other",via="replay"} 0`,
		`usher_kvevents_late_batches_total{source="pod-a"} 1`,
		`usher_kvevents_decode_errors_total{source="pod-a"} 1`,
		`usher_kvevents_apply_errors_total{source="pod-a"} 3`,
		`usher_kvevents_last_batch_timestamp_seconds{source="pod-a"} 1.7000000005e+09`,
		`usher_kvevents_last_batch_timestamp_seconds{source="other"} 0`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("exposition lacks %s:\n%s", want, got)
		}
	}
}

// TestWaitHistogramSeries checks that the wait histogram has a series per configured band
// (and "other") and waited-for outcome only: rejections, decided on arrival, are counted but
// not given wait series.
func TestWaitHistogramSeries(t *testing.T) {
	u, err := New(Options{Bands: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	u.ObserveAdmission(flowcontrol.RejectedCapacity, 0, 0)
	u.ObserveAdmission(flowcontrol.Dispatched, 0, 20*time.Millisecond)
	var series []string
	for _, mf := range promtest.Gather(t, u) {
		if mf.GetName() == "usher_admission_wait_seconds" {
			for _, m := range mf.GetMetric() {
				series = append(series, labelString(m))
			}
		}
	}
	want := []string{
		`band="0",outcome="cancelled"`, `band="0",outcome="dispatched"`, `band="0",outcome="expired"`,
		`band="other",outcome="cancelled"`, `band="other",outcome="dispatched"`, `band="other",outcome="expired"`,
	}
	if !slices.Equal(series, want) {
		t.Errorf("wait histogram series:\n%v\nwant\n%v", series, want)
	}
}

func TestPassiveHealthSeries(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a", "b"}})
	u.SetPassiveHealth("a", PassiveHealth{Ejections: 3, Probes: 2, Restorations: 2, Ejected: true})
	u.SetPassiveHealth("a", PassiveHealth{Ejections: 1, Probes: 1}) // counters never go back
	u.SetPassiveHealth("zzz", PassiveHealth{Ejections: 9, Probes: 9, Ejected: true})
	got := promtest.Text(t, u, "usher_backend_ejections_total", "usher_backend_probes_total", "usher_backend_ejected", "usher_backend_restorations_total")
	for _, want := range []string{
		`usher_backend_ejections_total{backend="a"} 3`, `usher_backend_probes_total{backend="a"} 2`, `usher_backend_ejected{backend="a"} 0`,
		`usher_backend_ejections_total{backend="b"} 0`, `usher_backend_ejected{backend="b"} 0`, `usher_backend_restorations_total{backend="a"} 2`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "zzz") {
		t.Errorf("a backend outside the set was exported:\n%s", got)
	}
	// Replacing the set keeps a remaining backend's counters.
	u.SetBackends([]string{"a"})
	if got := promtest.Text(t, u, "usher_backend_ejections_total"); !strings.Contains(got, `{backend="a"} 3`) || strings.Contains(got, `"b"`) {
		t.Errorf("after SetBackends([a]):\n%s", got)
	}
}

// Active probes and stall moves are counted per configured backend, the rest as "other".
func TestProbeAndStallSeries(t *testing.T) {
	u := mustUsher(t, Options{Backends: []string{"a"}})
	u.ObserveProbe("a", true)
	u.ObserveProbe("a", true)
	u.ObserveProbe("a", false)
	u.ObserveProbe("zzz", false)
	u.ObserveStallMove("a")
	u.ObserveStallMove("zzz")
	u.ObserveStallMove("yyy")
	got := promtest.Text(t, u, "usher_health_probes_total", "usher_stall_moves_total")
	for _, want := range []string{
		`usher_health_probes_total{backend="a",result="ok"} 2`, `usher_health_probes_total{backend="a",result="failed"} 1`,
		`usher_health_probes_total{backend="other",result="failed"} 1`, `usher_health_probes_total{backend="other",result="ok"} 0`,
		`usher_stall_moves_total{backend="a"} 1`, `usher_stall_moves_total{backend="other"} 2`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "zzz") || strings.Contains(got, "yyy") {
		t.Errorf("a backend outside the set was exported:\n%s", got)
	}
}
