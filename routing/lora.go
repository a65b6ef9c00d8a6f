package routing

import (
	"fmt"
	"hash/maphash"
	"slices"
	"sync/atomic"
)

// Models and LoRA adapters.
//
// A backend lists the models it serves (BackendState.Models) and, when it runs LoRA, the
// adapters of its running and waiting requests and its number of adapter slots
// (SignalAdapters). Update interns every name it sees into one small-integer space per
// snapshot and gives each backend sorted id sets, so that a pick looks the request's model
// and adapter up once (two map reads) and tests each backend with a binary search over a few
// integers instead of comparing strings.
//
// What polling cannot know in time — that this router just sent a request for adapter a to
// backend b — is counted in adapterTable, a fixed array of atomic words keyed by (backend,
// adapter): Pick adds one, Done takes it away, and every candidate of a pick for a reads its
// count (Candidate.AdapterInFlight).

// ErrNoBackendForModel means no backend in the set serves Request.Model: some backends list
// their models and none lists this one (and none serves any model). It wraps ErrNoBackend, so
// errors.Is(err, ErrNoBackend) holds too; a gateway maps it to 404 when the model is unknown
// to its configuration and to 503 when the model's servers are merely absent.
var ErrNoBackendForModel = fmt.Errorf("%w for the requested model", ErrNoBackend)

// loraIndex is a snapshot's interned model and adapter names.
type loraIndex struct {
	ids map[string]int32
	// allAny: every backend serves any model (none lists Models).
	allAny bool
}

// id returns name's id, or -1 when no backend lists it (or name is empty). O(1).
func (x *loraIndex) id(name string) int32 {
	if x == nil || name == "" {
		return -1
	}
	if id, ok := x.ids[name]; ok {
		return id
	}
	return -1
}

// loraSets is one backend's interned sets, sorted, without duplicates.
type loraSets struct {
	idx              *loraIndex
	models           []int32 // empty: serves any model
	running, waiting []int32 // valid when the state has SignalAdapters
	// used is the number of distinct adapters running or waiting; waitOnly those waiting and
	// not running (adapters whose requests wait for a slot or a load).
	used, waitOnly int
}

// serves reports whether the backend serves model id (-1: a name no backend lists). A nil
// set serves any model. O(log m).
func (l *loraSets) serves(id int32) bool {
	if l == nil || len(l.models) == 0 {
		return true
	}
	if id < 0 {
		return false
	}
	_, ok := slices.BinarySearch(l.models, id)
	return ok
}

// buildLora interns the names of backends and sets each backend's lora, or leaves every
// lora nil and returns nil when no backend lists a model or an adapter. Called by Update
// after sanitize. O(total names · log); it allocates.
func buildLora(backends []backend) *loraIndex {
	listed := false
	for i := range backends {
		st := &backends[i].state
		if len(st.Models) > 0 || (st.Known.Has(SignalAdapters) && len(st.RunningAdapters)+len(st.WaitingAdapters) > 0) {
			listed = true
			break
		}
	}
	if !listed {
		return nil
	}
	x := &loraIndex{ids: make(map[string]int32), allAny: true}
	intern := func(names []string) []int32 {
		if len(names) == 0 {
			return nil
		}
		out := make([]int32, 0, len(names))
		for _, n := range names {
			if n == "" {
				continue
			}
			id, ok := x.ids[n]
			if !ok {
				id = int32(len(x.ids))
				x.ids[n] = id
			}
			out = append(out, id)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	sets := make([]loraSets, len(backends))
	for i := range backends {
		st := &backends[i].state
		l := &sets[i]
		l.idx = x
		l.models = intern(st.Models)
		if len(l.models) > 0 {
			x.allAny = false
		}
		if st.Known.Has(SignalAdapters) {
			l.running, l.waiting = intern(st.RunningAdapters), intern(st.WaitingAdapters)
			l.used = len(l.running)
			for _, w := range l.waiting {
				if _, ok := slices.BinarySearch(l.running, w); !ok {
					l.used++
					l.waitOnly++
				}
			}
		}
		backends[i].lora = l
	}
	return x
}

// modelServed reports whether some backend of s serves model id. O(n·log m); error path only.
func (s *snapshot) modelServed(id int32) bool {
	for i := range s.backends {
		if s.backends[i].lora.serves(id) {
			return true
		}
	}
	return false
}

// adapterTable counts a router's requests in flight per (backend, adapter). Each word packs
// a 32-bit tag of the pair (high half) and a count (low half); a pair lives in one of
// adapterProbe consecutive words from its hash, and a word whose count is 0 is free for any
// pair. Counting a pick claims or bumps a word with CAS; Done decrements the word the ticket
// remembers, so counts always return to zero, and a reader sums the words of the window that
// carry the tag (two picks racing for a new pair may claim two words). A pair that finds its
// window full is not counted. Lock-free; no allocation after New.
type adapterTable struct {
	seed  maphash.Seed
	words [adapterWords]atomic.Uint64
}

const (
	adapterWords = 1 << 12 // 32 KiB per Router: room for thousands of distinct pairs in flight
	adapterProbe = 8
)

// hash returns the adapter's hash, computed once per pick. O(len(adapter)).
func (t *adapterTable) hash(adapter string) uint64 { return maphash.String(t.seed, adapter) }

// slot returns the first word of the pair's window and its tag.
func adapterSlot(h uint64, id BackendID) (int, uint64) {
	z := h ^ (uint64(id)+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z & (adapterWords - 1)), (z >> 32) | 1
}

// count returns the requests in flight for the pair. O(adapterProbe).
func (t *adapterTable) count(h uint64, id BackendID) int {
	i, tag := adapterSlot(h, id)
	n := 0
	for k := range adapterProbe {
		v := t.words[(i+k)&(adapterWords-1)].Load()
		if v>>32 == tag {
			n += int(uint32(v))
		}
	}
	return n
}

// add counts one more request for the pair and returns the word it used, or -1 when the
// window is full. O(adapterProbe) plus CAS retries under contention.
func (t *adapterTable) add(h uint64, id BackendID) int32 {
	i, tag := adapterSlot(h, id)
	for range 4 {
		for k := range adapterProbe { // bump a word the pair holds
			j := (i + k) & (adapterWords - 1)
			if v := t.words[j].Load(); v>>32 == tag && uint32(v) > 0 && t.words[j].CompareAndSwap(v, v+1) {
				return int32(j)
			}
		}
		for k := range adapterProbe { // or claim a free one
			j := (i + k) & (adapterWords - 1)
			if v := t.words[j].Load(); uint32(v) == 0 && t.words[j].CompareAndSwap(v, tag<<32|1) {
				return int32(j)
			}
		}
	}
	return -1
}

// release takes back one request counted in word j. O(1).
func (t *adapterTable) release(j int32) { t.words[j].Add(^uint64(0)) }

// adapterOf is hook.Adapter: whether req's adapter runs or waits on c's backend, and how many
// distinct adapters run or wait there and only wait, from the snapshot's interned sets; ok is
// false when c or req was not built by a Router's pick over the same snapshot. O(log k).
func adapterOf(req *Request, c *Candidate) (running, waiting bool, used, waitOnly int, ok bool) {
	l := c.lora
	if l == nil || l.idx != req.lora || req.lora == nil {
		return false, false, 0, 0, false
	}
	if id := req.adapterID; id >= 0 {
		_, running = slices.BinarySearch(l.running, id)
		_, waiting = slices.BinarySearch(l.waiting, id)
	}
	return running, waiting, l.used, l.waitOnly, true
}
