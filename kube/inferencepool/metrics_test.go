package inferencepool

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The collector exports the Source's Stats: not found and no endpoints before the pool
// exists, then found, connected, with the pods' endpoints.
func TestCollector(t *testing.T) {
	text := func(reg *prometheus.Registry) string {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				v := m.GetGauge().GetValue()
				if mf.GetType() == dto.MetricType_COUNTER {
					v = m.GetCounter().GetValue()
					fmt.Fprintf(&b, "# TYPE %s counter\n", mf.GetName())
				}
				fmt.Fprintf(&b, "%s %v\n", mf.GetName(), v)
			}
		}
		return b.String()
	}
	c := newFakeCluster(poolObject(map[string]string{"app": "a"}, 8000),
		newPod("p1", "10.0.0.1", true, map[string]string{"app": "a"}), newPod("p2", "10.0.0.2", true, map[string]string{"app": "a"}))
	s, updates, stop := run(t, Options{Clients: c.clients()})
	defer func() { _ = stop() }()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	waitSet(t, "two pods", updates, "10.0.0.1:8000,10.0.0.2:8000")
	got := text(reg)
	for _, want := range []string{
		"usher_epp_pool_connected 1\n", "usher_epp_pool_found 1\n", "usher_epp_pool_endpoints 2\n",
		"usher_epp_pool_sync_errors_total 0\n", "# TYPE usher_epp_pool_sync_errors_total counter\n",
		"usher_epp_pool_last_sync_timestamp_seconds 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}
