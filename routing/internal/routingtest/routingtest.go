// Package routingtest holds the fixtures that the tests of package routing (its external
// tests) and of its capability packages (routing/latency, routing/outlier, routing/session, ...)
// share: a fixed clock, a fleet of backends, a benchmark router over a real prefix index,
// hand-made candidates and a scorer table checker, a fake prefix index and a SessionFeed log.
// It is imported only by tests.
package routingtest

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
)

// T0 is the fixed time the fixtures' routers and backends start at.
var T0 = time.Unix(1_000_000, 0)

// QR is the set of the queue signals: queued and running.
const QR = routing.SignalQueued | routing.SignalRunning

// Fleet returns n fresh, healthy backends "b0".."b(n-1)" with equal signals, updated at at.
func Fleet(n int, at time.Time) []routing.BackendState {
	out := make([]routing.BackendState, n)
	for i := range out {
		out[i] = routing.BackendState{
			Name: fmt.Sprintf("b%d", i), Health: routing.Healthy, Known: routing.AllSignals,
			Queued: 0, Running: 0, KVUtilization: 0.1, KVCapacityBlocks: 1000, BlockSize: 16,
			UpdatedAt: at,
		}
	}
	return out
}

// MustNew returns routing.New(opts), with the clock at T0 and seed 42 unless opts set them.
func MustNew(tb testing.TB, opts routing.Options) *routing.Router {
	tb.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return T0 }
	}
	if opts.Seed == 0 {
		opts.Seed = 42
	}
	r, err := routing.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// MustUpdate calls r.Update(s) and fails tb on an error.
func MustUpdate(tb testing.TB, r *routing.Router, s []routing.BackendState) {
	tb.Helper()
	if err := r.Update(s); err != nil {
		tb.Fatal(err)
	}
}

// MustScorer returns a scorer whose constructor must not fail, and panics if it did.
func MustScorer(s routing.Scorer, err error) routing.Scorer {
	if err != nil {
		panic(err)
	}
	return s
}

// BenchRouter builds a router over n backends with a real prefixcache index, and a request with
// a 128-block chain (2,048 tokens at 16 per block). Every backend holds the first 16 blocks (a
// shared system prompt); every tenth holds the whole chain, every other one a chain that
// diverges after block 16 — so the match walks all 128 blocks for some backends.
func BenchRouter(tb testing.TB, n int, profile routing.Profile) (*routing.Router, *routing.Request) {
	tb.Helper()
	r, req, _ := BenchRouterIndex(tb, n, profile, prefixcache.Options{})
	return r, req
}

// BenchRouterIndex is BenchRouter with an index configured by ixOpts, which it also returns.
func BenchRouterIndex(tb testing.TB, n int, profile routing.Profile, ixOpts prefixcache.Options) (*routing.Router, *routing.Request, *prefixcache.Index) {
	tb.Helper()
	ix, err := prefixcache.New(ixOpts)
	if err != nil {
		tb.Fatal(err)
	}
	r := MustNew(tb, routing.Options{Index: ix, Profile: profile})
	states := Fleet(n, T0)
	for i := range states {
		states[i].Queued = i % 7
		states[i].Running = i % 5
		states[i].KVUtilization = float64(i%10) / 10
	}
	MustUpdate(tb, r, states)
	req := make([]prefixcache.BlockHash, 128)
	other := make([]prefixcache.BlockHash, 128)
	for i := range req {
		req[i] = prefixcache.BlockHash(0x9e3779b97f4a7c15 * uint64(i+1))
		other[i] = req[i]
		if i >= 16 {
			other[i] ^= 0xdeadbeef
		}
	}
	for i := range states {
		id, err := ix.AddBackend(states[i].Name, 0)
		if err != nil {
			tb.Fatal(err)
		}
		c := other
		if i%10 == 0 {
			c = req
		}
		if err := ix.Insert(id, c); err != nil {
			tb.Fatal(err)
		}
	}
	return r, &routing.Request{Chain: req, PromptTokens: 2048}, ix
}

// Chain returns a chain of n blocks hashed 1..n.
func Chain(n int) []prefixcache.BlockHash {
	c := make([]prefixcache.BlockHash, n)
	for i := range c {
		c[i] = prefixcache.BlockHash(i + 1)
	}
	return c
}

// Spec describes a candidate built by hand for scorer tables.
type Spec struct {
	Queued, Running int
	KV              float64
	CapBlocks       int
	Known           routing.Signal
	Stale           bool
	InFlight        int64
	Prefill         int64
	Blocks          int64
	Matched         int
	Uncached        int
	ID              routing.BackendID // 0: the candidate's index
	Health          routing.Health
}

// Cands builds candidates "b0".."b(n-1)" from specs, as if outside a Router.
func Cands(cs ...Spec) []routing.Candidate {
	out := make([]routing.Candidate, len(cs))
	for i, c := range cs {
		st := &routing.BackendState{
			Name: "b" + itoa(i), Queued: c.Queued, Running: c.Running, KVUtilization: c.KV,
			KVCapacityBlocks: c.CapBlocks, BlockSize: 16, Known: c.Known, Health: c.Health,
			UpdatedAt: time.Unix(1, 0),
		}
		fresh := c.Known
		if c.Stale {
			fresh = 0
		}
		out[i] = routing.Candidate{
			State: st, ID: c.ID, InFlight: routing.InFlight{Requests: c.InFlight, PrefillTokens: c.Prefill, Blocks: c.Blocks},
			MatchedBlocks: c.Matched, MatchedTokens: c.Matched * 16, Fresh: fresh, Stale: c.Stale,
			UncachedTokens: c.Uncached,
		}
		if c.ID == 0 {
			out[i].ID = routing.BackendID(i)
		}
	}
	return out
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// IDs returns the candidates' ids, in order.
func IDs(cs []routing.Candidate) []routing.BackendID {
	var out []routing.BackendID
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// SameIDs reports whether the candidates' ids are want, in order.
func SameIDs(cs []routing.Candidate, want []routing.BackendID) bool {
	got := IDs(cs)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// Score returns what s scores cs for req.
func Score(s routing.Scorer, req *routing.Request, cs []routing.Candidate) []float64 {
	dst := make([]float64, len(cs))
	s.Score(req, cs, dst)
	return dst
}

// Near reports whether a and b are within 1e-9.
func Near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// CheckScores fails tb unless got is want, each score Near.
func CheckScores(tb testing.TB, name string, got, want []float64) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: got %d scores, want %d", name, len(got), len(want))
	}
	for i := range got {
		if !Near(got[i], want[i]) {
			tb.Errorf("%s: score[%d] = %v, want %v (all: got %v, want %v)", name, i, got[i], want[i], got, want)
		}
	}
}

// PickName picks for req, fails tb on an error, and returns the chosen backend's name (done).
func PickName(tb testing.TB, r *routing.Router, req *routing.Request) string {
	tb.Helper()
	p, err := r.Pick(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Done(routing.DoneInfo{})
	return p.Backend.Name
}

// FakeIndex is a naive prefix index: per backend a set of held blocks, matched by walking the
// chain. It records every insert.
type FakeIndex struct {
	mu      sync.Mutex
	names   map[string]prefixcache.HolderID
	held    []map[prefixcache.BlockHash]bool
	Inserts int      // Insert calls, Hold's excepted
	Removes int      // Remove calls
	FailAdd bool     // AddBackend fails
	Adds    []string // "name:capacity" per AddBackend call
}

// NewFakeIndex returns an empty FakeIndex.
func NewFakeIndex() *FakeIndex { return &FakeIndex{names: map[string]prefixcache.HolderID{}} }

// AddBackend returns name's holder id, adding it on first sight; it fails when FailAdd is set.
func (f *FakeIndex) AddBackend(name string, capacity int) (prefixcache.HolderID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailAdd {
		return 0, errors.New("fake: full")
	}
	f.Adds = append(f.Adds, fmt.Sprintf("%s:%d", name, capacity))
	if id, ok := f.names[name]; ok {
		return id, nil
	}
	id := prefixcache.HolderID(len(f.held))
	f.names[name] = id
	f.held = append(f.held, map[prefixcache.BlockHash]bool{})
	return id, nil
}

// Match appends to dst[:0] each holder's matched prefix of chain, in blocks.
func (f *FakeIndex) Match(dst []int32, chain []prefixcache.BlockHash) []int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	dst = dst[:0]
	for _, h := range f.held {
		n := int32(0)
		for _, b := range chain {
			if !h[b] {
				break
			}
			n++
		}
		dst = append(dst, n)
	}
	return dst
}

// Insert records that id holds chain.
func (f *FakeIndex) Insert(id prefixcache.HolderID, chain []prefixcache.BlockHash) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Inserts++
	for _, b := range chain {
		f.held[id][b] = true
	}
	return nil
}

// Remove records that id no longer holds chain.
func (f *FakeIndex) Remove(id prefixcache.HolderID, chain []prefixcache.BlockHash) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Removes++
	for _, b := range chain {
		delete(f.held[id], b)
	}
	return nil
}

// Hold makes name hold chain without counting an insert.
func (f *FakeIndex) Hold(name string, chain []prefixcache.BlockHash) {
	id, _ := f.AddBackend(name, 0)
	_ = f.Insert(id, chain)
	f.mu.Lock()
	f.Inserts--
	f.mu.Unlock()
}

// Forget drops every block name holds, as an eviction would.
func (f *FakeIndex) Forget(name string) {
	f.mu.Lock()
	f.held[f.names[name]] = map[prefixcache.BlockHash]bool{}
	f.mu.Unlock()
}

// Placement is one SessionFeed call.
type Placement struct {
	Session uint64
	Backend string
	Blocks  int
	Expires time.Time
}

// PlacementLog is a SessionFeed that keeps what it hears.
type PlacementLog struct {
	mu  sync.Mutex
	got []Placement
}

// Placed records one placement.
func (l *PlacementLog) Placed(session uint64, backend string, blocks int, expires time.Time) {
	l.mu.Lock()
	l.got = append(l.got, Placement{session, backend, blocks, expires})
	l.mu.Unlock()
}

// Take returns the placements heard since the last Take.
func (l *PlacementLog) Take() []Placement {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}
