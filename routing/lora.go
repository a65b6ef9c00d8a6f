package routing

import (
	"fmt"
	"hash/maphash"
	"math"
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

// Defaults of AdapterOptions.
const (
	DefaultAdapterLoaded   = 1.0
	DefaultAdapterLoading  = 0.8
	DefaultAdapterFreeSlot = 0.6
	DefaultAdapterWait     = 1.0
)

// AdapterOptions configures AdapterAffinity. Zero fields take the defaults above.
type AdapterOptions struct {
	// Loaded is the score of a backend where the request's adapter is in use: in its
	// RunningAdapters, or in this router's requests in flight there (Candidate.
	// AdapterInFlight; the scrape lags). Zero: DefaultAdapterLoaded (1). In [0, 1].
	Loaded float64
	// Loading is the score of a backend where the adapter is only waiting (its requests are
	// queued or it is being loaded): sending one more there costs no second load. Zero:
	// DefaultAdapterLoading (0.8). In [0, 1].
	Loading float64
	// FreeSlot is the score of a backend with a free adapter slot (fewer distinct adapters
	// running or waiting than MaxAdapters): the adapter must be loaded, but nothing waits for a
	// slot. It is scaled by (1 + free/MaxAdapters)/2, so emptier servers take new adapters
	// first. Zero: DefaultAdapterFreeSlot (0.6). In [0, 1]. A backend with no free slot scores
	// 0: the request would wait for another adapter's requests to finish.
	FreeSlot float64
	// Wait weighs the adapters waiting at a backend and not running there, a sign that its
	// slots are contended: Loading and FreeSlot scores are divided by 1 + Wait·waiting.
	// Zero: DefaultAdapterWait (1). Negative: no penalty. At most 1e6.
	Wait float64
}

// AdapterAffinity scores candidates for a request that needs a LoRA adapter
// (Request.Adapter). A backend where the adapter is in use scores Loaded; one where it is
// only waiting scores Loading; one with a free adapter slot scores FreeSlot scaled by the
// share of slots free; one whose slots are all in use scores 0; the last two are divided by
// 1 + Wait·(adapters waiting there and not running). A request without an adapter scores 0
// everywhere, so the term changes nothing for base-model traffic.
//
// A backend without fresh SignalAdapters, and with none of this router's requests for the
// adapter in flight, is imputed the mean score of the candidates that have the signal fresh
// (0.5 when none has), as the load scorers do.
//
// This is GIE's LoRA-affinity tiers (running 1, capacity 0.8, waiting 0.6, full 0) with three
// changes measured on the bench simulator (bench/README.md, "LoRA adapters"): the router's own
// in-flight requests count as running, because a scrape lags the burst that loads an adapter;
// waiting adapters count against a backend, because they mean its slots are contended; and a
// backend where the adapter already waits ranks above a free slot, since joining it costs no
// second load. Weigh it against a load term: on its own it would pin each adapter to the first
// backend that ran it.
//
// Score is O(n·log k) for n candidates and k adapters per backend and allocates nothing.
// AdapterAffinity is immutable and safe for concurrent use.
type AdapterAffinity struct {
	loaded, loading, free, wait float64
}

// NewAdapterAffinity returns an AdapterAffinity configured by opts, or an error wrapping
// ErrInvalidOptions when a field is out of range.
func NewAdapterAffinity(opts AdapterOptions) (*AdapterAffinity, error) {
	a := &AdapterAffinity{loaded: opts.Loaded, loading: opts.Loading, free: opts.FreeSlot, wait: opts.Wait}
	for _, f := range []struct {
		name string
		v    *float64
		def  float64
	}{{"Loaded", &a.loaded, DefaultAdapterLoaded}, {"Loading", &a.loading, DefaultAdapterLoading}, {"FreeSlot", &a.free, DefaultAdapterFreeSlot}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if !(*f.v >= 0 && *f.v <= 1) {
			return nil, fmt.Errorf("%w: AdapterOptions.%s %v (want a value in [0, 1])", ErrInvalidOptions, f.name, *f.v)
		}
	}
	switch {
	case a.wait == 0:
		a.wait = DefaultAdapterWait
	case a.wait < 0:
		a.wait = 0
	case !(a.wait <= 1e6):
		return nil, fmt.Errorf("%w: AdapterOptions.Wait %v (want a finite value ≤ 1e6)", ErrInvalidOptions, opts.Wait)
	}
	return a, nil
}

var _ Scorer = (*AdapterAffinity)(nil)

// Score implements Scorer. O(n·log k), no allocation.
func (a *AdapterAffinity) Score(req *Request, cands []Candidate, dst []float64) {
	if req.Adapter == "" {
		clear(dst)
		return
	}
	// Impute from the candidates scored on fresh signals only: one known solely from this
	// router's in-flight count says nothing of the others.
	sum, known, unknown := 0.0, 0, 0
	for i := range cands {
		c := &cands[i]
		if !c.Has(SignalAdapters) {
			v := math.NaN()
			if c.AdapterInFlight > 0 {
				v = a.loaded
			} else {
				unknown++
			}
			dst[i] = v
			continue
		}
		v := a.score(req, c)
		dst[i] = v
		sum += v
		known++
	}
	if unknown > 0 {
		impute(dst, sum, known)
	}
}

// score returns the score of c, which has fresh SignalAdapters, for req.Adapter.
func (a *AdapterAffinity) score(req *Request, c *Candidate) float64 {
	if c.AdapterInFlight > 0 {
		return a.loaded
	}
	var running, waiting bool
	var used, waitOnly int
	if l := c.lora; l != nil && l.idx == req.lora && req.lora != nil {
		if id := req.adapterID; id >= 0 {
			_, running = slices.BinarySearch(l.running, id)
			_, waiting = slices.BinarySearch(l.waiting, id)
		}
		used, waitOnly = l.used, l.waitOnly
	} else {
		// A candidate built outside a Router: read the names. O(k²) for k names.
		st := c.State
		running = slices.Contains(st.RunningAdapters, req.Adapter)
		waiting = slices.Contains(st.WaitingAdapters, req.Adapter)
		used, waitOnly = distinctAdapters(st.RunningAdapters, st.WaitingAdapters)
	}
	switch {
	case running:
		return a.loaded
	case waiting:
		return a.loading / (1 + a.wait*float64(waitOnly-1))
	}
	slots := c.State.MaxAdapters
	if used >= slots || slots <= 0 {
		return 0
	}
	share := float64(slots-used) / float64(slots)
	return a.free * (1 + share) / 2 / (1 + a.wait*float64(waitOnly))
}

// distinctAdapters returns the number of distinct names in running ∪ waiting and of those
// in waiting only. O((r + w)²).
func distinctAdapters(running, waiting []string) (used, waitOnly int) {
	for i, r := range running {
		if r != "" && !slices.Contains(running[:i], r) {
			used++
		}
	}
	for i, w := range waiting {
		if w != "" && !slices.Contains(waiting[:i], w) && !slices.Contains(running, w) {
			used++
			waitOnly++
		}
	}
	return used, waitOnly
}

// invalidScorer stands in a Profile for a scorer whose options were invalid, so that a
// profile constructor without an error result can still report it: New fails with err.
type invalidScorer struct{ err error }

func (invalidScorer) Score(_ *Request, _ []Candidate, dst []float64) { clear(dst) }
