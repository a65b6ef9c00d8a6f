package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/internal/glue/quotaseam"
)

// gather returns the Limiter's series as "name{labels} value".
func gather(t *testing.T, l *Limiter) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{l})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			k := f.GetName()
			for _, lp := range m.GetLabel() {
				k += fmt.Sprintf(" %s=%s", lp.GetName(), lp.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[k] = v
		}
	}
	return out
}

// A tenant refused or at half a limit gets a label of its own at the next sweep; the others stay "other", and
// the series exist before any traffic.
func TestMetricsSlots(t *testing.T) {
	now := t0
	l, _ := New(Options{Limits: []Limit{{Window: time.Minute, Requests: 2}}, Now: func() time.Time { return now }})
	if got := gather(t, l); got["usher_quota_requests_total outcome=admitted tenant=other"] != 0 || len(got) != 7 {
		t.Fatalf("before traffic: %v, want the other tenant's series and the totals", got)
	}
	ask := func(tenant string) {
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: tenant, PromptTokens: 10, OutputTokens: 5, Now: now}, &g)
		l.settle(&g, quotaseam.Usage{Prompt: 10, Output: 5})
	}
	for range 3 {
		ask("heavy")
	}
	ask("light")
	l.sweep(now)
	for range 2 {
		ask("heavy")
	}
	got := gather(t, l)
	for k, want := range map[string]float64{
		"usher_quota_requests_total outcome=admitted tenant=other": 3, // heavy's 2, light's 1, before heavy had a slot
		"usher_quota_requests_total outcome=refused tenant=other":  1,
		"usher_quota_requests_total outcome=refused tenant=heavy":  2,
		"usher_quota_utilization tenant=heavy":                     1,
		"usher_quota_utilization tenant=light":                     0.5, // at half its limit: a slot too
		"usher_quota_utilization tenant=other":                     0,
		"usher_quota_tokens_total tenant=other":                    45,
		"usher_quota_tenants":                                      2,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}
