package flowcontrol_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

func TestBandsStrictPriority(t *testing.T) {
	q, _, rec := newQueue(t, flowcontrol.Options{Bands: 3, MaxInFlight: 1})
	blocker, _ := q.TryAdmit(flowcontrol.Request{Band: 0, Value: "blocker"})
	for _, r := range []flowcontrol.Request{
		{Band: 2, Value: "low"}, {Band: 1, Value: "mid"}, {Band: 0, Value: "high"}, {Band: 2, Value: "low2"},
	} {
		if _, err := q.Enqueue(r); err != nil {
			t.Fatal(err)
		}
	}
	blocker.Done(flowcontrol.Usage{})
	for _, v := range []string{"high", "mid", "low", "low2"} {
		tk := rec.ticket(v)
		if !flowcontrol.Valid(tk) {
			t.Fatalf("%s not dispatched; got %v", v, rec.dispatched())
		}
		tk.Done(flowcontrol.Usage{})
	}
	if got, want := rec.dispatched(), []any{"blocker", "high", "mid", "low", "low2"}; !equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func TestGatePerBandThreshold(t *testing.T) {
	// Band 1 may use at most 1 slot, band 0 up to 3.
	q, _, rec := newQueue(t, flowcontrol.Options{Bands: 2, MaxInFlight: 3, BandMaxInFlight: []int{0, 1}})
	for i := range 3 {
		q.Enqueue(flowcontrol.Request{Band: 1, Value: i})
	}
	if got := len(rec.dispatched()); got != 1 {
		t.Fatalf("band 1 dispatched %d, want 1 (its limit)", got)
	}
	q.Enqueue(flowcontrol.Request{Band: 0, Value: "a"})
	q.Enqueue(flowcontrol.Request{Band: 0, Value: "b"})
	q.Enqueue(flowcontrol.Request{Band: 0, Value: "c"})
	if got, want := rec.dispatched(), []any{0, "a", "b"}; !equal(got, want) {
		t.Fatalf("dispatched %v, want %v (band 0 fills the limit of 3)", got, want)
	}
	if s := q.Stats(); s.InFlight != 3 || s.Queued != 3 {
		t.Errorf("stats %+v, want 3 in flight, 3 queued", s)
	}
	for b, want := range []flowcontrol.BandStats{{Queued: 1, InFlight: 2, Flows: 1}, {Queued: 2, InFlight: 1, Flows: 1}, {}, {}} {
		if got := q.BandStats(b); got != want {
			t.Errorf("BandStats(%d) = %+v, want %+v", b, got, want)
		}
	}
}

func TestSaturationNotifyDispatchesMany(t *testing.T) {
	var level atomic.Uint64
	level.Store(math.Float64bits(0.95))
	q, _, rec := newQueue(t, flowcontrol.Options{Saturation: []flowcontrol.Pool{{
		Level:      func() float64 { return math.Float64frombits(level.Load()) },
		Thresholds: []float64{0.9},
	}}})
	for i := range 5 {
		q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(rune('a' + i)), Value: i})
	}
	if got := rec.dispatched(); len(got) != 0 {
		t.Fatalf("dispatched %v while saturated", got)
	}
	q.Notify() // nothing changed: still nothing
	if got := rec.dispatched(); len(got) != 0 {
		t.Fatalf("dispatched %v while saturated", got)
	}
	level.Store(math.Float64bits(0.5))
	q.Notify()
	if got, want := rec.dispatched(), []any{0, 1, 2, 3, 4}; !equal(got, want) {
		t.Fatalf("after Notify dispatched %v, want all of %v in one wake-up", got, want)
	}
}

func TestCapacity(t *testing.T) {
	opts := flowcontrol.Options{
		Bands:        2,
		Gate:         gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return false }),
		Capacity:     flowcontrol.Limits{Requests: 6, Bytes: 1000},
		BandCapacity: []flowcontrol.Limits{{}, {Requests: 3, Bytes: 300}},
		FlowCapacity: flowcontrol.Limits{Requests: 2, Bytes: 150},
	}
	steps := []struct {
		r       flowcontrol.Request
		want    error
		wantMsg string
	}{
		{flowcontrol.Request{Flow: "a", Bytes: 100}, nil, ""},
		{flowcontrol.Request{Flow: "a", Bytes: 100}, flowcontrol.ErrFlowFull, "flow limit on bytes"},
		{flowcontrol.Request{Flow: "a", Bytes: 50}, nil, ""},
		{flowcontrol.Request{Flow: "a", Bytes: 0}, flowcontrol.ErrFlowFull, "flow limit on requests"},
		{flowcontrol.Request{Flow: "b", Band: 1, Bytes: 150}, nil, ""},
		{flowcontrol.Request{Flow: "c", Band: 1, Bytes: 151}, flowcontrol.ErrBandFull, "band limit on bytes"},
		{flowcontrol.Request{Flow: "c", Band: 1}, nil, ""},
		{flowcontrol.Request{Flow: "d", Band: 1}, nil, ""},
		{flowcontrol.Request{Flow: "e", Band: 1}, flowcontrol.ErrBandFull, "band limit on requests"},
		{flowcontrol.Request{Flow: "f", Bytes: 900}, flowcontrol.ErrGlobalFull, "global limit on bytes"},
		{flowcontrol.Request{Flow: "f"}, nil, ""},
		{flowcontrol.Request{Flow: "g"}, flowcontrol.ErrGlobalFull, "global limit on requests"},
	}
	q, _, _ := newQueue(t, opts)
	for i, s := range steps {
		before := q.Stats()
		_, err := q.Enqueue(s.r)
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("step %d: Enqueue(%+v) = %v, want %v", i, s.r, err, s.want)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, flowcontrol.ErrQueueFull) || !strings.Contains(err.Error(), s.wantMsg) {
			t.Errorf("step %d: error %q does not match ErrQueueFull or lacks %q", i, err, s.wantMsg)
		}
		after := q.Stats()
		if after.Queued != before.Queued || after.QueuedBytes != before.QueuedBytes || after.Flows != before.Flows {
			t.Errorf("step %d: rejection changed the queue: %+v → %+v", i, before, after)
		}
		if got := flowcontrol.OutcomeOf(err); got != flowcontrol.RejectedCapacity {
			t.Errorf("step %d: OutcomeOf = %v, want rejected_capacity", i, got)
		}
	}
	if s := q.Stats(); s.RejectedCapacity != 6 || s.Queued != 6 {
		t.Errorf("stats %+v, want 6 rejected, 6 queued", s)
	}
}

func TestInvalidRequests(t *testing.T) {
	q, clk, _ := newQueue(t, flowcontrol.Options{Bands: 2})
	now := clk.Now()
	bad := []struct {
		name string
		r    flowcontrol.Request
	}{
		{"negative band", flowcontrol.Request{Band: -1}},
		{"unknown band", flowcontrol.Request{Band: 2}},
		{"negative bytes", flowcontrol.Request{Bytes: -1}},
		{"negative prompt", flowcontrol.Request{PromptTokens: -1}},
		{"negative output", flowcontrol.Request{OutputTokens: -5}},
		{"negative ttl", flowcontrol.Request{TTL: -time.Second}},
		{"deadline now", flowcontrol.Request{Deadline: now}},
		{"deadline past", flowcontrol.Request{Deadline: now.Add(-time.Second)}},
		{"arrival future", flowcontrol.Request{Arrival: now.Add(time.Second)}},
		{"ttl passed", flowcontrol.Request{Arrival: now.Add(-time.Minute), TTL: time.Second}},
		{"arrival before 1678", flowcontrol.Request{Arrival: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, b := range bad {
		for _, call := range []struct {
			name string
			f    func(flowcontrol.Request) (flowcontrol.Ticket, error)
		}{
			{"Admit", func(r flowcontrol.Request) (flowcontrol.Ticket, error) { return q.Admit(context.Background(), r) }},
			{"TryAdmit", q.TryAdmit},
			{"Enqueue", q.Enqueue},
		} {
			tk, err := call.f(b.r)
			if !errors.Is(err, flowcontrol.ErrInvalidRequest) || flowcontrol.Valid(tk) {
				t.Errorf("%s %s: err = %v, want ErrInvalidRequest", call.name, b.name, err)
			}
			if got := flowcontrol.OutcomeOf(err); got != flowcontrol.RejectedInvalid {
				t.Errorf("%s %s: OutcomeOf = %v, want rejected_invalid", call.name, b.name, got)
			}
		}
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := q.Admit(nil, flowcontrol.Request{}); !errors.Is(err, flowcontrol.ErrInvalidRequest) { //nolint:staticcheck
		t.Errorf("Admit(nil ctx) = %v, want ErrInvalidRequest", err)
	}
	s := q.Stats()
	if want := uint64(3*len(bad) + 1); s.RejectedInvalid != want || s.Queued != 0 || s.Flows != 0 || s.Dispatched != 0 {
		t.Errorf("stats %+v, want %d invalid and nothing else", s, want)
	}
}

func TestFarDeadlines(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	run, _ := q.TryAdmit(flowcontrol.Request{})
	q.Enqueue(flowcontrol.Request{Value: "max ttl", TTL: math.MaxInt64})
	q.Enqueue(flowcontrol.Request{Value: "year 9999", Deadline: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)})
	clk.Advance(100 * 365 * 24 * time.Hour)
	if next := q.Notify(); next.Year() != 2262 {
		t.Errorf("next deadline %v, want the end of representable time (2262)", next)
	}
	if s := q.Stats(); s.Expired != 0 || s.Queued != 2 {
		t.Fatalf("far deadlines expired early: %+v", s)
	}
	run.Done(flowcontrol.Usage{})
	rec.ticket("max ttl").Done(flowcontrol.Usage{})
	rec.ticket("year 9999").Done(flowcontrol.Usage{})
}

func TestBadOptions(t *testing.T) {
	for _, o := range []flowcontrol.Options{
		{Bands: -1},
		{TTL: -1},
		{Capacity: flowcontrol.Limits{Requests: -1}},
		{FlowCapacity: flowcontrol.Limits{Bytes: -1}},
		{BandCapacity: []flowcontrol.Limits{{}, {}}},
		{Bands: 2, BandCapacity: []flowcontrol.Limits{{}, {Requests: -2}}},
		{EarlyShed: flowcontrol.EarlyShed{Bound: -1}},
		{EarlyShed: flowcontrol.EarlyShed{HalfLife: -1}},
		{EarlyShed: flowcontrol.EarlyShed{Margin: -1}},
		{EarlyShed: flowcontrol.EarlyShed{Margin: math.NaN()}},
		{EarlyShed: flowcontrol.EarlyShed{Margin: math.Inf(1)}},
	} {
		if _, err := flowcontrol.New(o); !errors.Is(err, flowcontrol.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestCloseEndsWaiters(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	inflight, _ := q.Admit(context.Background(), flowcontrol.Request{})
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := q.Admit(context.Background(), flowcontrol.Request{}); errs <- err }()
	}
	clk.WaitTimers(3)
	q.Enqueue(flowcontrol.Request{Value: "async"})
	q.Close()
	for range 3 {
		if err := <-errs; !errors.Is(err, flowcontrol.ErrClosed) {
			t.Errorf("waiter got %v, want ErrClosed", err)
		}
	}
	if _, err := q.Admit(context.Background(), flowcontrol.Request{}); !errors.Is(err, flowcontrol.ErrClosed) {
		t.Errorf("Admit after Close = %v, want ErrClosed", err)
	}
	inflight.Done(flowcontrol.Usage{}) // in-flight work still completes
	s := q.Stats()
	if s.RejectedClosed != 5 || s.Queued != 0 || s.InFlight != 0 || s.Flows != 0 || s.Completed != 1 {
		t.Errorf("stats %+v, want 5 closed (3 waiters, 1 async, 1 late), all empty", s)
	}
	var async int
	for _, r := range rec.outcomes {
		if r.Request.Value == "async" && r.Outcome == flowcontrol.RejectedClosed {
			async++
		}
	}
	if async != 1 {
		t.Errorf("async request got %d closed outcomes, want 1", async)
	}
	q.Close() // idempotent
}

func mustPanic(t *testing.T, name, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", name)
			return
		}
		if s, _ := r.(string); !strings.HasPrefix(s, "flowcontrol: ") || !strings.Contains(s, want) {
			t.Errorf("%s: panic %v, want a flowcontrol message containing %q", name, r, want)
		}
	}()
	f()
}

func TestDoneMisuse(t *testing.T) {
	q, _, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	tk, err := q.TryAdmit(flowcontrol.Request{})
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := q.TryAdmit(flowcontrol.Request{})
	if !errors.Is(err, flowcontrol.ErrWouldWait) {
		t.Fatalf("second TryAdmit = %v, want ErrWouldWait", err)
	}
	mustPanic(t, "rejected", "zero Ticket", func() { rejected.Done(flowcontrol.Usage{}) })
	waiting, _ := q.Enqueue(flowcontrol.Request{})
	mustPanic(t, "waiting", "still waiting", func() { waiting.Done(flowcontrol.Usage{}) })
	tk.Done(flowcontrol.Usage{})
	mustPanic(t, "twice", "twice", func() { tk.Done(flowcontrol.Usage{}) })
	// The waiting request has been dispatched by the first Done, into the record tk had.
	waiting.Done(flowcontrol.Usage{})
	mustPanic(t, "stale", "twice", func() { waiting.Done(flowcontrol.Usage{}) })
	if s := q.Stats(); s.Completed != 2 || s.InFlight != 0 {
		t.Errorf("stats %+v, want 2 completed", s)
	}
}

func TestTryAdmit(t *testing.T) {
	q, _, rec := newQueue(t, flowcontrol.Options{Bands: 2, MaxInFlight: 2})
	a, err := q.TryAdmit(flowcontrol.Request{Band: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := q.TryAdmit(flowcontrol.Request{Band: 1})
	if _, err := q.TryAdmit(flowcontrol.Request{Band: 0}); !errors.Is(err, flowcontrol.ErrWouldWait) || flowcontrol.OutcomeOf(err) != flowcontrol.RejectedCapacity {
		t.Fatalf("TryAdmit at the limit = %v, want ErrWouldWait (429)", err)
	}
	if s := q.Stats(); s.Queued != 0 || s.RejectedCapacity != 1 || s.Flows != 1 {
		t.Fatalf("stats %+v: a refused TryAdmit must not queue", s)
	}
	q.Enqueue(flowcontrol.Request{Band: 0, Value: "queued"})
	a.Done(flowcontrol.Usage{}) // dispatches the queued band-0 request
	if !flowcontrol.Valid(rec.ticket("queued")) {
		t.Fatal("queued request not dispatched by the completion")
	}
	if _, err := q.TryAdmit(flowcontrol.Request{Band: 1}); !errors.Is(err, flowcontrol.ErrWouldWait) {
		t.Fatalf("TryAdmit = %v, want ErrWouldWait", err)
	}
	b.Done(flowcontrol.Usage{})
	c, err := q.TryAdmit(flowcontrol.Request{Band: 1})
	if err != nil {
		t.Fatalf("TryAdmit with a free slot = %v", err)
	}
	c.Done(flowcontrol.Usage{})
	rec.ticket("queued").Done(flowcontrol.Usage{})
	if s := q.Stats(); s.Dispatched != 4 || s.Completed != 4 || s.RejectedCapacity != 2 || s.Flows != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestTryAdmitRespectsWaiters(t *testing.T) {
	// Band 0 is held back by its gate; band 1 is open.
	band0Open := false
	gate := gateFunc(func(r *flowcontrol.Request, _ flowcontrol.Load) bool { return r.Band == 1 || band0Open })
	q, _, _ := newQueue(t, flowcontrol.Options{Bands: 2, Gate: gate})
	q.Enqueue(flowcontrol.Request{Band: 0, Value: "held"})
	if _, err := q.TryAdmit(flowcontrol.Request{Band: 0}); !errors.Is(err, flowcontrol.ErrWouldWait) {
		t.Fatalf("TryAdmit behind a waiter of its band = %v, want ErrWouldWait", err)
	}
	tk, err := q.TryAdmit(flowcontrol.Request{Band: 1})
	if err != nil {
		t.Fatalf("TryAdmit band 1 = %v; a higher band held by its own gate must not block it", err)
	}
	tk.Done(flowcontrol.Usage{})
	band0Open = true
	if _, err := q.TryAdmit(flowcontrol.Request{Band: 0}); err != nil {
		t.Fatalf("TryAdmit = %v: TryAdmit brings the queue up to date first, so the waiter goes and then this one", err)
	}
}

func TestTickAndEnqueueExpiry(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1, TTL: 30 * time.Second})
	q.Enqueue(flowcontrol.Request{Value: "runs"})
	q.Enqueue(flowcontrol.Request{Value: "ttl"})
	q.Enqueue(flowcontrol.Request{Value: "short", TTL: 5 * time.Second})
	q.Enqueue(flowcontrol.Request{Value: "deadline", Deadline: t0.Add(20 * time.Second)})
	steps := []struct {
		advance  time.Duration
		wantNext time.Duration // from t0; -1 for none
		expired  int
	}{
		{0, 5 * time.Second, 0},
		{4 * time.Second, 5 * time.Second, 0},
		{time.Second, 20 * time.Second, 1},
		{20 * time.Second, 30 * time.Second, 2},
		{10 * time.Second, -1, 3},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		next := q.Notify()
		want := time.Time{}
		if s.wantNext >= 0 {
			want = t0.Add(s.wantNext)
		}
		if !next.Equal(want) {
			t.Errorf("step %d: Notify = %v, want %v", i, next, want)
		}
		if got := q.Stats().Expired; got != uint64(s.expired) {
			t.Errorf("step %d: expired %d, want %d", i, got, s.expired)
		}
	}
	var order []any
	for _, r := range rec.outcomes {
		if r.Outcome == flowcontrol.Expired {
			order = append(order, r.Request.Value)
			if !errors.Is(r.Err, flowcontrol.ErrExpired) || flowcontrol.OutcomeOf(r.Err) != flowcontrol.Expired {
				t.Errorf("expired record err %v", r.Err)
			}
		}
	}
	if want := []any{"short", "deadline", "ttl"}; !equal(order, want) {
		t.Errorf("expiry order %v, want %v", order, want)
	}
	rec.ticket("runs").Done(flowcontrol.Usage{})
}

func TestTicketCancel(t *testing.T) {
	q, _, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	a, _ := q.Enqueue(flowcontrol.Request{Flow: "a"})
	b, _ := q.Enqueue(flowcontrol.Request{Flow: "b", Bytes: 7})
	if a.Cancel() {
		t.Error("Cancel of a dispatched request succeeded")
	}
	if !b.Cancel() {
		t.Error("Cancel of a waiting request failed")
	}
	if b.Cancel() || flowcontrol.Valid(b) {
		t.Error("second Cancel succeeded or ticket still valid")
	}
	s := q.Stats()
	if s.Cancelled != 1 || s.Queued != 0 || s.QueuedBytes != 0 || s.Flows != 1 {
		t.Errorf("stats %+v, want 1 cancelled, only flow a left", s)
	}
	a.Done(flowcontrol.Usage{})
}

func TestAdmitCancelledContext(t *testing.T) {
	q, _, _ := newQueue(t, flowcontrol.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Admit(ctx, flowcontrol.Request{}); err != context.Canceled {
		t.Fatalf("Admit(cancelled) = %v", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := q.Admit(ctx, flowcontrol.Request{}); err != context.DeadlineExceeded {
		t.Fatalf("Admit(expired ctx) = %v", err)
	}
	if s := q.Stats(); s.Cancelled != 1 || s.Expired != 1 || s.Flows != 0 || s.Dispatched != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestAdmitContextDeadlineIsExpiry(t *testing.T) {
	q, _, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	first, _ := q.Admit(context.Background(), flowcontrol.Request{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond) // real time
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := q.Admit(ctx, flowcontrol.Request{}); done <- err }()
	// No WaitTimers here: the context may end before the test would see the timer armed.
	if err := <-done; err != context.DeadlineExceeded || flowcontrol.OutcomeOf(err) != flowcontrol.Expired {
		t.Fatalf("Admit = %v, want DeadlineExceeded mapped to 503", err)
	}
	if s := q.Stats(); s.Expired != 1 {
		t.Errorf("stats %+v, want the ctx deadline counted as expiry", s)
	}
	first.Done(flowcontrol.Usage{})
}

func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		err error
		o   flowcontrol.Outcome
	}{
		{nil, flowcontrol.Dispatched},
		{flowcontrol.ErrFlowFull, flowcontrol.RejectedCapacity},
		{flowcontrol.ErrWouldWait, flowcontrol.RejectedCapacity},
		{flowcontrol.ErrWouldExpire, flowcontrol.RejectedWait},
		{flowcontrol.ErrClosed, flowcontrol.RejectedClosed},
		{flowcontrol.ErrExpired, flowcontrol.Expired},
		{context.DeadlineExceeded, flowcontrol.Expired},
		{flowcontrol.ErrInvalidRequest, flowcontrol.RejectedInvalid},
		{context.Canceled, flowcontrol.Cancelled},
		{errors.New("other"), 0},
	} {
		if got := flowcontrol.OutcomeOf(c.err); got != c.o {
			t.Errorf("OutcomeOf(%v) = %v, want %v", c.err, got, c.o)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 10, TTL: time.Minute})
	if got := q.RetryAfter(); got != time.Second {
		t.Errorf("RetryAfter of an empty queue = %v, want 1s", got)
	}
	// 10 dispatches in the first second, then 20 waiting: 2 s to drain.
	for i := range 30 {
		q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(rune(i)), Value: i})
	}
	clk.Advance(time.Second)
	if got := q.RetryAfter(); got != 2*time.Second {
		t.Errorf("RetryAfter = %v, want 2s", got)
	}
	clk.Advance(5 * time.Second) // a second with no dispatch: the backlog is stuck
	if got := q.RetryAfter(); got != time.Minute {
		t.Errorf("RetryAfter of a stuck backlog = %v, want the TTL", got)
	}
	for _, v := range rec.dispatched() {
		rec.ticket(v).Done(flowcontrol.Usage{}) // completes and dispatches the rest, 10 at a time
	}
}

// TestCapacityHugeBytes: a request whose Bytes would overflow the sum with what is already
// queued is rejected by the byte limit, never admitted with the gauges wrapped negative. (The
// band and flow sums are at most the global one, so the global check guards them too.)
func TestCapacityHugeBytes(t *testing.T) {
	gate := gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return false })
	q, _, _ := newQueue(t, flowcontrol.Options{Gate: gate, Capacity: flowcontrol.Limits{Bytes: math.MaxInt64}})
	if _, err := q.Enqueue(flowcontrol.Request{Flow: "a", Bytes: 10}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int64{math.MaxInt64, math.MaxInt64 - 9} {
		if _, err := q.Enqueue(flowcontrol.Request{Flow: "b", Bytes: b}); !errors.Is(err, flowcontrol.ErrGlobalFull) {
			t.Errorf("Enqueue(Bytes: %d) = %v, want ErrGlobalFull", b, err)
		}
	}
	if s := q.Stats(); s.Queued != 1 || s.QueuedBytes != 10 {
		t.Errorf("stats %+v, want 1 queued, 10 bytes", s)
	}
	if _, err := q.Enqueue(flowcontrol.Request{Flow: "b", Bytes: math.MaxInt64 - 10}); err != nil {
		t.Errorf("Enqueue(Bytes: MaxInt64-10) = %v, want it to fit exactly", err)
	}
}

// TestStaleDeadlines has most waiting requests leave the queue other than by expiry
// (cancelled, dispatched), enough for the deadline heap to compact, and checks against the
// set of those still waiting that Notify reports the earliest remaining deadline and that each
// one expires at its deadline, once.
func TestStaleDeadlines(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1, TTL: time.Hour})
	holder, _ := q.Enqueue(flowcontrol.Request{Value: -1})
	const n = 400
	tickets := make([]flowcontrol.Ticket, n)
	waiting := map[int]time.Duration{} // value → deadline from t0
	for i := range n {
		ttl := time.Duration(n-i) * time.Second // later arrivals expire first
		tk, err := q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(fmt.Sprint("f", i%7)), Value: i, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		tickets[i], waiting[i] = tk, ttl
	}
	for i := range n {
		if i%4 != 3 {
			if !tickets[i].Cancel() {
				t.Fatalf("Cancel(%d) = false", i)
			}
			delete(waiting, i)
		}
	}
	// Dispatch the first ten still waiting, one at a time, in FCFS order.
	prev := holder
	for range 10 {
		prev.Done(flowcontrol.Usage{})
		d := rec.outcomes[len(rec.outcomes)-1]
		if d.Outcome != flowcontrol.Dispatched {
			t.Fatalf("last outcome %v, want a dispatch", d.Outcome)
		}
		delete(waiting, d.Request.Value.(int))
		prev = d.Ticket
	}
	// Enqueue more, which compacts the heap, then let everything expire.
	for i := n; i < n+100; i++ {
		ttl := time.Duration(i-n)*time.Second + 500*time.Millisecond
		if _, err := q.Enqueue(flowcontrol.Request{Value: i, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		waiting[i] = ttl
	}
	expired := map[int]bool{}
	for now := time.Duration(0); len(waiting) > 0; now += 250 * time.Millisecond {
		if now > 0 {
			clk.Advance(250 * time.Millisecond)
		}
		next := q.Notify()
		for _, r := range rec.outcomes {
			if r.Outcome == flowcontrol.Expired && !expired[r.Request.Value.(int)] {
				v := r.Request.Value.(int)
				if dl, ok := waiting[v]; !ok || dl > now {
					t.Fatalf("at %v: %d expired, deadline %v (waiting %v)", now, v, dl, ok)
				}
				expired[v] = true
				delete(waiting, v)
			}
		}
		var want time.Time
		for _, dl := range waiting {
			if dl <= now {
				t.Fatalf("at %v: a request with deadline %v has not expired", now, dl)
			}
			if w := t0.Add(dl); want.IsZero() || w.Before(want) {
				want = w
			}
		}
		if !next.Equal(want) {
			t.Fatalf("at %v: Notify = %v, want %v", now, next.Sub(t0), want.Sub(t0))
		}
	}
	if got, want := len(expired), n/4-10+100; got != want {
		t.Errorf("%d expired, want %d", got, want)
	}
	if s := q.Stats(); s.Queued != 0 || s.Expired != uint64(len(expired)) {
		t.Errorf("stats %+v, want nothing waiting and %d expired", s, len(expired))
	}
	prev.Done(flowcontrol.Usage{})
}
