package prefixcache

import (
	"fmt"
	"strings"
)

// Medium is where a cached block lives on a backend. Blocks in different media are indexed
// separately: Match answers for GPU blocks, MatchMedium for the others, so placement can charge
// a block held only in CPU memory or a shared store at its transfer cost. Each medium of a
// backend has its own capacity (SetMediumCapacity) and CLOCK, so blocks stored in one medium
// never evict another's.
type Medium uint8

// Media, in the order ParseMedium recognises them.
const (
	GPU    Medium = iota // device memory: served without transfer
	CPU                  // host memory (CPU offload): must be copied to the GPU first
	Remote               // any other store (disk, a shared or remote KV store)

	// NumMedia is the number of media: the media are 0 ≤ m < NumMedia.
	NumMedia
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

// StoredBlocks is an engine's report that it stored blocks (vLLM's and SGLang's BlockStored
// event), for the exact mode. The engine's hashes are opaque: the index recomputes its own
// chained hashes from the tokens and remembers, per backend and medium, which engine hash
// names which block. ApplyStored does not retain the slices.
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
// engine→usher map, or from ev.Seed), inserts the blocks into ev.Medium as Insert does into
// the GPU (with that medium's capacity and CLOCK), and records each inserted block's engine
// hash as its name in that medium. The chain is the same one HashTokens computes for a request
// with the same seed and tokens, so Match (or MatchMedium) finds the blocks.
//
// A name lasts exactly as long as its block in that medium: until ApplyRemovedFrom removes
// it, or the block leaves the medium by the byte budget or a clear, so a continuation naming a
// block the index holds always finds its parent, and a removal always finds its block, however
// long ago it was stored. Predictions never take a named block away: the medium's capacity
// evicts only blocks that Insert alone put there, and Remove leaves named blocks alone. A block
// can have several names (engine hashes that differ in what usher does not hash, such as a
// cache salt); it stays while any of them does. An engine may hold several copies of one block
// (vLLM does when two requests compute it at once) and report each stored and each removed:
// the name stays until its last copy is removed. The names are charged to the byte budget
// (EngineHashBytes each) and counted in Stats.Bytes. Blocks past min(MaxChainBlocks,
// capacity) in one event are neither inserted nor named.
//
// It returns ErrInvalidEvent (nothing applied) when BlockSize <= 0, there are no hashes, or
// Tokens does not hold exactly len(EngineHashes) full blocks; ErrUnknownParent (nothing
// applied) when the parent engine hash names no block the backend holds in any medium;
// ErrUnknownBackend when id is not registered. Cost O(len(Tokens)) amortised, plus
// O(names of a block) probes per block, which is 1 but for aliased blocks.
func (ix *Index) ApplyStored(id HolderID, ev StoredBlocks) error {
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
	ix.insertLocked(b, b.scratch, m, ev.EngineHashes)
	b.mu.Unlock()
	ix.enforceBudget()
	return nil
}

// parentLocked finds the usher hash of the block engine hash h names, preferring medium m: a
// block offloaded to CPU continues the same chain as its GPU copy.
func (b *backend) parentLocked(h uint64, m Medium) (BlockHash, bool) {
	if e := b.tiers[m].eng; e != nil {
		if u, ok := e.lookup(h); ok {
			return u, true
		}
	}
	for o := range NumMedia {
		if e := b.tiers[o].eng; o != m && e != nil {
			if u, ok := e.lookup(h); ok {
				return u, true
			}
		}
	}
	return 0, false
}

// ApplyRemovedFrom applies a BlockRemoved event for blocks in the named medium (see
// ParseMedium) from backend id: each engine hash is forgotten, and a block that no other
// engine hash names any more leaves the medium. Only that medium is touched: a copy of the
// block in another medium stays, with its own name. Unknown hashes are ignored (the engine may
// evict blocks stored before the subscription began, or ones the index has already evicted).
// Cost O(len(engineHashes)) amortised. It returns ErrUnknownBackend when id is not registered.
func (ix *Index) ApplyRemovedFrom(id HolderID, medium string, engineHashes []uint64) error {
	m := ParseMedium(medium)
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	t := &b.tiers[m]
	b.scratch = b.scratch[:0]
	if e := t.eng; e != nil {
		bytes, names := e.bytes, e.names
		for _, eh := range engineHashes {
			if u, last, ok := e.remove(eh); ok && last {
				b.scratch = append(b.scratch, u)
			}
		}
		ix.accountLocked(t, bytes, names)
	}
	ix.removeLocked(b, b.scratch, m)
	b.mu.Unlock()
	return nil
}

// ApplyCleared applies an AllBlocksCleared event, or any other news that backend id holds
// nothing any more (an engine that restarted, in either mode): it removes every block of the
// backend, in every medium, and every engine hash it remembers, keeping it registered (and its
// CLOCK rings and the tables of its engine maps allocated, for the blocks to come). Cost O(the
// backend's blocks and the size its engine maps have reached), independent of the index's
// size. It returns ErrUnknownBackend if id is not registered.
func (ix *Index) ApplyCleared(id HolderID) error {
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	ix.clearLocked(b, false)
	b.mu.Unlock()
	return nil
}
