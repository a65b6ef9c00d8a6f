// Package promtest gathers Prometheus collectors for tests: through a pedantic registry, which
// checks each collector's Describe against its Collect, and optionally rendered in the text
// exposition format so that a test can compare a whole exposition with what it wants.
package promtest

import (
	"bytes"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Gather registers cs in a new pedantic registry, gathers, and returns the families, sorted by
// name; a registration or gathering error fails tb.
func Gather(tb testing.TB, cs ...prometheus.Collector) []*dto.MetricFamily {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			tb.Fatalf("Register: %v", err)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		tb.Fatalf("Gather: %v", err)
	}
	return fams
}

// Text renders c's families named in names in the text format, in the registry's order.
func Text(tb testing.TB, c prometheus.Collector, names ...string) string {
	tb.Helper()
	var buf bytes.Buffer
	for _, mf := range Gather(tb, c) {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.String()
}
