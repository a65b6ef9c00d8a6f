package prefixcache

import (
	"math/rand/v2"
	"slices"
)

// toyEngine is a model server's prefix cache with a GPU tier and, optionally, a CPU offload
// tier, as vLLM runs with CPU offloading: the ground truth that the exact mode must mirror.
// Each tier is an LRU over full blocks with a fixed capacity whose eviction takes a chain
// from its tail (the oldest blocks first, the deepest first among equally old ones), so each
// tier's contents stay closed under prefixes. Every block the engine serves is made resident
// on the GPU (computed, or loaded back from the CPU) and, with offloading, copied to the CPU
// tier. Its block hashes are its own, chained from a seed unrelated to usher's, as a real
// engine's are; a block keeps its engine hash in both tiers, as vLLM's offloaded copies do.
type toyEngine struct {
	blockSize int
	seed      BlockHash // usher's seed for the model: what the events carry
	salt      BlockHash // the engine's own chain seed
	capacity  [2]int    // by Medium: GPU, CPU (0: no offloading)
	held      [2]map[uint64]toyBlock
	now       int64
}

type toyBlock struct {
	stamp int64 // last use
	depth int   // position in its chain
}

// toyEvent is one KV event: a store, a removal from one medium, or a clear.
type toyEvent struct {
	stored  *StoredBlocks
	medium  string
	removed []uint64
	clear   bool
}

var toyMediumName = [2]string{"GPU", "CPU"}

func newToyEngine(salt uint64, blockSize, gpuBlocks, cpuBlocks int) *toyEngine {
	e := &toyEngine{blockSize: blockSize, seed: Seed("toy-model", "", ""), salt: BlockHash(salt*0x9e3779b97f4a7c15 + 1),
		capacity: [2]int{gpuBlocks, cpuBlocks}}
	for m := range e.held {
		e.held[m] = map[uint64]toyBlock{}
	}
	return e
}

// engineChain returns the engine's hashes of the full blocks of tokens.
func (e *toyEngine) engineChain(tokens []uint32) []uint64 {
	ch := HashTokens(nil, e.salt, tokens, e.blockSize)
	out := make([]uint64, len(ch))
	for i, h := range ch {
		out[i] = uint64(h) ^ 0x5bd1e9955bd1e995 // anything but usher's hashes
	}
	return out
}

// serve runs a request for tokens and appends the events the engine publishes.
func (e *toyEngine) serve(tokens []uint32, out []toyEvent) []toyEvent {
	e.now++
	eh := e.engineChain(tokens)
	out = e.admit(GPU, eh, tokens, out)
	if e.capacity[CPU] > 0 {
		out = e.admit(CPU, eh, tokens, out)
	}
	return out
}

// admit makes medium m hold the chain eh (up to its capacity): it refreshes the prefix m
// holds, evicts the least recently used blocks to make room for the rest, and stores the rest.
func (e *toyEngine) admit(m Medium, eh []uint64, tokens []uint32, out []toyEvent) []toyEvent {
	held := e.held[m]
	n := min(len(eh), e.capacity[m])
	hit := 0
	for hit < n {
		if _, ok := held[eh[hit]]; !ok {
			break
		}
		hit++
	}
	for i := range hit {
		held[eh[i]] = toyBlock{e.now, i}
	}
	if hit == n {
		return out
	}
	if need := len(held) + n - hit - e.capacity[m]; need > 0 {
		victims := e.victims(m, need)
		for _, h := range victims {
			delete(held, h)
		}
		out = append(out, toyEvent{medium: toyMediumName[m], removed: victims})
	}
	bs := e.blockSize
	ev := &StoredBlocks{EngineHashes: slices.Clone(eh[hit:n]), Tokens: tokens[hit*bs : n*bs], BlockSize: bs, Seed: e.seed,
		Medium: toyMediumName[m]}
	if hit > 0 {
		ev.Parent, ev.HasParent = eh[hit-1], true
	}
	for i := hit; i < n; i++ {
		held[eh[i]] = toyBlock{e.now, i}
	}
	return append(out, toyEvent{stored: ev})
}

// victims returns the need blocks of medium m that LRU evicts first.
func (e *toyEngine) victims(m Medium, need int) []uint64 {
	all := make([]uint64, 0, len(e.held[m]))
	for h := range e.held[m] {
		all = append(all, h)
	}
	held := e.held[m]
	slices.SortFunc(all, func(a, b uint64) int {
		x, y := held[a], held[b]
		switch {
		case x.stamp != y.stamp:
			return int(x.stamp - y.stamp)
		case x.depth != y.depth:
			return y.depth - x.depth
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	return all[:need]
}

// clearAll drops every block (vLLM's reset_prefix_cache) and returns the event.
func (e *toyEngine) clearAll() toyEvent {
	for m := range e.held {
		clear(e.held[m])
	}
	return toyEvent{clear: true}
}

// matched is the number of leading blocks of tokens medium m holds.
func (e *toyEngine) matched(m Medium, tokens []uint32) int {
	n := 0
	for _, h := range e.engineChain(tokens) {
		if _, ok := e.held[m][h]; !ok {
			break
		}
		n++
	}
	return n
}

// apply applies ev to backend id of ix.
func (ev toyEvent) apply(ix *Index, id HolderID) error {
	switch {
	case ev.clear:
		return ix.ApplyCleared(id)
	case ev.stored != nil:
		return ix.ApplyStored(id, *ev.stored)
	}
	return ix.ApplyRemovedFrom(id, ev.medium, ev.removed)
}

// blocks is the number of block hashes ev carries.
func (ev toyEvent) blocks() int {
	if ev.stored != nil {
		return len(ev.stored.EngineHashes)
	}
	return len(ev.removed)
}

// toyPrompts returns n prompts of 1 to maxBlocks blocks that share prefixes the way
// conversations do: most extend or branch from an earlier prompt, and all of them start with
// one of a few system prompts of sysBlocks blocks.
func toyPrompts(r *rand.Rand, n, blockSize, maxBlocks, sysBlocks int) [][]uint32 {
	systems := make([][]uint32, 3)
	for i := range systems {
		systems[i] = make([]uint32, sysBlocks*blockSize)
		for j := range systems[i] {
			systems[i][j] = uint32(900000 + i*10000 + j)
		}
	}
	var out [][]uint32
	for range n {
		var p []uint32
		if len(out) > 0 && r.IntN(3) > 0 {
			base := out[r.IntN(len(out))]
			keep := max(sysBlocks, r.IntN(len(base)/blockSize+1)) * blockSize
			p = append(p, base[:min(keep, len(base))]...)
		} else {
			p = append(p, systems[r.IntN(len(systems))]...)
		}
		for range (1 + r.IntN(maxBlocks)) * blockSize {
			p = append(p, uint32(r.IntN(50000)))
		}
		out = append(out, p[:min(len(p), maxBlocks*blockSize)])
	}
	return out
}
