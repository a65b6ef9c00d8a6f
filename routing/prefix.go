package routing

import "github.com/usher-llm/usher/prefixcache"

// BlockHash is one chained prompt block hash, as prefixcache computes it.
type BlockHash = prefixcache.BlockHash

type indexID = prefixcache.BackendID

// PrefixIndex is the part of a prefix index the router uses; *prefixcache.Index satisfies it.
// Match is called from Pick and Insert from Result's completion methods, on any goroutine, so
// both must be safe for concurrent use, and Match must not block. AddBackend is called only from
// Update, once per backend name the router has not seen before.
type PrefixIndex interface {
	// AddBackend interns a backend name (with its KV capacity in blocks, 0 when unknown) and
	// returns its dense index id. Adding a known name returns its existing id.
	AddBackend(name string, capacityBlocks int) (prefixcache.BackendID, error)
	// Match fills dst so that dst[id] is the number of leading blocks of chain held by index id,
	// and returns it.
	Match(dst []int32, chain []prefixcache.BlockHash) []int32
	// Insert records that backend id now holds every block of chain.
	Insert(id prefixcache.BackendID, chain []prefixcache.BlockHash) error
}

var _ PrefixIndex = (*prefixcache.Index)(nil)
