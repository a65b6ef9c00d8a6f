package prefixpeer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/usher-llm/usher/prefixcache"
)

func mustNew(t testing.TB, o prefixcache.Options) *prefixcache.Index {
	t.Helper()
	ix, err := prefixcache.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func mustAdd(t testing.TB, ix *prefixcache.Index, name string, capacity int) prefixcache.HolderID {
	t.Helper()
	id, err := ix.AddBackend(name, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func seq(from, n int) []prefixcache.BlockHash {
	c := make([]prefixcache.BlockHash, n)
	for i := range c {
		c[i] = prefixcache.BlockHash(from + i)
	}
	return c
}

func benchChain(r *rand.Rand, n int) []prefixcache.BlockHash {
	c := make([]prefixcache.BlockHash, n)
	for i := range c {
		c[i] = prefixcache.BlockHash(r.Uint64())
	}
	return c
}

// record is one change a Feed heard, with its chain copied.
type record struct {
	backend string
	chain   []prefixcache.BlockHash
	removed bool
}

func (c record) String() string {
	op := "insert"
	if c.removed {
		op = "remove"
	}
	return fmt.Sprintf("%s %s %v", op, c.backend, c.chain)
}

func sameChanges(t *testing.T, what string, got, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d changes %v, want %d %v", what, len(got), got, len(want), want)
	}
	for i := range want {
		if got[i].backend != want[i].backend || got[i].removed != want[i].removed || !slices.Equal(got[i].chain, want[i].chain) {
			t.Errorf("%s: change %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// InsertRemote and RemoveRemote have the effect of Insert and Remove: a replica that applies
// another's feed (through a Buffer, by backend name) matches every chain as it does.
func TestInsertRemoteEqualsInsert(t *testing.T) {
	fb := NewBuffer(0)
	src := mustNew(t, prefixcache.Options{Feed: fb})
	dst := mustNew(t, prefixcache.Options{})
	names := []string{"a", "b", "c", "d"}
	ids := make(map[string]prefixcache.HolderID) // the replica's ids
	for i, n := range names {
		mustAdd(t, src, n, 64)
		// The replica interns the names in another order: the ids differ.
		mustAdd(t, dst, names[len(names)-1-i], 64)
	}
	for _, n := range names {
		ids[n], _ = dst.Lookup(n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	chains := make([][]prefixcache.BlockHash, 32)
	for i := range chains {
		chains[i] = benchChain(r, 1+r.IntN(40))
	}
	apply := func(backend string, chain []prefixcache.BlockHash, removed bool) {
		var err error
		if removed {
			err = RemoveRemote(dst, ids[backend], chain)
		} else {
			err = InsertRemote(dst, ids[backend], chain)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for round := range 20 {
		for range 50 {
			id, _ := src.Lookup(names[r.IntN(len(names))])
			c := chains[r.IntN(len(chains))]
			if r.IntN(4) == 0 {
				_ = src.Remove(id, c[r.IntN(len(c)):])
			} else {
				_ = src.Insert(id, c)
			}
		}
		fb.Drain(apply)
		for _, c := range chains {
			want, got := src.Match(nil, c), dst.Match(nil, c)
			for _, n := range names {
				s, _ := src.Lookup(n)
				if got[ids[n]] != want[s] {
					t.Fatalf("round %d: %s matches %d blocks on the replica, %d on the source", round, n, got[ids[n]], want[s])
				}
			}
		}
	}
	if fb.Dropped() != 0 {
		t.Errorf("Dropped = %d, want 0", fb.Dropped())
	}
	ss, ds := src.Stats(), dst.Stats()
	if ss.Evictions == 0 {
		t.Error("nothing was evicted: the test does not cover CLOCK")
	}
	if ss.Blocks != ds.Blocks || ss.Stale != ds.Stale || ss.Evictions != ds.Evictions {
		t.Errorf("source holds %d blocks (%d stale, %d evicted), the replica %d (%d, %d)",
			ss.Blocks, ss.Stale, ss.Evictions, ds.Blocks, ds.Stale, ds.Evictions)
	}
}

func TestBufferOrder(t *testing.T) {
	f := NewBuffer(0)
	want := []record{
		{"a", seq(1, 3), false},
		{"b", seq(7, 1), false},
		{"a", seq(2, 2), true},
		{"c", nil, false},
		{"b", seq(40, 5), true},
	}
	for _, c := range want {
		if c.removed {
			f.Removed(c.backend, c.chain)
		} else {
			f.Inserted(c.backend, c.chain)
		}
	}
	var got []record
	collect := func(backend string, chain []prefixcache.BlockHash, removed bool) {
		got = append(got, record{backend, slices.Clone(chain), removed})
	}
	if n := f.Drain(collect); n != len(want) {
		t.Errorf("Drain = %d, want %d", n, len(want))
	}
	sameChanges(t, "drain", got, want)
	got = nil
	if n := f.Drain(collect); n != 0 || len(got) != 0 {
		t.Errorf("second Drain = %d %v, want 0 changes", n, got)
	}
	// The buffer is reused: the next batch comes out alone.
	f.Inserted("d", seq(9, 2))
	if n := f.Drain(collect); n != 1 {
		t.Errorf("third Drain = %d, want 1", n)
	}
	sameChanges(t, "third drain", got, []record{{"d", seq(9, 2), false}})
	if n := f.Drain(nil); n != 0 {
		t.Errorf("Drain(nil) of an empty buffer = %d", n)
	}
	f.Inserted("e", seq(1, 1))
	if n := f.Drain(nil); n != 1 {
		t.Errorf("Drain(nil) = %d, want 1 (discarded)", n)
	}
}

// When a change does not fit, the newest is dropped and counted; Drain frees the room.
func TestBufferDrop(t *testing.T) {
	// "a" costs 1 + 32 the first time in a batch, each change 16, each block 8.
	f := NewBuffer(100)
	steps := []struct {
		backend string
		blocks  int
		kept    bool
		dropped uint64
	}{
		{"a", 4, true, 0},   // 33 + 16 + 32 = 81
		{"a", 1, false, 1},  // +24 = 105 > 100
		{"a", 0, true, 1},   // +16 = 97
		{"b", 0, false, 2},  // +1 + 32 + 16 = 146
		{"a", 0, false, 3},  // +16 = 113
		{"a", 20, false, 4}, // never fits
	}
	for i, s := range steps {
		f.Inserted(s.backend, seq(1, s.blocks))
		if got := f.Dropped(); got != s.dropped {
			t.Errorf("step %d: Dropped = %d, want %d", i, got, s.dropped)
		}
	}
	var got []record
	collect := func(backend string, chain []prefixcache.BlockHash, removed bool) {
		got = append(got, record{backend, slices.Clone(chain), removed})
	}
	f.Drain(collect)
	sameChanges(t, "drain", got, []record{{"a", seq(1, 4), false}, {"a", nil, false}})
	got = nil
	f.Removed("b", seq(5, 4)) // fits again after the drain
	f.Drain(collect)
	sameChanges(t, "after drain", got, []record{{"b", seq(5, 4), true}})
	if d := f.Dropped(); d != 4 {
		t.Errorf("Dropped = %d after draining, want 4 (cumulative)", d)
	}
}

// The zero Buffer works (DefaultBufferBytes), and a nil one hears nothing without failing.
func TestBufferZeroAndNil(t *testing.T) {
	var f Buffer
	f.Inserted("a", seq(1, 2))
	if n := f.Drain(nil); n != 1 {
		t.Errorf("zero Buffer: Drain = %d, want 1", n)
	}
	var nilBuf *Buffer
	ix := mustNew(t, prefixcache.Options{Feed: nilBuf})
	a := mustAdd(t, ix, "a", 0)
	if err := ix.Insert(a, seq(1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(a, seq(1, 2)); err != nil {
		t.Fatal(err)
	}
	if nilBuf.Drain(nil) != 0 || nilBuf.Dropped() != 0 {
		t.Error("nil Buffer reported something")
	}
}

// Reporters and a drainer at once (meant for -race): every change is drained or dropped, each
// reporter's changes come out in its order, and no chain is torn.
func TestBufferConcurrent(t *testing.T) {
	const workers, per = 4, 2000
	f := NewBuffer(4 << 10) // small, so that some changes are dropped
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := fmt.Sprint("w", w)
			chain := make([]prefixcache.BlockHash, 8)
			for i := range per {
				for k := range chain {
					chain[k] = prefixcache.BlockHash(i)
				}
				if i%3 == 0 {
					f.Removed(name, chain[:1+i%8])
				} else {
					f.Inserted(name, chain[:1+i%8])
				}
			}
		})
	}
	last := make(map[string]int)
	drained := 0
	check := func(backend string, chain []prefixcache.BlockHash, removed bool) {
		i := int(chain[0])
		if len(chain) != 1+i%8 || removed != (i%3 == 0) {
			t.Fatalf("%s: change %d has %d blocks, removed %v", backend, i, len(chain), removed)
		}
		for _, h := range chain {
			if h != chain[0] {
				t.Fatalf("%s: torn chain %v", backend, chain)
			}
		}
		if p, ok := last[backend]; ok && i <= p {
			t.Fatalf("%s: change %d after %d", backend, i, p)
		}
		last[backend] = i
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		drained += f.Drain(check)
	}
	drained += f.Drain(check)
	if total := uint64(drained) + f.Dropped(); total != workers*per {
		t.Errorf("drained %d + dropped %d = %d, want %d", drained, f.Dropped(), total, workers*per)
	}
}

// Insert and Remove reporting to a Buffer, and its Drain, allocate nothing once the
// buffers have grown.
func TestFeedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	fb := NewBuffer(0)
	ix := mustNew(t, prefixcache.Options{Feed: fb})
	ids := make([]prefixcache.HolderID, 8)
	for i := range ids {
		ids[i] = mustAdd(t, ix, fmt.Sprint("backend-", i), 1<<12)
	}
	chain := benchChain(rand.New(rand.NewPCG(1, 2)), 128)
	cycle := func() {
		for _, id := range ids {
			_ = ix.Insert(id, chain)
		}
		_ = ix.Remove(ids[1], chain[64:])
		fb.Drain(func(string, []prefixcache.BlockHash, bool) {})
	}
	for range 3 {
		cycle()
	}
	if a := testing.AllocsPerRun(100, cycle); a != 0 {
		t.Errorf("Insert, Remove and Drain with a Buffer: %v allocs/op, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { fb.Inserted("backend-3", chain) }); a != 0 {
		t.Errorf("Buffer.Inserted: %v allocs/op, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		_ = InsertRemote(ix, ids[2], chain)
		_ = RemoveRemote(ix, ids[2], chain[64:])
	}); a != 0 {
		t.Errorf("InsertRemote and RemoveRemote: %v allocs/op, want 0", a)
	}
}
