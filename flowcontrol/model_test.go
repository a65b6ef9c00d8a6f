package flowcontrol_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// The model-based test drives a Queue (FCFS, two bands, a concurrency limit and a
// saturation switch, small capacities) and a naive reference — a plain slice scanned on
// every step — with the same operations, and requires the same outcomes, in the same order,
// after every step. On top of that it checks the invariants directly: exactly one outcome
// per request, counts never negative, capacities never exceeded, nothing dispatched while
// saturated, the gate's limit held.
//
// With early shedding on, the model does not reproduce the queue's rate estimate; it takes
// EstimateWait, read just before each Enqueue, as given and decides from it, the deadline
// and its own view of the gate whether the request is shed: the queue must agree, and
// everything else must still match.

const (
	mLimit      = 2
	mTTL        = 3 * time.Second
	mCapReqs    = 6
	mCapBytes   = 100
	mBand1Reqs  = 4
	mFlowReqs   = 3
	mFlowBytes  = 60
	mFlows      = 4
	mBands      = 2
	mMaxActions = 200
)

type mreq struct {
	id, flow, band int
	bytes          int64
	arrival, dl    time.Time
	seq            int
}

type event struct {
	id int
	o  flowcontrol.Outcome
}

type model struct {
	now       time.Time
	waiting   []mreq
	inflight  map[int]mreq
	saturated bool
	closed    bool
	seq       int
	events    []event
}

func (m *model) gateOpen() bool { return !m.saturated && len(m.inflight) < mLimit }

func (m *model) expire() {
	var due []mreq
	m.waiting = slices.DeleteFunc(m.waiting, func(r mreq) bool {
		if !r.dl.After(m.now) {
			due = append(due, r)
			return true
		}
		return false
	})
	slices.SortFunc(due, func(a, b mreq) int {
		if c := a.dl.Compare(b.dl); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	for _, r := range due {
		m.events = append(m.events, event{r.id, flowcontrol.Expired})
	}
}

func (m *model) dispatch() {
	for b := range mBands {
		for {
			best := -1
			for i, r := range m.waiting {
				if r.band != b {
					continue
				}
				if best < 0 || r.arrival.Before(m.waiting[best].arrival) || (r.arrival.Equal(m.waiting[best].arrival) && r.seq < m.waiting[best].seq) {
					best = i
				}
			}
			if best < 0 || !m.gateOpen() {
				break
			}
			r := m.waiting[best]
			m.waiting = slices.Delete(m.waiting, best, best+1)
			m.inflight[r.id] = r
			m.events = append(m.events, event{r.id, flowcontrol.Dispatched})
		}
	}
}

func (m *model) run() { m.expire(); m.dispatch() }

func (m *model) count(pred func(mreq) bool) (n int, bytes int64) {
	for _, r := range m.waiting {
		if pred(r) {
			n++
			bytes += r.bytes
		}
	}
	return n, bytes
}

// enqueue mirrors Queue.Enqueue; it returns the rejection outcome or 0. est is the queue's
// EstimateWait for r's band when early shedding is on (ok false otherwise).
func (m *model) enqueue(r mreq, est time.Duration, ok bool) flowcontrol.Outcome {
	if m.closed {
		m.events = append(m.events, event{r.id, flowcontrol.RejectedClosed})
		return flowcontrol.RejectedClosed
	}
	m.expire()
	n, by := m.count(func(mreq) bool { return true })
	bn, _ := m.count(func(x mreq) bool { return x.band == r.band })
	fn, fb := m.count(func(x mreq) bool { return x.band == r.band && x.flow == r.flow })
	if n+1 > mCapReqs || by+r.bytes > mCapBytes || (r.band == 1 && bn+1 > mBand1Reqs) || fn+1 > mFlowReqs || fb+r.bytes > mFlowBytes {
		m.events = append(m.events, event{r.id, flowcontrol.RejectedCapacity})
		return flowcontrol.RejectedCapacity
	}
	if ok && est > r.dl.Sub(m.now) && (bn > 0 || !m.gateOpen()) {
		m.events = append(m.events, event{r.id, flowcontrol.RejectedWait})
		return flowcontrol.RejectedWait
	}
	r.seq = m.seq
	m.seq++
	m.waiting = append(m.waiting, r)
	m.run()
	return 0
}

func (m *model) tryAdmit(r mreq) {
	m.run()
	if !m.closed {
		n, _ := m.count(func(x mreq) bool { return x.band == r.band })
		if n > 0 || !m.gateOpen() {
			m.events = append(m.events, event{r.id, flowcontrol.RejectedCapacity})
			return
		}
	}
	m.enqueue(r, 0, false)
}

func (m *model) cancel(id int) bool {
	for i, r := range m.waiting {
		if r.id == id {
			m.waiting = slices.Delete(m.waiting, i, i+1)
			m.events = append(m.events, event{id, flowcontrol.Cancelled})
			m.run()
			return true
		}
	}
	return false
}

func (m *model) done(id int) {
	delete(m.inflight, id)
	m.run()
}

func (m *model) close() {
	m.closed = true
	slices.SortFunc(m.waiting, func(a, b mreq) int {
		if c := a.dl.Compare(b.dl); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	for _, r := range m.waiting {
		m.events = append(m.events, event{r.id, flowcontrol.RejectedClosed})
	}
	m.waiting = nil
}

// checkModel runs the operations encoded in ops against both, with early shedding on if
// shed, and reports the first divergence. It returns the number of requests shed.
func checkModel(t *testing.T, ops []byte, shed bool) (sheds int) {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(t0)
	m := &model{now: t0, inflight: map[int]mreq{}}
	var got []event
	tickets := map[int]flowcontrol.Ticket{} // from the observer
	all := map[int]flowcontrol.Ticket{}     // from Enqueue
	q, err := flowcontrol.New(flowcontrol.Options{
		Bands:        mBands,
		Clock:        clk,
		TTL:          mTTL,
		MaxInFlight:  mLimit,
		Gate:         gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return !m.saturated }),
		Capacity:     flowcontrol.Limits{Requests: mCapReqs, Bytes: mCapBytes},
		BandCapacity: []flowcontrol.Limits{{}, {Requests: mBand1Reqs}},
		FlowCapacity: flowcontrol.Limits{Requests: mFlowReqs, Bytes: mFlowBytes},
		EarlyShed:    flowcontrol.EarlyShed{Enabled: shed},
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			id := r.Request.Value.(int)
			got = append(got, event{id, r.Outcome})
			if r.Outcome == flowcontrol.Dispatched {
				tickets[id] = r.Ticket
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ended := map[int]flowcontrol.Outcome{}
	lastDispatched := map[[2]int]int{} // (flow, band) → id of its latest dispatched request
	flowOf := map[int][2]int{}
	nextID := 0
	var trace []string
	for step := 0; len(ops) >= 2 && step < mMaxActions; step, ops = step+1, ops[2:] {
		op, arg := ops[0]%8, int(ops[1])
		got, m.events = got[:0], m.events[:0]
		switch op {
		case 0, 1: // enqueue
			r := mreq{id: nextID, flow: arg % mFlows, band: (arg / mFlows) % mBands, bytes: int64(arg%4) * 15, arrival: m.now}
			ttl := time.Duration(0)
			if arg&0x80 != 0 {
				ttl = time.Duration(1+arg%3) * time.Second
				r.dl = m.now.Add(ttl)
			} else {
				r.dl = m.now.Add(mTTL)
			}
			nextID++
			flowOf[r.id] = [2]int{r.flow, r.band}
			trace = append(trace, fmt.Sprintf("enqueue %+v", r))
			var est time.Duration
			var ok bool
			if shed {
				est, ok = flowcontrol.EstimateBandWait(q, r.band)
			}
			want := m.enqueue(r, est, ok)
			if want == flowcontrol.RejectedWait {
				sheds++
			}
			tk, err := q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(rune('a' + r.flow)), Band: r.band, Bytes: r.bytes, TTL: ttl, Value: r.id})
			if (err == nil) != (want == 0) || (err != nil && flowcontrol.OutcomeOf(err) != want) {
				t.Fatalf("%s\nEnqueue error %v, model %v", trace, err, want)
			}
			all[r.id] = tk
		case 2: // TryAdmit
			r := mreq{id: nextID, flow: arg % mFlows, band: (arg / mFlows) % mBands, bytes: int64(arg%4) * 15, arrival: m.now, dl: m.now.Add(mTTL)}
			nextID++
			flowOf[r.id] = [2]int{r.flow, r.band}
			trace = append(trace, fmt.Sprintf("try %+v", r))
			m.tryAdmit(r)
			q.TryAdmit(flowcontrol.Request{Flow: flowcontrol.FlowID(rune('a' + r.flow)), Band: r.band, Bytes: r.bytes, Value: r.id})
		case 3: // Done of an in-flight request
			ids := make([]int, 0, len(m.inflight))
			for id := range m.inflight {
				ids = append(ids, id)
			}
			if len(ids) == 0 {
				continue
			}
			slices.Sort(ids)
			id := ids[arg%len(ids)]
			trace = append(trace, fmt.Sprintf("done %d", id))
			m.done(id)
			tickets[id].Done(flowcontrol.Usage{OutputTokens: 1})
		case 4: // Cancel of some request, waiting or not
			if nextID == 0 {
				continue
			}
			id := arg % nextID
			trace = append(trace, fmt.Sprintf("cancel %d", id))
			want := m.cancel(id)
			// all[id] may be stale (the request ended and its record was reused): Cancel
			// must then report false and touch nothing.
			if ok := all[id].Cancel(); ok != want {
				t.Fatalf("%s\nCancel = %v, model %v", trace, ok, want)
			}
		case 5: // time passes
			d := time.Duration(arg%8) * 500 * time.Millisecond
			trace = append(trace, fmt.Sprintf("advance %v", d))
			clk.Advance(d)
			m.now = m.now.Add(d)
			m.run()
			q.Notify()
		case 6: // saturation changes
			m.saturated = arg%2 == 1
			trace = append(trace, fmt.Sprintf("saturated %v", m.saturated))
			m.run()
			q.Notify()
		case 7:
			if arg%16 != 0 {
				continue
			}
			trace = append(trace, "close")
			m.close()
			q.Close()
		}
		if !slices.Equal(got, m.events) {
			t.Fatalf("%s\nqueue outcomes %v\nmodel outcomes %v", trace, got, m.events)
		}
		for _, e := range got {
			if prev, dup := ended[e.id]; dup {
				t.Fatalf("%s\nrequest %d ended twice: %v then %v", trace, e.id, prev, e.o)
			}
			ended[e.id] = e.o
			if e.o == flowcontrol.Dispatched && m.saturated {
				t.Fatalf("%s\nrequest %d dispatched while saturated", trace, e.id)
			}
			if e.o == flowcontrol.Dispatched { // FCFS within a flow: ids rise
				k := flowOf[e.id]
				if prev, ok := lastDispatched[k]; ok && prev > e.id {
					t.Fatalf("%s\nflow %v dispatched %d after %d", trace, k, e.id, prev)
				}
				lastDispatched[k] = e.id
			}
		}
		s := q.Stats()
		n, by := m.count(func(mreq) bool { return true })
		if s.Queued != n || s.QueuedBytes != by || s.InFlight != len(m.inflight) {
			t.Fatalf("%s\nstats %+v, model %d queued / %d bytes / %d in flight", trace, s, n, by, len(m.inflight))
		}
		if s.Queued < 0 || s.QueuedBytes < 0 || s.InFlight < 0 || s.Flows < 0 || s.Queued > mCapReqs || s.QueuedBytes > mCapBytes || s.InFlight > mLimit {
			t.Fatalf("%s\nstats out of bounds: %+v", trace, s)
		}
		sum := s.Dispatched + s.RejectedCapacity + s.RejectedClosed + s.RejectedInvalid + s.Expired + s.Cancelled + s.RejectedWait
		if sum != uint64(len(ended)) || int(s.RejectedWait) != countOutcome(ended, flowcontrol.RejectedWait) {
			t.Fatalf("%s\n%d outcomes counted, %d observed", trace, sum, len(ended))
		}
	}
	// Finish: close and complete everything; every request has exactly one outcome.
	m.events = m.events[:0]
	m.close()
	q.Close()
	for id := range m.inflight {
		tickets[id].Done(flowcontrol.Usage{})
	}
	if s := q.Stats(); s.Queued != 0 || s.InFlight != 0 || s.Flows != 0 || int(s.Completed) != countOutcome(ended, flowcontrol.Dispatched) {
		t.Fatalf("%s\nafter close and done: %+v", trace, s)
	}
	if len(ended)+len(m.events) != nextID {
		t.Fatalf("%d requests, %d outcomes", nextID, len(ended)+len(m.events))
	}
	return sheds
}

func countOutcome(m map[int]flowcontrol.Outcome, o flowcontrol.Outcome) int {
	n := 0
	for _, v := range m {
		if v == o {
			n++
		}
	}
	return n
}

func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 2, 3, 0, 5, 7, 0, 4})
	f.Add([]byte{6, 1, 0, 5, 0, 9, 2, 0, 5, 3, 6, 0, 3, 0, 3, 0})
	f.Add([]byte{0, 0x81, 0, 0x82, 0, 3, 5, 2, 5, 2, 4, 1, 2, 5, 7, 16, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) { checkModel(t, ops, false); checkModel(t, ops, true) })
}

func TestModelRandom(t *testing.T) {
	seeds := 300
	if raceEnabled {
		seeds = 60
	}
	sheds := 0
	for s := range 2 * seeds { // the second half with early shedding on
		ops := make([]byte, 2*mMaxActions)
		x := uint64(s)*0x9E3779B97F4A7C15 + 1
		for i := range ops {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			ops[i] = byte(x)
		}
		sheds += checkModel(t, ops, s >= seeds)
	}
	if sheds == 0 {
		t.Error("no request was shed: the early-shedding half tests nothing")
	}
	t.Logf("%d requests shed", sheds)
}

// FuzzRequestInput feeds arbitrary request fields to Enqueue: every request is either
// accepted or rejected with a sentinel error that leaves the queue unchanged, and nothing
// panics.
func FuzzRequestInput(f *testing.F) {
	f.Add(0, int64(10), int64(5), int64(5), int64(0), int64(0), int64(0), 1)
	f.Add(3, int64(-1), int64(0), int64(0), int64(-5), int64(1), int64(-1), 0)
	f.Add(1, int64(1<<40), int64(1<<62), int64(0), int64(1<<62), int64(-1<<62), int64(1<<62), 2)
	f.Fuzz(func(t *testing.T, band int, bytes, prompt, output, ttl, deadlineOff, arrivalOff int64, flows int) {
		clk := new(flowcontroltest.FakeClock)
		clk.Set(t0)
		q, err := flowcontrol.New(flowcontrol.Options{Bands: 2, Clock: clk, MaxInFlight: 1, FlowCapacity: flowcontrol.Limits{Bytes: 1 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		q.Enqueue(flowcontrol.Request{Flow: "running"})
		r := flowcontrol.Request{
			Flow: flowcontrol.FlowID(rune('a' + flows%3)), Band: band, Bytes: bytes,
			PromptTokens: flowcontrol.Tokens(prompt), OutputTokens: flowcontrol.Tokens(output), TTL: time.Duration(ttl),
		}
		if deadlineOff != 0 {
			r.Deadline = t0.Add(time.Duration(deadlineOff))
		}
		if arrivalOff != 0 {
			r.Arrival = t0.Add(time.Duration(arrivalOff))
		}
		before := q.Stats()
		tk, err := q.Enqueue(r)
		after := q.Stats()
		if err != nil {
			if !errors.Is(err, flowcontrol.ErrInvalidRequest) && !errors.Is(err, flowcontrol.ErrQueueFull) {
				t.Fatalf("Enqueue(%+v) = %v: not a sentinel", r, err)
			}
			if after.Queued != before.Queued || after.QueuedBytes != before.QueuedBytes || after.Flows != before.Flows {
				t.Fatalf("rejected request changed the queue: %+v → %+v", before, after)
			}
			return
		}
		if after.Queued != before.Queued+1 || after.QueuedBytes != before.QueuedBytes+bytes {
			t.Fatalf("accepted request not queued: %+v → %+v", before, after)
		}
		req, ok := flowcontrol.TicketRequest(tk)
		if !ok || !req.Deadline.After(t0) || req.Arrival.After(t0) {
			t.Fatalf("accepted request has Arrival %v, Deadline %v", req.Arrival, req.Deadline)
		}
		if !tk.Cancel() || q.Stats().Queued != before.Queued {
			t.Fatal("Cancel of the accepted request failed")
		}
	})
}
