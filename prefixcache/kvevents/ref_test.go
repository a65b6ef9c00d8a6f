package kvevents

import (
	"github.com/usher-llm/usher/prefixcache"
)

// refIndex is a naive exact-mode index for one backend: the reference the
// model test compares prefixcache.Index against.
type refIndex struct {
	engine map[uint64]prefixcache.BlockHash
	copies map[uint64]int // copies of the block each engine hash names
	held   map[prefixcache.BlockHash]bool
}

func newRefIndex() *refIndex {
	return &refIndex{engine: map[uint64]prefixcache.BlockHash{}, copies: map[uint64]int{}, held: map[prefixcache.BlockHash]bool{}}
}

func (r *refIndex) Lookup(name string) (prefixcache.HolderID, bool) { return 0, true }

func (r *refIndex) ApplyStored(_ prefixcache.HolderID, ev prefixcache.StoredBlocks) error {
	seed := ev.Seed
	if ev.HasParent {
		u, ok := r.engine[ev.Parent]
		if !ok {
			return prefixcache.ErrUnknownParent
		}
		seed = u
	}
	chain := prefixcache.HashTokens(nil, seed, ev.Tokens, ev.BlockSize)
	for i, h := range ev.EngineHashes {
		if u, ok := r.engine[h]; ok && u == chain[i] {
			r.copies[h]++
		} else {
			r.copies[h] = 1
		}
		r.engine[h] = chain[i]
		r.held[chain[i]] = true
	}
	return nil
}

func (r *refIndex) ApplyRemovedFrom(_ prefixcache.HolderID, _ string, hs []uint64) error {
	for _, h := range hs {
		if u, ok := r.engine[h]; ok {
			if r.copies[h]--; r.copies[h] > 0 {
				continue
			}
			delete(r.held, u)
			delete(r.engine, h)
			delete(r.copies, h)
		}
	}
	return nil
}

func (r *refIndex) ApplyCleared(prefixcache.HolderID) error {
	clear(r.engine)
	clear(r.copies)
	clear(r.held)
	return nil
}
