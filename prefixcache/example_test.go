package prefixcache_test

import (
	"fmt"

	"github.com/usher-llm/usher/prefixcache"
)

// Hash a prompt once, match it against the index to see how much each backend already holds,
// and record the routing decision.
func Example() {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		panic(err)
	}
	a, _ := ix.AddBackend("vllm-a", 1000)
	b, _ := ix.AddBackend("vllm-b", 1000)

	seed := prefixcache.Seed("qwen3-32b", "", "")
	system := make([]uint32, 64) // a shared 64-token system prompt: 4 blocks of 16
	for i := range system {
		system[i] = uint32(1000 + i)
	}
	turn1 := append(append([]uint32{}, system...), make([]uint32, 32)...) // + 2 more blocks

	// Backend a served the first turn; backend b has only seen the system prompt.
	_ = ix.Insert(a, prefixcache.HashTokens(nil, seed, turn1, 16))
	_ = ix.Insert(b, prefixcache.HashTokens(nil, seed, system, 16))

	// The second turn extends the first by 40 tokens: 2 more full blocks and 8 tokens left over.
	turn2 := append(append([]uint32{}, turn1...), make([]uint32, 40)...)
	chain := prefixcache.HashTokens(nil, seed, turn2, 16)
	matched := ix.Match(nil, chain)
	fmt.Printf("blocks in prompt: %d\n", len(chain))
	fmt.Printf("%s holds %d, %s holds %d\n", ix.Name(a), matched[a], ix.Name(b), matched[b])

	// Route to a, then record what a now holds.
	_ = ix.Insert(a, chain)
	fmt.Println("after insert:", ix.Match(matched, chain))
	// Output:
	// blocks in prompt: 8
	// vllm-a holds 6, vllm-b holds 4
	// after insert: [8 4]
}

// The exact mode: apply an engine's KV events, keyed by the engine's own block hashes, and
// match requests hashed by the gateway against them.
func ExampleIndex_ApplyStored() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	pod, _ := ix.AddBackend("vllm-0", 0)
	seed := prefixcache.Seed("qwen3-32b", "", "")

	prompt := make([]uint32, 3*16)
	for i := range prompt {
		prompt[i] = uint32(7 * i)
	}
	// The engine stored the first two blocks, then the third, naming its parent by the
	// engine's hash of block 2.
	_ = ix.ApplyStored(pod, prefixcache.StoredBlocks{
		EngineHashes: []uint64{0xa1, 0xa2}, Tokens: prompt[:32], BlockSize: 16, Seed: seed,
	})
	_ = ix.ApplyStored(pod, prefixcache.StoredBlocks{
		EngineHashes: []uint64{0xa3}, Parent: 0xa2, HasParent: true, Tokens: prompt[32:], BlockSize: 16,
	})
	chain := prefixcache.HashTokens(nil, seed, prompt, 16)
	fmt.Println("matched:", ix.Match(nil, chain)[pod])

	// The engine evicted block 2 (and with it, for matching, everything after it).
	_ = ix.ApplyRemovedFrom(pod, "", []uint64{0xa2})
	fmt.Println("after eviction:", ix.Match(nil, chain)[pod])

	st := ix.Stats()
	fmt.Println("blocks held:", st.Blocks)
	// Output:
	// matched: 3
	// after eviction: 1
	// blocks held: 2
}

// Each backend holds at most its capacity in blocks (a vLLM server's num_gpu_blocks): past it,
// the index evicts that backend's least recently used blocks (CLOCK), exactly as the engine
// would have to. Clearing a backend costs only its own blocks.
func ExampleIndex() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	small, _ := ix.AddBackend("small-gpu", 4) // room for 4 blocks
	big, _ := ix.AddBackend("big-gpu", 1000)
	seed := prefixcache.Seed("qwen3-32b", "", "")

	chainOf := func(first uint32) []prefixcache.BlockHash {
		tokens := make([]uint32, 3*16)
		for i := range tokens {
			tokens[i] = first + uint32(i)
		}
		return prefixcache.HashTokens(nil, seed, tokens, 16)
	}
	p1, p2 := chainOf(1), chainOf(100000) // two unrelated 3-block prompts
	for _, id := range []prefixcache.HolderID{small, big} {
		_ = ix.Insert(id, p1)
		_ = ix.Insert(id, p2) // small-gpu must evict 2 of p1's blocks to make room
	}
	fmt.Println("p1 matched:", ix.Match(nil, p1))
	fmt.Println("p2 matched:", ix.Match(nil, p2))
	for _, b := range ix.Stats().Backends {
		fmt.Printf("%s: %d blocks, %d evicted\n", b.Name, b.Blocks, b.Evictions)
	}

	_ = ix.ApplyCleared(big)
	fmt.Println("after clearing big-gpu:", ix.Match(nil, p2))
	// Output:
	// p1 matched: [1 3]
	// p2 matched: [3 3]
	// small-gpu: 4 blocks, 2 evicted
	// big-gpu: 6 blocks, 0 evicted
	// after clearing big-gpu: [3 0]
}

// Each medium of a backend has its own capacity and CLOCK: in exact mode, blocks an engine
// offloads to CPU memory never push its GPU blocks out, and a block removed from one medium
// stays in the other.
func ExampleIndex_SetMediumCapacity() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	pod, _ := ix.AddBackend("vllm-0", 4)               // num_gpu_blocks: 4
	_ = ix.SetMediumCapacity(pod, prefixcache.CPU, 16) // 16 blocks of CPU offload
	seed := prefixcache.Seed("qwen3-32b", "", "")
	prompt := make([]uint32, 3*16)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	chain := prefixcache.HashTokens(nil, seed, prompt, 16)
	match := func() {
		fmt.Println("GPU:", ix.MatchMedium(nil, chain, prefixcache.GPU)[pod], "CPU:", ix.MatchMedium(nil, chain, prefixcache.CPU)[pod])
	}

	// The engine computes the prompt's three blocks on the GPU and offloads copies to the CPU.
	for _, medium := range []string{"GPU", "CPU"} {
		_ = ix.ApplyStored(pod, prefixcache.StoredBlocks{
			EngineHashes: []uint64{1, 2, 3}, Tokens: prompt, BlockSize: 16, Seed: seed, Medium: medium,
		})
	}
	match()
	// Then it offloads 20 blocks of other prompts: the CPU evicts its oldest blocks, the GPU
	// keeps its own.
	for i := range 20 {
		other := make([]uint32, 16)
		other[0] = uint32(1000 + i)
		_ = ix.ApplyStored(pod, prefixcache.StoredBlocks{
			EngineHashes: []uint64{uint64(100 + i)}, Tokens: other, BlockSize: 16, Seed: seed, Medium: "CPU",
		})
	}
	match()
	// The GPU evicts the prompt's last block.
	_ = ix.ApplyRemovedFrom(pod, "GPU", []uint64{3})
	match()
	for m, ms := range ix.Stats().Backends[0].Media[:prefixcache.CPU+1] {
		fmt.Printf("%v: %d of %d blocks, %d evicted, %d engine hashes\n",
			prefixcache.Medium(m), ms.Blocks, ms.Capacity, ms.Evictions, ms.EngineHashes)
	}
	// Output:
	// GPU: 3 CPU: 3
	// GPU: 3 CPU: 0
	// GPU: 2 CPU: 0
	// GPU: 2 of 4 blocks, 0 evicted, 2 engine hashes
	// CPU: 16 of 16 blocks, 7 evicted, 16 engine hashes
}
