package prefixcache

import (
	"fmt"
	"strings"
)

// Medium is where a cached block lives on a backend. Blocks in different media are indexed
// separately: Match answers for GPU blocks, MatchMedium for the others, so placement can charge
// a block held only in CPU memory or a shared store at its transfer cost.
type Medium uint8

// Media, in the order ParseMedium recognises them.
const (
	GPU    Medium = iota // device memory: served without transfer
	CPU                  // host memory (CPU offload): must be copied to the GPU first
	Remote               // any other store (disk, a shared or remote KV store)
	numMedia
)

// ParseMedium maps an engine's medium name to a Medium: "" and "GPU" (any case; vLLM's
// default) to GPU, "CPU" to CPU, anything else to Remote.
func ParseMedium(s string) Medium {
	switch {
	case s == "" || strings.EqualFold(s, "GPU"):
		return GPU
	case strings.EqualFold(s, "CPU"):
		return CPU
	default:
		return Remote
	}
}

// String returns "GPU", "CPU" or "Remote", and "Medium(n)" for any other value.
func (m Medium) String() string {
	switch m {
	case GPU:
		return "GPU"
	case CPU:
		return "CPU"
	case Remote:
		return "Remote"
	}
	return fmt.Sprintf("Medium(%d)", uint8(m))
}

// engineKey is an engine block hash in one medium.
type engineKey struct {
	hash   uint64
	medium Medium
}

// StoredBlocks is an engine's report that it stored blocks (vLLM's and SGLang's BlockStored
// event), for the exact mode. The engine's hashes are opaque: the index recomputes its own
// chained hashes from the tokens and remembers, per backend, which engine hash maps to which.
// ApplyStored does not retain the slices.
type StoredBlocks struct {
	// EngineHashes are the engine's hashes of the stored blocks, in chain order.
	EngineHashes []uint64
	// Parent is the engine hash of the block preceding the first stored block; it is ignored
	// unless HasParent (vLLM sends null for a chain's first block).
	Parent    uint64
	HasParent bool
	// Tokens are the token ids of all stored blocks, concatenated:
	// len(Tokens) == len(EngineHashes)·BlockSize.
	Tokens    []uint32
	BlockSize int
	// Seed starts the chain when there is no parent: Seed(model, lora, salt) for the model and
	// adapter the event is about, exactly as the gateway computes it for requests.
	Seed BlockHash
	// Medium is the engine's medium name ("GPU", "CPU", ...; "" means GPU), see ParseMedium.
	Medium string
}

// ApplyStored applies a BlockStored event from backend id: it computes usher's chained hashes
// of the blocks (continuing from the parent's usher hash, found through the backend's
// engine→usher map, or from ev.Seed), records each engine hash's usher hash, and inserts the
// blocks into ev.Medium as Insert does. The chain is the same one HashTokens computes for a
// request with the same seed and tokens, so Match finds the blocks.
//
// It returns ErrInvalidEvent (nothing applied) when BlockSize <= 0, there are no hashes, or
// Tokens does not hold exactly len(EngineHashes) full blocks; ErrUnknownParent when the parent
// engine hash was never stored (or was removed or cleared) on this backend; ErrUnknownBackend
// when id is not registered. Cost O(len(Tokens)); the engine map holds at most about twice the
// backend's capacity entries (it is reset, with the blocks kept, when it outgrows that).
func (ix *Index) ApplyStored(id BackendID, ev StoredBlocks) error {
	n := len(ev.EngineHashes)
	switch {
	case ev.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d", ErrInvalidEvent, ev.BlockSize)
	case n == 0:
		return fmt.Errorf("%w: no block hashes", ErrInvalidEvent)
	case len(ev.Tokens) != n*ev.BlockSize:
		return fmt.Errorf("%w: %d tokens for %d blocks of %d", ErrInvalidEvent, len(ev.Tokens), n, ev.BlockSize)
	}
	m := ParseMedium(ev.Medium)
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	seed := ev.Seed
	if ev.HasParent {
		var ok bool
		if seed, ok = b.parentLocked(ev.Parent, m); !ok {
			b.mu.Unlock()
			return fmt.Errorf("%w: engine hash %#x on backend %d", ErrUnknownParent, ev.Parent, id)
		}
	}
	b.scratch = HashTokens(b.scratch[:0], seed, ev.Tokens, ev.BlockSize)
	if b.engine == nil {
		b.engine = make(map[engineKey]BlockHash)
	}
	if len(b.engine)+n > 2*b.capacity+1024 {
		clear(b.engine)
	}
	for i, eh := range ev.EngineHashes {
		b.engine[engineKey{eh, m}] = b.scratch[i]
	}
	ix.insertLocked(b, b.scratch, m)
	b.mu.Unlock()
	ix.enforceBudget()
	return nil
}

// parentLocked finds the usher hash of engine hash h, preferring medium m: a block offloaded
// to CPU continues the same chain as its GPU copy.
func (b *backend) parentLocked(h uint64, m Medium) (BlockHash, bool) {
	if u, ok := b.engine[engineKey{h, m}]; ok {
		return u, true
	}
	for o := range numMedia {
		if u, ok := b.engine[engineKey{h, o}]; ok {
			return u, true
		}
	}
	return 0, false
}

// ApplyRemoved applies a BlockRemoved event for GPU blocks from backend id: each engine hash
// the backend stored is removed from the index and forgotten; unknown hashes are ignored (the
// engine may evict blocks stored before the subscription began). Cost O(len(engineHashes)).
// It returns ErrUnknownBackend when id is not registered.
func (ix *Index) ApplyRemoved(id BackendID, engineHashes []uint64) error {
	return ix.ApplyRemovedFrom(id, "", engineHashes)
}

// ApplyRemovedFrom is ApplyRemoved for blocks in the named medium (see ParseMedium).
// Cost O(len(engineHashes)).
func (ix *Index) ApplyRemovedFrom(id BackendID, medium string, engineHashes []uint64) error {
	m := ParseMedium(medium)
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	b.scratch = b.scratch[:0]
	for _, eh := range engineHashes {
		k := engineKey{eh, m}
		if u, ok := b.engine[k]; ok {
			b.scratch = append(b.scratch, u)
			delete(b.engine, k)
		}
	}
	ix.removeLocked(b, b.scratch, m)
	b.mu.Unlock()
	return nil
}

// ApplyCleared applies an AllBlocksCleared event: backend id holds nothing any more, in any
// medium, and its engine→usher map is emptied. It is ClearBackend: O(the backend's blocks).
func (ix *Index) ApplyCleared(id BackendID) error { return ix.ClearBackend(id) }
