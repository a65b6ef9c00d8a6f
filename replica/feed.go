package replica

import (
	"sync"
	"sync/atomic"
	"time"
)

// placement is one buffered session placement.
type placement struct {
	session uint64
	backend string
	blocks  int32
	expires int64 // Unix ms
}

// placeBuffer is the session.Feed a Replica hands out: a bounded buffer of placements
// between two flushes, in the order of the picks (a session placed twice is sent twice; the
// peers keep the later expiry). When full it drops the newest and counts it.
type placeBuffer struct {
	mu      sync.Mutex
	buf     []placement
	max     int
	dropped atomic.Uint64
}

// Placed implements session.Feed. O(1), allocation-free once the buffer has grown.
func (b *placeBuffer) Placed(session uint64, backend string, blocks int, expires time.Time) {
	b.mu.Lock()
	if len(b.buf) >= b.max {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.buf = append(b.buf, placement{session, backend, int32(min(max(blocks, 0), 1<<31-1)), expires.UnixMilli()})
	b.mu.Unlock()
}

// drain appends the buffered placements to dst, empties the buffer and returns dst.
func (b *placeBuffer) drain(dst []placement) []placement {
	b.mu.Lock()
	dst = append(dst, b.buf...)
	clear(b.buf) // drop the backend strings
	b.buf = b.buf[:0]
	b.mu.Unlock()
	return dst
}

func (b *placeBuffer) droppedCount() uint64 { return b.dropped.Load() }
