package prefixcache

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference: a naive model of the documented semantics, with linear searches everywhere.
// Each (backend, medium) has a capacity, a list in CLOCK order (front first) and, for the
// exact mode, a map from the engine's block hashes to usher's: an engine hash names its block
// until the engine removes it or the block leaves that medium; a block leaves on a BlockRemoved
// only once no engine hash names it any more.

type refPair struct {
	key   uint64 // block key (hash with medium folded in)
	ref   bool
	stale bool
}

type refTier struct {
	capacity  int
	queue     []refPair
	evictions int64
	engine    map[uint64]BlockHash // engine hash → usher hash
}

type refBackend struct {
	name  string
	tiers [NumMedia]refTier
}

func (t *refTier) find(k uint64) int {
	for i, p := range t.queue {
		if p.key == k {
			return i
		}
	}
	return -1
}

func (t *refTier) count(stale bool) int {
	n := 0
	for _, p := range t.queue {
		if p.stale == stale {
			n++
		}
	}
	return n
}

// names returns how many engine hashes name block u.
func (t *refTier) names(u BlockHash) int {
	n := 0
	for _, v := range t.engine {
		if v == u {
			n++
		}
	}
	return n
}

// named returns how many blocks have at least one engine hash as their name.
func (t *refTier) named() int {
	blocks := map[BlockHash]bool{}
	for _, v := range t.engine {
		blocks[v] = true
	}
	return len(blocks)
}

// forget drops every engine hash naming u and returns how many there were.
func (t *refTier) forget(u BlockHash) int {
	n := 0
	for e, v := range t.engine {
		if v == u {
			delete(t.engine, e)
			n++
		}
	}
	return n
}

func (t *refTier) charge() int64 {
	return int64(len(t.queue))*PairBytes + int64(len(t.engine))*EngineHashBytes
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

func (r *refIndex) charge() int64 {
	var c int64
	for _, b := range r.backends {
		if b != nil {
			for m := range b.tiers {
				c += b.tiers[m].charge()
			}
		}
	}
	return c
}

func (r *refIndex) bound() int {
	for i := len(r.backends) - 1; i >= 0; i-- {
		if r.backends[i] != nil {
			return i + 1
		}
	}
	return 0
}

// resolve is the capacity of medium m given as blocks (0: the medium's default).
func (r *refIndex) resolve(m Medium, blocks int) int {
	if blocks != 0 {
		return blocks
	}
	blocks = []int{r.opts.DefaultCapacity, r.opts.DefaultCPUCapacity, r.opts.DefaultRemoteCapacity}[m]
	if blocks == 0 {
		return noLimit
	}
	return blocks
}

func (r *refIndex) add(name string, capacity int) (HolderID, error) {
	if name == "" {
		return 0, ErrInvalidName
	}
	if capacity < 0 {
		return 0, ErrInvalidCapacity
	}
	for i, b := range r.backends {
		if b != nil && b.name == name {
			if capacity == 0 { // re-adding without a capacity keeps the one it has
				return HolderID(i), nil
			}
			return HolderID(i), r.setCapacity(HolderID(i), GPU, capacity)
		}
	}
	for i, b := range r.backends {
		if b == nil {
			nb := &refBackend{name: name}
			for m := range NumMedia {
				nb.tiers[m].capacity = r.resolve(m, 0)
			}
			nb.tiers[GPU].capacity = r.resolve(GPU, capacity)
			r.backends[i] = nb
			return HolderID(i), nil
		}
	}
	return 0, ErrTooManyBackends
}

func (r *refIndex) get(id HolderID) (*refBackend, error) {
	if int(id) >= len(r.backends) || r.backends[id] == nil {
		return nil, ErrUnknownBackend
	}
	return r.backends[id], nil
}

func (r *refIndex) setCapacity(id HolderID, m Medium, capacity int) error {
	if capacity < 0 || m >= NumMedia {
		return ErrInvalidCapacity
	}
	b, err := r.get(id)
	if err != nil {
		return err
	}
	b.tiers[m].capacity = r.resolve(m, capacity)
	r.evictToCapacity(&b.tiers[m], m)
	return nil
}

// step moves t's CLOCK hand one pair and returns what left: pairs evicted (0 or 1) and the
// bytes of charge released.
func (r *refIndex) step(t *refTier, m Medium) (evicted int, freed int64) {
	p := t.queue[0]
	t.queue = t.queue[1:]
	switch {
	case p.stale:
		return 0, PairBytes
	case p.ref:
		p.ref = false
		t.queue = append(t.queue, p)
		return 0, 0
	default:
		t.evictions++
		r.evictions++
		return 1, PairBytes + int64(t.forget(usherHash(p.key, m)))*EngineHashBytes
	}
}

// evictToCapacity evicts until t is within its capacity. Once an engine named some of t's
// blocks they are the engine's to evict, and are evicted here only when they alone are over
// capacity; the blocks only predicted may hold the room the named ones leave, and at least a
// quarter of the capacity, and are evicted among themselves: the hand moves named blocks to
// the back as they are.
func (r *refIndex) evictToCapacity(t *refTier, m Medium) {
	if named := t.named(); named > 0 {
		if t.capacity == noLimit {
			return
		}
		allowance := max(t.capacity-named, t.capacity/4)
		for t.count(false)-t.named() > allowance {
			if p := t.queue[0]; !p.stale && t.names(usherHash(p.key, m)) > 0 {
				t.queue = append(t.queue[1:], p)
				continue
			}
			r.step(t, m)
		}
		if named > t.capacity {
			for t.count(false) > t.capacity {
				for ev, _ := r.step(t, m); ev == 0; ev, _ = r.step(t, m) {
				}
			}
		}
		return
	}
	for t.count(false) > t.capacity {
		for ev, _ := r.step(t, m); ev == 0; ev, _ = r.step(t, m) {
		}
	}
}

// budget evicts until the index is within its byte budget: from the (backend, medium) charged
// the most, CPU and Remote before GPU, the lowest id and then medium first on ties.
func (r *refIndex) budget() {
	for r.charge() > r.opts.MaxBytes {
		var victim *refTier
		var vm Medium
		for _, media := range [][]Medium{{CPU, Remote}, {GPU}} {
			for _, b := range r.backends {
				for _, m := range media {
					if b != nil && b.tiers[m].charge() > 0 && (victim == nil || b.tiers[m].charge() > victim.charge()) {
						victim, vm = &b.tiers[m], m
					}
				}
			}
			if victim != nil {
				break
			}
		}
		for r.charge() > r.opts.MaxBytes && len(victim.queue) > 0 {
			r.step(victim, vm)
		}
	}
}

func (r *refIndex) insertLocked(b *refBackend, chain []BlockHash, m Medium, engine []uint64) {
	t := &b.tiers[m]
	n := min(len(chain), r.opts.MaxChainBlocks, t.capacity)
	for i := n - 1; i >= 0; i-- {
		k := blockKey(chain[i], m)
		if j := t.find(k); j >= 0 {
			t.queue[j].ref = true
			t.queue[j].stale = false
			continue
		}
		t.queue = append(t.queue, refPair{key: k})
	}
	if engine != nil {
		if t.engine == nil {
			t.engine = map[uint64]BlockHash{}
		}
		for i := range n {
			t.engine[engine[i]] = chain[i]
		}
	}
	r.evictToCapacity(t, m)
}

func (r *refIndex) insert(id HolderID, chain []BlockHash, m Medium) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	r.insertLocked(b, chain, m, nil)
	r.budget()
	return nil
}

// removeLocked removes b's pairs of medium m for chain; a prediction's retraction (predicted)
// leaves the blocks an engine named.
func (r *refIndex) removeLocked(b *refBackend, chain []BlockHash, m Medium, predicted bool) {
	t := &b.tiers[m]
	for _, h := range chain {
		if predicted && t.names(h) > 0 {
			continue
		}
		if j := t.find(blockKey(h, m)); j >= 0 && !t.queue[j].stale {
			t.queue[j].stale = true
			t.queue[j].ref = false
			t.forget(h)
		}
	}
	if stale := t.count(true); stale >= compactMin && stale > t.count(false) {
		t.queue = slices.DeleteFunc(t.queue, func(p refPair) bool { return p.stale })
	}
}

func (r *refIndex) remove(id HolderID, chain []BlockHash, m Medium) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	r.removeLocked(b, chain[:min(len(chain), r.opts.MaxChainBlocks)], m, true)
	return nil
}

func (r *refIndex) clear(id HolderID) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	for m := range b.tiers {
		b.tiers[m].queue = nil
		b.tiers[m].engine = nil
	}
	return nil
}

func (r *refIndex) removeBackend(id HolderID) error {
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
		if b == nil || m >= NumMedia {
			continue
		}
		t := &b.tiers[m]
		n := 0
		for _, h := range chain {
			j := t.find(blockKey(h, m))
			if j < 0 || t.queue[j].stale {
				break
			}
			n++
		}
		out[id] = int32(n)
	}
	return out
}

func (r *refIndex) applyStored(id HolderID, ev StoredBlocks) error {
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
		u, ok := b.tiers[m].engine[ev.Parent]
		for o := Medium(0); !ok && o < NumMedia; o++ {
			u, ok = b.tiers[o].engine[ev.Parent]
		}
		if !ok {
			return ErrUnknownParent
		}
		seed = u
	}
	r.insertLocked(b, HashTokens(nil, seed, ev.Tokens, ev.BlockSize), m, ev.EngineHashes)
	r.budget()
	return nil
}

func (r *refIndex) applyRemoved(id HolderID, medium string, hashes []uint64) error {
	b, err := r.get(id)
	if err != nil {
		return err
	}
	m := ParseMedium(medium)
	t := &b.tiers[m]
	var gone []BlockHash
	for _, eh := range hashes {
		if u, ok := t.engine[eh]; ok {
			delete(t.engine, eh)
			if t.names(u) == 0 {
				gone = append(gone, u)
			}
		}
	}
	r.removeLocked(b, gone, m, false)
	return nil
}

// snapshotRing reads the CLOCK queue of backend id's medium m and its pair bits out of the
// index, front first.
func (ix *Index) snapshotRing(id HolderID, m Medium) []refPair {
	b := ix.load(id)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rg := &b.tiers[m].ring
	out := make([]refPair, 0, rg.len())
	for j := range rg.len() {
		k := rg.at(j)
		hold, aux := ix.peek(entryKey(k, int(id>>6)))
		bit := uint64(1) << (id & 63)
		out = append(out, refPair{key: k, ref: hold&bit != 0 && aux&bit != 0, stale: hold&bit == 0})
		if hold&bit == 0 && aux&bit == 0 {
			out[len(out)-1].key = ^uint64(0) // queued pair with no bits: corrupt
		}
	}
	return out
}

// engineNames returns the engine hashes backend id's medium m remembers, with their blocks.
func (ix *Index) engineNames(id HolderID, m Medium) map[uint64]BlockHash {
	b := ix.load(id)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[uint64]BlockHash{}
	e := b.tiers[m].eng
	if e == nil {
		return out
	}
	// Walk the reverse lists of the medium's live pairs; checkInvariants proves they hold
	// every forward entry.
	for j := range b.tiers[m].ring.len() {
		u := usherHash(b.tiers[m].ring.at(j), m)
		for k := 0; ; k++ {
			v, ok := e.get(revKey(u, k))
			if !ok {
				break
			}
			out[v&^nextBit] = u
		}
	}
	return out
}

// checkInvariants verifies the index's internal consistency: counters agree with rings,
// tables and engine maps; every bit in a table belongs to exactly one ring slot; every engine
// hash names a block its medium holds, and is listed by it; the byte counter is the sum of
// what is allocated.
func (ix *Index) checkInvariants() error {
	bits := map[[2]uint64]int{} // (entry key, id) → ring slots
	var pairs, names, bytes int64
	for id := range ix.backends {
		b := ix.backends[id].Load()
		if b == nil {
			continue
		}
		b.mu.Lock()
		err := func() error {
			for m := range NumMedia {
				t := &b.tiers[m]
				live, stale := 0, 0
				var liveKeys []uint64
				for j := range t.ring.len() {
					k := t.ring.at(j)
					ek := entryKey(k, id>>6)
					bits[[2]uint64{ek, uint64(id)}]++
					hold, aux := ix.peek(ek)
					bit := uint64(1) << (id & 63)
					switch {
					case hold&bit != 0:
						live++
						liveKeys = append(liveKeys, k)
					case aux&bit != 0:
						stale++
					default:
						return fmt.Errorf("backend %d %v: queued key %#x has no bits", id, m, k)
					}
				}
				if live != t.live || stale != t.stale || int64(t.ring.len()) != t.size.Load() {
					return fmt.Errorf("backend %d %v: live %d/%d stale %d/%d size %d/%d", id, m, live, t.live, stale, t.stale, t.ring.len(), t.size.Load())
				}
				// In exact mode the engine's blocks are bounded by the capacity and the
				// predictions by their allowance; without names, everything by the capacity.
				limit := t.capacity
				if t.eng != nil && t.eng.blocks > 0 && t.capacity != noLimit {
					limit = t.capacity + t.capacity/predictedShare
				}
				if t.live > limit {
					return fmt.Errorf("backend %d %v: %d live > limit %d (capacity %d)", id, m, t.live, limit, t.capacity)
				}
				pairs += int64(t.ring.len())
				bytes += int64(len(t.ring.buf)) * 8
				if t.eng == nil {
					if t.names.Load() != 0 {
						return fmt.Errorf("backend %d %v: %d names without a map", id, m, t.names.Load())
					}
					continue
				}
				e := t.eng
				listed := 0
				for _, k := range liveKeys {
					u := usherHash(k, Medium(m))
					for n := 0; ; n++ {
						rv, ok := e.get(revKey(u, n))
						if !ok {
							break
						}
						listed++
						if v, ok := e.get(rv &^ nextBit); !ok || BlockHash(v) != u {
							return fmt.Errorf("backend %d %v: block %#x lists a name that names %#x (%v)", id, m, u, v, ok)
						}
						if _, more := e.get(revKey(u, n+1)); more != (rv&nextBit != 0) {
							return fmt.Errorf("backend %d %v: block %#x name %d: next bit %v, next entry %v", id, m, u, n, rv&nextBit != 0, more)
						}
					}
				}
				entries, slots := 0, 0
				for p := range e.parts {
					pt := &e.parts[p]
					slots += len(pt.slots)
					n := 0
					for i, s := range pt.slots {
						if s.key == 0 {
							continue
						}
						n++
						if s.key&(engParts-1) != uint64(p) {
							return fmt.Errorf("backend %d %v: key %#x in part %d", id, m, s.key, p)
						}
						if v, ok := e.get(s.key); !ok || v != s.val {
							return fmt.Errorf("backend %d %v: key %#x at %d not found by probing", id, m, s.key, i)
						}
					}
					if n != pt.count {
						return fmt.Errorf("backend %d %v: part %d count %d, holds %d", id, m, p, pt.count, n)
					}
					entries += n
				}
				if listed != e.names || entries != 2*e.names+e.copies || int64(e.names) != t.names.Load() {
					return fmt.Errorf("backend %d %v: %d names, %d listed by live blocks, %d entries, published %d", id, m, e.names, listed, entries, t.names.Load())
				}
				if int64(slots)*engSlotBytes != e.bytes {
					return fmt.Errorf("backend %d %v: engine map bytes %d, slots %d", id, m, e.bytes, slots)
				}
				names += int64(e.names)
				bytes += e.bytes
			}
			return nil
		}()
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if got := ix.pairs.Load(); got != pairs {
		return fmt.Errorf("pairs counter %d, rings hold %d", got, pairs)
	}
	if got := ix.engNames.Load(); got != names {
		return fmt.Errorf("engine hash counter %d, maps hold %d", got, names)
	}
	for si := range ix.shards {
		t := ix.shards[si].tab.Load()
		if t == nil {
			continue
		}
		bytes += int64(len(t.slots)) * slotBytes
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
	if got := ix.bytes.Load(); got != bytes {
		return fmt.Errorf("bytes counter %d, allocated %d", got, bytes)
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
	id     HolderID
	n      int // capacity, chain choice or length
	chain  []BlockHash
	medium Medium
	ev     StoredBlocks
	hashes []uint64
}

const (
	opAdd = iota
	opRemoveBackend
	opCleared
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
		case opCleared:
			same(step, "ApplyCleared", ix.ApplyCleared(p.id), ref.clear(p.id))
		case opSetCapacity:
			var got error
			if p.medium == GPU {
				got = ix.SetCapacity(p.id, p.n)
			} else {
				got = ix.SetMediumCapacity(p.id, p.medium, p.n)
			}
			same(step, "SetCapacity", got, ref.setCapacity(p.id, p.medium, p.n))
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
			got := ix.ApplyRemovedFrom(p.id, p.ev.Medium, p.hashes)
			same(step, "ApplyRemovedFrom", got, ref.applyRemoved(p.id, p.ev.Medium, p.hashes))
		}
		if bound := int(ix.bound.Load()); bound != ref.bound() {
			t.Fatalf("step %d: bound %d, want %d", step, bound, ref.bound())
		}
		var live, stale, names int64
		for id, rb := range ref.backends {
			if rb == nil {
				continue
			}
			for m := range NumMedia {
				rt := &rb.tiers[m]
				got := ix.snapshotRing(HolderID(id), m)
				if !slices.Equal(got, rt.queue) && !(len(got) == 0 && len(rt.queue) == 0) {
					t.Fatalf("step %d (op %d): backend %d %v queue\n got %v\nwant %v", step, p.kind, id, m, got, rt.queue)
				}
				want := map[uint64]BlockHash{}
				for e, u := range rt.engine {
					want[fwdKey(e)] = u
				}
				if got := ix.engineNames(HolderID(id), m); !maps.Equal(got, want) {
					t.Fatalf("step %d (op %d): backend %d %v engine hashes\n got %v\nwant %v", step, p.kind, id, m, got, want)
				}
				live += int64(rt.count(false))
				stale += int64(rt.count(true))
				names += int64(len(rt.engine))
			}
		}
		if err := ix.checkInvariants(); err != nil {
			t.Fatalf("step %d (op %d): %v", step, p.kind, err)
		}
		st := ix.Stats()
		if st.Evictions != ref.evictions {
			t.Fatalf("step %d: Evictions %d, want %d", step, st.Evictions, ref.evictions)
		}
		if st.Blocks != live || st.Stale != stale || st.EngineHashes != names {
			t.Fatalf("step %d: Blocks %d Stale %d EngineHashes %d, want %d %d %d", step, st.Blocks, st.Stale, st.EngineHashes, live, stale, names)
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
	engine   map[HolderID][]uint64 // engine hashes handed out per backend
	ehash    uint64
	exact    bool // mostly KV events, in every medium
}

func newOpGen(next func(int) int, backends int) *opGen {
	g := &opGen{next: next, backends: backends, seed: Seed("m", "", ""), engine: map[HolderID][]uint64{}}
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

func (g *opGen) id() HolderID {
	if g.next(8) == 0 {
		return HolderID(g.next(g.backends + 2)) // sometimes unknown
	}
	if g.backends <= 64 {
		return HolderID(g.next(g.backends))
	}
	// Favour a few low ids and a few past 64.
	ids := []int{0, 1, 2, 3, 64, 65, 70}
	v := ids[g.next(len(ids))]
	if v >= g.backends {
		v = g.next(g.backends)
	}
	return HolderID(v)
}

func (g *opGen) chain() []BlockHash {
	c := g.convs[g.next(len(g.convs))]
	n := g.next(len(c)/4 + 1)
	return HashTokens(nil, g.seed, c[:n*4], 4)
}

// exactKinds weighs the operations of an exact-mode run.
var exactKinds = []uint8{opStored, opStored, opStored, opStored, opStored, opRemoved, opRemoved, opRemoved,
	opMatch, opMatch, opInsert, opRemove, opSetCapacity, opAdd, opCleared}

func (g *opGen) op() op {
	p := op{kind: uint8(g.next(numOps)), id: g.id()}
	if g.exact {
		p.kind = exactKinds[g.next(len(exactKinds))]
		if p.kind == opCleared && g.next(4) != 0 {
			p.kind = opStored
		}
	}
	if g.exact || g.next(4) == 0 {
		p.medium = Medium(g.next(int(NumMedia)))
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
			if prev := g.engine[p.id]; len(prev) > 0 && g.next(8) == 0 {
				hashes[i] = prev[g.next(len(prev))] // stored again, maybe for another block
				continue
			}
			g.ehash++
			hashes[i] = g.ehash
		}
		p.ev = StoredBlocks{EngineHashes: hashes, Tokens: c[start*4 : (start+n)*4], BlockSize: 4, Seed: g.seed,
			Medium: []string{"", "GPU", "CPU", "disk"}[g.next(4)]}
		// Without a parent, blocks of one conversation at one position hash alike whatever
		// their engine hashes: a block with several names.
		if prev := g.engine[p.id]; start > 0 && len(prev) > 0 && g.next(3) > 0 {
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
		p.ev.Medium = []string{"", "CPU", "GPU", "disk"}[g.next(4)]
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
				ops = append(ops, op{kind: opAdd, id: HolderID(i), n: 400})
			}
			for range 2000 {
				p := g.op()
				if p.kind == opAdd || p.kind == opSetCapacity {
					p.n *= 10
				}
				if (p.kind == opCleared || p.kind == opMatch) && r.IntN(4) != 0 {
					p.kind = opRemove // keep stale pairs around long enough to compact
					p.chain = g.chain()
				}
				ops = append(ops, p)
			}
			o := modelOptions([]int{300, 1 << 20}[seed%2])
			o.DefaultCPUCapacity = []int{0, 250}[seed/2%2]
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
				ops = append(ops, op{kind: opAdd, id: HolderID(i), n: []int{0, 8, 20, 40}[i%4]})
			}
			for range 1200 {
				ops = append(ops, g.op())
			}
			o := modelOptions([]int{50, 400, 1 << 20}[seed%3])
			o.DefaultCPUCapacity, o.DefaultRemoteCapacity = []int{0, 25}[seed%2], []int{0, 10}[seed/2%2]
			runModel(t, o, ops)
		})
	}
}

// TestModelExact runs mostly KV events in every medium against the reference, with tight
// capacities and budgets, so that blocks with several engine hashes, evictions that take
// engine hashes with them, and budget pressure from engine hashes are all frequent.
func TestModelExact(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 97))
			g := newOpGen(r.IntN, 3)
			g.exact = true
			var ops []op
			for i := range 3 {
				ops = append(ops, op{kind: opAdd, id: HolderID(i), n: []int{12, 30, 0}[i]})
			}
			for range 1500 {
				ops = append(ops, g.op())
			}
			o := modelOptions([]int{60, 150, 1 << 20, 100}[seed%4])
			o.MaxBackends = 4
			o.DefaultCPUCapacity, o.DefaultRemoteCapacity = []int{0, 16}[seed%2], []int{0, 8}[seed/2%2]
			runModel(t, o, ops)
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
			ops = append(ops, op{kind: opAdd, id: HolderID(i), n: 10})
		}
		for pos < len(data) && len(ops) < 400 {
			ops = append(ops, g.op())
		}
		runModel(t, modelOptions(budget), ops)
	})
}
