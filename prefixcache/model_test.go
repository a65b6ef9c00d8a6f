package prefixcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference: a naive model of the documented semantics, one list per backend in CLOCK
// order (front first) and linear searches everywhere.

type refPair struct {
	key   uint64 // block key (hash with medium folded in)
	ref   bool
	stale bool
}

type refBackend struct {
	name      string
	capacity  int
	queue     []refPair
	evictions int64
	engine    map[engineKey]BlockHash
}

func (b *refBackend) find(k uint64) int {
	for i, p := range b.queue {
		if p.key == k {
			return i
		}
	}
	return -1
}

func (b *refBackend) count(stale bool) int {
	n := 0
	for _, p := range b.queue {
		if p.stale == stale {
			n++
		}
	}
	return n
}

type refIndex struct {
	opts      Options
	backends  []*refBackend // by id, nil when free
	evictions int64
}

func newRef(o Options) *refIndex {
	o, _ = o.withDefaults()
	return &refIndex{opts: o, backends: make([]*refBackend, o.MaxBackends)}
}

func (r *refIndex) pairs() int {
	n := 0
	for _, b := range r.backends {
		if b != nil {
			n += len(b.queue)
		}
	}
	return n
}

func (r *refIndex) bound() int {
	for i := len(r.backends) - 1; i >= 0; i-- {
		if r.backends[i] != nil {
			return i + 1
		}
	}
	return 0
}

func (r *refIndex) add(name string, capacity int) (BackendID, error) {
	if name == "" {
		return 0, ErrInvalidName
	}
	if capacity < 0 {
		return 0, ErrInvalidCapacity
	}
	if capacity == 0 {
		capacity = r.opts.DefaultCapacity
	}
	for i, b := range r.backends {
		if b != nil && b.name == name {
			return BackendID(i), r.setCapacity(BackendID(i), capacity)
		}
	}
	for i, b := range r.backends {
		if b == nil {
			r.backends[i] = &refBackend{name: name, capacity: capacity}
			return BackendID(i), nil
		}
	}
	return 0, ErrTooManyBackends
}

func (r *refIndex) get(id BackendID) (*refBackend, error) {
	if int(id) >= len(r.backends) || r.backends[id] == nil {
		return nil, ErrUnknownBackend
	}
	return r.backends[id], nil
}

func (r *refIndex) setCapacity(id BackendID, capacity int) error {
	if capacity < 0 {
		return ErrInvalidCapacity
	}
	if capacity == 0 {
		capacity = r.opts.DefaultCapacity
	}
	b, err := r.get(id)
	if err != nil {
		return err
	}
	b.capacity = capacity
	r.evictToCapacity(b)
	return nil
}

// step moves the CLOCK hand one pair and reports whether it evicted a live pair.
func (r *refIndex) step(b *refBackend) bool {
	p := b.queue[0]
	b.queue = b.queue[1:]
	switch {
	case p.stale:
		return false
	case p.ref:
		p.ref = false
		b.queue = append(b.queue, p)
		return false
	default:
		b.evictions++
		r.evictions++
		return true
	}
}

func (r *refIndex) evictToCapacity(b *refBackend) {
	for b.count(false) > b.capacity {
		for !r.step(b) {
		}
	}
}

func (r *refIndex) budget() {
	maxPairs := int(r.opts.MaxBytes / PairBytes)
	for r.pairs() > maxPairs {
		var victim *refBackend
		for _, b := range r.backends {
			if b != nil && (victim == nil || len(b.queue) > len(victim.queue)) {
				victim = b
			}
		}
		for r.pairs() > maxPairs && len(victim.queue) > 0 {
			r.step(victim)
		}
	}
}

func (r *refIndex) insertLocked(b *refBackend, chain []BlockHash, m Medium) {
	n := min(len(chain), r.opts.MaxChainBlocks, b.capacity)
	for i := n - 1; i >= 0; i-- {
		k := blockKey(chain[i], m)
		if j := b.find(k); j >= 0 {
			b.queue[j].ref = true
			b.queue[j].stale = false
			continue
		}
		b.queue = append(b.queue, refPair{key: k})
	}
	r.evictToCapacity(b)
}

func (r *refIndex) insert(id BackendID, chain []BlockHash, m Medium) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	r.insertLocked(b, chain, m)
	r.budget()
	return nil
}

func (r *refIndex) removeLocked(b *refBackend, chain []BlockHash, m Medium) {
	for _, h := range chain[:min(len(chain), r.opts.MaxChainBlocks)] {
		if j := b.find(blockKey(h, m)); j >= 0 && !b.queue[j].stale {
			b.queue[j].stale = true
			b.queue[j].ref = false
		}
	}
	if stale := b.count(true); stale >= compactMin && stale > b.count(false) {
		b.queue = slices.DeleteFunc(b.queue, func(p refPair) bool { return p.stale })
	}
}

func (r *refIndex) remove(id BackendID, chain []BlockHash, m Medium) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	r.removeLocked(b, chain, m)
	return nil
}

func (r *refIndex) clear(id BackendID) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	b.queue = nil
	b.engine = nil
	return nil
}

func (r *refIndex) removeBackend(id BackendID) error {
	if _, err := r.get(id); err != nil {
		return err
	}
	r.backends[id] = nil
	return nil
}

func (r *refIndex) match(chain []BlockHash, m Medium) []int32 {
	out := make([]int32, r.bound())
	chain = chain[:min(len(chain), r.opts.MaxChainBlocks)]
	for id, b := range r.backends[:len(out)] {
		if b == nil {
			continue
		}
		n := 0
		for _, h := range chain {
			j := b.find(blockKey(h, m))
			if j < 0 || b.queue[j].stale {
				break
			}
			n++
		}
		out[id] = int32(n)
	}
	return out
}

func (r *refIndex) applyStored(id BackendID, ev StoredBlocks) error {
	n := len(ev.EngineHashes)
	if ev.BlockSize <= 0 || n == 0 || len(ev.Tokens) != n*ev.BlockSize {
		return ErrInvalidEvent
	}
	b, err := r.get(id)
	if err != nil {
		return err
	}
	m := ParseMedium(ev.Medium)
	seed := ev.Seed
	if ev.HasParent {
		u, ok := b.engine[engineKey{ev.Parent, m}]
		for o := Medium(0); !ok && o < numMedia; o++ {
			u, ok = b.engine[engineKey{ev.Parent, o}]
		}
		if !ok {
			return ErrUnknownParent
		}
		seed = u
	}
	chain := HashTokens(nil, seed, ev.Tokens, ev.BlockSize)
	if b.engine == nil {
		b.engine = map[engineKey]BlockHash{}
	}
	if len(b.engine)+n > 2*b.capacity+1024 {
		b.engine = map[engineKey]BlockHash{}
	}
	for i, eh := range ev.EngineHashes {
		b.engine[engineKey{eh, m}] = chain[i]
	}
	r.insertLocked(b, chain, m)
	r.budget()
	return nil
}

func (r *refIndex) applyRemoved(id BackendID, medium string, hashes []uint64) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	m := ParseMedium(medium)
	var chain []BlockHash
	for _, eh := range hashes {
		if u, ok := b.engine[engineKey{eh, m}]; ok {
			chain = append(chain, u)
			delete(b.engine, engineKey{eh, m})
		}
	}
	r.removeLocked(b, chain, m)
	return nil
}

// snapshotRing reads backend id's CLOCK queue and pair bits out of the index, front first.
func (ix *Index) snapshotRing(id BackendID) []refPair {
	b := ix.load(id)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]refPair, 0, b.ring.len())
	for j := range b.ring.len() {
		i := (b.ring.head + j) % len(b.ring.buf)
		k := b.ring.buf[i]
		hold, aux := ix.peek(entryKey(k, int(id>>6)))
		bit := uint64(1) << (id & 63)
		out = append(out, refPair{key: k, ref: hold&bit != 0 && aux&bit != 0, stale: hold&bit == 0})
		if hold&bit == 0 && aux&bit == 0 {
			out[len(out)-1].key = ^uint64(0) // queued pair with no bits: corrupt
		}
	}
	return out
}

// checkInvariants verifies the index's internal consistency: counters agree with rings and
// tables, and every bit in a table belongs to exactly one ring slot.
func (ix *Index) checkInvariants() error {
	bits := map[[2]uint64]int{} // (entry key, id) → ring slots
	var pairs int64
	for id := range ix.backends {
		b := ix.backends[id].Load()
		if b == nil {
			continue
		}
		b.mu.Lock()
		live, stale := 0, 0
		for j := range b.ring.len() {
			k := b.ring.buf[(b.ring.head+j)%len(b.ring.buf)]
			ek := entryKey(k, id>>6)
			bits[[2]uint64{ek, uint64(id)}]++
			hold, aux := ix.peek(ek)
			bit := uint64(1) << (id & 63)
			switch {
			case hold&bit != 0:
				live++
			case aux&bit != 0:
				stale++
			default:
				b.mu.Unlock()
				return fmt.Errorf("backend %d: queued key %#x has no bits", id, k)
			}
		}
		if live != b.live || stale != b.stale || int64(b.ring.len()) != b.size.Load() {
			b.mu.Unlock()
			return fmt.Errorf("backend %d: live %d/%d stale %d/%d size %d/%d", id, live, b.live, stale, b.stale, b.ring.len(), b.size.Load())
		}
		if b.live > b.capacity {
			b.mu.Unlock()
			return fmt.Errorf("backend %d: %d live > capacity %d", id, b.live, b.capacity)
		}
		pairs += int64(b.ring.len())
		b.mu.Unlock()
	}
	if got := ix.pairs.Load(); got != pairs {
		return fmt.Errorf("pairs counter %d, rings hold %d", got, pairs)
	}
	for si := range ix.shards {
		t := ix.shards[si].tab.Load()
		if t == nil {
			continue
		}
		count := 0
		for i, s := range t.slots {
			if s.key == 0 {
				continue
			}
			count++
			if s.key&ix.mask != uint64(si) {
				return fmt.Errorf("key %#x in shard %d", s.key, si)
			}
			if got := t.find(s.key); got != i {
				return fmt.Errorf("key %#x at %d not found by probing (%d)", s.key, i, got)
			}
			aux := s.aux
			if s.hold == 0 && aux == 0 {
				return fmt.Errorf("empty entry %#x kept", s.key)
			}
			for w := s.hold | aux; w != 0; w &= w - 1 {
				// The word index is not recoverable from the key; check the bit's owner
				// exists among ids ≡ bit (mod 64) with the key queued.
				bit := uint64(0)
				for x := w & -w; x > 1; x >>= 1 {
					bit++
				}
				found := false
				for id := bit; id < uint64(len(ix.backends)); id += 64 {
					if bits[[2]uint64{s.key, id}] == 1 {
						found = true
						break
					}
				}
				if !found {
					return fmt.Errorf("entry %#x bit %d not queued by any backend", s.key, bit)
				}
			}
		}
		if count != t.count {
			return fmt.Errorf("shard %d count %d, table holds %d", si, t.count, count)
		}
	}
	for k, n := range bits {
		if n != 1 {
			return fmt.Errorf("pair %v queued %d times", k, n)
		}
	}
	return nil
}

// peek reads an entry's words under its shard lock.
func (ix *Index) peek(k uint64) (hold, aux uint64) {
	sh := &ix.shards[k&ix.mask]
	sh.lock()
	defer sh.unlock()
	t := sh.tab.Load()
	if t == nil {
		return 0, 0
	}
	i := t.find(k)
	if i < 0 {
		return 0, 0
	}
	return t.slots[i].hold, t.slots[i].aux
}

// An op is one step of a model-based run.
type op struct {
	kind   uint8
	id     BackendID
	n      int // capacity, chain choice or length
	chain  []BlockHash
	medium Medium
	ev     StoredBlocks
	hashes []uint64
}

const (
	opAdd = iota
	opRemoveBackend
	opClearBackend
	opInsert
	opRemove
	opMatch
	opSetCapacity
	opStored
	opRemoved
	numOps
)

// runModel applies ops to an Index and the reference, comparing results, rings (eviction order
// included), statistics and invariants after every step.
func runModel(t testing.TB, o Options, ops []op) {
	ix, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ref := newRef(o)
	same := func(step int, what string, got, want error) {
		if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
			t.Fatalf("step %d %s: got error %v, want %v", step, what, got, want)
		}
	}
	var dst []int32
	for step, p := range ops {
		switch p.kind {
		case opAdd:
			name := fmt.Sprintf("b%d", p.id)
			gotID, gotErr := ix.AddBackend(name, p.n)
			wantID, wantErr := ref.add(name, p.n)
			same(step, "AddBackend", gotErr, wantErr)
			if gotErr == nil && gotID != wantID {
				t.Fatalf("step %d AddBackend(%q): got id %d, want %d", step, name, gotID, wantID)
			}
		case opRemoveBackend:
			same(step, "RemoveBackend", ix.RemoveBackend(p.id), ref.removeBackend(p.id))
		case opClearBackend:
			same(step, "ClearBackend", ix.ClearBackend(p.id), ref.clear(p.id))
		case opSetCapacity:
			same(step, "SetCapacity", ix.SetCapacity(p.id, p.n), ref.setCapacity(p.id, p.n))
		case opInsert:
			var got error
			if p.medium == GPU {
				got = ix.Insert(p.id, p.chain)
			} else {
				got = ix.insert(p.id, p.chain, p.medium)
			}
			same(step, "Insert", got, ref.insert(p.id, p.chain, p.medium))
		case opRemove:
			var got error
			if p.medium == GPU {
				got = ix.Remove(p.id, p.chain)
			} else {
				got = ix.remove(p.id, p.chain, p.medium)
			}
			same(step, "Remove", got, ref.remove(p.id, p.chain, p.medium))
		case opMatch:
			dst = ix.MatchMedium(dst, p.chain, p.medium)
			if want := ref.match(p.chain, p.medium); !slices.Equal(dst, want) {
				t.Fatalf("step %d Match(%d blocks, %v): got %v, want %v", step, len(p.chain), p.medium, dst, want)
			}
		case opStored:
			same(step, "ApplyStored", ix.ApplyStored(p.id, p.ev), ref.applyStored(p.id, p.ev))
		case opRemoved:
			var got error
			if p.ev.Medium == "" {
				got = ix.ApplyRemoved(p.id, p.hashes)
			} else {
				got = ix.ApplyRemovedFrom(p.id, p.ev.Medium, p.hashes)
			}
			same(step, "ApplyRemoved", got, ref.applyRemoved(p.id, p.ev.Medium, p.hashes))
		}
		if ix.Bound() != ref.bound() {
			t.Fatalf("step %d: Bound %d, want %d", step, ix.Bound(), ref.bound())
		}
		for id, rb := range ref.backends {
			if rb == nil {
				continue
			}
			got := ix.snapshotRing(BackendID(id))
			if !slices.Equal(got, rb.queue) && !(len(got) == 0 && len(rb.queue) == 0) {
				t.Fatalf("step %d (op %d): backend %d queue\n got %v\nwant %v", step, p.kind, id, got, rb.queue)
			}
		}
		if err := ix.checkInvariants(); err != nil {
			t.Fatalf("step %d (op %d): %v", step, p.kind, err)
		}
		st := ix.Stats()
		if st.Evictions != ref.evictions {
			t.Fatalf("step %d: Evictions %d, want %d", step, st.Evictions, ref.evictions)
		}
		var live, stale int64
		for _, rb := range ref.backends {
			if rb != nil {
				live += int64(rb.count(false))
				stale += int64(rb.count(true))
			}
		}
		if st.Blocks != live || st.Stale != stale {
			t.Fatalf("step %d: Blocks %d Stale %d, want %d %d", step, st.Blocks, st.Stale, live, stale)
		}
	}
}

// opGen turns a stream of small numbers into operations over a small universe of shared
// prefixes, so that inserts overlap, evictions and budget pressure are frequent, and both
// the single-word (ids < 64) and the wide paths are exercised.
type opGen struct {
	next     func(n int) int // a number in [0, n)
	backends int
	convs    [][]uint32 // token sequences of a few conversations
	seed     BlockHash
	engine   map[BackendID][]uint64 // engine hashes handed out per backend
	ehash    uint64
}

func newOpGen(next func(int) int, backends int) *opGen {
	g := &opGen{next: next, backends: backends, seed: Seed("m", "", ""), engine: map[BackendID][]uint64{}}
	for c := 0; c < 6; c++ {
		toks := make([]uint32, 4*24)
		for i := range toks {
			toks[i] = uint32(c*1000 + i)
			if i < 4*3 {
				toks[i] = uint32(i) // a shared 3-block system prompt
			}
		}
		g.convs = append(g.convs, toks)
	}
	return g
}

func (g *opGen) id() BackendID {
	if g.next(8) == 0 {
		return BackendID(g.next(g.backends + 2)) // sometimes unknown
	}
	if g.backends <= 64 {
		return BackendID(g.next(g.backends))
	}
	// Favour a few low ids and a few past 64.
	ids := []int{0, 1, 2, 3, 64, 65, 70}
	v := ids[g.next(len(ids))]
	if v >= g.backends {
		v = g.next(g.backends)
	}
	return BackendID(v)
}

func (g *opGen) chain() []BlockHash {
	c := g.convs[g.next(len(g.convs))]
	n := g.next(len(c)/4 + 1)
	return HashTokens(nil, g.seed, c[:n*4], 4)
}

func (g *opGen) op() op {
	p := op{kind: uint8(g.next(numOps)), id: g.id()}
	if g.next(4) == 0 {
		p.medium = Medium(g.next(int(numMedia)))
	}
	switch p.kind {
	case opAdd, opSetCapacity:
		p.n = []int{0, 1, 3, 8, 20, 40, -1}[g.next(7)]
	case opInsert, opRemove, opMatch:
		p.chain = g.chain()
	case opStored:
		c := g.convs[g.next(len(g.convs))]
		start, n := g.next(8), 1+g.next(6)
		hashes := make([]uint64, n)
		for i := range hashes {
			g.ehash++
			hashes[i] = g.ehash
		}
		p.ev = StoredBlocks{EngineHashes: hashes, Tokens: c[start*4 : (start+n)*4], BlockSize: 4, Seed: g.seed,
			Medium: []string{"", "GPU", "CPU", "disk"}[g.next(4)]}
		if prev := g.engine[p.id]; start > 0 && len(prev) > 0 {
			p.ev.Parent, p.ev.HasParent = prev[g.next(len(prev))], true
		}
		if g.next(10) == 0 {
			p.ev.BlockSize = g.next(3) // sometimes invalid
		}
		g.engine[p.id] = append(g.engine[p.id], hashes...)
	case opRemoved:
		if prev := g.engine[p.id]; len(prev) > 0 {
			for range 1 + g.next(4) {
				p.hashes = append(p.hashes, prev[g.next(len(prev))])
			}
		}
		p.ev.Medium = []string{"", "CPU"}[g.next(2)]
	}
	return p
}

func modelOptions(budgetPairs int) Options {
	return Options{Shards: 4, DefaultCapacity: 30, MaxBytes: int64(budgetPairs) * PairBytes, MaxChainBlocks: 20, MaxBackends: 72}
}

func TestModel(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("narrow/%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 98))
			g := newOpGen(r.IntN, 5)
			var ops []op
			for i := range 4 {
				ops = append(ops, op{kind: opAdd, id: BackendID(i), n: 400})
			}
			for range 2000 {
				p := g.op()
				if p.kind == opAdd || p.kind == opSetCapacity {
					p.n *= 10
				}
				if (p.kind == opClearBackend || p.kind == opMatch) && r.IntN(4) != 0 {
					p.kind = opRemove // keep stale pairs around long enough to compact
					p.chain = g.chain()
				}
				ops = append(ops, p)
			}
			o := modelOptions([]int{300, 1 << 20}[seed%2])
			o.MaxBackends = 8
			o.MaxChainBlocks = 22
			runModel(t, o, ops)
		})
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("wide/%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			g := newOpGen(r.IntN, 72)
			var ops []op
			// Register a few backends up front, including ids past 64.
			for i := range 70 {
				ops = append(ops, op{kind: opAdd, id: BackendID(i), n: []int{0, 8, 20, 40}[i%4]})
			}
			for range 1200 {
				ops = append(ops, g.op())
			}
			runModel(t, modelOptions([]int{50, 400, 1 << 20}[seed%3]), ops)
		})
	}
}

// FuzzOps runs byte-driven operation sequences against the reference.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte("insert match remove clear add 0123456789abcdefghijklmnopqrstuvwxyz"))
	f.Add(make([]byte, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		pos := 0
		next := func(n int) int {
			if n <= 1 || pos >= len(data) {
				pos++
				return 0
			}
			v := int(data[pos]) % n
			pos++
			return v
		}
		budget := []int{20, 100, 1 << 20}[int(data[0])%3]
		data = data[1:]
		g := newOpGen(next, 72)
		var ops []op
		for i := range 6 {
			ops = append(ops, op{kind: opAdd, id: BackendID(i), n: 10})
		}
		for pos < len(data) && len(ops) < 400 {
			ops = append(ops, g.op())
		}
		runModel(t, modelOptions(budget), ops)
	})
}
