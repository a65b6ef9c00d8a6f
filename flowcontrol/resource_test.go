package flowcontrol_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestMemoryFlatUnderManyFlows runs two million distinct flow ids (150,000
// under -race) through the queue, a few hundred alive at a time, and checks that the queue
// forgets them: no flows left, and live heap after the run no larger than after the first
// slice of it.
func TestMemoryFlatUnderManyFlows(t *testing.T) {
	total := 2_000_000
	if raceEnabled || testing.Short() {
		total = 150_000
	}
	q, _ := newBareQueue(t, flowcontrol.Options{MaxInFlight: 256})
	ring := make([]flowcontrol.Ticket, 512)
	buf := make([]byte, 0, 32)
	var base uint64
	for i := range total {
		buf = strconv.AppendInt(append(buf[:0], "session-"...), int64(i), 10)
		tk, err := q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(buf), Bytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		slot := &ring[i%len(ring)]
		if flowcontrol.Valid(*slot) {
			slot.Done(flowcontrol.Usage{}) // completes an older request; the oldest waiter goes
		}
		*slot = tk
		if i == total/8 {
			base = heapInUse()
		}
	}
	// Drain oldest first: each Done dispatches the next waiter, which is then done in turn.
	for i := range len(ring) {
		if tk := ring[(total+i)%len(ring)]; flowcontrol.Valid(tk) {
			tk.Done(flowcontrol.Usage{})
		}
	}
	if s := q.Stats(); s.InFlight > 0 || s.Queued > 0 {
		t.Fatalf("stats %+v after draining", s)
	}
	end := heapInUse()
	s := q.Stats()
	if s.Flows != 0 {
		t.Errorf("%d flows remembered after all work ended", s.Flows)
	}
	if s.Dispatched != uint64(total) || s.Completed != uint64(total) {
		t.Errorf("stats %+v, want %d dispatched and completed", s, total)
	}
	const slack = 4 << 20
	if end > base+slack {
		t.Errorf("heap grew from %d to %d bytes over %d flows: flows are not forgotten", base, end, total)
	}
	t.Logf("heap in use after %d flows: %d KiB (after %d: %d KiB)", total, end>>10, total/8, base>>10)
}

// TestConcurrentInvariants hammers one queue from many goroutines with Admit (some
// cancelled, some with short deadlines), TryAdmit and Done, on the real clock, and checks
// the books balance: every request has exactly one outcome, the in-flight limit held, nothing
// is left over.
func TestConcurrentInvariants(t *testing.T) {
	const limit = 4
	var inflight, peak atomic.Int64
	var outcomes sync.Map // Value → count
	q, err := flowcontrol.New(flowcontrol.Options{
		Bands:        2,
		MaxInFlight:  limit,
		FlowCapacity: flowcontrol.Limits{Requests: 20},
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			c, _ := outcomes.LoadOrStore(r.Request.Value, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	workers, per := 32, 200
	if raceEnabled {
		per = 100
	}
	var wg sync.WaitGroup
	var attempted atomic.Int64
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range per {
				id := g*per + i
				attempted.Add(1)
				r := flowcontrol.Request{Flow: flowcontrol.FlowID(strconv.Itoa(rng.IntN(10))), Band: rng.IntN(2), Value: id}
				var tk flowcontrol.Ticket
				var err error
				switch rng.IntN(5) {
				case 4:
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(rng.IntN(100))*time.Microsecond, cancel)
					tk, err = q.Admit(ctx, r)
					cancel()
				case 0:
					tk, err = q.TryAdmit(r)
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
					tk, err = q.Admit(ctx, r)
					cancel()
				case 2:
					r.TTL = time.Duration(1+rng.IntN(300)) * time.Microsecond
					tk, err = q.Admit(context.Background(), r)
				default:
					tk, err = q.Admit(context.Background(), r)
				}
				if err != nil {
					continue
				}
				n := inflight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				runtime.Gosched()
				inflight.Add(-1)
				tk.Done(flowcontrol.Usage{OutputTokens: 1})
			}
		}()
	}
	wg.Wait()
	s := q.Stats()
	if s.Queued != 0 || s.InFlight != 0 || s.Flows != 0 || s.QueuedBytes != 0 {
		t.Errorf("leftovers: %+v", s)
	}
	sum := s.Dispatched + s.RejectedCapacity + s.RejectedClosed + s.RejectedInvalid + s.Expired + s.Cancelled
	if sum != uint64(attempted.Load()) || s.Completed != s.Dispatched {
		t.Errorf("outcomes %d for %d requests; completed %d of %d dispatched (%+v)", sum, attempted.Load(), s.Completed, s.Dispatched, s)
	}
	n := 0
	outcomes.Range(func(k, v any) bool {
		n++
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("request %v had %d outcomes", k, c)
		}
		return true
	})
	if n != int(attempted.Load()) {
		t.Errorf("%d requests observed, %d attempted", n, attempted.Load())
	}
	if p := peak.Load(); p > limit {
		t.Errorf("peak in flight %d > limit %d", p, limit)
	}
	t.Logf("%+v, peak in flight %d", s, peak.Load())
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	ctx := context.Background()
	shed := flowcontrol.EarlyShed{Enabled: true}
	cases := []struct {
		name  string
		opts  flowcontrol.Options
		run   func(q *flowcontrol.Queue)
		setup func(*flowcontrol.Queue, *flowcontroltest.FakeClock) // nil: see below
	}{
		{"Admit+Done", flowcontrol.Options{}, func(q *flowcontrol.Queue) {
			tk, _ := q.Admit(ctx, flowcontrol.Request{Flow: "a", Bytes: 10})
			tk.Done(flowcontrol.Usage{})
		}, nil},
		{"TryAdmit+Done", flowcontrol.Options{MaxInFlight: 1}, func(q *flowcontrol.Queue) {
			tk, _ := q.TryAdmit(flowcontrol.Request{Flow: "a"})
			tk.Done(flowcontrol.Usage{})
		}, nil},
		{"Enqueue+Cancel", flowcontrol.Options{MaxInFlight: 1}, func(q *flowcontrol.Queue) {
			tk, _ := q.Enqueue(flowcontrol.Request{Flow: "b"})
			tk.Cancel()
		}, nil},
		{"Enqueue+Notify expiry", flowcontrol.Options{MaxInFlight: 1}, func(q *flowcontrol.Queue) {
			q.Enqueue(flowcontrol.Request{Flow: "c", TTL: time.Nanosecond})
			q.Notify()
		}, nil},
		{"observed Admit+Done", flowcontrol.Options{Observer: flowcontrol.Observer{
			Outcome: func(flowcontrol.Record) {}, Done: func(flowcontrol.Record) {},
		}}, func(q *flowcontrol.Queue) {
			tk, _ := q.Admit(ctx, flowcontrol.Request{Flow: "a"})
			tk.Done(flowcontrol.Usage{})
		}, nil},
		// Early shedding on, with a known rate: the estimate is computed on each arrival.
		{"early shed: Admit+Done", flowcontrol.Options{MaxInFlight: 1, EarlyShed: shed}, func(q *flowcontrol.Queue) {
			tk, _ := q.Admit(ctx, flowcontrol.Request{Flow: "a", Bytes: 10})
			tk.Done(flowcontrol.Usage{})
		}, warmRate},
		{"early shed: Enqueue+Cancel", flowcontrol.Options{MaxInFlight: 1, EarlyShed: shed}, func(q *flowcontrol.Queue) {
			tk, _ := q.Enqueue(flowcontrol.Request{Flow: "b"})
			tk.Cancel()
		}, func(q *flowcontrol.Queue, clk *flowcontroltest.FakeClock) {
			warmRate(q, clk)
			q.TryAdmit(flowcontrol.Request{Flow: "holder"})
		}},
		{"early shed: Enqueue shed", flowcontrol.Options{MaxInFlight: 1, EarlyShed: shed, Observer: flowcontrol.Observer{
			Outcome: func(flowcontrol.Record) {},
		}}, func(q *flowcontrol.Queue) {
			q.Enqueue(flowcontrol.Request{Flow: "c", TTL: 100 * time.Millisecond})
		}, func(q *flowcontrol.Queue, clk *flowcontroltest.FakeClock) {
			warmRate(q, clk)
			q.TryAdmit(flowcontrol.Request{Flow: "holder"})
			for range 20 {
				q.Enqueue(flowcontrol.Request{Flow: "backlog"})
			}
			if _, err := q.Enqueue(flowcontrol.Request{Flow: "c", TTL: 100 * time.Millisecond}); !errors.Is(err, flowcontrol.ErrWouldExpire) {
				t.Errorf("early shed: Enqueue behind 20 = %v, want ErrWouldExpire", err)
			}
		}},
		// A Ranker policy: Rank on every enqueue, the class's history, and for a request the
		// band count would shed, the walk of the flow heap that counts what is ahead of it.
		{"ranked early shed: Admit+Done", flowcontrol.Options{Policy: rankedClassPolicy{}, MaxInFlight: 1, EarlyShed: shed}, func(q *flowcontrol.Queue) {
			tk, _ := q.Admit(ctx, flowcontrol.Request{Flow: "a", Bytes: 10})
			tk.Done(flowcontrol.Usage{})
		}, warmRate},
		{"ranked early shed: Enqueue shed", flowcontrol.Options{Policy: rankedClassPolicy{}, MaxInFlight: 1, EarlyShed: shed, Observer: flowcontrol.Observer{
			Outcome: func(flowcontrol.Record) {},
		}}, func(q *flowcontrol.Queue) {
			q.Enqueue(flowcontrol.Request{Flow: "c", TTL: 100 * time.Millisecond})
		}, func(q *flowcontrol.Queue, clk *flowcontroltest.FakeClock) {
			warmRate(q, clk)
			q.TryAdmit(flowcontrol.Request{Flow: "holder"})
			for i := range 20 {
				q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(fmt.Sprint("backlog-", i%5))})
			}
			if _, err := q.Enqueue(flowcontrol.Request{Flow: "c", TTL: 100 * time.Millisecond}); !errors.Is(err, flowcontrol.ErrWouldExpire) {
				t.Errorf("ranked early shed: Enqueue behind 20 = %v, want ErrWouldExpire", err)
			}
		}},
	}
	for _, c := range cases {
		q, clk := newBareQueue(t, c.opts)
		if c.setup != nil {
			c.setup(q, clk)
			if _, ok := flowcontrol.EstimateBandWait(q, 0); !ok {
				t.Errorf("%s: the rate is unknown after warming up", c.name)
			}
		} else if c.opts.MaxInFlight > 0 {
			// Occupy the single slot so that Enqueue'd requests wait.
			if c.name != "TryAdmit+Done" {
				q.TryAdmit(flowcontrol.Request{Flow: "holder"})
			}
		}
		tick := func() { c.run(q); clk.Advance(time.Microsecond) }
		tick()
		if got := testing.AllocsPerRun(1000, tick); got != 0 {
			t.Errorf("%s: %v allocs per run, want 0", c.name, got)
		}
		if s := q.Stats(); strings.HasSuffix(c.name, "early shed: Enqueue shed") && s.RejectedWait < 1000 {
			t.Errorf("%s: %d shed, want every run shed", c.name, s.RejectedWait)
		}
	}
}

// warmRate gives q, whose gate admits one request at a time, a dispatch-rate history: three
// seconds of a backlog served at 10 requests/s, then drained, so that nothing waits or runs.
func warmRate(q *flowcontrol.Queue, clk *flowcontroltest.FakeClock) {
	var fifo []flowcontrol.Ticket // dispatched in this order
	for range 30 {
		for range 2 {
			tk, _ := q.Enqueue(flowcontrol.Request{Flow: "warm"})
			fifo = append(fifo, tk)
		}
		clk.Advance(100 * time.Millisecond)
		fifo[0].Done(flowcontrol.Usage{})
		fifo = fifo[1:]
	}
	for _, tk := range fifo {
		clk.Advance(100 * time.Millisecond)
		tk.Done(flowcontrol.Usage{})
	}
}
