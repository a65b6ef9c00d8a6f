package prefixcache

// ring is a growable FIFO of block keys: one backend's CLOCK queue. The front is the
// CLOCK hand. Each (backend, block) pair whose hold or stale bit is set appears in its
// backend's ring exactly once.
type ring struct {
	buf  []uint64
	head int
	n    int
}

const minRing = 64

func (r *ring) len() int { return r.n }

// push appends k at the back. It returns the bytes newly allocated (0 unless it grew).
func (r *ring) push(k uint64) int64 {
	var grown int64
	if r.n == len(r.buf) {
		grown = r.grow()
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = k
	r.n++
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
	if r.head++; r.head == len(r.buf) {
		r.head = 0
	}
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
	i := r.head + j
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return r.buf[i]
}
