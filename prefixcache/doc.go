// Package prefixcache hashes prompts into chained block hashes and keeps a lock-striped index
// from block hash to the backends (model servers) holding that block in their KV cache, so a
// router can ask, for a new prompt, how many of its leading blocks each backend already holds.
//
// # The model
//
// A gateway hashes each prompt once (HashTokens, or HashBytes without a tokenizer), asks the
// Index for the matched prefix per backend (Match), routes, and records the choice (Insert). Or
// it feeds the index the engines' own KV events (ApplyStored, ApplyRemovedFrom, ApplyCleared; the
// prefixcache/kvevents package decodes them) and the index is exact rather than a guess. Blocks
// in CPU memory or a shared store are indexed apart from GPU blocks (Medium), so MatchMedium
// can report them and placement can charge their transfer. The package knows nothing about
// HTTP, flows or routing policy.
//
// # Hashing
//
// A prompt is cut into blocks of a fixed number of tokens (16 in vLLM by default). Block i's
// hash covers the whole prefix up to and including block i:
//
//	h₋₁ = Seed(model, lora, salt)
//	hᵢ  = combine(hᵢ₋₁, xxhash64(little-endian bytes of block i's token ids))
//
// so two prompts share hᵢ exactly when they share the seed and their first i+1 blocks (barring
// a 64-bit collision). The seed folds in the model, the LoRA adapter and a cache salt with
// length prefixes, so different models, adapters or tenants never share entries. Only full
// blocks are hashed, as engines cache only full blocks; HashBytes also drops the trailing
// partial block, whose hash would change with every byte appended.
//
// combine is the XOR of two independent 64×64→128-bit multiplies of (parent, block) under
// different keys, each folded to 64 bits (wyhash's "mum"), where a naive chain calls xxhash a
// second time over parent ‖ block. HashTokens first hashes every block's content (independent
// calls the CPU overlaps), then runs the chain, whose critical path is one multiply per block.
// On little-endian platforms the token ids are hashed in place, their memory already being
// their little-endian encoding; elsewhere, or with the purego build tag, they are encoded
// through a stack buffer. Known-answer tests pin the values across platforms.
//
// # Index and striping
//
// Backends are interned to dense ids (a removed backend's id is reused by the next one added).
// The holders of a block are then a bitset, and Match is a running AND along the chain that
// stops at the first block nobody still matching holds; each backend's matched prefix is where
// its bit dropped out. Ids are grouped in words of 64: with up to 64 backends a block is one
// table entry and Match does one probe per block; beyond that (up to MaxBackends) a block has
// one entry per word with holders, and Match probes only the words in which some backend is
// still matching. All of a block's entries sit in one shard, so a wide Match mixes a block's
// key once and checks one shard's sequence counter once.
//
// Entries live in a power-of-two number of shards chosen by the low bits of the mixed key.
// Each shard is an open-addressing table with linear probing and backward-shift deletion (no
// tombstones), whose slot is three plain integers (key, holders, and an aux word for eviction):
// one pointer-free allocation the garbage collector never scans, a probe touching one or two
// cache lines. A table grows by half when it would pass 3/4 full.
//
// Each shard is guarded by a sequence counter used as a seqlock. Match never takes a lock and
// writes nothing a writer or another reader needs: it reads the counter, probes, and re-reads
// the counter, retrying if a writer was active. Writers move the counter from even to odd with
// a compare-and-swap (their mutual exclusion), update the table with atomic stores, and make it
// even again; a table that must grow is rebuilt aside and published atomically. A reader thus
// sees each block's holder set atomically but not the whole chain at one instant: a block
// inserted or evicted during a Match may or may not be seen, which routing tolerates. A writer
// batches its updates: it computes the keys of up to 128 blocks, touches each home slot without
// a lock so the cache misses overlap, sorts the batch by shard, and takes each shard once.
//
// # Eviction
//
// Each medium of each backend has a capacity in blocks and its own CLOCK: a FIFO ring of the
// blocks it holds there, whose front is the hand, and a reference bit per (block, backend,
// medium) pair. The GPU's capacity is the one AddBackend and SetCapacity set (for vLLM,
// num_gpu_blocks); CPU and Remote take theirs from SetMediumCapacity or Options, and by default
// are bounded only by the byte budget. Insert sets the reference bit of a block the backend
// already holds and queues new blocks deepest first, so that eviction takes a chain from its
// tail, as vLLM's own LRU does, and a prefix outlives its extensions. A medium over capacity
// advances its hand: a referenced pair loses its bit and goes to the back, an unreferenced one
// is evicted. Eviction state is per (backend, medium) because capacity is, so traffic in one
// medium never evicts another's blocks.
//
// Remove (and the engine's BlockRemoved) does not search the ring: the pair is marked stale and
// dropped when the hand reaches it, and a ring whose stale pairs outnumber its live ones is
// compacted in one pass. ApplyCleared costs time proportional to that backend's blocks.
//
// Above the capacities sits a global byte budget, Options.MaxBytes. The index charges
// PairBytes per (block, backend, medium) pair and EngineHashBytes per engine hash the exact mode
// remembers; past MaxBytes, the (backend, medium) charged the most loses its CLOCK victims,
// CPU and Remote media before any GPU medium, until the index is back within budget.
// Stats.Bytes reports what is actually allocated; TestBytesPerBlock and TestTieredExactMode
// check the charges against the live heap and, with -v, print the bytes per block.
//
// # Exact mode
//
// Engines publish the blocks they store and evict keyed by their own hashes, which a router
// cannot reproduce (vLLM seeds them per process). ApplyStored therefore recomputes usher's hash
// from the event's token ids, continuing the chain from the parent's usher hash, and records
// the engine hash as the block's name; ApplyRemovedFrom finds blocks by their names. A
// continuation whose parent the index does not hold fails with ErrUnknownParent.
//
// Names live in one map per (backend, medium) and last exactly as long as their block stays in
// that medium: the engine's removal forgets a name, and a block that leaves otherwise (by the
// byte budget, or cleared) takes its names with it. So a continuation of a block the index holds
// always finds its parent, a removal always finds its block, and the maps are bounded by the
// same capacities and budget as the blocks. A block may have several names, when engine hashes
// differ in what usher does not hash (vLLM's cache salt, multimodal inputs); it leaves on a
// removal only when its last name is removed. A name counts the copies of its block the engine
// reported stored and not yet removed (vLLM keeps two when two requests compute one block at
// once, and reports both), and leaves with the last. Each map is pointer-free, with a reverse
// entry per name so a leaving block finds its names without a search.
//
// A gateway may also learn at pick time (Insert) while it follows an engine's events, so an
// index in exact mode holds two kinds of block: those an engine reported (named) and those
// only predicted. A prediction never evicts, retracts or hides what an engine reported: the
// engine evicts its own blocks and says so, so the capacity bounds named blocks only when they
// alone exceed it, and Remove, which retracts a prediction that failed, leaves them in place.
// Predicted blocks have an allowance of their own, the room the named ones leave and at least
// a quarter of the capacity (a warm engine's cache is always full, and a prediction must last
// until the engine's events confirm it); past it they evict each other, the CLOCK hand
// passing over named blocks and leaving their reference bits as they were. Were
// predictions allowed to push engine blocks out, as they were before, the next BlockStored
// that continued such a block would find no parent and be lost: on the embedded demo fleet
// under the README's load, 109–151 events of about 3,000 in 20 s.
//
// # Gateway replicas
//
// Options.Feed hears every chain an index learns through Insert or forgets through Remove, by
// backend name, after the change and outside the locks; a replication layer (package replica)
// buffers it, sends it on, and other replicas apply it as Insert and Remove do but without
// reporting it to their own Feed, so nothing echoes. Exact mode's events are not fed: every
// replica can subscribe to the engines itself.
//
// # Complexity
//
// HashTokens is O(tokens) and allocates nothing when dst has room. Match is O(blocks matched)
// probes with at most 64 backends, O(blocks × words still matching) beyond. Insert and Remove
// are O(blocks) amortised, including eviction. Current figures are in bench/BENCHMARKS.md.
//
// # Alternatives not taken
//
//   - Go's map per shard: a cache miss or more per lookup and a table the collector scans.
//   - Tombstone deletion: inserts of new blocks (always misses) probe past the tombstones, and
//     the insert-one-evict-one churn of a full backend leaves tables slow or half empty.
//   - Buckets of eight keys with overflow counts (Folly's F14): a probe reads more lines and a
//     hit costs eight compares, where linear probing finds most keys in their home slot.
//   - A radix tree per backend (SGLang's router): pointer chasing per block and per backend,
//     where a bitset answers for 64 backends in one load.
//   - An RWMutex per shard: its read side is an atomic read-modify-write on a shared cache line
//     per probe, which costs more than the probe itself and contends across cores.
//   - Exact LRU: a list node per pair and a list update under a lock on every touch; CLOCK sets
//     one bit. CLOCK may evict a block LRU would keep by at most one sweep of the ring, well
//     inside the error of an approximate index, and exact mode's removals correct it.
//   - One ring for all media: CPU-tier traffic would evict GPU blocks the engine still holds.
//   - A Go map of engine hashes per backend, reset when large: after a reset continuations of
//     hot prefixes fail and removals are lost, and its memory is outside the byte budget.
//
// # Concurrency
//
// Every function and method of the package is safe for concurrent use. Match and MatchMedium
// never block. Writers to one backend, in any medium, are serialised by a per-backend lock
// (which also guards its engine-hash names); writers to different backends meet only on shards,
// each held for a batch of entry updates. Options, Stats, BackendStats, MediumStats,
// StoredBlocks and the unit types are plain values with no synchronisation of their own.
package prefixcache
