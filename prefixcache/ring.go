package prefixcache

// ring is a growable FIFO of block keys: one backend's CLOCK queue. The front is the
// CLOCK hand. Each (backend, block) pair whose hold or stale bit is set appears in its
// backend's ring exactly once. Its buffer is empty or a power of two long, so a position is
// its offset from head masked by len(buf)-1.
type ring struct {
	buf  []uint64
	head int
	n    int
}

const minRing = 64 // a power of two

func (r *ring) len() int { return r.n }

// push appends k at the back. It returns the bytes newly allocated (0 unless it grew).
func (r *ring) push(k uint64) int64 {
	var grown int64
	if r.n == len(r.buf) {
		grown = r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = k
	r.n++
	return grown
}

// reserve makes room for k more keys, growing exactly as k pushes would, and returns the
// bytes newly allocated.
func (r *ring) reserve(k int) int64 {
	var grown int64
	for r.n+k > len(r.buf) {
		grown += r.grow()
	}
	return grown
}

func (r *ring) grow() int64 {
	size := max(minRing, 2*len(r.buf))
	nb := make([]uint64, size)
	m := copy(nb, r.buf[r.head:])
	copy(nb[m:], r.buf[:r.head])
	old := len(r.buf)
	r.buf, r.head = nb, 0
	return int64(size-old) * 8
}

// pop removes and returns the front key; the ring must not be empty.
func (r *ring) pop() uint64 {
	k := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return k
}

// reset empties the ring and releases its buffer, returning the bytes released.
func (r *ring) reset() int64 {
	b := int64(len(r.buf)) * 8
	*r = ring{}
	return b
}

// clear empties the ring, keeping its buffer.
func (r *ring) clear() { r.head, r.n = 0, 0 }

// at returns the key j places behind the front; j < len.
func (r *ring) at(j int) uint64 {
	return r.buf[(r.head+j)&(len(r.buf)-1)]
}

// advance moves the CLOCK hand past the len(states) front keys, whose pairs had those states
// before the hand's visit: each pair that was referenced (ref of them) goes to the back, in
// order, and the others leave. len(states) <= len. O(len(states)), no allocation.
func (r *ring) advance(states []uint8, ref int) {
	mask := len(r.buf) - 1
	if ref > 0 {
		// Every key is copied to the back, and the copy kept (w advanced) only for a referenced
		// pair. The copy made while at key j goes n+w places past the front, w <= j, so modulo
		// len(buf) either past the back or onto a key already read: no key is lost.
		buf, head, tail := r.buf, r.head, r.head+r.n
		w := 0
		for j, st := range states {
			buf[(tail+w)&mask] = buf[(head+j)&mask]
			w += int(st >> 1 & st & 1) // st == pairLiveRef
		}
	}
	r.head = (r.head + len(states)) & mask
	r.n -= len(states) - ref
}
