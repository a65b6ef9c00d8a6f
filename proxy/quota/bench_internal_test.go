package quota

import (
	"strconv"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
)

// benchTenants is the tenant count of the admission benchmark (issue 47: 100k tenants).
const benchTenants = 100_000

// benchLimiter is a Limiter with a minute's and a day's limit, every one of n tenants known.
func benchLimiter(tb testing.TB, n int) (*Limiter, []string) {
	l, err := New(Options{Limits: []Limit{
		{Window: time.Minute, Requests: 1 << 40, Tokens: 1 << 50},
		{Window: 24 * time.Hour, Tokens: 1 << 60},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "key-" + strconv.Itoa(i)
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: names[i], Now: t0}, &g)
		l.settle(&g, quotaseam.Usage{})
	}
	return l, names
}

// benchQueue is a queue with room for every request, so that TryAdmit dispatches at once.
func benchQueue(tb testing.TB) *flowcontrol.Queue {
	q, err := flowcontrol.New(flowcontrol.Options{MaxInFlight: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// BenchmarkAdmission is a request's admission at 100k tenants, without quotas (the queue's
// TryAdmit and Done) and with them (the reservation before and the settlement after).
func BenchmarkAdmission(b *testing.B) {
	l, names := benchLimiter(b, benchTenants)
	for _, quotas := range []bool{false, true} {
		name := "without-quotas"
		if quotas {
			name = "with-quotas"
		}
		b.Run(name, func(b *testing.B) {
			q := benchQueue(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tenant := names[i%len(names)]
				i++
				var g quotaseam.Grant
				if quotas {
					l.reserve(&quotaseam.Ask{Tenant: tenant, PromptTokens: 500, OutputTokens: 200, Now: t0}, &g)
				}
				t, err := q.TryAdmit(flowcontrol.Request{Flow: flowcontrol.FlowID(tenant), PromptTokens: 500, OutputTokens: 200})
				if err != nil {
					b.Fatal(err)
				}
				t.Done(flowcontrol.Usage{PromptTokens: 500, OutputTokens: 100})
				if quotas {
					l.settle(&g, quotaseam.Usage{Prompt: 500, Output: 100})
				}
			}
		})
	}
	b.Run("quota-only", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var g quotaseam.Grant
			l.reserve(&quotaseam.Ask{Tenant: names[i%len(names)], PromptTokens: 500, OutputTokens: 200, Now: t0}, &g)
			l.settle(&g, quotaseam.Usage{Prompt: 500, Output: 100})
			i++
		}
	})
	b.Run("quota-only-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				var g quotaseam.Grant
				l.reserve(&quotaseam.Ask{Tenant: names[i%len(names)], PromptTokens: 500, OutputTokens: 200, Now: t0}, &g)
				l.settle(&g, quotaseam.Usage{Prompt: 500, Output: 100})
				i += 7
			}
		})
	})
}

// Reserving and settling at 100k known tenants allocates nothing.
func TestReserveAllocsAt100kTenants(t *testing.T) {
	l, names := benchLimiter(t, benchTenants)
	i := 0
	if n := testing.AllocsPerRun(10000, func() {
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: names[i%len(names)], PromptTokens: 500, OutputTokens: 200, Now: t0}, &g)
		l.settle(&g, quotaseam.Usage{Prompt: 500, Output: 100})
		i += 13
	}); n != 0 {
		t.Fatalf("%v allocations per reservation and settlement, want 0", n)
	}
}
