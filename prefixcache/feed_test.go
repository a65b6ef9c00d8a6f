package prefixcache

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// change is one change a Feed heard, with its chain copied.
type change struct {
	backend string
	chain   []BlockHash
	removed bool
}

func (c change) String() string {
	op := "insert"
	if c.removed {
		op = "remove"
	}
	return fmt.Sprintf("%s %s %v", op, c.backend, c.chain)
}

// recorder is a Feed that keeps every change, copied.
type recorder struct {
	mu  sync.Mutex
	got []change
}

func (r *recorder) Inserted(backend string, chain []BlockHash) {
	r.mu.Lock()
	r.got = append(r.got, change{backend, slices.Clone(chain), false})
	r.mu.Unlock()
}

func (r *recorder) Removed(backend string, chain []BlockHash) {
	r.mu.Lock()
	r.got = append(r.got, change{backend, slices.Clone(chain), true})
	r.mu.Unlock()
}

func sameChanges(t *testing.T, what string, got, want []change) {
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

// The Feed hears Insert and Remove exactly, and nothing else: not the chains applied for other
// replicas (through internal/peer's PrefixIndex), the exact mode's events, evictions, failures or empty chains.
func TestFeedHearsInsertAndRemove(t *testing.T) {
	rec := &recorder{}
	ix := mustNew(t, Options{Feed: rec, MaxChainBlocks: 8})
	a := mustAdd(t, ix, "vllm-a", 4) // capacity 4: inserting 6 blocks evicts, unreported
	b := mustAdd(t, ix, "vllm-b", 0)

	steps := []struct {
		name string
		do   func() error
	}{
		{"insert a", func() error { return ix.Insert(a, seq(1, 3)) }},
		{"insert b, cut to MaxChainBlocks", func() error { return ix.Insert(b, seq(10, 12)) }},
		{"remove a", func() error { return ix.Remove(a, seq(2, 2)) }},
		{"insert a past its capacity", func() error { return ix.Insert(a, seq(100, 6)) }},
		{"insert remote", func() error { return (*peerIndex)(ix).InsertRemote(b, seq(50, 3)) }},
		{"remove remote", func() error { return (*peerIndex)(ix).RemoveRemote(b, seq(10, 2)) }},
		{"empty insert", func() error { return ix.Insert(a, nil) }},
		{"empty remove", func() error { return ix.Remove(a, nil) }},
		{"stored event", func() error {
			return ix.ApplyStored(b, StoredBlocks{EngineHashes: []uint64{7}, Tokens: make([]uint32, 16), BlockSize: 16})
		}},
		{"removed event", func() error { return ix.ApplyRemovedFrom(b, "", []uint64{7}) }},
		{"cleared event", func() error { return ix.ApplyCleared(b) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if err := ix.Insert(99, seq(1, 2)); err == nil {
		t.Fatal("insert into an unknown backend succeeded")
	}
	if err := ix.Remove(99, seq(1, 2)); err == nil {
		t.Fatal("remove from an unknown backend succeeded")
	}
	sameChanges(t, "feed", rec.got, []change{
		{"vllm-a", seq(1, 3), false},
		{"vllm-b", seq(10, 8), false},
		{"vllm-a", seq(2, 2), true},
		{"vllm-a", seq(100, 6), false},
	})
}
