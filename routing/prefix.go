package routing

// BlockHash and indexID stand in for prefixcache.BlockHash and prefixcache.BackendID until that
// package lands; they are aliases so the switch changes no code.
type (
	// BlockHash is one chained prompt block hash (prefixcache.BlockHash).
	BlockHash = uint64
	indexID   = uint32
)

// PrefixIndex is the part of a prefix index the router uses (prefixcache.Index satisfies it).
// Match and Insert are called from Pick and from Result's completion methods on any goroutine;
// AddBackend only from Update.
type PrefixIndex interface {
	// AddBackend interns a backend name and returns its dense index id.
	AddBackend(name string, capacityBlocks int) (indexID, error)
	// Match fills dst so that dst[id] is the number of leading blocks of chain held by index id.
	Match(dst []int32, chain []BlockHash) []int32
	// Insert records that backend id now holds every block of chain.
	Insert(id indexID, chain []BlockHash) error
}
