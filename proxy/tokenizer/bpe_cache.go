package tokenizer

import "hash/maphash"

// wordCache remembers the ids of short words: a direct-mapped table of fixed-size entries
// (512 KiB), one per scratch space (as many as GOMAXPROCS are kept, and used without locks),
// that allocates nothing once made. Prompts repeat their words — code identifiers, common words, indentation — so
// most lookups hit and skip the merges.
type wordCache struct {
	seed    maphash.Seed
	entries [cacheEntries]cacheEntry
}

const (
	cacheEntries = 8192 // a power of two
	cacheKey     = 38   // the longest word cached, in bytes (an entry is 64 bytes)
	cacheIDs     = 6    // the most ids a cached word may have
)

type cacheEntry struct {
	klen, n uint8
	key     [cacheKey]byte
	ids     [cacheIDs]uint32
}

// get appends the cached ids of w to dst; ok is false on a miss.
func (c *wordCache) get(dst []uint32, w string) ([]uint32, bool) {
	if len(w) > cacheKey {
		return dst, false
	}
	e := &c.entries[maphash.String(c.seed, w)&(cacheEntries-1)]
	if int(e.klen) != len(w) || e.n == 0 || string(e.key[:e.klen]) != w {
		return dst, false
	}
	return append(dst, e.ids[:e.n]...), true
}

// put caches the ids of w, replacing whatever held its slot.
func (c *wordCache) put(w string, ids []uint32) {
	if len(w) > cacheKey || len(ids) > cacheIDs || len(ids) == 0 {
		return
	}
	e := &c.entries[maphash.String(c.seed, w)&(cacheEntries-1)]
	e.klen, e.n = uint8(len(w)), uint8(len(ids))
	copy(e.key[:], w)
	copy(e.ids[:], ids)
}
