package engine

// BlockHash identifies the content of one full KV block and, through chaining, everything before
// it: two prompts share a block hash exactly when they share the tokens up to the end of that
// block. The engine treats hashes as opaque.
type BlockHash uint64

const none = int32(-1)

// block is one KV block of the device. A block is in exactly one of three conditions:
// referenced (ref > 0, held by running requests), free and cached (ref == 0, hashed, on the
// free list and in the cache map, reusable by a prefix hit until evicted), or free and empty
// (ref == 0, not hashed, on the free list).
type block struct {
	hash       BlockHash
	ref        int32
	prev, next int32 // free-list links, none at the ends
	hashed     bool  // hash is valid and the cache map points at this block
	onFree     bool
}

// kvCache is the block pool with prefix reuse, after vLLM's KV cache manager: a map from block
// hash to the block holding it, and one free list whose head is evicted first. Releasing a
// request's blocks appends the cached ones to the tail in reverse order (a prompt's last
// blocks are the least likely to be shared, so they go first) and puts empty blocks at the head
// (reusing an empty block costs no cached content). Allocation takes the head; if it was cached,
// its hash leaves the map (an eviction). A prefix hit on a free cached block takes it off the
// list.
//
// Every operation is O(1) except where noted; nothing allocates after construction except the
// cache map's growth, which is bounded by the number of blocks.
type kvCache struct {
	blocks     []block
	head, tail int32
	free       int // blocks on the free list, cached or empty
	cached     map[BlockHash]int32

	// onEvict, when set, is told each hash that leaves the map by allocation.
	onEvict func(BlockHash)
}

func newKVCache(n int) *kvCache {
	c := &kvCache{
		blocks: make([]block, n),
		head:   none,
		tail:   none,
		cached: make(map[BlockHash]int32, n),
	}
	for i := range c.blocks {
		c.blocks[i] = block{prev: none, next: none}
		c.pushTail(int32(i))
	}
	return c
}

func (c *kvCache) pushTail(i int32) {
	b := &c.blocks[i]
	b.prev, b.next, b.onFree = c.tail, none, true
	if c.tail != none {
		c.blocks[c.tail].next = i
	} else {
		c.head = i
	}
	c.tail = i
	c.free++
}

func (c *kvCache) pushHead(i int32) {
	b := &c.blocks[i]
	b.prev, b.next, b.onFree = none, c.head, true
	if c.head != none {
		c.blocks[c.head].prev = i
	} else {
		c.tail = i
	}
	c.head = i
	c.free++
}

func (c *kvCache) unlink(i int32) {
	b := &c.blocks[i]
	if b.prev != none {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next != none {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.onFree = none, none, false
	c.free--
}

// lookup returns the block caching h.
func (c *kvCache) lookup(h BlockHash) (int32, bool) {
	i, ok := c.cached[h]
	return i, ok
}

// touch takes a reference on block i, found by lookup, taking it off the free list if needed.
func (c *kvCache) touch(i int32) {
	b := &c.blocks[i]
	if b.onFree {
		c.unlink(i)
	}
	b.ref++
}

// allocate takes the least recently freed block, evicting its cached content, with one
// reference. The caller has checked that a block is free.
func (c *kvCache) allocate() int32 {
	i := c.head
	c.unlink(i)
	b := &c.blocks[i]
	if b.hashed {
		delete(c.cached, b.hash)
		b.hashed = false
		if c.onEvict != nil {
			c.onEvict(b.hash)
		}
	}
	b.ref = 1
	return i
}

// release drops one reference on each block, last block first. O(len(ids)).
func (c *kvCache) release(ids []int32) {
	for k := len(ids) - 1; k >= 0; k-- {
		i := ids[k]
		b := &c.blocks[i]
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.hashed {
			c.pushTail(i)
		} else {
			c.pushHead(i)
		}
	}
}

// store records that referenced block i now holds the content h. It reports false, leaving the
// block unhashed, if another block already caches h (two requests computed the same prefix in
// the same step); the duplicate is freed as empty when released.
func (c *kvCache) store(i int32, h BlockHash) bool {
	if _, dup := c.cached[h]; dup {
		return false
	}
	b := &c.blocks[i]
	b.hash, b.hashed = h, true
	c.cached[h] = i
	return true
}

// clear forgets every free cached block (vLLM's reset_prefix_cache). Referenced blocks keep
// their content. O(free blocks).
func (c *kvCache) clear() {
	for i := c.head; i != none; i = c.blocks[i].next {
		b := &c.blocks[i]
		if b.hashed {
			delete(c.cached, b.hash)
			b.hashed = false
		}
	}
}
