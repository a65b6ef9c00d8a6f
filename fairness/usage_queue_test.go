package fairness_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
	"github.com/usher-llm/usher/internal/peer"
)

// sharingPolicies are the policies that are peer.UsageSharers, for the queue-level
// tests and the benchmark.
func sharingPolicies(t testing.TB) []policyCase {
	var out []policyCase
	for _, c := range policies() {
		if _, ok := c.new(t).(peer.UsageSharer); ok {
			out = append(out, c)
		}
	}
	return out
}

// TestSharingPolicies pins which policies share usage: those whose order depends on it, and
// bounded wait (which forwards to its inner turn priority).
func TestSharingPolicies(t *testing.T) {
	var got []string
	for _, c := range sharingPolicies(t) {
		got = append(got, c.name)
	}
	want := "[turn-priority bounded-wait bounded-wait+share las las-llm-d vtc hierarchy]"
	if fmt.Sprint(got) != want {
		t.Errorf("UsageSharers %v, want %s", got, want)
	}
}

// TestQueueAppliesPeerUsage runs two real queues as two gateway replicas. Replica A serves
// one flow five times; replica B, whose one slot is busy, has two flows waiting, x before y,
// which its own history cannot tell apart, so it would serve x first. Once B has applied A's
// deltas (peer.AppendUsage, peer.ApplyUsage: what package replica calls) it serves y first: the fair
// policies because A served x, turn priority because A served y's earlier turns.
func TestQueueAppliesPeerUsage(t *testing.T) {
	for _, c := range sharingPolicies(t) {
		turns := c.name == "turn-priority" || c.name == "bounded-wait" || c.name == "bounded-wait+share"
		for _, share := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/share=%v", c.name, share), func(t *testing.T) {
				x, y := flowcontrol.FlowID("acme/x"), flowcontrol.FlowID("beta/y")
				served := x
				if turns {
					served = y
				}
				a, b := newReplica(t, c.new(t)), newReplica(t, c.new(t))
				for range 5 {
					a.enqueue(served, 2000)
					a.clk.Advance(time.Second)
					a.done(flowcontrol.Usage{PromptTokens: 2000, OutputTokens: 500})
				}
				b.enqueue("zeta/blocker", 10)
				b.enqueue(x, 100)
				b.clk.Advance(time.Millisecond)
				b.enqueue(y, 100)
				if share {
					ds := peer.AppendUsage(a.q, nil)
					if len(ds) == 0 {
						t.Fatalf("replica A reported no usage")
					}
					peer.ApplyUsage(b.q, ds)
				}
				b.clk.Advance(time.Millisecond)
				b.done(flowcontrol.Usage{PromptTokens: 10})
				want := x
				if share {
					want = y
				}
				if got := b.dispatched[len(b.dispatched)-1]; got != want {
					t.Errorf("replica B dispatched %s first, want %s (dispatches %v)", got, want, b.dispatched)
				}
			})
		}
	}
}

// replica is one gateway replica's queue with one slot, on its own fake clock.
type replica struct {
	clk        *flowcontroltest.FakeClock
	q          *flowcontrol.Queue
	tickets    []flowcontrol.Ticket
	dispatched []flowcontrol.FlowID
}

func newReplica(t testing.TB, p flowcontrol.Policy) *replica {
	r := &replica{clk: new(flowcontroltest.FakeClock)}
	r.clk.Set(simStart)
	q, err := flowcontrol.New(flowcontrol.Options{
		Policy: p, MaxInFlight: 1, Clock: r.clk, TTL: time.Hour,
		Observer: flowcontrol.Observer{Outcome: func(rec flowcontrol.Record) {
			if rec.Outcome == flowcontrol.Dispatched {
				r.tickets = append(r.tickets, rec.Ticket)
				r.dispatched = append(r.dispatched, rec.Request.Flow)
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.q = q
	return r
}

func (r *replica) enqueue(id flowcontrol.FlowID, prompt flowcontrol.Tokens) {
	if _, err := r.q.Enqueue(flowcontrol.Request{Flow: id, PromptTokens: prompt}); err != nil {
		panic(err)
	}
}

// done completes the oldest request in flight with usage u.
func (r *replica) done(u flowcontrol.Usage) {
	tk := r.tickets[0]
	r.tickets = r.tickets[1:]
	tk.Done(u)
}

// replicaPair is two drivers, two replicas in steady state, exchanging usage.
type replicaPair struct {
	a, b *driver
	buf  []peer.UsageDelta
}

// exchange hands each replica's deltas to the other, as package replica does at a flush.
func (r *replicaPair) exchange() {
	r.buf = peer.AppendUsage(r.a.q, r.buf[:0])
	peer.ApplyUsage(r.b.q, r.buf)
	r.buf = peer.AppendUsage(r.b.q, r.buf[:0])
	peer.ApplyUsage(r.a.q, r.buf)
}

// exchangeEvery is how many dispatches each replica makes between two exchanges in the
// allocation test and the benchmark: a gateway dispatching 1,000 requests a second flushes
// every 50 ms, so about 50.
const exchangeEvery = 50

// TestUsageSharingAllocs: with usage shared, a dispatch (with its completion and enqueue)
// still allocates nothing, and neither does an exchange, for every sharing policy.
func TestUsageSharingAllocs(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("allocation counts are measured in the full run without the race detector")
	}
	for _, c := range sharingPolicies(t) {
		t.Run(c.name, func(t *testing.T) {
			r := &replicaPair{a: newDriver(t, c.new(t), 256), b: newDriver(t, c.new(t), 256)}
			round := func() {
				for range exchangeEvery {
					r.a.step()
					r.b.step()
				}
				r.exchange()
			}
			for range 20 {
				round()
			}
			if len(r.buf) == 0 {
				t.Fatal("no usage exchanged")
			}
			if got := testing.AllocsPerRun(100, round); got != 0 {
				t.Errorf("%s: %.2f allocations per %d dispatches on each replica and an exchange, want 0", c.name, got, exchangeEvery)
			}
		})
	}
}

// BenchmarkUsageSharing measures a dispatch on each of two replicas in steady state (each
// with its completion and enqueue, as BenchmarkPolicy): alone (sharing=off), reporting their
// usage every 50 dispatches with nobody to apply it (sharing=append: the cost of keeping the
// growth and the dirty list), and exchanging it (sharing=on: Append on each, Apply of the
// other's deltas, which re-keys the waiting flows named). Nearly every charge here is of a
// flow of its own, so each replica applies about two deltas per dispatch of its peer (the
// prompt charged at dispatch and the output at completion, mostly in different exchanges);
// fewer flows than dispatches per exchange would coalesce them. Compare with benchstat -col
// /sharing.
func BenchmarkUsageSharing(b *testing.B) {
	for _, name := range []string{"vtc", "las", "hierarchy"} {
		for _, n := range []int{100, 1000, 100000} {
			for _, share := range []string{"off", "append", "on"} {
				b.Run(fmt.Sprintf("%s/%d/sharing=%s", name, n, share), func(b *testing.B) {
					r := &replicaPair{a: newDriver(b, policyByName(b, name), n), b: newDriver(b, policyByName(b, name), n)}
					k, applied := 0, 0
					step := func() {
						r.a.step()
						r.b.step()
						if k++; k < exchangeEvery {
							return
						}
						k = 0
						switch share {
						case "append":
							r.buf = peer.AppendUsage(r.a.q, r.buf[:0])
							r.buf = peer.AppendUsage(r.b.q, r.buf[:0])
						case "on":
							r.exchange()
							applied += len(r.buf)
						}
					}
					for range 4 * exchangeEvery {
						step()
					}
					applied = 0
					runtime.GC()
					b.ReportAllocs()
					for b.Loop() {
						step()
					}
					if share == "on" {
						b.ReportMetric(float64(applied)/float64(b.N), "applied/op")
					}
				})
			}
		}
	}
}

// BenchmarkApplyUsageDeltas measures applying a peer's batch of 50 deltas, each for a
// different waiting flow, per delta: by the policy alone (via=policy; the queue's own order is
// then left stale, which does not matter here) and through the queue (peer.ApplyUsage), which also
// looks up and re-keys each flow named (via=queue). The difference is flowcontrol's share.
func BenchmarkApplyUsageDeltas(b *testing.B) {
	for _, name := range []string{"vtc", "las", "turn-priority", "hierarchy"} {
		for _, n := range []int{1000, 100000} {
			for _, via := range []string{"policy", "queue"} {
				b.Run(fmt.Sprintf("%s/%d/via=%s", name, n, via), func(b *testing.B) {
					p := policyByName(b, name)
					d := newDriver(b, p, n)
					ids := flowIDs(n, true)
					batch := make([]peer.UsageDelta, exchangeEvery)
					us := p.(peer.UsageSharer)
					k := 0
					b.ReportAllocs()
					for b.Loop() {
						for i := range batch {
							batch[i] = peer.UsageDelta{Flow: string(ids[k]), Amount: 100}
							k = (k + 7919) % n // a prime stride: a different flow each time
						}
						if via == "policy" {
							us.ApplyUsageDeltas(batch, d.clk.Now())
						} else {
							peer.ApplyUsage(d.q, batch)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/delta")
				})
			}
		}
	}
}

// Two gateway replicas share VTC's counters: replica A serves tenant acme, replica B then
// sees two tenants waiting with nothing of their own history to tell them apart, and with
// A's deltas applied serves beta first.
func ExampleNewVTC_replicas() {
	a, _ := fairness.NewVTC(fairness.VTCOptions{})
	b, _ := fairness.NewVTC(fairness.VTCOptions{})
	qa, _, ta := exampleQueue(a)
	qb, _, tb := exampleQueue(b)

	qa.Enqueue(flowcontrol.Request{Flow: "acme", PromptTokens: 1000})
	(*ta)[0].Done(flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 200})
	deltas := peer.AppendUsage(qa, nil) // what package replica sends at a flush
	fmt.Println("A reports", deltas)

	qb.Enqueue(flowcontrol.Request{Flow: "other", PromptTokens: 10}) // B's slot is busy
	qb.Enqueue(flowcontrol.Request{Flow: "acme", PromptTokens: 100})
	qb.Enqueue(flowcontrol.Request{Flow: "beta", PromptTokens: 100})
	peer.ApplyUsage(qb, deltas) // what package replica applies from the stream
	c, _ := fairness.Counter(b, "acme", 0)
	fmt.Println("B's counter for acme", c)
	(*tb)[0].Done(flowcontrol.Usage{PromptTokens: 10})
	// Output:
	// t=  0s dispatched acme (waited 0s)
	// A reports [{acme 0 1400}]
	// t=  0s dispatched other (waited 0s)
	// B's counter for acme 1410
	// t=  0s dispatched beta (waited 0s)
}
