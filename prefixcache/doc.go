// Package prefixcache hashes prompts into chained block hashes and keeps a lock-striped index
// from block hash to the backends (model servers) holding that block in their KV cache, so a
// router can ask, for a new prompt, how many of its leading blocks each backend already holds.
//
// A gateway hashes each prompt once (HashTokens, or HashBytes without a tokenizer), asks the
// Index for the matched prefix per backend (Match), routes, and then records the choice
// (Insert). Or it feeds the index the engines' own KV events (ApplyStored, ApplyRemoved,
// ApplyCleared; the prefixcache/kvevents package decodes them) and the index is exact rather
// than a guess. The package knows nothing about HTTP, flows or routing policy.
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
// a 64-bit collision, about one in 10¹⁹ per pair). The seed folds in the model, the LoRA
// adapter and a cache salt with length prefixes, so different models, adapters or tenants never
// share entries. Only full blocks are hashed, as engines cache only full blocks; byte mode
// (HashBytes) also drops the trailing partial block, because its hash would change with every
// byte appended and no longer prompt could ever match it.
//
// combine is the XOR of two independent 64×64→128-bit multiplies of (parent, block) under
// different keys, each folded to 64 bits (the "mum" of wyhash): a few cycles, where llm-d
// calls xxhash a second time over parent ‖ block. That second call, together with encoding
// each block's tokens into a fresh byte slice, is what makes a naive chained hash 2.5–3×
// slower than xxhash over the same bytes. HashTokens first hashes every block's content (the
// calls are independent, so they overlap in the CPU like the plain xxhash loop), then runs the
// chain, whose critical path is one multiply per block. The token ids are hashed in
// place: on little-endian platforms a []uint32 already is its little-endian encoding, so
// hash_le.go passes xxhash the same memory reinterpreted as bytes (unsafe, behind a build tag);
// elsewhere, or with the purego tag, hash_portable.go encodes through a stack buffer. A test
// checks that both agree, and known-answer tests pin the values across platforms.
//
// # Index and striping
//
// Backends are interned to dense ids (0, 1, 2, ...; a removed backend's id is reused by the
// next one added). The holders of a block are then a bitset, and Match is a running AND along
// the chain that stops at the first block nobody still matching holds; each backend's matched
// prefix is the position where its bit dropped out. Ids are grouped in words of 64: with up to
// 64 backends a block is one table entry and Match does one probe per block; beyond that
// (up to 4,096 backends) a block has one entry per word that has holders, and Match probes
// only the words in which some backend is still matching. A block's entries for all its words
// sit in one shard (the word index changes only the key's high bits), so a wide Match mixes a
// block's key once and checks one shard's sequence counter once for all of its words.
//
// The entries live in a power-of-two number of shards chosen by the low bits of the (mixed)
// entry key. Each shard is an open-addressing table with linear probing and backward-shift
// deletion (no tombstones), whose slot is three plain integers: key, holders, and an aux word
// (below). A table is one pointer-free allocation the garbage collector never scans; probing it
// touches one or two cache lines, where Go's map costs a cache miss or more per lookup
// (2.0–3.0 µs for 128 lookups in 10⁶ entries against about 0.5 µs for such a table). A table
// grows by half when it would pass 3/4 full; its size need not be a power of two, since a key's
// home slot is the high word of key·size. Tombstone deletion was tried and rejected: deleting
// becomes a single store, but every insert of a new block (a guaranteed miss) then probes past
// the tombstones, and under the insert-one-evict-one churn of a full backend the tables ended
// up either slow to probe or half empty. A radix tree per backend (SGLang's router) was
// rejected too: it chases pointers per block and per backend, where a bitset answers for 64
// backends in one load.
//
// Each shard is guarded by a sequence counter used as a seqlock. Match never takes a lock and
// never writes shared memory: it reads the counter, probes, and re-reads the counter, retrying
// the probe if a writer was active. Writers move the counter from even to odd with a
// compare-and-swap (which is also their mutual exclusion), update the table with atomic
// stores, and make it even again; a table that must grow is rebuilt aside and published
// atomically. A reader thus sees each block's holder set atomically but not the whole chain at
// one instant: a block inserted or evicted during a Match may or may not be seen, which
// routing tolerates. An RWMutex per shard was the alternative: its read side is an atomic
// read-modify-write on a shared cache line per probe (about 10 ns each on this class of
// machine, 1.3 µs per 128-block Match before any probing, and worse when cores contend), most
// of the 2 µs budget. A writer batches its updates: it computes the entry keys of up to 128 blocks,
// touches each home slot without any lock so that the cache misses of the batch overlap,
// sorts the batch by shard, and takes each shard once for all of its blocks.
//
// # Eviction
//
// Each backend has a capacity in blocks (for vLLM, num_gpu_blocks) and its own CLOCK:
// a FIFO ring of the blocks it holds, whose front is the clock hand, and a reference bit per
// (block, backend) pair kept in the entry's aux word. Insert sets the reference bit of a block
// the backend already holds and queues new blocks at the back, deepest block of the chain
// first, so that eviction takes a chain from its tail as vLLM's own LRU does and a prefix
// outlives its extensions. When a backend exceeds its capacity the hand advances: a referenced
// pair loses its bit and goes to the back (its second chance), an unreferenced one is evicted.
// Eviction state is per backend rather than per shard, because capacity is per backend.
//
// CLOCK instead of exact LRU: exact LRU needs a doubly-linked list node per (block, backend)
// pair (16–24 bytes) and a list update, under the backend's lock, on every touch; CLOCK needs
// one bit set in place. Its error: among blocks untouched since the hand last passed, it
// evicts in insertion order rather than by last use, and a block touched once since the hand
// passed survives one more round whatever its age, so CLOCK may evict a block that LRU would
// keep while keeping one LRU would evict, by at most one sweep of the ring. For a prefix
// index, whose entries are anyway a guess at what the engine still holds, that is well inside
// the noise; in exact mode the engine's own removal events correct it.
//
// Remove (and the engine's BlockRemoved) does not search the ring: the pair is marked stale
// in its aux word and dropped when the hand reaches it, and a ring whose stale pairs
// outnumber its live ones is compacted in one pass, so a ring never holds much more than
// twice its live pairs. ClearBackend walks only that backend's ring: its cost is
// proportional to the backend's blocks, not to the index.
//
// Above the per-backend capacities sits a global byte budget, Options.MaxBytes: the index
// holds at most MaxBytes/PairBytes (block, backend) pairs, and when it is over, the backend
// holding the most pairs loses its CLOCK victims until it is back within budget.
//
// # Memory layout
//
// A (block, backend) pair costs its share of a 24-byte table slot (one slot serves up to 64
// backends holding the same block) at a load factor kept between 1/2 and 3/4, plus an 8-byte
// ring slot in its backend's ring. For blocks held by one backend that is 40–56 bytes; the
// budget charges PairBytes = 64 per pair, and TestBytesPerBlock measures the live heap after
// inserting 10⁶ blocks (about 45–50 bytes per block). For comparison, llm-d's approximate
// index uses 210–538 bytes per (server, block) and its precise index about 1,130.
//
// # Exact mode
//
// Engines publish the blocks they store and evict, keyed by their own hashes, which a router
// cannot reproduce (vLLM seeds them with a per-process random value). ApplyStored therefore
// recomputes usher's hash from the event's token ids, continuing the chain from the parent's
// usher hash, found through a per-backend map from engine hash to usher hash; ApplyRemoved
// looks engine hashes up in the same map. Blocks in CPU memory or a shared store are indexed
// apart from GPU blocks (Medium), so that MatchMedium can report them and placement can charge
// their transfer. The map is bounded by twice the backend's capacity; when it outgrows that it
// is reset, and an event whose parent is no longer known fails with ErrUnknownParent until the
// engine starts a new chain.
//
// # Concurrency
//
// Every function and method of the package is safe for concurrent use. Match and MatchMedium
// never block; writers to one backend are serialised by that backend's mutex (the lock order is
// backend, then shard, never two of either at once), and writers to different backends meet
// only on shards, each held for a batch of entry updates. Options, Stats, BackendStats,
// StoredBlocks and the unit types are plain values with no synchronisation of their own.
package prefixcache
