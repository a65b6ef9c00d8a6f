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
// touches one or two cache lines, where Go's map costs a cache miss or more per lookup, some
// four to six times the table's for 128 lookups in 10⁶ entries. A table
// grows by half when it would pass 3/4 full; its size need not be a power of two, since a key's
// home slot is the high word of key·size. Tombstone deletion was tried and rejected: deleting
// becomes a single store, but every insert of a new block (a guaranteed miss) then probes past
// the tombstones, and under the insert-one-evict-one churn of a full backend the tables ended
// up either slow to probe or half empty. A deletion stores only what changes: every store a
// lock-free reader can see is atomic (a locked instruction on amd64), so a moved entry's hold
// and aux words are stored only where they differ from its new slot's, and a slot left empty
// only loses its key. Buckets of eight keys with overflow counts (as in Folly's F14), whose
// deletions move nothing, were tried and rejected: a probe then reads a line of keys and a line
// of hold words, a writer a line of aux words too, and a hit costs eight compares where linear
// probing finds most keys in their home slot, so both Match and Insert were slower. A radix
// tree per backend (SGLang's router) was rejected too: it chases pointers per block and per
// backend, where a bitset answers for 64 backends in one load.
//
// Each shard is guarded by a sequence counter used as a seqlock. Match never takes a lock and
// writes nothing a writer or another reader needs (its hit counters sit on lines of their
// own): it reads the counter, probes, and re-reads the counter, retrying
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
// Each medium of each backend has a capacity in blocks and its own CLOCK: a FIFO ring of the
// blocks it holds there, whose front is the clock hand, and a reference bit per (block,
// backend, medium) pair kept in the entry's aux word. The GPU's capacity is the one AddBackend
// and SetCapacity set (for vLLM, num_gpu_blocks); the CPU and Remote media take theirs from
// SetMediumCapacity or Options (DefaultCPUCapacity, DefaultRemoteCapacity), and by default are
// bounded only by the byte budget. Insert sets the reference bit of a block the backend
// already holds and queues new blocks at the back, deepest block of the chain first, so that
// eviction takes a chain from its tail as vLLM's own LRU does and a prefix outlives its
// extensions. When a medium exceeds its capacity its hand advances: a referenced pair loses its
// bit and goes to the back (its second chance), an unreferenced one is evicted. Eviction state
// is per (backend, medium) rather than per shard, because capacity is: an engine's GPU and its
// CPU offload are separate caches of separate sizes, and one ring for both (the first design) let a
// stream of CPU-tier events evict GPU blocks the engine still held.
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
// Above the capacities sits a global byte budget, Options.MaxBytes. The index charges
// PairBytes for each (block, backend, medium) pair, live or stale, and EngineHashBytes for each
// engine hash the exact mode remembers (below); when the charges pass MaxBytes, the (backend,
// medium) charged the most loses its CLOCK victims, each taking its engine hashes with it,
// until the index is back within budget. CPU and Remote media are taken before any GPU medium:
// they are the ones a capacity may leave unbounded, and a GPU block is worth the most to a
// router. The charges are what a pair and an engine hash occupy in tables at their lowest load
// after growing; Stats.Bytes reports what is actually allocated.
//
// # Memory layout
//
// A (block, backend) pair costs its share of a 24-byte table slot (one slot serves up to 64
// backends holding the same block) at a load factor kept between 1/2 and 3/4, plus an 8-byte
// ring slot in its backend's ring. For blocks held by one backend that is 40–56 bytes; the
// budget charges PairBytes = 64 per pair, and TestBytesPerBlock measures the live heap after
// inserting 10⁶ blocks (about 45–50 bytes per block). In exact mode each block also has its
// engine hash: two 16-byte entries of its medium's engine map (below), some 52 bytes at the
// map's load factor, charged EngineHashBytes = 64; TestTieredExactMode measures about 101
// bytes per block at 10⁶ exact-mode blocks, and Stats.Bytes, which counts the tables, the
// rings and the engine maps, within 1% of the live heap. For comparison, llm-d's approximate
// index uses 210–538 bytes per (server, block) and its precise index about 1,130.
//
// # Exact mode
//
// Engines publish the blocks they store and evict, keyed by their own hashes, which a router
// cannot reproduce (vLLM seeds them with a per-process random value). ApplyStored therefore
// recomputes usher's hash from the event's token ids, continuing the chain from the parent's
// usher hash, and records the engine hash as the block's name; ApplyRemovedFrom finds blocks
// by their names. Blocks in CPU memory or a shared store are indexed apart from GPU blocks
// (Medium), each medium with its own capacity and CLOCK, so that MatchMedium can report them
// and placement can charge their transfer, and so that traffic in one medium never evicts
// another's blocks: a GPU prefix the engine holds matches however many blocks it offloads.
//
// Names live in one engine map per (backend, medium), and a name lasts exactly as long as its
// block stays in that medium: the engine's removal forgets it, and a block that leaves the
// medium otherwise (evicted by its capacity or the byte budget, removed by Remove, cleared)
// takes its names with it. A block offloaded to CPU keeps its engine hash there, as a separate
// name that the GPU's removal does not touch, and a continuation finds its parent in any
// medium (its own first). So a continuation of a block the index holds always finds its
// parent, a removal always finds its block however long ago it was stored, and, as every name
// belongs to a block the index holds, the maps are bounded by the same capacities and byte
// budget as the blocks. An engine hash can name only one block, but a block can have several
// names, when engine hashes differ in what usher does not hash (vLLM's cache salt, multimodal
// inputs): the block leaves on a removal only when its last name is removed.
//
// A map is a set of pointer-free open-addressing tables (16 bytes a slot, split in 16 parts so
// that growing one rebuilds a sixteenth) holding, for each name, an entry from the engine hash
// to the usher hash, and, for each block, entries (block, k) → its k-th name, k = 0, 1, ..., so
// that a block leaving finds its names without a search. The first design was a Go map from
// engine hash to usher hash per backend, cleared whole when it outgrew twice the backend's
// capacity: after a reset, continuations of hot prefixes failed with ErrUnknownParent and
// removals of older blocks were ignored, leaving stale blocks; it cost about 56 bytes per
// block that the byte budget did not see. Keeping a block's name in its ring slot (8 more
// bytes a slot) instead of a reverse entry (16 bytes at the table's load) would be smaller,
// but a ring slot cannot be found from its block, which a second name and a removal need.
//
// # Gateway replicas
//
// Replicas of a gateway each keep an index of what they routed. Options.Feed hears every chain
// an index learns through Insert or forgets through Remove, by backend name, after the change
// and outside the locks; a replication layer sends it on, and the other replicas apply it with
// InsertRemote and RemoveRemote, which change the index exactly as Insert and Remove do but are
// not reported, so nothing echoes. FeedBuffer is a Feed for that layer to drain: a bounded,
// allocation-free buffer that drops the newest change when full (a missed chain costs one less
// well routed prefix, an unbounded buffer the gateway's memory). The exact mode's events are not
// fed: every replica can subscribe to the engines itself, and evictions follow from the same
// inserts under the same capacities.
//
// # Concurrency
//
// Every function and method of the package is safe for concurrent use. Match and MatchMedium
// never block; writers to one backend, in any medium, are serialised by that backend's mutex,
// which also guards its engine maps (the lock order is backend, then shard, never two of
// either at once), and writers to different backends meet only on shards, each held for a
// batch of entry updates. Options, Stats, BackendStats, MediumStats, StoredBlocks and the unit
// types are plain values with no synchronisation of their own.
package prefixcache
