package flowcontrol_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
	"github.com/usher-llm/usher/internal/benchcpu"
)

func flowIDs(n int) []flowcontrol.FlowID {
	ids := make([]flowcontrol.FlowID, n)
	for i := range ids {
		ids[i] = flowcontrol.FlowID("flow-" + strconv.Itoa(i))
	}
	return ids
}

// BenchmarkAdmitDone measures one admission, its dispatch and its completion.
//
//   - idle/ids=n: Admit + Done with nothing waiting (the fast path), on the system clock,
//     rotating over n flow ids. The queue holds at most one flow at a time: when n > 1 each
//     op also creates and forgets one, and n only says how many distinct ids pass through.
//   - backlog/flows=n: every one of n flows has a request waiting behind a one-slot gate
//     (n requests waiting, n flows in the band's heap), on a fake clock; each op is Done
//     (which dispatches the oldest waiting request: a flow-heap pop) and Enqueue of a new
//     request (a flow-table lookup and a flow-heap push). This is the O(log flows) path.
func BenchmarkAdmitDone(b *testing.B) {
	for _, n := range []int{1, 1000, 100_000} {
		ids := flowIDs(n)
		b.Run(fmt.Sprintf("idle/ids=%d", n), func(b *testing.B) {
			q, err := flowcontrol.New(flowcontrol.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			defer benchcpu.StartProcess().Stop(b)
			for b.Loop() {
				tk, err := q.Admit(ctx, flowcontrol.Request{Flow: ids[i%n], Bytes: 512, PromptTokens: 100})
				if err != nil {
					b.Fatal(err)
				}
				tk.Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
				i++
			}
		})
		b.Run(fmt.Sprintf("backlog/flows=%d", n), func(b *testing.B) {
			clk := new(flowcontroltest.FakeClock)
			clk.Set(t0)
			q, err := flowcontrol.New(flowcontrol.Options{MaxInFlight: 1, Clock: clk, Capacity: flowcontrol.Limits{Requests: n + 2}})
			if err != nil {
				b.Fatal(err)
			}
			ring := make([]flowcontrol.Ticket, n+1)
			for i := range ring {
				if ring[i], err = q.Enqueue(flowcontrol.Request{Flow: ids[i%n], Bytes: 512}); err != nil {
					b.Fatal(err)
				}
			}
			head, k := 0, 1
			b.ReportAllocs()
			defer benchcpu.StartProcess().Stop(b)
			for b.Loop() {
				ring[head].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
				if ring[head], err = q.Enqueue(flowcontrol.Request{Flow: ids[k%n], Bytes: 512}); err != nil {
					b.Fatal(err)
				}
				k++
				if head++; head == len(ring) {
					head = 0
				}
			}
			if s := q.Stats(); s.Queued != n || s.Flows != n {
				b.Fatalf("stats %+v, want %d flows with one waiting each", s, n)
			}
		})
	}
}

// BenchmarkAdmitDoneEarlyShed is BenchmarkAdmitDone's idle and backlog cases with early
// shedding on. In backlog the queue has a known rate (warmed up at 10 dispatches/s) and a TTL
// long enough that nothing is shed, so every Enqueue computes the estimate and keeps the
// request.
func BenchmarkAdmitDoneEarlyShed(b *testing.B) {
	shed := flowcontrol.EarlyShed{Enabled: true}
	b.Run("idle", func(b *testing.B) {
		q, err := flowcontrol.New(flowcontrol.Options{EarlyShed: shed})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		defer benchcpu.StartProcess().Stop(b)
		for b.Loop() {
			tk, err := q.Admit(ctx, flowcontrol.Request{Flow: "a", Bytes: 512, PromptTokens: 100})
			if err != nil {
				b.Fatal(err)
			}
			tk.Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
		}
	})
	b.Run("backlog/flows=1000", func(b *testing.B) {
		const n = 1000
		ids := flowIDs(n)
		clk := new(flowcontroltest.FakeClock)
		clk.Set(t0)
		q, err := flowcontrol.New(flowcontrol.Options{MaxInFlight: 1, Clock: clk, TTL: 24 * time.Hour,
			Capacity: flowcontrol.Limits{Requests: n + 2}, EarlyShed: shed})
		if err != nil {
			b.Fatal(err)
		}
		warmRate(q, clk)
		ring := make([]flowcontrol.Ticket, n+1)
		for i := range ring {
			if ring[i], err = q.Enqueue(flowcontrol.Request{Flow: ids[i%n], Bytes: 512}); err != nil {
				b.Fatal(err)
			}
		}
		if _, ok := flowcontrol.EstimateBandWait(q, 0); !ok {
			b.Fatal("rate unknown after warming up")
		}
		head, k := 0, 1
		b.ReportAllocs()
		defer benchcpu.StartProcess().Stop(b)
		for b.Loop() {
			ring[head].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
			if ring[head], err = q.Enqueue(flowcontrol.Request{Flow: ids[k%n], Bytes: 512}); err != nil {
				b.Fatal(err)
			}
			k++
			if head++; head == len(ring) {
				head = 0
			}
		}
	})
}

// BenchmarkAdmitParallel measures Admit + Done from GOMAXPROCS goroutines on one queue
// (system clock, no gate: the cost of sharing the lock).
func BenchmarkAdmitParallel(b *testing.B) {
	q, err := flowcontrol.New(flowcontrol.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ids := flowIDs(1024)
	var next atomic.Int64
	b.ReportAllocs()
	defer benchcpu.StartProcess().Stop(b)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := int(next.Add(1)) * 97
		for pb.Next() {
			tk, err := q.Admit(ctx, flowcontrol.Request{Flow: ids[i%len(ids)], Bytes: 512})
			if err != nil {
				b.Fatal(err)
			}
			tk.Done(flowcontrol.Usage{OutputTokens: 1})
			i++
		}
	})
}

// BenchmarkExpire measures one enqueue and one expiry with 10,000 requests waiting behind a
// closed gate, deadlines staggered 1 µs apart: each op enqueues a request, advances the fake
// clock by 1 µs and calls Notify, which expires exactly the oldest one through the deadline
// heap.
func BenchmarkExpire(b *testing.B) {
	const n = 10_000
	clk := new(flowcontroltest.FakeClock)
	clk.Set(t0)
	closed := gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return false })
	q, err := flowcontrol.New(flowcontrol.Options{Gate: closed, Clock: clk, TTL: n * time.Microsecond, Capacity: flowcontrol.Limits{Requests: n + 1}})
	if err != nil {
		b.Fatal(err)
	}
	ids := flowIDs(100)
	for i := range n - 1 {
		q.Enqueue(flowcontrol.Request{Flow: ids[i%len(ids)]})
		clk.Advance(time.Microsecond)
	}
	i := 0
	b.ReportAllocs()
	defer benchcpu.StartProcess().Stop(b)
	for b.Loop() {
		if _, err := q.Enqueue(flowcontrol.Request{Flow: ids[i%len(ids)]}); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Microsecond)
		q.Notify()
		i++
	}
	if s := q.Stats(); s.Queued != n-1 || s.Expired != uint64(b.N) {
		b.Fatalf("stats %+v, want %d waiting and %d expired", s, n-1, b.N)
	}
}
