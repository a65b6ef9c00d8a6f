package engine

import (
	"slices"
	"testing"
	"time"
)

// FuzzEngine drives the engine with operations decoded from the input — submit, abort, step,
// abort during a step — and checks the block accounting after each, then that every request
// ends exactly once and nothing is left held.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 10, 3, 0, 20, 5, 2, 2, 2, 1, 0, 2, 2})
	f.Add([]byte{0, 200, 9, 0, 200, 9, 0, 200, 9, 3, 1, 2, 2, 2, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		p := tiny
		p.NumBlocks = 24
		p.MaxNumSeqs = 4
		p.MaxNumBatchedTokens = 16
		p.MaxModelLen = 96
		e := newEngine(t, p, func(o *Options) { o.KVEvents = true })
		var evs []Event
		now := time.Duration(0)
		next := RequestID(0)
		submitted := 0
		for i := 0; i+2 < len(ops); i += 3 {
			a, b := int(ops[i+1]), int(ops[i+2])
			switch ops[i] % 4 {
			case 0:
				prefix := seq(1, a%40)
				prompt := append(prefix, seq(1000+int(next)*50, 1+b%20)...)
				if e.Submit(Request{ID: next, Prompt: prompt, OutputTokens: 1 + b%30, Output: seq(7, b%9)}, now) == nil {
					submitted++
				}
				next++
			case 1:
				e.Abort(RequestID(a%max(1, int(next))), now)
			case 2:
				if d, ok := e.BeginStep(now); ok {
					now += d
					e.EndStep(now)
				}
			case 3:
				if d, ok := e.BeginStep(now); ok {
					e.Abort(RequestID(a%max(1, int(next))), now+d/2)
					now += d
					e.EndStep(now)
				}
			}
			checkInvariants(t, e)
			evs = e.Events(evs)
			e.KVEvents(nil)
		}
		for e.HasWork() {
			d, _ := e.BeginStep(now)
			now += d
			e.EndStep(now)
			checkInvariants(t, e)
		}
		evs = e.Events(evs)
		ended := map[RequestID]bool{}
		for _, ev := range evs {
			if ended[ev.ID] {
				t.Fatalf("event %v after the end of request %d", ev.Kind, ev.ID)
			}
			if ev.Kind == EventFinished || ev.Kind == EventAborted {
				ended[ev.ID] = true
			}
		}
		if len(ended) != submitted {
			t.Fatalf("%d requests ended, %d submitted", len(ended), submitted)
		}
		if st := e.Stats(); st.UsedBlocks != 0 {
			t.Fatalf("%d blocks held after all requests ended", st.UsedBlocks)
		}
	})
}

// TestKVCacheAgainstReference compares the block pool with a naive one that keeps its free
// list as a slice, over a deterministic random sequence of operations.
func TestKVCacheAgainstReference(t *testing.T) {
	const n = 16
	c := newKVCache(n)
	var evicted []BlockHash
	c.onEvict = func(h BlockHash) { evicted = append(evicted, h) }
	// Reference: free order, refs and content.
	free := make([]int32, n)
	for i := range free {
		free[i] = int32(i)
	}
	refs := make([]int32, n)
	content := map[int32]BlockHash{}
	byHash := map[BlockHash]int32{}
	var refEvicted []BlockHash
	var held []int32
	x := uint64(12345)
	rnd := func(k int) int { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int(x % uint64(k)) }
	for step := range 5000 {
		switch rnd(4) {
		case 0: // allocate
			if len(free) == 0 {
				continue
			}
			want := free[0]
			free = free[1:]
			if h, ok := content[want]; ok {
				refEvicted = append(refEvicted, h)
				delete(byHash, h)
				delete(content, want)
			}
			refs[want] = 1
			if got := c.allocate(); got != want {
				t.Fatalf("step %d: allocate = %d, want %d", step, got, want)
			}
			held = append(held, want)
		case 1: // store a hash in a held block
			if len(held) == 0 {
				continue
			}
			b := held[rnd(len(held))]
			h := BlockHash(rnd(40) + 1)
			_, dup := byHash[h]
			_, has := content[b]
			if has {
				continue // the engine stores each block once
			}
			if !dup {
				content[b], byHash[h] = h, b
			}
			if got := c.store(b, h); got != !dup {
				t.Fatalf("step %d: store = %v, want %v", step, got, !dup)
			}
		case 2: // release a run of held blocks
			if len(held) == 0 {
				continue
			}
			k := 1 + rnd(min(3, len(held)))
			run := slices.Clone(held[len(held)-k:])
			held = held[:len(held)-k]
			for j := k - 1; j >= 0; j-- {
				b := run[j]
				refs[b]--
				if refs[b] > 0 {
					continue
				}
				if _, ok := content[b]; ok {
					free = append(free, b)
				} else {
					free = append([]int32{b}, free...)
				}
			}
			c.release(run)
		case 3: // prefix hit on a cached block
			h := BlockHash(rnd(40) + 1)
			b, ok := byHash[h]
			got, gotOK := c.lookup(h)
			if ok != gotOK || (ok && got != b) {
				t.Fatalf("step %d: lookup(%d) = %d,%v, want %d,%v", step, h, got, gotOK, b, ok)
			}
			if !ok {
				continue
			}
			if refs[b] == 0 {
				free = slices.DeleteFunc(free, func(i int32) bool { return i == b })
			}
			refs[b]++
			c.touch(b)
			held = append(held, b)
		}
		var order []int32
		for i := c.head; i != none; i = c.blocks[i].next {
			order = append(order, i)
		}
		if !slices.Equal(order, free) && !(len(order) == 0 && len(free) == 0) {
			t.Fatalf("step %d: free list %v, want %v", step, order, free)
		}
	}
	if !slices.Equal(evicted, refEvicted) {
		t.Fatalf("evictions %v, want %v", evicted, refEvicted)
	}
	if len(evicted) == 0 {
		t.Fatal("no eviction exercised")
	}
}
