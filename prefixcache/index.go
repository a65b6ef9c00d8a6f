package prefixcache

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// HolderID is a backend's dense id, interned by an Index from the backend's name. Ids are
// small integers (0, 1, 2, ...) so that a block's holders form a bitset. A removed backend's id
// is reused by the next AddBackend (the lowest free id is taken first), after every block of
// the removed backend has left the index.
type HolderID uint32

// Sentinel errors. They are returned wrapped with context; test them with errors.Is.
var (
	ErrInvalidOptions  = errors.New("prefixcache: invalid options")
	ErrInvalidName     = errors.New("prefixcache: invalid backend name")
	ErrInvalidCapacity = errors.New("prefixcache: invalid capacity")
	ErrTooManyBackends = errors.New("prefixcache: too many backends")
	ErrUnknownBackend  = errors.New("prefixcache: unknown backend")
	ErrInvalidEvent    = errors.New("prefixcache: invalid event")
	ErrUnknownParent   = errors.New("prefixcache: unknown parent block")
)

// PairBytes is the memory the byte budget charges for one (block, backend, medium) pair: its
// table slot (24 bytes at a load factor between 1/2 and 3/4, shared by up to 64 backends
// holding the block) plus its CLOCK ring slot (8 bytes, up to twice that while the ring
// grows). TestBytesPerBlock measures the real figure.
const PairBytes = 64

// EngineHashBytes is the memory the byte budget charges, on top of the pair's PairBytes, for
// each engine hash the exact mode remembers (one per block an engine reported stored in a
// medium and has not removed): its entry from engine hash to usher hash and the entry from the
// block back to it, 16 bytes each at a load factor between 1/2 and 3/4. TestTieredExactMode
// measures the real figure.
const EngineHashBytes = 64

// MaxBackends is the largest Options.MaxBackends accepted.
const MaxBackends = 4096

const maxWords = MaxBackends / 64

// Options configures an Index. The zero value is valid: every zero field takes the default
// stated beside it.
type Options struct {
	// Shards is the number of lock stripes, a power of two in [1, 256]. Default 16.
	Shards int
	// DefaultCapacity is the GPU capacity, in blocks, of a backend added with capacity 0, e.g.
	// a vLLM server's num_gpu_blocks. Default 65,536.
	DefaultCapacity int
	// DefaultCPUCapacity is the capacity, in blocks, of each backend's CPU medium (CPU
	// offload, e.g. vLLM's num_cpu_blocks) unless SetMediumCapacity sets it. Default 0: no
	// limit but the byte budget.
	DefaultCPUCapacity int
	// DefaultRemoteCapacity is the same for the Remote medium (disk, a shared or remote KV
	// store). Default 0: no limit but the byte budget.
	DefaultRemoteCapacity int
	// MaxBytes is the global memory budget. The index charges PairBytes per (block, backend,
	// medium) pair and EngineHashBytes per engine hash it remembers in exact mode, and holds at
	// most MaxBytes of charges: past that, CLOCK victims are evicted from the (backend, medium)
	// charged the most, CPU and Remote media before any GPU one. Default 256 MiB (4M pairs).
	MaxBytes int64
	// MaxChainBlocks is the longest chain Insert, Remove and Match consider: longer chains are
	// truncated to their first MaxChainBlocks blocks (the rest could only matter after all of
	// those matched). Default 8,192 (131,072 tokens at 16 tokens per block).
	MaxChainBlocks int
	// MaxBackends bounds the number of backends registered at once, at most 4,096.
	// Default 1,024. Up to 64 backends every block lives in one table entry and Match does one
	// probe per block; each further 64 ids add a word that Match probes while any of its
	// backends is still matching.
	MaxBackends int
	// Feed, if set, hears of every successful Insert and Remove (not of the chains a
	// replication layer applies for other gateway replicas, the Apply* methods of the exact
	// mode, or evictions), so that a replication layer can send what this index learns to
	// other gateway replicas; see Feed. Nil: nobody hears, at the cost of one nil check per
	// Insert and Remove.
	Feed Feed
}

const (
	defaultShards         = 16
	defaultCapacity       = 1 << 16
	defaultMaxBytes       = 256 << 20
	defaultMaxChainBlocks = 8192
	defaultMaxBackends    = 1024
)

func (o Options) withDefaults() (Options, error) {
	if o.Shards == 0 {
		o.Shards = defaultShards
	}
	if o.DefaultCapacity == 0 {
		o.DefaultCapacity = defaultCapacity
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.MaxChainBlocks == 0 {
		o.MaxChainBlocks = defaultMaxChainBlocks
	}
	if o.MaxBackends == 0 {
		o.MaxBackends = defaultMaxBackends
	}
	switch {
	case o.Shards < 1 || o.Shards > 256 || o.Shards&(o.Shards-1) != 0:
		return o, fmt.Errorf("%w: Shards %d is not a power of two in [1, 256]", ErrInvalidOptions, o.Shards)
	case o.DefaultCapacity < 0:
		return o, fmt.Errorf("%w: DefaultCapacity %d < 0", ErrInvalidOptions, o.DefaultCapacity)
	case o.DefaultCPUCapacity < 0:
		return o, fmt.Errorf("%w: DefaultCPUCapacity %d < 0", ErrInvalidOptions, o.DefaultCPUCapacity)
	case o.DefaultRemoteCapacity < 0:
		return o, fmt.Errorf("%w: DefaultRemoteCapacity %d < 0", ErrInvalidOptions, o.DefaultRemoteCapacity)
	case o.MaxBytes < PairBytes:
		return o, fmt.Errorf("%w: MaxBytes %d < %d", ErrInvalidOptions, o.MaxBytes, PairBytes)
	case o.MaxChainBlocks < 0:
		return o, fmt.Errorf("%w: MaxChainBlocks %d < 0", ErrInvalidOptions, o.MaxChainBlocks)
	case o.MaxBackends < 0 || o.MaxBackends > MaxBackends:
		return o, fmt.Errorf("%w: MaxBackends %d not in [1, %d]", ErrInvalidOptions, o.MaxBackends, MaxBackends)
	}
	return o, nil
}

// shard is one lock stripe: a table and the sequence counter that guards it (a seqlock).
//
// A writer takes the shard by moving seq from even to odd with a compare-and-swap, changes the
// table, and makes seq even again; so seq is both the writers' lock and the readers' validity
// check, and a shard visit costs a writer two atomic instructions. Readers never lock and never
// write: they read seq, probe, and retry if seq was odd or has changed. Writers hold a shard for
// a handful of entry updates (or one table growth) and spin, yielding, while another writer has
// it. Shards sit by value in a fixed array, padded so two shards never share a cache line.
type shard struct {
	seq atomic.Uint64
	tab atomic.Pointer[table]
	_   [64 - 16]byte
	// Match statistics, counted in the shard of the chain's last block (prompts share their
	// first blocks, a system prompt, but rarely their last), on a cache line of their own so
	// that counting never disturbs the readers of seq.
	hits   atomic.Int64
	misses atomic.Int64
	_      [64 - 16]byte
}

// lock takes sh for writing: it makes seq odd.
func (sh *shard) lock() {
	for spins := 0; ; spins++ {
		if s := sh.seq.Load(); s&1 == 0 && sh.seq.CompareAndSwap(s, s+1) {
			return
		}
		if spins >= 16 {
			runtime.Gosched()
		}
	}
}

// unlock releases sh: it makes seq even again, invalidating reads that overlapped the writer.
func (sh *shard) unlock() { sh.seq.Add(1) }

// Index maps chained block hashes to the set of backends holding them, and answers, for a
// chain, how many leading blocks each backend holds. See the package documentation for the
// model; the zero Index is not usable, call New.
//
// Index is safe for concurrent use. Match never blocks on a lock: it reads shards under a
// sequence counter and retries a probe that raced with a writer. Writers to one backend
// (Insert, Remove, Apply*, SetCapacity, SetMediumCapacity), in any medium, are
// serialised by that backend's mutex; writers to different backends proceed in parallel and
// meet only on shards, each held for one batch of entry updates; no writer holds two backends'
// locks or two shards at once.
type Index struct {
	// Immutable after New.
	opts     Options
	feed     Feed // opts.Feed
	mask     uint64
	maxPairs int64
	shards   []shard
	backends []atomic.Pointer[backend] // by id; len opts.MaxBackends; stored under regMu

	// Counters, updated atomically by writers.
	pairs     atomic.Int64 // ring slots over all backends and media (live and stale pairs)
	engNames  atomic.Int64 // engine hashes remembered over all backends and media
	bytes     atomic.Int64 // bytes allocated to tables, rings and engine maps
	evictions atomic.Int64

	// Lock order: regMu, then a backend's mu, then one shard at a time; never two backends or
	// two shards at once.
	regMu sync.Mutex // guards names and bound updates
	names map[string]HolderID
	bound atomic.Int32 // max registered id + 1
}

// backend is one registered backend. id and name are immutable; the rest is guarded by mu.
type backend struct {
	id   HolderID
	name string

	mu      sync.Mutex
	removed bool
	tiers   [NumMedia]tier // by Medium
	scratch []BlockHash
	round   round // the batch updates' scratch space
}

// tier is one medium of a backend: its capacity, its CLOCK ring and, in exact mode, its map
// from the engine's block hashes to usher's. size and names are written under the backend's
// mu and read without it (by enforceBudget); the rest is guarded by mu.
type tier struct {
	size  atomic.Int64 // ring length (live + stale)
	names atomic.Int64 // engine hashes in eng

	capacity  int // blocks; noLimit when bounded only by the byte budget
	live      int
	stale     int
	evictions int64
	ring      ring
	eng       *engMap // nil until the medium's first ApplyStored
}

// noLimit is the capacity of a medium bounded only by the byte budget.
const noLimit = math.MaxInt

// charge is what the byte budget charges t for.
func (t *tier) charge() int64 {
	return t.size.Load()*PairBytes + t.names.Load()*EngineHashBytes
}

// New returns an empty Index configured by opts, or an error wrapping ErrInvalidOptions.
// It is O(Shards + MaxBackends); tables and rings are allocated as blocks arrive.
func New(opts Options) (*Index, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ix := &Index{
		opts:     o,
		feed:     o.Feed,
		mask:     uint64(o.Shards - 1),
		maxPairs: o.MaxBytes / PairBytes,
		shards:   make([]shard, o.Shards),
		backends: make([]atomic.Pointer[backend], o.MaxBackends),
		names:    make(map[string]HolderID),
	}
	return ix, nil
}

// AddBackend registers a backend under name with a GPU capacity in blocks (0 means
// Options.DefaultCapacity; its CPU and Remote media take DefaultCPUCapacity and
// DefaultRemoteCapacity, see SetMediumCapacity) and returns its id. Adding a name that is
// already registered is not an error: it returns the existing id and, when capacityBlocks is
// not 0, sets that backend's GPU capacity, evicting if it shrank; 0 leaves it as it is. To
// find an id without registering anything, use Lookup.
//
// The ids are the index's own: a routing.Router over this index numbers the same backends
// its own way (routing.HolderID), so read Match's result with the index's ids only (Lookup
// of the backend's name gives them).
// It returns ErrInvalidName for an empty name, ErrInvalidCapacity for a negative capacity and
// ErrTooManyBackends when Options.MaxBackends backends are registered.
//
// AddBackend is O(MaxBackends) for a new name (it looks for the lowest free id).
func (ix *Index) AddBackend(name string, capacityBlocks int) (HolderID, error) {
	if name == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if capacityBlocks < 0 {
		return 0, fmt.Errorf("%w: %d blocks for backend %q", ErrInvalidCapacity, capacityBlocks, name)
	}
	ix.regMu.Lock()
	if id, ok := ix.names[name]; ok {
		ix.regMu.Unlock()
		if capacityBlocks == 0 {
			return id, nil
		}
		return id, ix.SetCapacity(id, capacityBlocks)
	}
	if capacityBlocks == 0 {
		capacityBlocks = ix.opts.DefaultCapacity
	}
	defer ix.regMu.Unlock()
	for i := range ix.backends {
		if ix.backends[i].Load() != nil {
			continue
		}
		b := &backend{id: HolderID(i), name: name}
		for m := range NumMedia {
			b.tiers[m].capacity = ix.capacityOf(m, 0)
		}
		b.tiers[GPU].capacity = capacityBlocks
		ix.backends[i].Store(b)
		ix.names[name] = b.id
		if int32(i) >= ix.bound.Load() {
			ix.bound.Store(int32(i) + 1)
		}
		return b.id, nil
	}
	return 0, fmt.Errorf("%w: %d registered", ErrTooManyBackends, len(ix.backends))
}

// Lookup returns the id of the backend registered under name. It is O(1).
func (ix *Index) Lookup(name string) (HolderID, bool) {
	ix.regMu.Lock()
	id, ok := ix.names[name]
	ix.regMu.Unlock()
	return id, ok
}

// Name returns the name of backend id, or "" if id is not registered. It is O(1).
func (ix *Index) Name(id HolderID) string {
	if b := ix.load(id); b != nil {
		return b.name
	}
	return ""
}

// SetCapacity changes backend id's GPU capacity in blocks (0 means Options.DefaultCapacity),
// evicting its CLOCK victims down to the new capacity: SetMediumCapacity(id, GPU,
// capacityBlocks). Cost O(evicted blocks).
func (ix *Index) SetCapacity(id HolderID, capacityBlocks int) error {
	return ix.SetMediumCapacity(id, GPU, capacityBlocks)
}

// SetMediumCapacity changes the capacity in blocks of backend id's medium m (for a vLLM
// server: num_gpu_blocks for GPU, the CPU offload's block count for CPU), evicting that
// medium's CLOCK victims down to it. 0 means the medium's default, Options.DefaultCapacity,
// DefaultCPUCapacity or DefaultRemoteCapacity, where a CPU or Remote default of 0 sets no limit
// but the byte budget; math.MaxInt sets no limit for any medium. Each medium of a backend has
// its own capacity and CLOCK, so blocks stored in one medium never evict those of another.
//
// It returns ErrInvalidCapacity for a negative capacity or an unknown medium, ErrUnknownBackend
// if id is not registered. It is serialised with the backend's other writers; cost O(evicted
// blocks).
func (ix *Index) SetMediumCapacity(id HolderID, m Medium, capacityBlocks int) error {
	if capacityBlocks < 0 || m >= NumMedia {
		return fmt.Errorf("%w: %d blocks of %v for backend %d", ErrInvalidCapacity, capacityBlocks, m, id)
	}
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	b.tiers[m].capacity = ix.capacityOf(m, capacityBlocks)
	ix.evictToCapacityLocked(b, m)
	b.mu.Unlock()
	return nil
}

// capacityOf resolves a capacity given for medium m: 0 takes the medium's default.
func (ix *Index) capacityOf(m Medium, blocks int) int {
	if blocks == 0 {
		switch m {
		case GPU:
			blocks = ix.opts.DefaultCapacity
		case CPU:
			blocks = ix.opts.DefaultCPUCapacity
		default:
			blocks = ix.opts.DefaultRemoteCapacity
		}
		if blocks == 0 {
			blocks = noLimit
		}
	}
	return blocks
}

// RemoveBackend clears backend id and unregisters it; its id becomes free for reuse. Cost
// O(the backend's blocks). It returns ErrUnknownBackend if id is not registered.
func (ix *Index) RemoveBackend(id HolderID) error {
	ix.regMu.Lock()
	defer ix.regMu.Unlock()
	b, err := ix.lockBackend(id)
	if err != nil {
		return err
	}
	ix.clearLocked(b, true)
	b.removed = true
	b.mu.Unlock()
	ix.backends[id].Store(nil)
	delete(ix.names, b.name)
	bound := int32(0)
	for i := int32(ix.bound.Load()) - 1; i >= 0; i-- {
		if ix.backends[i].Load() != nil {
			bound = i + 1
			break
		}
	}
	ix.bound.Store(bound)
	return nil
}

// Insert records that backend id holds the blocks of chain on its GPU (the approximate mode:
// call it after routing a request there). Blocks it already holds get their CLOCK reference
// bit set; new blocks join the back of its GPU CLOCK queue, deepest block first, so that
// eviction takes a chain from its tail as vLLM does. Then the backend's GPU CLOCK victims are
// evicted down to its capacity, and, if the index is over its byte budget, victims of the
// (backend, medium) charged the most. Only the first min(MaxChainBlocks, capacity) blocks of
// chain are inserted: a block is useless without its prefix. An empty chain is a no-op.
//
// Insert is O(len(chain)) amortised and allocates nothing in steady state. It returns
// ErrUnknownBackend if id is not registered. With Options.Feed set, a successful Insert of a
// non-empty chain then calls Feed.Inserted with the backend's name and the chain cut to
// MaxChainBlocks.
func (ix *Index) Insert(id HolderID, chain []BlockHash) error {
	name, err := ix.insertNamed(id, chain, GPU)
	if ix.feed != nil && err == nil && len(chain) > 0 {
		ix.feed.Inserted(name, chain[:min(len(chain), ix.opts.MaxChainBlocks)])
	}
	return err
}

func (ix *Index) insert(id HolderID, chain []BlockHash, m Medium) error {
	_, err := ix.insertNamed(id, chain, m)
	return err
}

// insertNamed inserts chain into backend id's medium m and returns the backend's name.
func (ix *Index) insertNamed(id HolderID, chain []BlockHash, m Medium) (string, error) {
	b, err := ix.lockBackend(id)
	if err != nil {
		return "", err
	}
	ix.insertLocked(b, chain, m, nil)
	b.mu.Unlock()
	ix.enforceBudget()
	return b.name, nil
}

// Remove deletes backend id's GPU pairs for the blocks of chain (blocks it does not hold are
// ignored). It retracts a prediction, so it leaves alone the blocks the engine itself reported
// (exact mode: blocks with an engine hash as their name), which only the engine's removal, the
// byte budget or a clear take away. Only the first MaxChainBlocks blocks are considered. Cost O(len(chain)) amortised. It returns
// ErrUnknownBackend if id is not registered. With Options.Feed set, a successful Remove of a
// non-empty chain then calls Feed.Removed with the backend's name and the chain cut to
// MaxChainBlocks.
func (ix *Index) Remove(id HolderID, chain []BlockHash) error {
	name, err := ix.removeNamed(id, chain, GPU)
	if ix.feed != nil && err == nil && len(chain) > 0 {
		ix.feed.Removed(name, chain[:min(len(chain), ix.opts.MaxChainBlocks)])
	}
	return err
}

func (ix *Index) remove(id HolderID, chain []BlockHash, m Medium) error {
	_, err := ix.removeNamed(id, chain, m)
	return err
}

// removeNamed removes chain from backend id's medium m and returns the backend's name.
func (ix *Index) removeNamed(id HolderID, chain []BlockHash, m Medium) (string, error) {
	b, err := ix.lockBackend(id)
	if err != nil {
		return "", err
	}
	chain = chain[:min(len(chain), ix.opts.MaxChainBlocks)]
	if e := b.tiers[m].eng; e != nil && e.blocks > 0 {
		// Keep what the engine reported: retract only the blocks no engine hash names.
		b.scratch = b.scratch[:0]
		for _, h := range chain {
			if e.count(h) == 0 {
				b.scratch = append(b.scratch, h)
			}
		}
		chain = b.scratch
	}
	ix.removeLocked(b, chain, m)
	b.mu.Unlock()
	return b.name, nil
}

func (ix *Index) load(id HolderID) *backend {
	if int(id) >= len(ix.backends) {
		return nil
	}
	return ix.backends[id].Load()
}

// lockBackend returns backend id with its mu held, or ErrUnknownBackend.
func (ix *Index) lockBackend(id HolderID) (*backend, error) {
	b := ix.load(id)
	if b == nil {
		return nil, fmt.Errorf("%w: id %d", ErrUnknownBackend, id)
	}
	b.mu.Lock()
	if b.removed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: id %d", ErrUnknownBackend, id)
	}
	return b, nil
}

// Pair states, as found before an update. A state is 2·(hold bit) + (aux bit): touch and
// visit compute it so.
const (
	pairAbsent = iota
	pairStale
	pairLive    // held, reference bit clear
	pairLiveRef // held, reference bit set
)

// batch is how many pairs a writer updates per round: it prefetches their slots, then takes
// each shard's lock once for all of the round's pairs in that shard.
const batch = 128

// insertLocked inserts the first min(len(chain), MaxChainBlocks, capacity) blocks of chain
// into b's medium m, then, if engine is not nil (ApplyStored), records engine[i] as a name of
// chain[i] for each inserted block, and last evicts m's CLOCK victims down to its capacity,
// their names with them.
func (ix *Index) insertLocked(b *backend, chain []BlockHash, m Medium, engine []uint64) {
	t := &b.tiers[m]
	n := min(len(chain), ix.opts.MaxChainBlocks, t.capacity)
	mk, salt, bit := uint64(m)*tierK, wordSalt(int(b.id>>6)), uint64(1)<<(b.id&63)
	// A pair already held and referenced is left as it is by a touch, so the leading blocks
	// whose pairs are need no round: the prefix a backend already holds (a routed request's
	// cached turns, inserted again with the new blocks after them) costs one lock-free probe
	// per block instead of a locked update. The reads are exact, not a guess: b's bits change
	// only under b.mu, held here.
	held := ix.referencedPrefix(chain[:n], mk, salt, bit)
	rd := &b.round
	var added int64
	// Deepest block first, in rounds of up to batch blocks.
	for end := n; end > held; {
		r := min(end-held, batch)
		src := chain[end-r : end]
		keys := rd.keys[:len(src)]
		rg := &t.ring
		// Where the ring has room for the whole round, the block keys go straight to the
		// slots past its back, so that a round of new blocks only has to count them in.
		staged := rg.n+r <= len(rg.buf)
		if staged {
			buf, mask, tail := rg.buf, len(rg.buf)-1, rg.head+rg.n
			for j := range keys {
				bk := uint64(src[len(src)-1-j]) ^ mk
				buf[(tail+j)&mask] = bk
				keys[j] = saltedKey(baseKey(bk), salt)
			}
		} else {
			for j := range keys {
				keys[j] = saltedKey(baseKey(uint64(src[len(src)-1-j])^mk), salt)
			}
		}
		c := ix.touchBatch(rd, r, bit)
		absent, stale := c.of(pairAbsent), c.of(pairStale)
		states := rd.states[:r]
		switch {
		case absent == 0:
		case staged:
			// Keep the new ones, in order.
			if absent < r {
				buf, mask, tail := rg.buf, len(rg.buf)-1, rg.head+rg.n
				w := 0
				for j, st := range states {
					if st == pairAbsent {
						buf[(tail+w)&mask] = buf[(tail+j)&mask]
						w++
					}
				}
			}
			rg.n += absent
		default:
			if g := rg.reserve(absent); g != 0 {
				ix.bytes.Add(g)
			}
			buf, mask, pos := rg.buf, len(rg.buf)-1, rg.head+rg.n
			for j, st := range states {
				if st == pairAbsent {
					buf[pos&mask] = uint64(src[len(src)-1-j]) ^ mk
					pos++
				}
			}
			rg.n += absent
		}
		t.live += absent + stale
		t.stale -= stale
		added += int64(absent)
		end -= r
	}
	ix.pairs.Add(added)
	if engine != nil && n > 0 {
		if t.eng == nil {
			t.eng = new(engMap)
		}
		e := t.eng
		bytes, names := e.bytes, e.names
		for i, h := range chain[:n] {
			e.add(engine[i], h)
		}
		ix.accountLocked(t, bytes, names)
	}
	ix.evictToCapacityLocked(b, m)
}

// referencedPrefix returns how many leading blocks of chain have their pair for the backend
// whose bit is bit, in the medium whose key offset is mk, held and referenced. salt is the
// backend's wordSalt. It locks nothing and stops at the first block that is not.
func (ix *Index) referencedPrefix(chain []BlockHash, mk, salt, bit uint64) int {
	for i, h := range chain {
		hold, aux := ix.readBits(saltedKey(baseKey(uint64(h)^mk), salt))
		if hold&aux&bit == 0 {
			return i
		}
	}
	return len(chain)
}

// accountLocked publishes the change of t's engine map since it had bytes and names.
func (ix *Index) accountLocked(t *tier, bytes int64, names int) {
	if d := t.eng.bytes - bytes; d != 0 {
		ix.bytes.Add(d)
	}
	if d := t.eng.names - names; d != 0 {
		ix.engNames.Add(int64(d))
		t.names.Store(int64(t.eng.names))
	}
}

// removeLocked removes b's pairs of medium m for the blocks of chain, none of which has an
// engine hash as its name.
func (ix *Index) removeLocked(b *backend, chain []BlockHash, m Medium) {
	t := &b.tiers[m]
	word, bit := int(b.id>>6), uint64(1)<<(b.id&63)
	rd := &b.round
	for start := 0; start < len(chain); {
		r := min(len(chain)-start, batch)
		for j := range rd.keys[:r] {
			rd.keys[j] = entryKey(blockKey(chain[start+j], m), word)
		}
		ix.applyBatch(opUnhold, rd, r, bit)
		for _, st := range rd.states[:r] {
			if st == pairLive || st == pairLiveRef {
				t.live--
				t.stale++
			}
		}
		start += r
	}
	ix.maybeCompactLocked(b, m)
}

// compactMin is the fewest stale pairs worth a compaction pass.
const compactMin = 16

// maybeCompactLocked drops stale pairs from the ring of b's medium m once they are at least
// compactMin and outnumber live ones, so a ring never holds more than about twice its live
// pairs plus compactMin. Order is kept. Cost O(ring), amortised O(1) per removal.
func (ix *Index) maybeCompactLocked(b *backend, m Medium) {
	t := &b.tiers[m]
	if t.stale < compactMin || t.stale <= t.live {
		t.size.Store(int64(t.ring.len()))
		return
	}
	word, bit := int(b.id>>6), uint64(1)<<(b.id&63)
	for j := t.ring.len(); j > 0; j-- {
		bk := t.ring.pop()
		if ix.apply1(opDropStale, entryKey(bk, word), bit) == pairStale {
			t.stale--
			ix.pairs.Add(-1)
			continue
		}
		t.ring.push(bk)
	}
	t.size.Store(int64(t.ring.len()))
}

// evictToCapacityLocked evicts CLOCK victims of b's medium m until it is within its capacity.
//
// In exact mode the blocks an engine reported are the engine's to evict (it says so), and the
// capacity bounds them only if they alone exceed it (the engine reported more than the capacity
// says it holds, or its removals were lost): then the CLOCK evicts whatever it meets until the
// medium is within its capacity. The blocks only predicted have an allowance of
// their own: the room the engine's blocks leave, and at least a quarter of the capacity, so a
// prediction outlives the wait for the engine's events even on a full engine (whose cache
// always is, once warm: it evicts only when it needs room, and says so when it does).
// Predictions over their allowance are evicted by the CLOCK among themselves
// (evictPredictedLocked).
func (ix *Index) evictToCapacityLocked(b *backend, m Medium) {
	t := &b.tiers[m]
	if e := t.eng; e != nil && e.blocks > 0 {
		if t.capacity == noLimit {
			t.size.Store(int64(t.ring.len()))
			return
		}
		allowance := max(t.capacity-e.blocks, t.capacity/predictedShare)
		if predicted := t.live - e.blocks; predicted > allowance {
			ix.evictPredictedLocked(b, m, int64(predicted-allowance))
		}
		if e.blocks > t.capacity {
			// The engine's blocks alone are over capacity: the CLOCK evicts whatever it meets.
			ix.sweepLocked(b, m, int64(t.live)-int64(t.capacity), false)
		}
		t.size.Store(int64(t.ring.len()))
		return
	}
	ix.sweepLocked(b, m, int64(t.live)-int64(t.capacity), false)
}

// predictedShare: in exact mode, predictions may always hold 1/predictedShare of a medium's
// capacity beyond the blocks its engine reported.
const predictedShare = 4

// evictPredictedLocked is the capacity sweep of a medium that holds blocks an engine reported:
// the hand moves named pairs to the back as it meets them, their reference bits as they were,
// and treats the pairs between as sweepLocked does, in rounds of consecutive unnamed pairs,
// until want unnamed pairs are evicted. want is at most the medium's unnamed live pairs, so the
// sweep ends: each turn of the hand clears the reference bits it finds. Cost O(pairs visited),
// plus a probe of the engine map per pair.
func (ix *Index) evictPredictedLocked(b *backend, m Medium, want int64) {
	t := &b.tiers[m]
	e := t.eng
	word, bit := int(b.id>>6), uint64(1)<<(b.id&63)
	rd := &b.round
	keys := rd.keys[:]
	for want > 0 && t.ring.len() > 0 {
		for t.ring.len() > 0 && e.count(usherHash(t.ring.at(0), m)) > 0 {
			t.ring.push(t.ring.pop())
		}
		r := 0
		for got := int64(0); r < batch && r < t.ring.len() && got < want; r++ {
			bk := t.ring.at(r)
			if e.count(usherHash(bk, m)) > 0 {
				break
			}
			k := entryKey(bk, word)
			keys[r] = k
			if hold, aux := ix.readBits(k); hold&bit != 0 && aux&bit == 0 {
				got++
			}
		}
		c := ix.visitBatch(rd, r, bit)
		ref, evicted := c.of(pairLiveRef), c.of(pairLive)
		dropped := r - ref - evicted
		t.ring.advance(rd.states[:r], ref)
		t.live -= evicted
		t.stale -= dropped
		t.evictions += int64(evicted)
		ix.evictions.Add(int64(evicted))
		ix.pairs.Add(-int64(evicted + dropped))
		want -= int64(evicted)
	}
}

// usherHash recovers a block's usher hash from its block key in medium m.
func usherHash(bk uint64, m Medium) BlockHash { return BlockHash(bk ^ uint64(m)*tierK) }

// sweepLocked moves the CLOCK hand of b's medium m until want units have left its ring. For
// capacity (budget false) a unit is a live pair evicted; for the byte budget a unit is a byte
// of charge: PairBytes for each pair evicted or stale pair dropped, plus EngineHashBytes for
// each engine hash an evicted pair takes with it. At each pair the hand visits, a referenced
// pair loses its reference bit and goes to the back (its second chance), an unreferenced one
// is evicted (with its engine hashes), a stale one is dropped.
//
// It works in rounds of visitBatch, one lock per shard per round. A round never visits more
// pairs than sequential CLOCK would: where every pair that leaves counts the same, a round
// visits at most as many pairs as are still wanted; otherwise (reference bits left the first
// round short, or pairs with engine hashes weigh more than others) the round first reads the
// states of the pairs at the front without locking (b's own bits cannot change while b.mu is
// held, so those reads are exact), and their engine hashes, to find how far the hand must go.
// Either way the hand visits the same pairs in the same order with the same outcomes as one
// step at a time.
func (ix *Index) sweepLocked(b *backend, m Medium, want int64, budget bool) {
	t := &b.tiers[m]
	word, bit := int(b.id>>6), uint64(1)<<(b.id&63)
	salt := wordSalt(word)
	e := t.eng
	if e != nil && e.names == 0 {
		e = nil
	}
	var bytes int64
	var names int
	if e != nil {
		bytes, names = e.bytes, e.names
	}
	unit := int64(1)
	if budget {
		unit = PairBytes
	}
	rd := &b.round
	keys := rd.keys[:]
	for first := true; want > 0 && t.ring.len() > 0; first = false {
		var r int
		if first && (!budget || e == nil) {
			r = int(min((want+unit-1)/unit, batch, int64(t.ring.len())))
			buf, mask, head := t.ring.buf, len(t.ring.buf)-1, t.ring.head
			for j := range keys[:r] {
				keys[j] = saltedKey(baseKey(buf[(head+j)&mask]), salt)
			}
		} else {
			// Extend the round over pairs that will not count, up to a full batch.
			for got := int64(0); r < batch && r < t.ring.len() && got < want; r++ {
				bk := t.ring.at(r)
				k := entryKey(bk, word)
				keys[r] = k
				hold, aux := ix.readBits(k)
				switch {
				case hold&bit != 0 && aux&bit == 0:
					got += unit
					if budget && e != nil {
						got += EngineHashBytes * int64(e.count(usherHash(bk, m)))
					}
				case budget && hold&bit == 0:
					got += unit
				}
			}
		}
		c := ix.visitBatch(rd, r, bit)
		ref, evicted := c.of(pairLiveRef), c.of(pairLive)
		dropped := r - ref - evicted
		states := rd.states[:r]
		var unnamed int64
		if e != nil && evicted > 0 {
			for j, st := range states {
				if st == pairLive {
					unnamed += int64(e.drop(usherHash(t.ring.at(j), m)))
				}
			}
		}
		t.ring.advance(states, ref)
		t.live -= evicted
		t.stale -= dropped
		t.evictions += int64(evicted)
		ix.evictions.Add(int64(evicted))
		ix.pairs.Add(-int64(evicted + dropped))
		if budget {
			want -= int64(evicted+dropped)*PairBytes + unnamed*EngineHashBytes
		} else {
			want -= int64(evicted)
		}
	}
	if e != nil {
		ix.accountLocked(t, bytes, names)
	}
	t.size.Store(int64(t.ring.len()))
}

// clearLocked removes every pair and engine hash of b. Its rings keep their buffers and its
// engine maps their tables (an engine that cleared its cache refills it soon) unless release,
// as when b is removed.
func (ix *Index) clearLocked(b *backend, release bool) {
	word, bit := int(b.id>>6), uint64(1)<<(b.id&63)
	rd := &b.round
	for m := range NumMedia {
		t := &b.tiers[m]
		ix.pairs.Add(int64(-t.ring.len()))
		for t.ring.len() > 0 {
			r := min(t.ring.len(), batch)
			for j := range rd.keys[:r] {
				rd.keys[j] = entryKey(t.ring.pop(), word)
			}
			ix.applyBatch(opClear, rd, r, bit)
		}
		if release {
			ix.bytes.Add(-t.ring.reset())
		} else {
			t.ring.clear()
		}
		t.live, t.stale = 0, 0
		t.size.Store(0)
		if t.eng != nil {
			ix.engNames.Add(-int64(t.eng.names))
			t.names.Store(0)
			if release {
				ix.bytes.Add(-t.eng.bytes)
				t.eng = nil
			} else {
				t.eng.reset()
			}
		}
	}
}

// charged is what the byte budget charges the whole index for.
func (ix *Index) charged() int64 {
	return ix.pairs.Load()*PairBytes + ix.engNames.Load()*EngineHashBytes
}

// enforceBudget moves the CLOCK hand of the (backend, medium) charged the most until the index
// is back within its budget. CPU and Remote media are victims before any GPU one: a block held
// on a GPU is the one worth most to a router, and the GPU media are bounded by capacities that
// the engines themselves honour, where the other media may be bounded by the budget alone. Ties
// go to the lowest id, then the lowest medium.
func (ix *Index) enforceBudget() {
	for {
		over := ix.charged() - ix.opts.MaxBytes
		if over <= 0 {
			return
		}
		victim, m := ix.budgetVictim(CPU, Remote)
		if victim == nil {
			if victim, m = ix.budgetVictim(GPU); victim == nil {
				return
			}
		}
		victim.mu.Lock()
		if !victim.removed {
			ix.sweepLocked(victim, m, min(over, victim.tiers[m].charge()), true)
		}
		victim.mu.Unlock()
	}
}

// budgetVictim returns the backend and medium, among media, charged the most (nil if none is
// charged anything). It reads the charges without locking. O(backends).
func (ix *Index) budgetVictim(media ...Medium) (*backend, Medium) {
	var victim *backend
	var vm Medium
	var most int64
	for i := range int(ix.bound.Load()) {
		b := ix.backends[i].Load()
		if b == nil {
			continue
		}
		for _, m := range media {
			if c := b.tiers[m].charge(); c > most {
				victim, vm, most = b, m, c
			}
		}
	}
	return victim, vm
}

// Key derivation. A (block, medium) pair has a block key; its holders for ids 64w..64w+63 live
// in the table entry keyed by entryKey(blockKey, w).
const tierK = 0x9e3779b97f4a7c15

func blockKey(h BlockHash, tier Medium) uint64 { return uint64(h) ^ uint64(tier)*tierK }

// wordK spreads a word index over a key's high bits, which choose the home slot, and leaves
// its low bits, which choose the shard, alone: every word of a block lives in the shard of
// word 0, so a wide Match reads all of a block's words under one sequence-counter check.
const wordK = 0xc2b2ae3d27d4eb4f &^ 0xff

// baseKey mixes a block key with the bijective murmur3 finaliser, so keys are uniform even for
// hand-made chains like 1, 2, 3. It is the entry key of word 0 but for the input that mixes
// to 0.
func baseKey(bk uint64) uint64 {
	k := bk
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// wordKey is the table key of word w of the block whose baseKey is base. The one word key
// per word that would be 0 (the empty marker) is folded onto 1<<63, which is in the same shard.
func wordKey(base uint64, word int) uint64 { return saltedKey(base, wordSalt(word)) }

// wordSalt is what wordKey mixes into a block's base key for word w.
func wordSalt(word int) uint64 { return uint64(word) * wordK }

// saltedKey is wordKey(base, w) given salt = wordSalt(w), for loops over one word.
func saltedKey(base, salt uint64) uint64 {
	k := base ^ salt
	if k == 0 {
		k = 1 << 63
	}
	return k
}

// entryKey is the table key of word w of block key bk.
func entryKey(bk uint64, word int) uint64 { return wordKey(baseKey(bk), word) }

// readBits returns the hold and aux words of table key k, never blocking.
func (ix *Index) readBits(k uint64) (hold, aux uint64) {
	sh := &ix.shards[k&ix.mask]
	for spins := 0; ; spins++ {
		s := sh.seq.Load()
		if s&1 == 0 {
			hold, aux = 0, 0
			if t := sh.tab.Load(); t != nil {
				hold, aux = t.readBits(k)
			}
			if sh.seq.Load() == s {
				return hold, aux
			}
		}
		if spins >= 8 {
			runtime.Gosched()
		}
	}
}

// lockShard takes k's shard for writing.
func (ix *Index) lockShard(k uint64) *shard {
	sh := &ix.shards[k&ix.mask]
	sh.lock()
	return sh
}

// reserveLocked returns sh's table with room for n more entries, growing it by half (and
// publishing the new table) as often as needed.
func (ix *Index) reserveLocked(sh *shard, n int) *table {
	t := sh.tab.Load()
	if t != nil && uint64(t.count+n)*maxLoadDen <= t.n*maxLoadNum {
		return t
	}
	size, count := uint64(minTableSlots), 0
	if t != nil {
		size, count = t.n+t.n/2, t.count
	}
	for uint64(count+n)*maxLoadDen > size*maxLoadNum {
		size += size / 2
	}
	u := newTable(int(size))
	grown := int64(size)
	if t != nil {
		t.rehashInto(u)
		grown -= int64(t.n)
	}
	ix.bytes.Add(grown * slotBytes)
	sh.tab.Store(u)
	return u
}

// Match fills dst with, for every backend id up to the largest registered one, the number of
// leading blocks of chain that backend holds, and returns it (len the largest registered id
// + 1; dst's storage is reused when large enough). It walks the chain once, keeping the set of backends still matching as a bitset
// (one word per 64 ids) and stops at the first block nobody in the set holds. Ids not
// registered get 0. Only the first MaxChainBlocks blocks of chain are considered; an empty
// chain gives all zeros.
//
// Match never blocks and allocates nothing when dst has room: when it is the previous result
// and no backend was registered since, or cap(dst) >= Options.MaxBackends. It is O(blocks matched)
// probes when at most 64 backends are registered, O(blocks matched × words still matching)
// beyond. It sees each block's holders atomically, but not the whole chain: blocks inserted or
// evicted concurrently may or may not be seen.
func (ix *Index) Match(dst []int32, chain []BlockHash) []int32 {
	return ix.MatchMedium(dst, chain, GPU)
}

// MatchMedium is Match over the blocks stored in medium m (see ApplyStored); Match is
// MatchMedium(dst, chain, GPU). Its cost and allocation behaviour are Match's.
func (ix *Index) MatchMedium(dst []int32, chain []BlockHash, m Medium) []int32 {
	bound := int(ix.bound.Load())
	if cap(dst) < bound {
		dst = make([]int32, bound)
	} else {
		dst = dst[:bound]
		clear(dst)
	}
	if len(chain) > ix.opts.MaxChainBlocks {
		chain = chain[:ix.opts.MaxChainBlocks]
	}
	if len(chain) == 0 || bound == 0 {
		return dst
	}
	var matched int
	switch {
	case bound <= 64:
		matched = ix.match1(dst, chain, m, bound)
	case bound <= 128:
		matched = ix.match2(dst, chain, m, bound)
	default:
		matched = ix.matchWide(dst, chain, m, bound)
	}
	sh := &ix.shards[uint64(chain[len(chain)-1])&ix.mask]
	sh.hits.Add(int64(matched))
	sh.misses.Add(int64(len(chain) - matched))
	return dst
}

// match1 is Match's fast path for ids below 64: one probe and one AND per block.
func (ix *Index) match1(dst []int32, chain []BlockHash, m Medium, bound int) int {
	run := ^uint64(0) >> (64 - bound)
	shards, mask := ix.shards, ix.mask
	for i, h := range chain {
		// a seqlocked read of table.readHold, inlined by hand: this loop is the router's hot path,
		// and the calls cost about a tenth of its instructions.
		k := entryKey(blockKey(h, m), 0)
		sh := &shards[k&mask]
		var hold uint64
		for spins := 0; ; spins++ {
			s := sh.seq.Load()
			if s&1 == 0 {
				hold = 0
				if t := sh.tab.Load(); t != nil {
					slots := t.slots
					n := uint64(len(slots))
					j, _ := bits.Mul64(k, n)
					for probes := n; probes > 0; probes-- {
						sl := &slots[j]
						if key := atomic.LoadUint64(&sl.key); key == k {
							hold = atomic.LoadUint64(&sl.hold)
							break
						} else if key == 0 {
							break
						}
						if j++; j == n {
							j = 0
						}
					}
				}
				if sh.seq.Load() == s {
					break
				}
			}
			if spins >= 8 {
				runtime.Gosched()
			}
		}
		hold &= run
		if lost := run &^ hold; lost != 0 && i > 0 {
			for ; lost != 0; lost &= lost - 1 {
				dst[bits.TrailingZeros64(lost)] = int32(i)
			}
		}
		run = hold
		if run == 0 {
			return i
		}
	}
	for ; run != 0; run &= run - 1 {
		dst[bits.TrailingZeros64(run)] = int32(len(chain))
	}
	return len(chain)
}

// match2 is Match for ids below 128 (65 to 128 registered, a common fleet size): match1's
// loop with the probes of a block's two words under one sequence-counter check, and no bitset
// of words still matching, which costs matchWide about a third of its instructions.
func (ix *Index) match2(dst []int32, chain []BlockHash, m Medium, bound int) int {
	run0, run1 := ^uint64(0), ^uint64(0)>>(128-bound)
	shards, mask := ix.shards, ix.mask
	salt1 := wordSalt(1)
	for i, h := range chain {
		base := baseKey(blockKey(h, m))
		k0, k1 := saltedKey(base, 0), saltedKey(base, salt1)
		sh := &shards[base&mask]
		var h0, h1 uint64
		for spins := 0; ; spins++ {
			s := sh.seq.Load()
			if s&1 == 0 {
				h0, h1 = 0, 0
				if t := sh.tab.Load(); t != nil {
					if run0 != 0 {
						h0 = t.readHold(k0)
					}
					if run1 != 0 {
						h1 = t.readHold(k1)
					}
				}
				if sh.seq.Load() == s {
					break
				}
			}
			if spins >= 8 {
				runtime.Gosched()
			}
		}
		h0 &= run0
		h1 &= run1
		if i > 0 {
			for lost := run0 &^ h0; lost != 0; lost &= lost - 1 {
				dst[bits.TrailingZeros64(lost)] = int32(i)
			}
			for lost := run1 &^ h1; lost != 0; lost &= lost - 1 {
				dst[64+bits.TrailingZeros64(lost)] = int32(i)
			}
		}
		run0, run1 = h0, h1
		if run0|run1 == 0 {
			return i
		}
	}
	for r := run0; r != 0; r &= r - 1 {
		dst[bits.TrailingZeros64(r)] = int32(len(chain))
	}
	for r := run1; r != 0; r &= r - 1 {
		dst[64+bits.TrailingZeros64(r)] = int32(len(chain))
	}
	return len(chain)
}

// matchWide is Match for any number of ids. All words of a block share a shard (see wordK),
// so each block costs one key mix and one sequence-counter check, and then one probe per word
// whose backends are still matching.
func (ix *Index) matchWide(dst []int32, chain []BlockHash, m Medium, bound int) int {
	var run, got [maxWords]uint64
	words := (bound + 63) / 64
	for w := range words {
		run[w] = ^uint64(0)
	}
	if r := bound % 64; r != 0 {
		run[words-1] = ^uint64(0) >> (64 - r)
	}
	alive := ^uint64(0) >> (64 - words) // words whose backends are still matching
	for i, h := range chain {
		ix.readWords(baseKey(blockKey(h, m)), alive, &got)
		next := uint64(0)
		for a := alive; a != 0; a &= a - 1 {
			w := bits.TrailingZeros64(a)
			r := run[w]
			hold := got[w] & r
			if lost := r &^ hold; lost != 0 && i > 0 {
				for ; lost != 0; lost &= lost - 1 {
					dst[w*64+bits.TrailingZeros64(lost)] = int32(i)
				}
			}
			run[w] = hold
			if hold != 0 {
				next |= 1 << w
			}
		}
		if alive = next; alive == 0 {
			return i
		}
	}
	for a := alive; a != 0; a &= a - 1 {
		w := bits.TrailingZeros64(a)
		for r := run[w]; r != 0; r &= r - 1 {
			dst[w*64+bits.TrailingZeros64(r)] = int32(len(chain))
		}
	}
	return len(chain)
}

// readWords sets got[w], for every word w in the bitset want, to the hold word of entry
// wordKey(base, w) (0 if absent), never blocking: it retries while a writer is active in the
// block's shard.
func (ix *Index) readWords(base, want uint64, got *[maxWords]uint64) {
	sh := &ix.shards[base&ix.mask]
	for spins := 0; ; spins++ {
		s := sh.seq.Load()
		if s&1 == 0 {
			if t := sh.tab.Load(); t != nil {
				for a := want; a != 0; a &= a - 1 {
					w := bits.TrailingZeros64(a)
					got[w] = t.readHold(wordKey(base, w))
				}
			} else {
				for a := want; a != 0; a &= a - 1 {
					got[bits.TrailingZeros64(a)] = 0
				}
			}
			if sh.seq.Load() == s {
				return
			}
		}
		if spins >= 8 {
			runtime.Gosched()
		}
	}
}
