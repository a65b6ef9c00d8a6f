package bench

import (
	"math"
	"reflect"
	"sync"
	"testing"
	"time"
)

// trace loads the Mooncake conversation trace once per test binary.
var traceOnce = sync.OnceValues(func() (*Workload, error) { return Mooncake(MooncakeOptions{}) })

func trace(t testing.TB) *Workload {
	t.Helper()
	w, err := traceOnce()
	if err != nil {
		t.Fatalf("Mooncake trace: %v", err)
	}
	return w
}

func TestTraceFacts(t *testing.T) {
	w := trace(t)
	st := w.Stats()
	if st.Requests != 12031 {
		t.Errorf("requests = %d, want 12031", st.Requests)
	}
	if got := st.IdealBlockHitRate; math.Abs(got-0.366) > 0.0005 {
		t.Errorf("ideal block hit rate = %.4f, want 0.366 (the trace's README)", got)
	}
	// Sessions are derived from hash_ids[1] (block 0 is the shared opening).
	if st.Sessions != 7373 || st.FirstTurns != 7373 {
		t.Errorf("sessions = %d, first turns = %d, want 7373 and 7373", st.Sessions, st.FirstTurns)
	}
	maxTurn := int32(0)
	for i := range w.Requests {
		maxTurn = max(maxTurn, w.Requests[i].Turn)
	}
	if maxTurn != 43 {
		t.Errorf("longest session = %d turns, want 43", maxTurn)
	}
}

// TestOneServerInfiniteCache replays the whole trace on one server whose cache never evicts
// and whose steps are nearly free (so requests do not overlap): the prefix hits it measures
// must be the ideal ones. Tolerance: 0.2 percentage points, for requests that arrive in the
// same millisecond and are admitted in one step, before either has cached anything.
//
// Under the race detector only the first 3,000 requests are replayed, against their own
// ideal block hit rate.
func TestOneServerInfiniteCache(t *testing.T) {
	w := trace(t)
	wantBlocks := 0.366
	if raceEnabled {
		w = w.Head(3000)
		wantBlocks = w.IdealBlockHitRate()
	}
	// Outputs do not change prefix hits; one token each keeps the replay short.
	c := *w
	c.Requests = make([]Request, len(w.Requests))
	copy(c.Requests, w.Requests)
	for i := range c.Requests {
		c.Requests[i].OutputTokens = 1
	}
	p := BenchProfile()
	var total int64
	for i := range c.Requests {
		total += int64(c.Requests[i].PromptTokens)
	}
	p.NumBlocks = int(total/int64(p.BlockSize)) + 1024
	p.MaxNumBatchedTokens = p.MaxModelLen
	p.MaxNumSeqs = 1 << 16
	p.StepBase, p.PrefillPerToken, p.PrefillAttnPerTokenPair = time.Nanosecond, 0, 0
	p.DecodePerSeq, p.DecodePerContextToken = 0, 0
	s, err := newSim(&c, mustDefaults(t, Config{Servers: 1, Profile: p, Gate: GateNone, NoIndex: true, Router: roundRobin(t)}))
	if err != nil {
		t.Fatal(err)
	}
	s.loop()
	res := s.result(0)
	if res.Completed != len(c.Requests) {
		t.Fatalf("completed %d of %d", res.Completed, len(c.Requests))
	}
	// In the trace's own unit: an id is a hit when the engine served its whole 512-token
	// block, or the block's tail up to the last prompt token the engine must compute.
	var hitIDs, ids int
	for i := range s.reqs {
		r := &s.reqs[i]
		ids += len(r.w.IDs)
		hitIDs += (int(r.cached) + c.BlockTokens - 1) / c.BlockTokens
		if int(r.cached) > int(r.w.PromptTokens) {
			t.Fatalf("request %d: %d cached tokens of %d", i, r.cached, r.w.PromptTokens)
		}
	}
	blockRate := float64(hitIDs) / float64(ids)
	if math.Abs(blockRate-wantBlocks) > 0.002 {
		t.Errorf("one server, infinite cache: block hit rate %.4f, want the trace's %.3f ± 0.002", blockRate, wantBlocks)
	}
	if math.Abs(res.HitRate-res.IdealHitRate) > 0.002 {
		t.Errorf("token hit rate %.4f, ideal %.4f: want equal within 0.002", res.HitRate, res.IdealHitRate)
	}
	t.Logf("block hit rate %.4f (trace 0.3664), token hit rate %.4f (ideal %.4f)", blockRate, res.HitRate, res.IdealHitRate)
}

func mustDefaults(t testing.TB, c Config) Config {
	t.Helper()
	d, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func roundRobin(t testing.TB) Router {
	t.Helper()
	rs, err := SelectRouters("round-robin")
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// small is a short synthetic workload for the quick tests.
func small() *Workload {
	return Chat(ChatOptions{Sessions: 120, Rate: 3, Turns: 4, Think: 5 * time.Second, Seed: 7})
}

// tiny is a shorter one, for the tests that run every configuration.
func tiny() *Workload {
	return Chat(ChatOptions{Sessions: 30, Rate: 3, Turns: 3, Think: 5 * time.Second, Seed: 11})
}

// TestLittlesLaw checks that the gateway's population, sampled from the queue's own gauges at
// every scrape, matches the arrival rate times the mean time in the system measured from each
// request's timestamps (L = λ·W). Tolerance 3%: the population is sampled every 50 ms, not
// integrated, and a request's arrival and completion fall between samples.
func TestLittlesLaw(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"light", Config{Servers: 4}},
		{"queueing", Config{Servers: 2, MaxInFlight: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(small(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != res.Sent {
				t.Fatalf("completed %d of %d sent; Little's law needs nothing shed", res.Completed, res.Sent)
			}
			lambda := float64(res.Completed) / res.Duration.Seconds()
			want := lambda * res.Sojourn.Seconds()
			if math.Abs(res.InSystem-want) > 0.03*want {
				t.Errorf("L = %.3f, λ·W = %.3f·%.2fs = %.3f: differ by more than 3%%", res.InSystem, lambda, res.Sojourn.Seconds(), want)
			}
		})
	}
}

// TestDeterministic runs the same configuration twice for each router: results must be
// identical apart from wall-clock fields.
func TestDeterministic(t *testing.T) {
	w := tiny()
	for _, r := range Routers() {
		t.Run(r.Name, func(t *testing.T) {
			cfg := Config{Servers: 3, MaxInFlight: 6, Router: r, Seed: 42}
			a, err := Run(w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Run(w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a.Deterministic(), b.Deterministic()) {
				t.Errorf("two runs differ:\n%+v\n%+v", a.Deterministic(), b.Deterministic())
			}
		})
	}
}

// TestShortRun is the CI run of the matrix on a small synthetic workload: every configuration
// completes, and the accounting adds up.
func TestShortRun(t *testing.T) {
	w := tiny()
	for _, p := range Policies() {
		for _, r := range Routers() {
			res, err := Run(w, Config{Servers: 2, MaxInFlight: 4, Policy: p, Router: r, TTL: 20 * time.Second})
			if err != nil {
				t.Fatalf("%s × %s: %v", p.Name, r.Name, err)
			}
			checkAccounting(t, p.Name+" × "+r.Name, w, res)
		}
	}
}

// checkAccounting checks the invariants every run must satisfy.
func checkAccounting(t *testing.T, name string, w *Workload, res *Result) {
	t.Helper()
	ended := 0
	for _, ts := range []TurnStats{res.First, res.Later} {
		ended += ts.Completed + ts.Expired + ts.Rejected + ts.Failed
	}
	abandoned := res.First.Abandoned + res.Later.Abandoned
	switch {
	case res.Sent != ended+res.Unfinished:
		t.Errorf("%s: sent %d ≠ ended %d + unfinished %d", name, res.Sent, ended, res.Unfinished)
	case res.Sent+abandoned+res.NotSent != len(w.Requests):
		t.Errorf("%s: sent %d + abandoned %d + not sent %d ≠ %d requests", name, res.Sent, abandoned, res.NotSent, len(w.Requests))
	case res.Completed != res.First.Completed+res.Later.Completed:
		t.Errorf("%s: completed %d ≠ %d + %d", name, res.Completed, res.First.Completed, res.Later.Completed)
	case res.HitRate < 0 || res.HitRate > res.IdealHitRate+1e-9:
		t.Errorf("%s: hit rate %.4f outside [0, ideal %.4f]", name, res.HitRate, res.IdealHitRate)
	case res.Jain <= 0 || res.Jain > 1+1e-9:
		t.Errorf("%s: Jain %.4f outside (0, 1]", name, res.Jain)
	case res.Completed > 0 && (res.TTFT.P50 <= 0 || res.TTFT.P50 > res.TTFT.P90 || res.TTFT.P90 > res.TTFT.P99 || res.E2E.P99 < res.TTFT.P99):
		t.Errorf("%s: percentiles out of order: TTFT %+v, E2E %+v", name, res.TTFT, res.E2E)
	case res.LoadImbalance < 1-1e-9 && res.LoadMean > 0:
		t.Errorf("%s: max/mean load %.3f < 1", name, res.LoadImbalance)
	}
}

// TestShortTrace replays the first 600 requests of the trace (skipped without it).
func TestShortTrace(t *testing.T) {
	w := trace(t).Head(600).Scaled(4)
	res, err := Run(w, Config{})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "trace", w, res)
	if res.Completed != res.Sent || res.HitRate <= 0 {
		t.Errorf("completed %d of %d, hit rate %.3f", res.Completed, res.Sent, res.HitRate)
	}
}

// TestFrontend: the time from pick to engine delays every first token by exactly that much
// when the servers are never contended (one request at a time), and the accounting holds.
func TestFrontend(t *testing.T) {
	w := &Workload{Name: "spaced", BlockTokens: 64}
	for i := range 20 {
		w.Requests = append(w.Requests, Request{At: time.Duration(i) * 10 * time.Second, Prev: -1, Session: -1, Turn: 1,
			PromptTokens: 256, OutputTokens: 2, IDs: []uint64{uint64(4 * i), uint64(4*i + 1), uint64(4*i + 2), uint64(4*i + 3)}})
	}
	base, err := Run(w, Config{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Servers: 2, Frontend: 10 * time.Millisecond, FrontendPerToken: 78125 * time.Nanosecond} // 10 + 256·0.078125 = 30 ms
	res, err := Run(w, c)
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "frontend", w, res)
	if d := res.TTFT.P50 - base.TTFT.P50; d != 30*time.Millisecond {
		t.Errorf("front end adds %v to the median TTFT, want 30ms", d)
	}
	if res.Completed != len(w.Requests) {
		t.Errorf("completed %d of %d", res.Completed, len(w.Requests))
	}
	if _, err := Run(w, Config{FrontendPerToken: -1}); err == nil {
		t.Error("negative FrontendPerToken accepted")
	}
}

func TestMaxTime(t *testing.T) {
	w := small()
	res, err := Run(w, Config{Servers: 1, MaxInFlight: 2, MaxTime: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "max-time", w, res)
	if res.Unfinished == 0 || res.Duration > 20*time.Second {
		t.Errorf("unfinished %d, duration %v: want some left at 20 s", res.Unfinished, res.Duration)
	}
}

func TestShedding(t *testing.T) {
	// One slow server, a 5 s TTL: most of the load must expire in the queue, and the turns
	// after a shed one are abandoned.
	w := Chat(ChatOptions{Sessions: 200, Rate: 20, Turns: 3, Think: time.Second, Seed: 3})
	res, err := Run(w, Config{Servers: 1, MaxInFlight: 2, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "shedding", w, res)
	if res.First.Expired == 0 || res.Later.Abandoned == 0 {
		t.Errorf("first turns expired %d, later turns abandoned %d: want both > 0", res.First.Expired, res.Later.Abandoned)
	}
	if res.First.WaitP99 > 5*time.Second {
		t.Errorf("p99 wait of admitted first turns %v exceeds the 5 s TTL", res.First.WaitP99)
	}
}

// TestContinueAfterShed: the same overload with sessions that carry on after a shed turn
// offers every turn of the workload — none is abandoned, more later turns are sent than
// when sessions end, and the accounting holds.
func TestContinueAfterShed(t *testing.T) {
	w := Chat(ChatOptions{Sessions: 200, Rate: 20, Turns: 3, Think: time.Second, Seed: 3})
	cfg := Config{Servers: 1, MaxInFlight: 2, TTL: 5 * time.Second}
	ended, err := Run(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ContinueAfterShed = true
	cont, err := Run(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "continue", w, cont)
	if cont.First.Abandoned+cont.Later.Abandoned != 0 {
		t.Errorf("continue: %d first and %d later turns abandoned, want 0", cont.First.Abandoned, cont.Later.Abandoned)
	}
	if cont.Sent+cont.NotSent != len(w.Requests) {
		t.Errorf("continue: sent %d + not sent %d ≠ %d requests", cont.Sent, cont.NotSent, len(w.Requests))
	}
	if cont.First.Shed() == 0 || cont.Later.Sent <= ended.Later.Sent {
		t.Errorf("continue: %d first turns shed, %d later turns sent (%d when sessions end): want sheds, and more later turns",
			cont.First.Shed(), cont.Later.Sent, ended.Later.Sent)
	}
}

func TestInvalidConfig(t *testing.T) {
	w := small()
	for _, c := range []Config{
		{Servers: -1},
		{MaxInFlight: -1},
		{Gate: GateUsherMean + 1},
		{Index: IndexExact + 1},
		{TTL: -time.Second},
	} {
		if _, err := Run(w, c); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", c)
		}
	}
	if _, err := Run(&Workload{}, Config{}); err == nil {
		t.Error("Run(empty workload) succeeded")
	}
	odd := *w
	odd.BlockTokens = 100
	if _, err := Run(&odd, Config{}); err == nil {
		t.Error("Run with ids of 100 tokens (not a multiple of 64) succeeded")
	}
}

func TestGates(t *testing.T) {
	w := tiny()
	for _, g := range []GateKind{GateConcurrency, GateSaturation, GateBoth, GateNone} {
		res, err := Run(w, Config{Servers: 2, Gate: g})
		if err != nil {
			t.Fatal(err)
		}
		checkAccounting(t, g.String(), w, res)
		if got, err := ParseGate(g.String()); err != nil || got != g {
			t.Errorf("ParseGate(%q) = %v, %v", g.String(), got, err)
		}
	}
}
