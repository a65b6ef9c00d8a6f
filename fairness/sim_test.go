package fairness_test

import (
	"container/heap"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// The scenario harness: a discrete-event simulation of a gateway in front of k serving
// slots, driving a real flowcontrol.Queue on a fake clock from one goroutine (Enqueue,
// Notify, Ticket.Done). Everything is deterministic.

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// job is one simulated request; it travels as Request.Value.
type job struct {
	flow     flowcontrol.FlowID
	class    string // "deep", "new", "heavy", "light", ...
	prompt   flowcontrol.Tokens
	output   flowcontrol.Tokens
	service  time.Duration
	deadline time.Time // zero: Arrival + TTL

	arrival    time.Time
	dispatched time.Time
	expired    bool
	shed       bool // refused on arrival by early shedding
	ticket     flowcontrol.Ticket
}

type simEvent struct {
	at   time.Time
	seq  int
	j    *job
	done bool // completion rather than arrival
}

type eventQueue []simEvent

func (h eventQueue) Len() int { return len(h) }
func (h eventQueue) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventQueue) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventQueue) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventQueue) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type sim struct {
	t       testing.TB
	clk     *flowcontroltest.FakeClock
	q       *flowcontrol.Queue
	events  eventQueue
	seq     int
	pending []flowcontrol.Record
	next    time.Time // earliest queue deadline

	jobs []*job
	// onDone is called after a job completes (closed-loop sessions submit their next turn).
	onDone func(s *sim, j *job)
	// onDispatch is called when a job is dispatched, onExpire when it expires, onShed when
	// early shedding refuses it on arrival.
	onDispatch func(s *sim, j *job)
	onExpire   func(s *sim, j *job)
	onShed     func(s *sim, j *job)
	// arrive, if set, is called with each job's request just before it is enqueued.
	arrive func(s *sim, j *job, r flowcontrol.Request)
}

func newSim(t testing.TB, p flowcontrol.Policy, slots int) *sim {
	return newSimOptions(t, flowcontrol.Options{Policy: p, MaxInFlight: slots, TTL: 60 * time.Second})
}

// newSimOptions is newSim with the queue's options; Clock, Capacity (unless set) and
// Observer are the harness's.
func newSimOptions(t testing.TB, o flowcontrol.Options) *sim {
	s := &sim{t: t, clk: new(flowcontroltest.FakeClock)}
	s.clk.Set(simStart)
	o.Clock = s.clk
	if o.Capacity == (flowcontrol.Limits{}) {
		o.Capacity = flowcontrol.Limits{Requests: 1 << 20}
	}
	o.Observer = flowcontrol.Observer{Outcome: func(r flowcontrol.Record) { s.pending = append(s.pending, r) }}
	q, err := flowcontrol.New(o)
	if err != nil {
		t.Fatal(err)
	}
	s.q = q
	return s
}

func (s *sim) now() time.Time { return s.clk.Now() }

// submit schedules j's arrival at time at.
func (s *sim) submit(at time.Time, j *job) {
	s.seq++
	heap.Push(&s.events, simEvent{at: at, seq: s.seq, j: j})
}

func (s *sim) drain() {
	for len(s.pending) > 0 {
		r := s.pending[0]
		s.pending = s.pending[1:]
		j := r.Request.Value.(*job)
		switch r.Outcome {
		case flowcontrol.Dispatched:
			j.dispatched = s.now()
			j.ticket = r.Ticket
			s.seq++
			heap.Push(&s.events, simEvent{at: s.now().Add(j.service), seq: s.seq, j: j, done: true})
			if s.onDispatch != nil {
				s.onDispatch(s, j)
			}
		case flowcontrol.Expired:
			j.expired = true
			if s.onExpire != nil {
				s.onExpire(s, j)
			}
		case flowcontrol.RejectedWait:
			j.shed = true
			if s.onShed != nil {
				s.onShed(s, j)
			}
		default:
			s.t.Fatalf("job %s: unexpected outcome %v (%v)", j.flow, r.Outcome, r.Err)
		}
	}
}

// run processes events and deadlines until end, then leaves the clock at end.
func (s *sim) run(end time.Time) {
	for {
		var at time.Time
		if len(s.events) > 0 {
			at = s.events[0].at
		}
		if !s.next.IsZero() && (at.IsZero() || s.next.Before(at)) {
			at = s.next
		}
		if at.IsZero() || at.After(end) {
			s.clk.Set(end)
			s.next = s.q.Notify()
			s.drain()
			return
		}
		s.clk.Set(at)
		if len(s.events) > 0 && s.events[0].at.Equal(at) {
			s.step(heap.Pop(&s.events).(simEvent))
		}
		s.next = s.q.Notify()
		s.drain()
	}
}

func (s *sim) step(e simEvent) {
	at := e.at
	if e.done {
		e.j.ticket.Done(flowcontrol.Usage{PromptTokens: e.j.prompt, OutputTokens: e.j.output})
		s.drain()
		if s.onDone != nil {
			s.onDone(s, e.j)
		}
		return
	}
	e.j.arrival = at
	s.jobs = append(s.jobs, e.j)
	r := flowcontrol.Request{
		Flow: e.j.flow, PromptTokens: e.j.prompt, OutputTokens: e.j.output,
		Arrival: at, Deadline: e.j.deadline, Value: e.j,
	}
	if s.arrive != nil {
		s.arrive(s, e.j, r)
	}
	if _, err := s.q.Enqueue(r); err != nil && !errors.Is(err, flowcontrol.ErrWouldExpire) {
		s.t.Fatalf("enqueue %s: %v", e.j.flow, err)
	}
	s.drain()
}

// percentile returns the p-th percentile (0..1) of ds, nearest rank; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
