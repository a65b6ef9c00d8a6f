package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// tiny is a profile small enough to reason about by hand: 4-token blocks, linear costs.
var tiny = Profile{
	Name:                "tiny",
	BlockSize:           4,
	NumBlocks:           64,
	MaxNumSeqs:          8,
	MaxNumBatchedTokens: 64,
	MaxModelLen:         1024,
	StepBase:            time.Millisecond,
	PrefillPerToken:     10 * time.Microsecond,
	DecodePerSeq:        100 * time.Microsecond,
}

func newEngine(t testing.TB, p Profile, mod func(*Options)) *Engine {
	t.Helper()
	o := Options{Profile: p}
	if mod != nil {
		mod(&o)
	}
	e, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func seq(from, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(from + i)
	}
	return s
}

// drive runs steps until the engine is idle, returning all events and the final time.
func drive(t testing.TB, e *Engine, now time.Duration) ([]Event, time.Duration) {
	t.Helper()
	var evs []Event
	for i := 0; e.HasWork(); i++ {
		if i > 1_000_000 {
			t.Fatal("engine did not drain")
		}
		d, ok := e.BeginStep(now)
		if !ok {
			t.Fatalf("HasWork but BeginStep had nothing to run: %+v", e.Stats())
		}
		now += d
		e.EndStep(now)
		checkInvariants(t, e)
		evs = e.Events(evs)
	}
	return e.Events(evs), now
}

// checkInvariants verifies the block accounting against a recount from the requests.
func checkInvariants(t testing.TB, e *Engine) {
	t.Helper()
	refs := make([]int32, len(e.kv.blocks))
	for _, r := range e.running {
		if r.state != stateRunning {
			t.Fatalf("request %d in running with state %d", r.id, r.state)
		}
		if got, max := len(r.blocks)*e.p.BlockSize, r.promptLen+r.outputLen+e.p.BlockSize; got > max {
			t.Fatalf("request %d holds %d tokens of blocks, more than %d", r.id, got, max)
		}
		for _, b := range r.blocks {
			refs[b]++
		}
	}
	for i := e.wHead; i < len(e.waiting); i++ {
		if r := e.waiting[i]; len(r.blocks) != 0 || r.state != stateWaiting {
			t.Fatalf("waiting request %d holds %d blocks, state %d", r.id, len(r.blocks), r.state)
		}
	}
	free := 0
	for i := e.kv.head; i != none; i = e.kv.blocks[i].next {
		free++
		if refs[i] != 0 {
			t.Fatalf("block %d is free but referenced %d times", i, refs[i])
		}
	}
	if free != e.kv.free {
		t.Fatalf("free list has %d blocks, counter says %d", free, e.kv.free)
	}
	for i, b := range e.kv.blocks {
		if b.ref != refs[i] {
			t.Fatalf("block %d: ref %d, recount %d", i, b.ref, refs[i])
		}
		if b.ref == 0 && !b.onFree {
			t.Fatalf("block %d unreferenced but not free", i)
		}
		if b.hashed && e.kv.cached[b.hash] != int32(i) {
			t.Fatalf("block %d hashed but not in the map", i)
		}
	}
	if len(e.reqs) != len(e.running)+len(e.waiting)-e.wHead {
		t.Fatalf("%d live requests, %d running + %d waiting", len(e.reqs), len(e.running), len(e.waiting)-e.wHead)
	}
}

func startedTokens(evs []Event, id RequestID) int {
	for _, ev := range evs {
		if ev.ID == id && ev.Kind == EventStarted {
			return ev.Tokens
		}
	}
	return -1
}

func TestPrefixReuse(t *testing.T) {
	base := seq(1, 20)
	tests := []struct {
		name   string
		prompt []uint32
		want   int // cached tokens
	}{
		{"same prompt recomputes its last block", base, 16},
		{"shares 16 tokens", append(slices.Clone(base[:16]), seq(500, 10)...), 16},
		{"shares 9 tokens: two full blocks", append(slices.Clone(base[:9]), seq(500, 10)...), 8},
		{"shares 3 tokens: no full block", append(slices.Clone(base[:3]), seq(500, 10)...), 0},
		{"differs in the first token", append([]uint32{999}, base[1:]...), 0},
		{"exactly 16 cached tokens: last one recomputed", slices.Clone(base[:16]), 12},
		{"17 tokens", slices.Clone(base[:17]), 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, tiny, nil)
			if err := e.Submit(Request{ID: 1, Prompt: base, OutputTokens: 2}, 0); err != nil {
				t.Fatal(err)
			}
			_, now := drive(t, e, 0)
			if err := e.Submit(Request{ID: 2, Prompt: tt.prompt, OutputTokens: 2}, now); err != nil {
				t.Fatal(err)
			}
			evs, _ := drive(t, e, now)
			if got := startedTokens(evs, 2); got != tt.want {
				t.Errorf("cached tokens = %d, want %d", got, tt.want)
			}
			st := e.Stats()
			if st.PrefixQueries != int64(len(base)+len(tt.prompt)) || st.PrefixHits != int64(tt.want) {
				t.Errorf("prefix queries/hits = %d/%d, want %d/%d", st.PrefixQueries, st.PrefixHits, len(base)+len(tt.prompt), tt.want)
			}
		})
	}
}

func TestPrefixReuseByBlockHashes(t *testing.T) {
	e := newEngine(t, tiny, nil)
	blocks := []BlockHash{11, 12, 13}
	must(t, e.Submit(Request{ID: 1, Blocks: blocks, PromptTokens: 14, OutputTokens: 1}, 0))
	_, now := drive(t, e, 0)
	must(t, e.Submit(Request{ID: 2, Blocks: []BlockHash{11, 12, 99}, PromptTokens: 13, OutputTokens: 1}, now))
	evs, _ := drive(t, e, now)
	if got := startedTokens(evs, 2); got != 8 {
		t.Errorf("cached tokens = %d, want 8", got)
	}
	// Tokens and block hashes give the same hashes.
	p := seq(7, 8)
	h0 := e.HashBlock(0, false, p[:4])
	h1 := e.HashBlock(h0, true, p[4:])
	must(t, e.Submit(Request{ID: 3, Prompt: append(slices.Clone(p), 1), OutputTokens: 1}, now))
	_, now = drive(t, e, now)
	must(t, e.Submit(Request{ID: 4, Blocks: []BlockHash{h0, h1}, PromptTokens: 9, OutputTokens: 1}, now))
	evs, _ = drive(t, e, now)
	if got := startedTokens(evs, 4); got != 8 {
		t.Errorf("cached tokens by hashes of a tokenized prompt = %d, want 8", got)
	}
}

func TestOutputBlocksAreCached(t *testing.T) {
	e := newEngine(t, tiny, nil)
	prompt, out := seq(1, 6), seq(100, 10)
	must(t, e.Submit(Request{ID: 1, Prompt: prompt, Output: out, OutputTokens: len(out)}, 0))
	_, now := drive(t, e, 0)
	// The next turn repeats prompt and answer: 15 of its 16 computed tokens were computed
	// (the last output token's KV never is), so 3 blocks (12 tokens) hit.
	next := append(append(slices.Clone(prompt), out...), seq(300, 5)...)
	must(t, e.Submit(Request{ID: 2, Prompt: next, OutputTokens: 1}, now))
	evs, _ := drive(t, e, now)
	if got := startedTokens(evs, 2); got != 12 {
		t.Errorf("cached tokens = %d, want 12", got)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEvictionOrder(t *testing.T) {
	p := tiny
	p.NumBlocks = 8
	e := newEngine(t, p, func(o *Options) { o.KVEvents = true })
	a, b := seq(1, 12), seq(100, 12) // 3 blocks each, +1 block for decoding
	must(t, e.Submit(Request{ID: 1, Prompt: a, OutputTokens: 1}, 0))
	_, now := drive(t, e, 0)
	must(t, e.Submit(Request{ID: 2, Prompt: b, OutputTokens: 1}, now))
	_, now = drive(t, e, now)
	// Touch a's prefix so that b's blocks become the least recently used.
	must(t, e.Submit(Request{ID: 3, Prompt: append(slices.Clone(a[:8]), 7777), OutputTokens: 1}, now))
	_, now = drive(t, e, now)
	e.KVEvents(nil)
	names := map[BlockHash]string{}
	var parent BlockHash
	for i := range 3 {
		parent = e.HashBlock(parent, i > 0, a[i*4:(i+1)*4])
		names[parent] = fmt.Sprintf("a%d", i)
	}
	parent = 0
	for i := range 3 {
		parent = e.HashBlock(parent, i > 0, b[i*4:(i+1)*4])
		names[parent] = fmt.Sprintf("b%d", i)
	}
	// Free list now, least recent first: two empty blocks, a2 (freed with a, untouched since),
	// b2, b1, b0 (b's last block first), a1, a0 (touched by request 3). A new 6-block prompt
	// takes the empty blocks, then evicts in that order and leaves a0 and a1.
	must(t, e.Submit(Request{ID: 4, Prompt: seq(1000, 24), OutputTokens: 1}, now))
	_, now = drive(t, e, now)
	var removed []string
	for _, ev := range e.KVEvents(nil) {
		if ev.Kind == KVBlockRemoved {
			for _, h := range ev.Hashes {
				removed = append(removed, names[h])
			}
		}
	}
	want := []string{"a2", "b2", "b1", "b0"}
	if !slices.Equal(removed, want) {
		t.Errorf("eviction order = %v, want %v", removed, want)
	}
	must(t, e.Submit(Request{ID: 5, Prompt: slices.Clone(a), OutputTokens: 1}, now))
	evs, _ := drive(t, e, now)
	if got := startedTokens(evs, 5); got != 8 {
		t.Errorf("a's surviving prefix gives %d cached tokens, want 8", got)
	}
}

func TestChunkedPrefillBudget(t *testing.T) {
	p := tiny
	p.MaxNumBatchedTokens = 8
	p.StepBase = time.Millisecond
	p.PrefillPerToken = time.Millisecond
	p.DecodePerSeq = 500 * time.Microsecond
	e := newEngine(t, p, nil)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 20), OutputTokens: 2}, 0))
	var durs []time.Duration
	var first int
	now := time.Duration(0)
	for step := 1; e.HasWork(); step++ {
		d, _ := e.BeginStep(now)
		durs = append(durs, d)
		now += d
		e.EndStep(now)
		for _, ev := range e.Events(nil) {
			if ev.Kind == EventToken && ev.Tokens == 1 {
				first = step
			}
		}
	}
	// 8 + 8 + 4 prompt tokens, then one decode step.
	want := []time.Duration{9 * time.Millisecond, 9 * time.Millisecond, 5 * time.Millisecond, 1500 * time.Microsecond}
	if !slices.Equal(durs, want) {
		t.Errorf("step durations = %v, want %v", durs, want)
	}
	if first != 3 {
		t.Errorf("first token in step %d, want 3", first)
	}
}

func TestBudgetSharedByDecodeAndPrefill(t *testing.T) {
	p := tiny
	p.MaxNumBatchedTokens = 10
	e := newEngine(t, p, nil)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 4), OutputTokens: 50}, 0))
	d, _ := e.BeginStep(0)
	e.EndStep(d)
	// Request 1 decodes (1 token), request 2 gets the other 9 tokens of budget.
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 30), OutputTokens: 1}, d))
	e.BeginStep(d)
	var got []int
	for _, it := range e.batch {
		got = append(got, it.n)
	}
	e.EndStep(2 * d)
	if !slices.Equal(got, []int{1, 9}) {
		t.Errorf("batch tokens = %v, want [1 9]", got)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	p := tiny
	p.MaxNumSeqs = 2
	e := newEngine(t, p, nil)
	for i := range 5 {
		must(t, e.Submit(Request{ID: RequestID(i), Prompt: seq(10*i, 5), OutputTokens: 3}, 0))
	}
	d, _ := e.BeginStep(0)
	if st := e.Stats(); st.Running != 2 || st.Waiting != 3 {
		t.Errorf("running/waiting = %d/%d, want 2/3", st.Running, st.Waiting)
	}
	e.EndStep(d)
	e.Events(nil)
	evs, _ := drive(t, e, d)
	// Admission is FIFO: the order of first tokens follows submission.
	var order []RequestID
	for _, ev := range evs {
		if ev.Kind == EventStarted {
			order = append(order, ev.ID)
		}
	}
	if !slices.Equal(order, []RequestID{2, 3, 4}) {
		t.Errorf("later admissions = %v, want [2 3 4]", order)
	}
}

func TestDecodeStepTimeByBatch(t *testing.T) {
	p := Profile{Name: "d", BlockSize: 16, NumBlocks: 1024, MaxNumSeqs: 64, MaxNumBatchedTokens: 4096, MaxModelLen: 4096,
		StepBase: 10 * time.Millisecond, DecodePerSeq: 100 * time.Microsecond, DecodePerContextToken: 1000}
	for _, batch := range []int{1, 8, 32} {
		e := newEngine(t, p, nil)
		for i := range batch {
			must(t, e.Submit(Request{ID: RequestID(i), Prompt: seq(1000*i, 100), OutputTokens: 10}, 0))
		}
		d, _ := e.BeginStep(0) // prefill of all prompts
		e.EndStep(d)
		got, _ := e.BeginStep(d)
		e.EndStep(d + got)
		// Each sequence reads its 100 prompt tokens' KV (1 ns each).
		want := 10*time.Millisecond + time.Duration(batch)*(100*time.Microsecond+100*time.Nanosecond)
		if got != want {
			t.Errorf("batch %d: decode step %v, want %v", batch, got, want)
		}
	}
}

func TestPreemptionWhenKVFull(t *testing.T) {
	p := tiny
	p.NumBlocks = 10
	e := newEngine(t, p, nil)
	// Two requests that each end up needing 6 blocks (8 prompt + 16 output tokens).
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 8), OutputTokens: 16}, 0))
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 8), OutputTokens: 16}, 0))
	evs, _ := drive(t, e, 0)
	var preempted []RequestID
	finished := map[RequestID]int{}
	for _, ev := range evs {
		switch ev.Kind {
		case EventPreempted:
			preempted = append(preempted, ev.ID)
		case EventFinished:
			finished[ev.ID] = ev.Tokens
		}
	}
	if len(preempted) == 0 || preempted[0] != 2 {
		t.Errorf("preempted %v, want the later request 2 first", preempted)
	}
	if finished[1] != 16 || finished[2] != 16 {
		t.Errorf("finished outputs = %v, want 16 each", finished)
	}
	if st := e.Stats(); st.Preemptions != int64(len(preempted)) || st.UsedBlocks != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestAdmissionWaitsForBlocks(t *testing.T) {
	p := tiny
	p.NumBlocks = 8
	e := newEngine(t, p, nil)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 20), OutputTokens: 4}, 0)) // 5 blocks + 1
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 16), OutputTokens: 1}, 0))
	d, _ := e.BeginStep(0)
	if st := e.Stats(); st.Running != 1 || st.Waiting != 1 {
		t.Fatalf("running/waiting = %d/%d, want 1/1: the second prompt must wait for blocks", st.Running, st.Waiting)
	}
	e.EndStep(d)
	evs, _ := drive(t, e, d)
	if n := countKind(evs, EventFinished); n != 2 {
		t.Errorf("%d finished, want 2", n)
	}
}

func countKind(evs []Event, k EventKind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func TestAbort(t *testing.T) {
	e := newEngine(t, tiny, nil)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 10), OutputTokens: 5}, 0))
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 10), OutputTokens: 5}, 0))
	must(t, e.Submit(Request{ID: 3, Prompt: seq(200, 10), OutputTokens: 5}, 0))
	if !e.Abort(3, 0) { // waiting
		t.Fatal("Abort(3) = false")
	}
	d, _ := e.BeginStep(0)
	if !e.Abort(2, d/2) { // in the batch of the running step
		t.Fatal("Abort(2) = false")
	}
	e.EndStep(d)
	checkInvariants(t, e)
	if !e.Abort(1, d) { // running, between steps
		t.Fatal("Abort(1) = false")
	}
	if e.Abort(1, d) || e.Abort(42, d) {
		t.Error("second abort or unknown id reported true")
	}
	evs := e.Events(nil)
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%d:%s", ev.ID, ev.Kind))
	}
	want := []string{"3:aborted", "1:started", "2:started", "2:aborted", "1:token", "1:aborted"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if st := e.Stats(); st.UsedBlocks != 0 || e.HasWork() || st.Aborted != 3 {
		t.Errorf("after aborts: %+v", st)
	}
	// The id can be reused.
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 10), OutputTokens: 1}, d))
}

func TestSubmitErrors(t *testing.T) {
	e := newEngine(t, tiny, nil)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(1, 4), OutputTokens: 1}, 0))
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{ID: 2, OutputTokens: 1}, ErrInvalidRequest},
		{"no output", Request{ID: 2, Prompt: seq(1, 4)}, ErrInvalidRequest},
		{"too many blocks", Request{ID: 2, Blocks: []BlockHash{1, 2}, PromptTokens: 5, OutputTokens: 1}, ErrInvalidRequest},
		{"too long", Request{ID: 2, Prompt: seq(1, 1000), OutputTokens: 100}, ErrTooLong},
		{"more than the cache", Request{ID: 2, PromptTokens: 64*4 + 1, OutputTokens: 1}, ErrTooLong},
		{"duplicate", Request{ID: 1, Prompt: seq(1, 4), OutputTokens: 1}, ErrDuplicateID},
	}
	for _, tt := range tests {
		if err := e.Submit(tt.req, 0); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, mod := range []func(*Profile){
		func(p *Profile) { p.BlockSize = 0 },
		func(p *Profile) { p.NumBlocks = -1 },
		func(p *Profile) { p.MaxNumSeqs = 0 },
		func(p *Profile) { p.MaxNumBatchedTokens = 0 },
		func(p *Profile) { p.MaxModelLen = 0 },
		func(p *Profile) { p.DecodePerSeq = -1 },
		func(p *Profile) { p.StepBase, p.PrefillPerToken, p.DecodePerSeq = 0, 0, 0 },
	} {
		p := tiny
		mod(&p)
		if _, err := New(Options{Profile: p}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("profile %+v: err = %v, want ErrInvalidOptions", p, err)
		}
	}
	e, err := New(Options{})
	if err != nil || e.Profile() != Demo {
		t.Errorf("zero Options: %v, profile %q", err, e.Profile().Name)
	}
	for _, name := range []string{"demo", "qwen3-32b-h100"} {
		p, ok := ProfileByName(name)
		if !ok || p.validate() != nil {
			t.Errorf("ProfileByName(%q) = %v, %v", name, ok, p.validate())
		}
	}
}

func TestKVEvents(t *testing.T) {
	e := newEngine(t, tiny, func(o *Options) { o.KVEvents = true })
	prompt := seq(1, 10)
	must(t, e.Submit(Request{ID: 1, Prompt: prompt, OutputTokens: 1}, 0))
	drive(t, e, 0)
	evs := e.KVEvents(nil)
	if len(evs) != 1 || evs[0].Kind != KVBlockStored || evs[0].HasParent || len(evs[0].Hashes) != 2 ||
		!slices.Equal(evs[0].Tokens, prompt[:8]) || evs[0].BlockSize != 4 {
		t.Fatalf("stored events = %+v", evs)
	}
	h0 := e.HashBlock(0, false, prompt[:4])
	if evs[0].Hashes[0] != h0 || evs[0].Hashes[1] != e.HashBlock(h0, true, prompt[4:8]) {
		t.Errorf("stored hashes do not chain")
	}
	e.ResetPrefixCache(time.Second)
	evs = e.KVEvents(nil)
	if len(evs) != 1 || evs[0].Kind != KVAllBlocksCleared {
		t.Errorf("after reset: %+v", evs)
	}
	if e.Stats().CachedBlocks != 0 {
		t.Errorf("cached blocks after reset = %d", e.Stats().CachedBlocks)
	}
}

// workload submits random requests with shared prefixes and random aborts, steps the engine to
// completion and returns every event.
func workload(t testing.TB, seed uint64, p Profile, n int) []Event {
	e := newEngine(t, p, nil)
	rng := rand.New(rand.NewPCG(seed, 1))
	prefixes := [][]uint32{seq(1, 40), seq(1000, 24), seq(2000, 64)}
	var evs []Event
	now := time.Duration(0)
	next := RequestID(0)
	live := []RequestID{}
	for next < RequestID(n) || e.HasWork() {
		if next < RequestID(n) && rng.IntN(3) > 0 {
			pre := prefixes[rng.IntN(len(prefixes))]
			prompt := append(slices.Clone(pre[:rng.IntN(len(pre))]), seq(10000+int(next)*100, 1+rng.IntN(60))...)
			must(t, e.Submit(Request{ID: next, Prompt: prompt, OutputTokens: 1 + rng.IntN(40)}, now))
			live = append(live, next)
			next++
		}
		if len(live) > 0 && rng.IntN(10) == 0 {
			e.Abort(live[rng.IntN(len(live))], now)
		}
		if d, ok := e.BeginStep(now); ok {
			if rng.IntN(4) == 0 && len(live) > 0 {
				e.Abort(live[rng.IntN(len(live))], now+d/2)
			}
			now += d
			e.EndStep(now)
		} else {
			now += time.Millisecond
		}
		checkInvariants(t, e)
		evs = e.Events(evs)
	}
	if st := e.Stats(); st.UsedBlocks != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("engine not empty at the end: %+v", st)
	}
	return evs
}

func TestConservation(t *testing.T) {
	p := tiny
	p.NumBlocks = 40 // tight: forces preemption and waiting
	p.MaxNumBatchedTokens = 32
	const n = 300
	evs := workload(t, 7, p, n)
	terminal := map[RequestID]EventKind{}
	tokens := map[RequestID]int{}
	for _, ev := range evs {
		if k, done := terminal[ev.ID]; done {
			t.Fatalf("event %s for request %d after it %s", ev.Kind, ev.ID, k)
		}
		switch ev.Kind {
		case EventFinished, EventAborted:
			terminal[ev.ID] = ev.Kind
		case EventToken:
			if ev.Tokens != tokens[ev.ID]+1 {
				t.Fatalf("request %d: token %d after %d", ev.ID, ev.Tokens, tokens[ev.ID])
			}
			tokens[ev.ID] = ev.Tokens
		}
	}
	if len(terminal) != n {
		t.Fatalf("%d of %d requests ended", len(terminal), n)
	}
	if countKind(evs, EventPreempted) == 0 || countKind(evs, EventAborted) == 0 {
		t.Errorf("workload exercised no preemption or abort: %d, %d", countKind(evs, EventPreempted), countKind(evs, EventAborted))
	}
}

func TestDeterminism(t *testing.T) {
	p := tiny
	p.NumBlocks = 48
	a := workload(t, 3, p, 200)
	b := workload(t, 3, p, 200)
	if !slices.Equal(a, b) {
		t.Fatal("the same workload gave different events")
	}
}

func TestQwenCalibration(t *testing.T) {
	p := Qwen3_32B_H100
	e := newEngine(t, p, nil)
	must(t, e.Submit(Request{ID: 1, PromptTokens: 8192, OutputTokens: 1}, 0))
	d, _ := e.BeginStep(0)
	if d < 380*time.Millisecond || d > 420*time.Millisecond {
		t.Errorf("one uncached 8192-token chunk takes %v, want ≈ 0.40 s", d)
	}
	e.EndStep(d)

	// Sustained prefill at saturation: 8k-token prompts with 128-token answers.
	e = newEngine(t, p, func(o *Options) { o.OmitTokenEvents = true })
	now := time.Duration(0)
	const n = 150
	for i := range n {
		must(t, e.Submit(Request{ID: RequestID(i), Blocks: []BlockHash{BlockHash(i + 1)}, PromptTokens: 8192, OutputTokens: 128}, 0))
	}
	for e.HasWork() {
		d, _ := e.BeginStep(now)
		now += d
		e.EndStep(now)
	}
	rate := float64(n*8192) / now.Seconds()
	t.Logf("sustained prefill %.0f tok/s with decode mixed in (llm-d default 15928)", rate)
	if rate < 0.85*15928 || rate > 1.15*15928 {
		t.Errorf("sustained prefill %.0f tok/s, want within 15%% of 15928", rate)
	}
	// Decode alone: one sequence near 12 ms a token.
	e = newEngine(t, p, nil)
	must(t, e.Submit(Request{ID: 1, PromptTokens: 2000, OutputTokens: 3}, 0))
	d, _ = e.BeginStep(0)
	e.EndStep(d)
	d, _ = e.BeginStep(d)
	if d < 11*time.Millisecond || d > 14*time.Millisecond {
		t.Errorf("decode step of one sequence = %v, want ≈ 12 ms", d)
	}
}

func TestSteadyDecodeAllocs(t *testing.T) {
	p := tiny
	p.MaxModelLen = 1 << 20
	p.NumBlocks = 1 << 16
	e := newEngine(t, p, nil)
	for i := range 8 {
		must(t, e.Submit(Request{ID: RequestID(i), Prompt: seq(100*i, 30), Output: seq(5000, 1<<17), OutputTokens: 1 << 17}, 0))
	}
	var evs []Event
	now := time.Duration(0)
	step := func() {
		d, _ := e.BeginStep(now)
		now += d
		e.EndStep(now)
		evs = e.Events(evs[:0])
	}
	for range 100 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Errorf("steady decode step allocates %v times, want 0", a)
	}
}

func TestSubBlocks(t *testing.T) {
	a := SubBlocks(nil, []uint64{7, 8}, 4)
	b := SubBlocks(nil, []uint64{7, 9}, 4)
	if len(a) != 8 || !slices.Equal(a[:4], b[:4]) || slices.Equal(a[4:], b[4:]) {
		t.Fatalf("SubBlocks: %v vs %v", a, b)
	}
	seen := map[BlockHash]bool{}
	for _, h := range append(a, b[4:]...) {
		if seen[h] {
			t.Fatalf("duplicate sub-block hash %d", h)
		}
		seen[h] = true
	}
	// A trace request whose first coarse block matches reuses exactly those engine blocks.
	e := newEngine(t, tiny, nil)
	must(t, e.Submit(Request{ID: 1, Blocks: a, PromptTokens: 33, OutputTokens: 1}, 0))
	_, now := drive(t, e, 0)
	must(t, e.Submit(Request{ID: 2, Blocks: b, PromptTokens: 33, OutputTokens: 1}, now))
	evs, _ := drive(t, e, now)
	if got := startedTokens(evs, 2); got != 16 {
		t.Errorf("cached tokens %d, want 16", got)
	}
}

// TestRemotePrefill: a request whose KV was transferred from a prefill server costs one
// token of compute to start, reports only its local hits as cached, and leaves its prompt
// cached here for the next turn; preempted, it would recompute like any other.
func TestRemotePrefill(t *testing.T) {
	prompt := seq(1, 40)
	run := func(remote bool) (time.Duration, []Event, *Engine) {
		e := newEngine(t, tiny, nil)
		must(t, e.Submit(Request{ID: 1, Prompt: prompt, OutputTokens: 1, RemotePrefill: remote}, 0))
		evs, end := drive(t, e, 0)
		return end, evs, e
	}
	local, _, _ := run(false)
	remote, evs, e := run(true)
	// tiny: 1 ms per step + 10 µs per prefill token. Local: 40 tokens in one step; remote: 1.
	if want := time.Millisecond + 10*time.Microsecond; remote != want {
		t.Errorf("remote prefill took %v, want %v (one token)", remote, want)
	}
	if remote >= local {
		t.Errorf("remote prefill %v not cheaper than local %v", remote, local)
	}
	if got := startedTokens(evs, 1); got != 0 {
		t.Errorf("cached tokens reported %d, want 0 (nothing was cached here)", got)
	}
	must(t, e.Submit(Request{ID: 2, Prompt: prompt, OutputTokens: 1}, remote))
	evs, _ = drive(t, e, remote)
	if got := startedTokens(evs, 2); got != 36 {
		t.Errorf("next turn cached %d tokens, want 36: the transferred blocks stay cached", got)
	}
}
