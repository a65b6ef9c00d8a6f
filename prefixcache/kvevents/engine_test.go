package kvevents

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// engine is a toy model server's prefix cache: the ground truth the index
// must end up mirroring. Its block hashes live in the engine's own key
// space (salted per process, as vLLM's NONE_HASH is), unrelated to usher's.
// Like vLLM's block pool, it may hold several copies of a block: a prompt
// whose cached prefix stops at an evicted block computes everything after it
// again, also blocks it still holds, and reports each copy stored and each
// removed.
type engine struct {
	blockSize int
	salt      uint64
	held      map[uint64]int // engine hashes cached now, and their copies
	rng       *rand.Rand
}

func newEngine(seed uint64, blockSize int) *engine {
	return &engine{blockSize: blockSize, salt: seed*0x9E3779B97F4A7C15 + 1, held: map[uint64]int{}, rng: rand.New(rand.NewPCG(seed, 7))}
}

// chain returns the engine hashes of the full blocks of tokens.
func (e *engine) chain(lora string, tokens []uint32) []uint64 {
	var out []uint64
	parent := e.salt ^ xxhash.Sum64String(lora)
	buf := make([]byte, 8+4*e.blockSize)
	for i := 0; i+e.blockSize <= len(tokens); i += e.blockSize {
		binary.LittleEndian.PutUint64(buf, parent)
		for j, t := range tokens[i : i+e.blockSize] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], t)
		}
		parent = xxhash.Sum64(buf)
		out = append(out, parent)
	}
	return out
}

// store caches the blocks of tokens and returns the BlockStored event for
// the blocks it did not hold (from the first missing one), or false.
func (e *engine) store(lora string, tokens []uint32) (BlockEvent, bool) {
	ch := e.chain(lora, tokens)
	first := 0
	for first < len(ch) && e.held[ch[first]] > 0 {
		first++
	}
	if first == len(ch) {
		return BlockEvent{}, false
	}
	ev := BlockEvent{Kind: BlockStored, Hashes: ch[first:], Tokens: tokens[first*e.blockSize : len(ch)*e.blockSize],
		BlockSize: e.blockSize, LoRAName: lora, Medium: "GPU"}
	if lora != "" {
		ev.LoRAID = 1
	}
	if first > 0 {
		ev.Parent, ev.HasParent = ch[first-1], true
	}
	for _, h := range ch[first:] {
		e.held[h]++
	}
	return ev, true
}

// evict drops n random cached copies and returns the BlockRemoved event:
// one hash per copy, as vLLM reports them.
func (e *engine) evict(n int) (BlockEvent, bool) {
	var victims []uint64
	for h, copies := range e.held { // sorted below, for reproducible victims
		for range copies {
			victims = append(victims, h)
		}
	}
	if len(victims) == 0 {
		return BlockEvent{}, false
	}
	slices.Sort(victims)
	e.rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	victims = victims[:min(n, len(victims))]
	for _, h := range victims {
		if e.held[h]--; e.held[h] == 0 {
			delete(e.held, h)
		}
	}
	return BlockEvent{Kind: BlockRemoved, Hashes: victims, Medium: "GPU"}, true
}

func (e *engine) clear() BlockEvent {
	clear(e.held)
	return BlockEvent{Kind: AllBlocksCleared}
}

// matched is the number of leading blocks of tokens the engine holds.
func (e *engine) matched(lora string, tokens []uint32) int {
	n := 0
	for _, h := range e.chain(lora, tokens) {
		if e.held[h] == 0 {
			break
		}
		n++
	}
	return n
}

// prompts returns n prompts of up to maxBlocks blocks sharing prefixes the
// way conversations do: each extends or branches from an earlier one.
func prompts(rng *rand.Rand, n, blockSize, maxBlocks int) [][]uint32 {
	var out [][]uint32
	for range n {
		var p []uint32
		if len(out) > 0 && rng.IntN(3) > 0 {
			base := out[rng.IntN(len(out))]
			keep := rng.IntN(len(base)/blockSize+1) * blockSize
			p = append(p, base[:keep]...)
		}
		more := (1 + rng.IntN(maxBlocks)) * blockSize
		for range more {
			p = append(p, uint32(rng.IntN(50000)))
		}
		if len(p) > maxBlocks*blockSize {
			p = p[:maxBlocks*blockSize]
		}
		out = append(out, p)
	}
	return out
}
