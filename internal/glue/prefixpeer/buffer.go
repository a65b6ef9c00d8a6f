package prefixpeer

import (
	"sync"

	"github.com/usher-llm/usher/prefixcache"
)

var _ prefixcache.Feed = (*Buffer)(nil)

// DefaultBufferBytes is the Buffer bound used when none is given: 4 MiB, about half a million
// block hashes waiting.
const DefaultBufferBytes = 4 << 20

// What Buffer charges, besides 8 bytes per block hash, for one change and for the first
// change of a backend name since the last Drain (on top of the name's length).
const (
	changeBytes = 16
	nameBytes   = 32
)

// Buffer is a prefixcache.Feed that keeps what it hears in a bounded buffer until a replication
// goroutine takes it with Drain. When a change does not fit in the bound given to NewBuffer it drops
// that change, the newest, and counts it in Dropped: a replica that misses a chain only routes
// that prefix less well until it is learnt again, while an unbounded buffer would let a stalled
// replication link take the gateway's memory.
//
// The buffer charges 8 bytes per block hash, 16 per change and, per Drain period, the length of
// each backend name plus 32; it holds at most the bound of charges waiting, and as much again
// while a Drain is running (the batch being handed out). Backend names are interned per
// batch, so that the steady state allocates nothing: once the buffer has grown to its working
// size, Inserted, Removed and Drain allocate nothing.
//
// Buffer is safe for concurrent use: any number of goroutines may report changes while one
// drains (a second Drain waits for the first). Reporting takes a mutex held for the copy of
// one chain, never while Drain's callback runs. The zero value is a buffer of DefaultBufferBytes;
// a nil *Buffer is a valid prefixcache.Feed that hears nothing.
type Buffer struct {
	max int64 // immutable after NewBuffer; 0 means DefaultBufferBytes

	drainMu sync.Mutex // serialises Drain; held while its callback runs

	mu      sync.Mutex // guards the fields below
	bufs    [2]batch
	cur     int // bufs[cur] collects; the other one is empty or being drained
	dropped uint64
}

// batch is one buffer of changes: the changes in order, their chains back to back, and the
// backend names they use.
type batch struct {
	changes []change
	hashes  []prefixcache.BlockHash
	names   []string
	ids     map[string]uint32
	bytes   int64
}

type change struct {
	name    uint32 // index in names
	removed bool
	blocks  int // len(chain), stored from hashes' current end
}

func (b *batch) reset() {
	b.changes = b.changes[:0]
	b.hashes = b.hashes[:0]
	clear(b.names) // let go of the strings
	b.names = b.names[:0]
	clear(b.ids) // keeps the map's storage
	b.bytes = 0
}

// NewBuffer returns an empty Buffer bounded by maxBytes (≤ 0: DefaultBufferBytes). Its
// buffers grow as changes arrive, up to the bound. O(1).
func NewBuffer(maxBytes int) *Buffer {
	if maxBytes <= 0 {
		maxBytes = DefaultBufferBytes
	}
	return &Buffer{max: int64(maxBytes)}
}

// Inserted implements prefixcache.Feed: it buffers an insert of chain under backend, or drops it when the
// buffer is full. O(len(chain)); no allocation in steady state.
func (f *Buffer) Inserted(backend string, chain []prefixcache.BlockHash) {
	f.add(backend, chain, false)
}

// Removed implements prefixcache.Feed: it buffers a removal, as Inserted buffers an insert.
func (f *Buffer) Removed(backend string, chain []prefixcache.BlockHash) { f.add(backend, chain, true) }

func (f *Buffer) add(backend string, chain []prefixcache.BlockHash, removed bool) {
	if f == nil {
		return
	}
	limit := f.max
	if limit <= 0 {
		limit = DefaultBufferBytes
	}
	need := int64(len(chain))*8 + changeBytes
	f.mu.Lock()
	b := &f.bufs[f.cur]
	id, known := b.ids[backend]
	if !known {
		need += int64(len(backend)) + nameBytes
	}
	if need > limit-b.bytes {
		f.dropped++
		f.mu.Unlock()
		return
	}
	if !known {
		if b.ids == nil {
			b.ids = make(map[string]uint32)
		}
		id = uint32(len(b.names))
		b.names = append(b.names, backend)
		b.ids[backend] = id
	}
	b.changes = append(b.changes, change{name: id, removed: removed, blocks: len(chain)})
	b.hashes = append(b.hashes, chain...)
	b.bytes += need
	f.mu.Unlock()
}

// Drain calls fn for each buffered change, in the order they were reported (removed is false
// for an insert, true for a removal), then empties the buffer, and returns the number of
// changes. fn's chain is valid only during the call: copy or encode it. Changes reported while
// Drain runs go to the next Drain. fn may report changes to f but must not call Drain; a nil
// fn discards the changes. If fn panics, the rest of the batch is discarded. O(changes + their
// blocks); no allocation in steady state.
func (f *Buffer) Drain(fn func(backend string, chain []prefixcache.BlockHash, removed bool)) int {
	if f == nil {
		return 0
	}
	f.drainMu.Lock()
	defer f.drainMu.Unlock()
	f.mu.Lock()
	b := &f.bufs[f.cur]
	f.cur ^= 1 // the other batch is empty: the previous Drain reset it
	f.mu.Unlock()
	defer b.reset()
	if fn != nil {
		off := 0
		for _, c := range b.changes {
			end := off + c.blocks
			fn(b.names[c.name], b.hashes[off:end:end], c.removed)
			off = end
		}
	}
	return len(b.changes)
}

// Dropped returns the number of changes dropped because the buffer was full. O(1).
func (f *Buffer) Dropped() uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}
