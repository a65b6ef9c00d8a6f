package fairness_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
	"github.com/usher-llm/usher/internal/benchcpu"
	"github.com/usher-llm/usher/internal/peer"
)

// driver keeps a real queue in steady state: every flow has one request waiting, a fixed
// number of requests is in flight, and each step completes the oldest in-flight request
// (which dispatches the policy's next choice) and gives its flow a new request.
type driver struct {
	clk   *flowcontroltest.FakeClock
	q     *flowcontrol.Queue
	ring  []inflight
	head  int
	count int
	req   flowcontrol.Request
}

type inflight struct {
	t    flowcontrol.Ticket
	flow flowcontrol.FlowID
}

const driverSlots = 64

func flowIDs(n int, tenants bool) []flowcontrol.FlowID {
	ids := make([]flowcontrol.FlowID, n)
	for i := range ids {
		if tenants {
			ids[i] = flowcontrol.FlowID(fmt.Sprintf("t%03d/s%d", i%100, i))
		} else {
			ids[i] = flowcontrol.FlowID(fmt.Sprintf("flow-%d", i))
		}
	}
	return ids
}

// quickSetup wraps a FlowPicker so that, while the driver fills the queue, picks are O(1):
// the queue asks the picker before consulting the gate, so filling 100,000 flows behind a
// closed gate would cost an O(flows) scan per enqueue for LASReference (O(flows²) in all).
// The steady state is measured with the real picker.
type quickSetup struct {
	flowcontrol.Policy
	picker  flowcontrol.FlowPicker
	filling bool
}

func (w *quickSetup) PickFlow(band int, flows []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	if w.filling && len(flows) > 0 {
		return flows[0].ID, true
	}
	return w.picker.PickFlow(band, flows, now)
}

// quickSharer is a quickSetup around a policy that is a peer.UsageSharer, which the
// wrapper must stay for the queue to exchange its usage.
type quickSharer struct {
	*quickSetup
	peer.UsageSharer
}

func newDriver(tb testing.TB, p flowcontrol.Policy, flows int) *driver {
	d := &driver{clk: new(flowcontroltest.FakeClock), ring: make([]inflight, driverSlots+1)}
	d.clk.Set(simStart)
	var quick *quickSetup
	if fp, ok := p.(flowcontrol.FlowPicker); ok {
		quick = &quickSetup{Policy: p, picker: fp, filling: true}
		if us, ok := p.(peer.UsageSharer); ok {
			p = quickSharer{quick, us}
		} else {
			p = quick
		}
	}
	q, err := flowcontrol.New(flowcontrol.Options{
		Policy:      p,
		MaxInFlight: driverSlots,
		Clock:       d.clk,
		TTL:         24 * time.Hour,
		Capacity:    flowcontrol.Limits{Requests: flows + driverSlots + 1},
		Observer:    flowcontrol.Observer{Outcome: d.outcome},
	})
	if err != nil {
		tb.Fatal(err)
	}
	d.q = q
	d.req = flowcontrol.Request{PromptTokens: 1000, OutputTokens: 100, Bytes: 4000}
	for _, id := range flowIDs(flows, true) {
		d.req.Flow = id
		if _, err := q.Enqueue(d.req); err != nil {
			tb.Fatal(err)
		}
	}
	if quick != nil {
		quick.filling = false
	}
	if d.count != driverSlots {
		tb.Fatalf("%d in flight after setup, want %d", d.count, driverSlots)
	}
	return d
}

func (d *driver) outcome(r flowcontrol.Record) {
	if r.Outcome != flowcontrol.Dispatched {
		panic("driver: unexpected outcome " + r.Outcome.String())
	}
	d.ring[(d.head+d.count)%len(d.ring)] = inflight{r.Ticket, r.Request.Flow}
	d.count++
}

// step completes the oldest request in flight and refills its flow: one completion, one
// dispatch, one enqueue.
func (d *driver) step() {
	x := d.ring[d.head]
	d.ring[d.head] = inflight{}
	d.head = (d.head + 1) % len(d.ring)
	d.count--
	d.clk.Advance(time.Millisecond)
	x.t.Done(flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 100})
	d.req.Flow = x.flow
	if _, err := d.q.Enqueue(d.req); err != nil {
		panic(err)
	}
}

// BenchmarkPolicy measures one dispatch through the real queue in steady state (with the
// completion that frees the slot and the enqueue that refills the flow), for every policy,
// with 1,000 and 100,000 flows waiting. Beside wall-clock ns/op it reports cpu-ns/op, the
// benchmark thread's own CPU time, which a busy machine distorts less.
func BenchmarkPolicy(b *testing.B) {
	for _, c := range policies() {
		for _, n := range []int{1000, 100000} {
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				d := newDriver(b, c.new(b), n)
				for range 2 * driverSlots {
					d.step()
				}
				runtime.GC() // collect the setup's garbage outside the measurement
				b.ReportAllocs()
				m := benchcpu.StartThread()
				for b.Loop() {
					d.step()
				}
				m.Stop(b)
			})
		}
	}
}

// TestSteadyStateAllocs checks that a dispatch (with its completion and enqueue) allocates
// nothing once the queue and the policy have warmed up, for every policy.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are measured in the full run")
	}
	for _, c := range policies() {
		t.Run(c.name, func(t *testing.T) {
			d := newDriver(t, c.new(t), 256)
			for range 1000 {
				d.step()
			}
			if got := testing.AllocsPerRun(1000, d.step); got != 0 {
				t.Errorf("%s: %.2f allocations per dispatch, want 0", c.name, got)
			}
		})
	}
}

// BenchmarkGittinsChurn is BenchmarkPolicy with sessions that end: every eighth refill
// starts a new session (a fresh flow id) instead of continuing the one that completed, which
// goes idle and, past Memory.MaxIdle idle flows, is forgotten — an ended session for the
// Gittins policy, whose index table is then rebuilt and every waiting flow re-keyed, amortised
// into the figure. FCFS on the same workload is the baseline (bench/BENCHMARKS.md).
func BenchmarkGittinsChurn(b *testing.B) {
	ids := make([]flowcontrol.FlowID, 400000)
	for i := range ids {
		ids[i] = flowcontrol.FlowID(fmt.Sprintf("churn/s%d", i))
	}
	for _, c := range []policyCase{
		{"fcfs", func(testing.TB) flowcontrol.Policy { return fairness.FCFS() }},
		{"gittins", func(t testing.TB) flowcontrol.Policy {
			return must[flowcontrol.Policy](t)(fairness.NewGittins(fairness.GittinsOptions{Memory: fairness.Memory{MaxIdle: 1024}}))
		}},
		{"gittins+bw", func(t testing.TB) flowcontrol.Policy {
			return must[flowcontrol.Policy](t)(fairness.NewGittins(fairness.GittinsOptions{Wait: time.Hour, Memory: fairness.Memory{MaxIdle: 1024}}))
		}},
	} {
		for _, n := range []int{1000, 100000} {
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				d := newDriver(b, c.new(b), n)
				k := 0
				step := func() {
					x := d.ring[d.head]
					d.ring[d.head] = inflight{}
					d.head = (d.head + 1) % len(d.ring)
					d.count--
					d.clk.Advance(time.Millisecond)
					x.t.Done(flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 100})
					d.req.Flow = x.flow
					if k++; k%8 == 0 {
						d.req.Flow = ids[(k/8)%len(ids)]
					}
					if _, err := d.q.Enqueue(d.req); err != nil {
						panic(err)
					}
				}
				for range 2 * driverSlots {
					step()
				}
				runtime.GC()
				b.ReportAllocs()
				for b.Loop() {
					step()
				}
			})
		}
	}
}
