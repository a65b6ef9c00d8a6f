package gatewaymetrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
)

// usher's own metrics: plain calls where things happen, bounded labels.
func Example() {
	u, err := gatewaymetrics.New(gatewaymetrics.Options{Bands: []int{0, 1}, Backends: []string{"gpu-0", "gpu-1"}})
	if err != nil {
		panic(err)
	}
	kv, err := gatewaymetrics.NewKVEvents([]string{"gpu-0", "gpu-1"}, nil)
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(u, kv)

	u.ObserveAdmission(flowcontrol.Dispatched, 0, 12*time.Millisecond)
	u.ObserveAdmission(flowcontrol.Expired, 1, 30*time.Second)
	u.ObserveAdmission(flowcontrol.Dispatched, 0, 3*time.Millisecond)
	u.SetQueue(1, 17, 64<<10)
	u.ObservePick("gpu-1")
	u.ObservePick("10.1.2.3:8000") // not a configured backend: counted as "other"
	u.SetFlows(12)
	u.SetInFlight("gpu-1", 5)
	u.SetInFlight("10.1.2.3:8000", 2) // not a configured backend: dropped, and the drop counted
	u.SetInFlightTotal(7)
	// The KV-event subscriber's cumulative counters per source, as kvevents.SourceStatus has them.
	kv.Set("gpu-1", gatewaymetrics.KVStatus{Connected: true, Batches: 420, Lost: 3, Resets: 1, Reconnects: 2})
	u.SetIndexStats(gatewaymetrics.IndexStats{Blocks: 1 << 20, Bytes: 48 << 20, QueriedBlocks: 1000, MatchedBlocks: 640})

	fams, _ := reg.Gather()
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			default:
				continue
			}
			if v == 0 {
				continue
			}
			labels := ""
			for _, lp := range m.GetLabel() {
				labels += fmt.Sprintf(" %s=%s", lp.GetName(), lp.GetValue())
			}
			fmt.Printf("%s%s %v\n", mf.GetName(), labels, v)
		}
	}
	// Output:
	// usher_admissions_total band=0 outcome=dispatched 2
	// usher_admissions_total band=1 outcome=expired 1
	// usher_backend_inflight_dropped_total 1
	// usher_backend_inflight_requests backend=gpu-1 5
	// usher_flows 12
	// usher_inflight_requests 7
	// usher_kvevents_batches_total source=gpu-1 420
	// usher_kvevents_connected source=gpu-1 1
	// usher_kvevents_lost_batches_total source=gpu-1 3
	// usher_kvevents_reconnects_total source=gpu-1 2
	// usher_kvevents_resets_total source=gpu-1 1
	// usher_picks_total backend=gpu-1 1
	// usher_picks_total backend=other 1
	// usher_prefix_index_blocks 1.048576e+06
	// usher_prefix_index_bytes 5.0331648e+07
	// usher_prefix_index_matched_blocks_total 640
	// usher_prefix_index_queried_blocks_total 1000
	// usher_queue_bytes band=1 65536
	// usher_queue_requests band=1 17
}
