package routing

import "github.com/usher-llm/usher/prefixcache"

type indexID = prefixcache.HolderID

// PrefixIndex is the part of a prefix index the router uses; *prefixcache.Index satisfies it.
// Match is called from Pick, and Insert from Pick or Result's completion methods (see Learn),
// on any goroutine, so both must be safe for concurrent use, and Match must not block. AddBackend is called only from
// Update, once per backend name the router has not seen before.
type PrefixIndex interface {
	// AddBackend interns a backend name (with its KV capacity in blocks, 0 when unknown) and
	// returns its dense index id. Adding a known name returns its existing id.
	AddBackend(name string, capacityBlocks int) (prefixcache.HolderID, error)
	// Match fills dst so that dst[id] is the number of leading blocks of chain held by index id,
	// and returns it.
	Match(dst []int32, chain []prefixcache.BlockHash) []int32
	// Insert records that backend id now holds every block of chain.
	Insert(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
}

// PrefixRemover is implemented by prefix indexes that can forget blocks; a Router learning
// on pick (LearnOnPick) uses it to retract the blocks it predicted for a request that failed
// before its first token. *prefixcache.Index satisfies it. Safe for concurrent use.
type PrefixRemover interface {
	// Remove records that backend id no longer holds the blocks of chain.
	Remove(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
}

var (
	_ PrefixIndex   = (*prefixcache.Index)(nil)
	_ PrefixRemover = (*prefixcache.Index)(nil)
)
