package routing

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing/internal/hook"
	"github.com/usher-llm/usher/routing/internal/rng"
)

// Defaults used when the corresponding Options field is zero.
const (
	// DefaultBlockSize is the tokens per prefix block when neither Request nor Options says.
	DefaultBlockSize = 16
	// DefaultStaleAfter is how old polled signals may be before they count as stale (llm-d
	// treats metrics older than 2 s as stale).
	DefaultStaleAfter = 2 * time.Second
)

// Errors returned by the router. They are wrapped with context; test them with errors.Is.
var (
	// ErrNoBackend means no backend is eligible for the request: the set is empty, no backend
	// serves the requested role, or the filters removed every candidate.
	ErrNoBackend = errors.New("routing: no eligible backend")
	// ErrInvalidOptions means New was given options it cannot use.
	ErrInvalidOptions = errors.New("routing: invalid options")
	// ErrInvalidBackend means Update was given a backend set it cannot publish (an empty or
	// duplicate name, a Role or Health outside the constants). Out-of-range signal values are
	// not an error: they are dropped from Known and counted in Stats.InvalidSignals.
	ErrInvalidBackend = errors.New("routing: invalid backend state")
)

// Pick's failures, wrapped once so that the error path does not allocate either.
var (
	errEmptySet         = fmt.Errorf("%w: the backend set is empty", ErrNoBackend)
	errAllFiltered      = fmt.Errorf("%w: no candidate serves the role or passes the filters", ErrNoBackend)
	errForeignCandidate = fmt.Errorf("%w: a filter returned a candidate that is not in the backend set", ErrNoBackend)
)

// Scorer rates every candidate of one pick. It is the one method a custom scorer implements.
//
// Score writes one value per candidate into dst (len(dst) == len(cands), zeroed on entry);
// higher is better and values belong in [0, 1]. The router clamps anything else (NaN becomes 0, values below 0 become
// 0, above 1 become 1) and counts it in Stats.ClampedScores, so a faulty scorer can never
// propagate NaN into a pick. Score is called on the Pick path, possibly from many goroutines at
// once: it must be safe for concurrent use, must not block, and should not allocate.
type Scorer interface {
	Score(req *Request, cands []Candidate, dst []float64)
}

// unitScorer is implemented by the built-in scorers whose Score writes every entry of dst,
// each in [0, 1], whatever the candidates hold (a custom filter's candidates included), and
// which can score a pick's columns instead of its Candidates (see cols). needs says which
// columns AddCols reads; AddCols adds w·dst[i] to tot[i] for every candidate i < len(tot),
// where dst[i] is bit for bit what Score would write given the Candidates the columns were
// taken from. Pick neither zeroes, clamps nor combines their scores separately. AddCols is
// O(len(tot)) and allocates nothing.
type unitScorer interface {
	Scorer
	Needs() colMask
	AddCols(req *Request, c *cols, w float64, tot []float64)
}

// candScorer is a unitScorer that reads cols.Cands, when set, rather than the columns it
// needs: it needs only CandNeeds() of them then (routing/latency's scorer over the built-in
// model).
type candScorer interface {
	unitScorer
	CandNeeds() colMask
}

// ScorerFunc adapts a function to the Scorer interface.
type ScorerFunc func(req *Request, cands []Candidate, dst []float64)

// Score calls f(req, cands, dst).
func (f ScorerFunc) Score(req *Request, cands []Candidate, dst []float64) { f(req, cands, dst) }

// Filter narrows the candidates of one pick. It returns the candidates to keep, compacted in
// place at the front of cands (cands[:k], in any order, elements copied unchanged). Returning an empty slice makes Pick fail
// with ErrNoBackend. Like Scorer, it runs on the Pick path: safe for concurrent use, no
// blocking, no allocation.
type Filter interface {
	Filter(req *Request, cands []Candidate) []Candidate
}

// Picker chooses one candidate given their combined scores (len(scores) == len(cands)). It
// returns an index into cands. rng is a generator private to this pick, reseeded from the
// router's seed sequence (Options.Seed) for each; package routing/pick has the built-in pickers. Safe for concurrent
// use, no blocking, no allocation. An index out of range is counted in Stats.BadPicks and
// replaced by the max-score choice.
type Picker interface {
	Pick(req *Request, cands []Candidate, scores []float64, rng *rand.Rand) int
}

// PickObserver is implemented by filters and scorers that learn from placements (session tables,
// for example). Picked is called once per successful Pick, after the choice and before Pick
// returns, with the chosen candidate. It must be safe for concurrent use and must not block.
type PickObserver interface {
	Picked(req *Request, chosen *Candidate, now time.Time)
}

// Completer is implemented by filters, scorers and pickers that learn from outcomes (observed
// time to first token, failures). Completed is called once per Result, from Done, with the
// backend's id, when it was picked, and the DoneInfo. It must be safe for concurrent use and must
// not block.
type Completer interface {
	Completed(id BackendID, picked time.Time, info DoneInfo)
}

// Weighted is a Scorer and its weight in the blend.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Profile is a complete routing configuration: filters applied in order, weighted scorers, and
// a picker. Some filters, scorers and pickers keep state (session tables, counters, a
// round-robin cursor); a Profile value shares them with every Router built from it, so build a
// fresh Profile per Router (the constructors below do) unless sharing is meant. The combined score of a candidate is Σ Weight_i · clamp(score_i, 0, 1): weights are
// not normalised (as in llm-d), so a weight of 3 beside two weights of 2 is exactly 3/7 of the
// range. A nil Picker takes the highest combined score, breaking ties at random (as
// routing/pick's MaxScore does).
type Profile struct {
	// Name labels the configuration in reports and Stats; it has no effect on routing.
	Name    string
	Filters []Filter
	Scorers []Weighted
	Picker  Picker
	// Learn says when the router tells its prefix index that the chosen backend holds a
	// request's prompt. Zero: LearnOnPick.
	Learn Learn
}

// With returns p with scorers appended: how to extend a profile (the default's, say) with a
// scorer of your own. p's slices are copied, not shared or modified.
//
// The extended profile names itself after what it is, so that [Router.Name] and reports do not
// pass it off as the base: its Name is p.Name followed, for each added scorer, by "+" and the
// name of the scorer's Go type without its package ("usher+fewestStreams"; a nil scorer adds
// "+nil"). Set Name afterwards to choose another. O(len(p.Filters) + len(p.Scorers) +
// len(scorers)).
func (p Profile) With(scorers ...Weighted) Profile {
	p.Filters = slices.Clone(p.Filters)
	p.Scorers = append(slices.Clone(p.Scorers), scorers...)
	name := p.Name
	for _, w := range scorers {
		name += "+" + typeName(w.Scorer)
	}
	p.Name = name
	return p
}

// typeName returns the name of x's type without its package, looking through pointers; "nil"
// for nil and the type's spelling for an unnamed one.
func typeName(x any) string {
	t := reflect.TypeOf(x)
	if t == nil {
		return "nil"
	}
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	if n := t.Name(); n != "" {
		return n
	}
	return t.String()
}

// scorerLabels names each scorer by its Go type (typeName), the second and later scorers of a
// type followed by "#" and their rank among that type's ("prefixScorer", "prefixScorer#2").
// O(scorers²), at New.
func scorerLabels(ws []Weighted) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = typeName(w.Scorer)
		n := 1
		for _, prev := range ws[:i] {
			if typeName(prev.Scorer) == out[i] {
				n++
			}
		}
		if n > 1 {
			out[i] += "#" + strconv.Itoa(n)
		}
	}
	return out
}

// Learn says when a Router records a request's prompt blocks in its prefix index under the
// chosen backend.
type Learn uint8

const (
	// LearnOnPick (the zero value) inserts the chain at Pick: the chosen backend is about to
	// compute those blocks, so a request sent right behind it with the same prefix (a sibling of
	// a best-of-N or agent fan-out, the next request of a popular template) sees them there and
	// co-locates instead of scattering before the first of them has produced a token. This is
	// when the peers learn too: llm-d's approximate prefix scorer in its PreRequest hook,
	// SGLang's and AIBrix's trees on selection, and Dynamo's predict-on-route side index. The
	// prediction is retracted if the request fails before its first token: the blocks the
	// backend did not hold at pick time are removed again, when the index implements
	// PrefixRemover (*prefixcache.Index does). A success needs nothing more; in exact mode the
	// engine's KV events then confirm or evict the blocks.
	LearnOnPick Learn = iota
	// LearnOnFirstToken inserts the chain when the first token arrives (FirstToken, or Done of
	// a request that succeeded or got a token): only what the backend has certainly computed,
	// at the price of blindness to requests still in prefill.
	LearnOnFirstToken
	// LearnFromEvents never inserts: the index is fed by the engines' KV events alone (exact
	// mode without prediction, as llm-d's precise prefix scorer).
	LearnFromEvents
)

var learnNames = [...]string{"on-pick", "on-first-token", "from-events"}

// String returns "on-pick", "on-first-token" or "from-events".
func (l Learn) String() string {
	if int(l) < len(learnNames) {
		return learnNames[l]
	}
	return "Learn(" + strconv.Itoa(int(l)) + ")"
}

// Options configures a Router. Zero values are the documented defaults.
type Options struct {
	// Profile is the routing configuration (filters, scorers, picker). A profile without
	// scorers gives every candidate the score 0, leaving the choice to the picker.
	Profile
	// Index is the prefix index Pick matches Request.Chain against and Result inserts into.
	// Nil: no prefix information; Candidate.MatchedBlocks is always 0.
	Index PrefixIndex
	// BlockSize is the tokens per block of Request.Chain when the request does not say.
	// Zero: DefaultBlockSize.
	BlockSize int
	// StaleAfter is the age beyond which polled signals count as stale. Zero:
	// DefaultStaleAfter. Negative: signals never go stale.
	StaleAfter time.Duration
	// Now is the clock used when Request.Now is zero. Nil: time.Now.
	Now func() time.Time
	// Seed seeds the random choices (tie-breaks, weighted random, power of two). Zero: seeded
	// from the clock at New. Picks made one after another from one goroutine with a fixed seed
	// are reproducible.
	Seed uint64
}

// Router picks a backend for each request. Build one with New and publish the backend set with
// Update.
//
// Concurrency: Pick, Backends, InFlight, Stats, Lookup and the replication layer's reads and
// writes of in-flight counts (package replica) are safe for concurrent use from any number of
// goroutines. Update is meant for one writer (it is serialised internally, so a second writer is
// safe but pointless). Pick never blocks: it reads the current snapshot through an atomic
// pointer and scratch space from a pool, and the in-flight counters, its own and its peers',
// through atomics.
type Router struct {
	// Immutable after New.
	filters    []Filter
	scorers    []Weighted
	unit       []unitScorer // unit[i]: scorers[i].Scorer as a unitScorer, or nil
	picker     Picker
	observers  []PickObserver
	completers []Completer
	latency    []hook.Latency // the profile's latency scorers (routing/latency), one per model
	index      PrefixIndex
	blockSize  int
	staleAfter time.Duration
	now        func() time.Time
	name       string
	// clampedBy[i] counts the scores of scorers[i] that Pick clamped. Only scorers that are
	// not unitScorers can have any; each is written only when a pick clamped one of its
	// scores, so the usual pick touches none (a shared counter per pick would be contended).
	clampedBy []atomic.Uint64
	// scorerLabels[i] names scorers[i] in the gateway's metrics (internal/routerstats).
	scorerLabels []string
	// heard is set by the first Result.Progress: until a caller reports progress, no backend
	// counts as silent (a caller that never does would see every busy backend fall silent).
	heard   atomic.Bool
	learn   Learn
	remover PrefixRemover // the index's Remove, when it has one and learn is LearnOnPick
	// adapters counts this router's requests in flight per backend and LoRA adapter.
	adapters *adapterTable
	// cleanSkip[i]: filters[i] is a health filter preceded only by filters that return a subset
	// of the candidates they are given (health filters, hook.SubsetFilter's), so that it keeps every
	// candidate, and can be skipped, when no candidate Pick built is stale or unhealthy.
	cleanSkip []bool
	// need is the union of the columns the unit scorers read. fast: every filter is a
	// HealthFilter, every scorer a unitScorer, the picker a built-in and there is no PickObserver,
	// so that a pick that keeps every backend can score the columns without building the
	// candidates (see Pick).
	need colMask
	fast bool
	// needFrom is need for the general path, where a candScorer reads the Candidates.
	needFrom colMask

	snap    atomic.Pointer[snapshot]
	roles   atomic.Pointer[hook.RolePlan] // a role planner's, for KVBoth backends (nil: none)
	seed    atomic.Uint64
	scratch sync.Pool // *scratch
	tickets sync.Pool // *ticket
	stats   counters

	// peerIn is the peer hook's conversion buffer (internal/peer.SetPeerLoads), under peerInMu.
	peerInMu sync.Mutex
	peerIn   []backendInFlight

	mu sync.Mutex // serialises Update and setPeerInFlight; guards the fields below.
	// ids interns backend names to stable ids; names is its inverse, by id.
	ids   map[string]BackendID
	names []string
	// loads holds the in-flight counters by id; they outlive the backend's presence in the set
	// so that requests in flight across an update are released where they were counted.
	loads []*inflight
	// slab is where newInflight takes counters from, contiguously.
	slab []inflight
	// indexIDs caches the prefix index id of each backend id (-1: not yet interned), and
	// indexCaps the capacity last passed to AddBackend for it.
	indexIDs  []int64
	indexCaps []int
	// peerSums is setPeerInFlight's scratch, by id; peerPending holds what it was told of
	// names not interned yet (at most maxUnknownPeerNames), for Update to apply when they
	// appear.
	peerSums    []InFlight
	peerPending map[string]InFlight
}

type snapshot struct {
	backends  []backend
	unhealthy int        // backends whose Health is Unhealthy
	lora      *loraIndex // interned models and adapters; nil when no backend lists any
	// What every pick would otherwise recompute, set by summarise: the range of the backends'
	// updated times (never: some backend was never observed), and the columns of the polled
	// signals as they are while every backend is fresh (see cols).
	oldest, newest                     int64
	never                              bool
	queued, running, kv                []float64
	queuedStats, runningStats, kvStats colStats
}

// find returns the backend with id, or nil. O(n).
func (s *snapshot) find(id BackendID) *backend {
	for i := range s.backends {
		if s.backends[i].id == id {
			return &s.backends[i]
		}
	}
	return nil
}

// backend is one entry of a snapshot. The fields Pick reads for every candidate come first, so
// that they share a cache line with the start of state.
type backend struct {
	load    *inflight
	updated int64 // state.UpdatedAt in Unix nanoseconds; 0 for never
	index   int64 // prefix index id; -1 when there is no index
	id      BackendID
	lora    *loraSets // nil when the snapshot's lora is
	state   BackendState
}

// inflight holds one backend's router-side counters. They are not padded to a cache line:
// every pick reads the counters of every candidate, so packing them (from a slab, see
// Router.newInflight) means fewer cache lines per pick, while a write invalidates one line for
// the readers either way. The peers' counts sit beside the router's own so that a pick reads
// both from the same line; only setPeerInFlight and Update write them.
type inflight struct {
	requests atomic.Int64
	prefill  atomic.Int64
	blocks   atomic.Int64

	peerRequests atomic.Int64
	peerPrefill  atomic.Int64
	peerBlocks   atomic.Int64

	// streams counts this router's streamed requests in flight; heard is when the backend was
	// last heard from on any of its requests, Unix ns: the later of the last Result.Progress
	// and the pick that made streams go from 0 to 1.
	streams atomic.Int64
	heard   atomic.Int64
}

// progress notes that the backend was heard from at now (Unix ns). It writes only when the
// time moved on by a millisecond, so a stream's reads do not all write the shared line.
func (l *inflight) progress(now int64) {
	if h := l.heard.Load(); now-h >= int64(time.Millisecond) {
		l.heard.CompareAndSwap(h, now)
	}
}

// own returns the router's own counts.
func (l *inflight) own() InFlight {
	return InFlight{Requests: l.requests.Load(), PrefillTokens: l.prefill.Load(), Blocks: l.blocks.Load()}
}

// peers returns the peers' counts.
func (l *inflight) peers() InFlight {
	return InFlight{Requests: l.peerRequests.Load(), PrefillTokens: l.peerPrefill.Load(), Blocks: l.peerBlocks.Load()}
}

// setPeers stores the peers' counts, field by field: a concurrent pick may see some fields
// before and others after the change.
func (l *inflight) setPeers(v InFlight) {
	l.peerRequests.Store(v.Requests)
	l.peerPrefill.Store(v.PrefillTokens)
	l.peerBlocks.Store(v.Blocks)
}

type counters struct {
	picks, noBackend, badPicks, invalid, staleCands, insertErrs, retracted, done, failed, peerNames atomic.Uint64
	latency                                                                                         atomic.Uint64
}

// Stats are cumulative counters of a Router.
type Stats struct {
	// Picks is the number of successful picks.
	Picks uint64
	// NoBackend is the number of picks that failed with ErrNoBackend.
	NoBackend uint64
	// ClampedScores is the number of scores (one per candidate per scorer) that were NaN or
	// outside [0, 1] and were clamped.
	ClampedScores uint64
	// BadPicks is the number of times a Picker returned an index out of range.
	BadPicks uint64
	// InvalidSignals is the number of out-of-range signal values Update dropped from Known.
	InvalidSignals uint64
	// StaleCandidates is the number of candidates considered with stale or never-observed
	// signals (summed over picks). Built-in scorers impute such values; see each scorer.
	StaleCandidates uint64
	// InsertErrors is the number of prefix index inserts (and retractions) that failed.
	InsertErrors uint64
	// Retracted is the number of requests whose predicted blocks were removed from the prefix
	// index because they failed before their first token (LearnOnPick).
	Retracted uint64
	// Done is the number of Results finished with Done; Failed those with a non-nil Err.
	// Picks − Done is the number of requests in flight.
	Done, Failed uint64
	// DroppedPeerNames is the number of in-flight counts from other gateway replicas (package
	// replica) dropped because they named a backend the router did not know while 4,096 such
	// names were already held for a later Update.
	DroppedPeerNames uint64
	// LatencyOutcomes is the number of observations (a streamed request's first token, its
	// end) the router has taught its latency models: how far a model is from its prior. An
	// admission step that acts on Predict's figures can wait for a few hundred.
	LatencyOutcomes uint64
}

// New returns a Router configured by opts, with an empty backend set (Pick returns
// ErrNoBackend until the first Update). It fails with ErrInvalidOptions when a scorer, filter
// or weight is unusable.
func New(opts Options) (*Router, error) {
	r := &Router{
		filters:    opts.Filters,
		picker:     opts.Picker,
		index:      opts.Index,
		blockSize:  opts.BlockSize,
		staleAfter: opts.StaleAfter,
		now:        opts.Now,
		name:       opts.Name,
		learn:      opts.Learn,
		ids:        make(map[string]BackendID),
		adapters:   &adapterTable{seed: maphash.MakeSeed()},
	}
	if r.learn > LearnFromEvents {
		return nil, fmt.Errorf("%w: Learn %v", ErrInvalidOptions, opts.Learn)
	}
	if rm, ok := opts.Index.(PrefixRemover); ok && r.learn == LearnOnPick {
		r.remover = rm
	}
	if r.blockSize == 0 {
		r.blockSize = DefaultBlockSize
	}
	if r.blockSize < 0 {
		return nil, fmt.Errorf("%w: BlockSize %d", ErrInvalidOptions, opts.BlockSize)
	}
	if r.staleAfter == 0 {
		r.staleAfter = DefaultStaleAfter
	}
	if r.now == nil {
		r.now = time.Now
	}
	subset := true // every filter so far returns a subset of its candidates, unchanged
	for i, f := range opts.Filters {
		if f == nil {
			return nil, fmt.Errorf("%w: Filters[%d] is nil", ErrInvalidOptions, i)
		}
		if bad, ok := f.(hook.Invalid); ok {
			return nil, fmt.Errorf("Filters[%d]: %w", i, bad.InvalidOptions())
		}
		r.hook(f)
		switch {
		case isHealthFilter(f):
			r.cleanSkip = append(r.cleanSkip, subset)
		case hook.SubsetFilter != nil && hook.SubsetFilter(f):
			r.cleanSkip = append(r.cleanSkip, false)
		default:
			r.cleanSkip = append(r.cleanSkip, false)
			subset = false
		}
	}
	for i, w := range opts.Scorers {
		if w.Scorer == nil {
			return nil, fmt.Errorf("%w: Scorers[%d] is nil", ErrInvalidOptions, i)
		}
		if bad, ok := w.Scorer.(hook.Invalid); ok {
			return nil, fmt.Errorf("Scorers[%d]: %w", i, bad.InvalidOptions())
		}
		if !(w.Weight >= 0) || w.Weight > 1e12 {
			return nil, fmt.Errorf("%w: Scorers[%d] weight %v (want a finite value ≥ 0)", ErrInvalidOptions, i, w.Weight)
		}
		if w.Weight == 0 {
			continue
		}
		r.scorers = append(r.scorers, w)
		unit, _ := w.Scorer.(unitScorer)
		r.unit = append(r.unit, unit)
		r.hook(w.Scorer)
	}
	r.clampedBy = make([]atomic.Uint64, len(r.scorers))
	r.scorerLabels = scorerLabels(r.scorers)
	if r.picker != nil {
		r.hook(r.picker)
	}
	for _, w := range r.scorers {
		if l, ok := latencyOf(w.Scorer); ok && !slices.ContainsFunc(r.latency, func(k hook.Latency) bool {
			return k.LatencyModel() == l.LatencyModel()
		}) {
			r.latency = append(r.latency, l)
		}
	}
	_, scoresOnly := r.picker.(hook.ScoresOnly)
	r.fast = len(r.observers) == 0 && (r.picker == nil || scoresOnly)
	for _, f := range r.filters {
		if _, ok := f.(*healthFilter); !ok {
			r.fast = false
		}
	}
	for _, u := range r.unit {
		if u == nil {
			r.fast = false
			continue
		}
		r.need |= u.Needs()
		if cs, ok := u.(candScorer); ok {
			r.needFrom |= cs.CandNeeds()
		} else {
			r.needFrom |= u.Needs()
		}
	}
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	r.seed.Store(seed)
	r.scratch.New = func() any {
		sc := new(scratch)
		sc.rng, sc.src = rng.New(0)
		return sc
	}
	r.tickets.New = func() any { return &ticket{r: r} }
	return r, nil
}

// hook registers x's PickObserver and Completer sides, if any, once per value: a component that is
// both a filter and a scorer (routing/outlier's Detector) hears of each pick and each outcome once.
func (r *Router) hook(x any) {
	if o, ok := x.(PickObserver); ok && !hooked(r.observers, o) {
		r.observers = append(r.observers, o)
	}
	if c, ok := x.(Completer); ok && !hooked(r.completers, c) {
		r.completers = append(r.completers, c)
	}
}

// hooked reports whether x is already in list. Values of a type that cannot be compared (a
// func or slice type implementing the interface) are never taken for duplicates: comparing them
// would panic.
func hooked[T any](list []T, x T) bool {
	if t := reflect.TypeOf(x); t == nil || !t.Comparable() {
		return false
	}
	for _, y := range list {
		if any(y) == any(x) {
			return true
		}
	}
	return false
}

// Update replaces the backend set with states, published as one immutable snapshot that picks
// started afterwards see. It copies states; the caller may reuse the slice. Backends keep their
// in-flight counters and BackendID across updates by Name. Out-of-range signal values are
// dropped from Known and counted. Update fails with ErrInvalidBackend, publishing nothing, when
// a name is empty or repeated or a Role or Health is not one of the constants, and with the
// index's error when the prefix index refuses a new backend.
//
// With a prefix index, Update registers each new name with AddBackend, passing
// KVCapacityBlocks when known (0 otherwise), and calls it again when a backend's known capacity
// changes. The router never removes backends from the index: a backend that leaves the set keeps
// its blocks until the index evicts them, so a server that comes back is still warm. Whoever
// removes backends from a shared index must not do it while the router still routes to them.
//
// Update is O(n) in the number of backends and allocates the new snapshot; it is the writer
// side and is not meant for the request path.
func (r *Router) Update(states []BackendState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]struct{}, len(states))
	for i := range states {
		name := states[i].Name
		if name == "" {
			return fmt.Errorf("%w: backend %d has an empty name", ErrInvalidBackend, i)
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%w: duplicate name %q", ErrInvalidBackend, name)
		}
		if states[i].Role > RoleDecode || states[i].Health > Unhealthy {
			return fmt.Errorf("%w: backend %q has role %v, health %v", ErrInvalidBackend, name, states[i].Role, states[i].Health)
		}
		seen[name] = struct{}{}
	}
	s := &snapshot{backends: make([]backend, len(states))}
	invalid := 0
	for i := range states {
		b := &s.backends[i]
		b.state = states[i]
		invalid += b.state.sanitize()
		if b.state.Health == Unhealthy {
			s.unhealthy++
		}
		if !b.state.UpdatedAt.IsZero() {
			b.updated = b.state.UpdatedAt.UnixNano()
		}
		id, ok := r.ids[b.state.Name]
		if !ok {
			id = BackendID(len(r.loads))
			r.ids[b.state.Name] = id
			r.names = append(r.names, b.state.Name)
			l := r.newInflight()
			if v, ok := r.peerPending[b.state.Name]; ok {
				// Peers reported this backend before the router knew it.
				l.setPeers(v)
				delete(r.peerPending, b.state.Name)
			}
			r.loads = append(r.loads, l)
			r.indexIDs = append(r.indexIDs, -1)
			r.indexCaps = append(r.indexCaps, 0)
		}
		b.id = id
		b.load = r.loads[id]
		b.index = -1
		if r.index != nil {
			capacity := 0
			if b.state.Known.Has(SignalKVCapacity) {
				capacity = b.state.KVCapacityBlocks
			}
			// Intern new names; tell the index when a backend's capacity becomes known or
			// changes (AddBackend of a known name updates its capacity).
			if r.indexIDs[id] < 0 || (capacity > 0 && capacity != r.indexCaps[id]) {
				ix, err := r.index.AddBackend(b.state.Name, capacity)
				if err != nil {
					return fmt.Errorf("routing: adding backend %q to the prefix index: %w", b.state.Name, err)
				}
				r.indexIDs[id] = int64(ix)
				r.indexCaps[id] = capacity
			}
			b.index = r.indexIDs[id]
		}
	}
	r.stats.invalid.Add(uint64(invalid))
	s.lora = buildLora(s.backends)
	s.summarise()
	r.snap.Store(s)
	return nil
}

// newInflight returns a zeroed counter set from the slab, starting a new slab of 64 when it is
// used up. Called with mu held.
func (r *Router) newInflight() *inflight {
	if len(r.slab) == cap(r.slab) {
		r.slab = make([]inflight, 0, 64)
	}
	r.slab = r.slab[:len(r.slab)+1]
	return &r.slab[len(r.slab)-1]
}

// Backends appends the current backend set to dst and returns it. O(n).
func (r *Router) Backends(dst []BackendState) []BackendState {
	s := r.snap.Load()
	if s == nil {
		return dst
	}
	for i := range s.backends {
		dst = append(dst, s.backends[i].state)
	}
	return dst
}

// InFlight returns the router's own in-flight counters of the named backend (without its
// peers', as the replication layer last reported them), and whether the router has ever known it. O(1) after a map lookup under the writer lock; not for the hot path.
func (r *Router) InFlight(name string) (InFlight, bool) {
	r.mu.Lock()
	id, ok := r.ids[name]
	var l *inflight
	if ok {
		l = r.loads[id]
	}
	r.mu.Unlock()
	if !ok {
		return InFlight{}, false
	}
	return l.own(), true
}

// Name returns the name of the router's Profile. O(1).
func (r *Router) Name() string { return r.name }

// Stats returns the router's cumulative counters. O(scorers).
func (r *Router) Stats() Stats {
	var clamped uint64
	for i := range r.clampedBy {
		clamped += r.clampedBy[i].Load()
	}
	return Stats{
		Picks:            r.stats.picks.Load(),
		NoBackend:        r.stats.noBackend.Load(),
		ClampedScores:    clamped,
		BadPicks:         r.stats.badPicks.Load(),
		InvalidSignals:   r.stats.invalid.Load(),
		StaleCandidates:  r.stats.staleCands.Load(),
		InsertErrors:     r.stats.insertErrs.Load(),
		Retracted:        r.stats.retracted.Load(),
		Done:             r.stats.done.Load(),
		Failed:           r.stats.failed.Load(),
		DroppedPeerNames: r.stats.peerNames.Load(),
		LatencyOutcomes:  r.stats.latency.Load(),
	}
}

// scratch is the per-pick working memory, pooled so that Pick does not allocate.
type scratch struct {
	req    Request
	cands  []Candidate
	totals []float64
	tmp    []float64
	cols   cols // the columns' buffers
	view   cols // the columns of a pick that gathers them (cols and the snapshot's)
	match  []int32
	// rng draws from src, which each pick reseeds.
	rng *rand.Rand
	src *rng.Source
}

// reset makes room for n candidates.
func (s *scratch) reset(n int) {
	if cap(s.cands) < n {
		s.cands = make([]Candidate, 0, n)
		s.grow(n)
	}
}

// grow gives totals, tmp and the columns n entries.
func (s *scratch) grow(n int) {
	s.totals, s.tmp = make([]float64, n), make([]float64, n)
	s.cols.Grow(n)
}

// Pick chooses a backend for req. It runs the filters, the weighted scorers and the picker over
// the current snapshot, then charges the chosen backend's in-flight counters (one request, its
// uncached prompt tokens as prefill work, and its prompt's blocks) before returning. The Result must be finished with
// Done exactly once.
//
// Filters, scorers, pickers and observers receive a copy of req in which Now, BlockSize and
// PromptTokens are resolved (Options.Now(), Options.BlockSize, len(Chain)·BlockSize when zero).
//
// Pick is lock-free and never blocks; it does not allocate once its pools are warm (scorers and
// filters permitting). Its cost is O(n·s) for n backends and s scorers, plus one prefix match of
// req.Chain. It fails with ErrNoBackend when no backend is eligible, and with
// ErrNoBackendForModel (which wraps it) when no backend serves req.Model.
//
// Only backends that serve req.Role and req.Model (BackendState.Models lists it, or lists
// nothing) and are not in req.Exclude become candidates. A request naming an Adapter is
// counted against that adapter on the chosen backend until Done (Candidate.AdapterInFlight).
func (r *Router) Pick(req *Request) (Result, error) {
	s := r.snap.Load()
	if s == nil || len(s.backends) == 0 {
		r.stats.noBackend.Add(1)
		return Result{}, errEmptySet
	}
	sc, p := r.begin(s, req)
	req = &sc.req
	now, prompt, bs := req.Now, req.PromptTokens, req.BlockSize
	var (
		cands  []Candidate
		chosen *Candidate
		b      *backend
		score  float64
	)
	if r.fast && req.Role == RoleBoth && len(req.Exclude) == 0 && (req.Model == "" || s.lora == nil || s.lora.allAny) {
		// Every backend is a candidate, at its own index, and no filter changes that unless
		// one is stale or unhealthy: score the columns without building the candidates.
		n := len(s.backends)
		if stale := p.gather(s, &sc.cols, &sc.view, r.need); stale == 0 || len(r.filters) == 0 {
			if stale > 0 {
				r.stats.staleCands.Add(uint64(stale))
			}
			if len(r.filters) == 0 || s.unhealthy == 0 {
				totals := sc.totals[:n]
				clear(totals)
				for k, w := range r.scorers {
					r.unit[k].AddCols(req, &sc.view, w.Weight, totals)
				}
				// The built-in pickers read nothing of the candidates but their number.
				idx := r.pick(req, sc.cands[:n], totals, sc)
				b, score = &s.backends[idx], totals[idx]
				cands = sc.cands[:1]
				p.fill(cands, s.backends[idx:idx+1], idx)
				chosen = &cands[0]
			}
		}
	}
	if chosen == nil {
		var stale int
		cands, stale = s.candidates(sc.cands[:0], req, &p)
		if stale > 0 {
			r.stats.staleCands.Add(uint64(stale))
		}
		clean := stale == 0 && s.unhealthy == 0
		for k, f := range r.filters {
			if len(cands) == 0 {
				break
			}
			if clean && r.cleanSkip[k] {
				continue // HealthFilter would return cands as they are
			}
			cands = f.Filter(req, cands)
		}
		if len(cands) == 0 {
			err := errAllFiltered
			if req.Model != "" && s.lora != nil && !s.modelServed(req.modelID) {
				err = ErrNoBackendForModel
			}
			sc.cands = cands[:0]
			sc.req = Request{}
			r.scratch.Put(sc)
			r.stats.noBackend.Add(1)
			return Result{}, err
		}

		n := len(cands)
		if n > len(sc.totals) {
			// A custom filter returned more candidates than it was given.
			sc.grow(n)
		}
		totals := sc.totals[:n]
		r.score(req, cands, totals, sc)
		idx := r.pick(req, cands, totals, sc)
		chosen, score = &cands[idx], totals[idx]
		if k := int(chosen.slot) - 1; k >= 0 && k < len(s.backends) && s.backends[k].id == chosen.ID {
			b = &s.backends[k]
		} else {
			// A custom filter built its own candidates: find the backend by id.
			b = s.find(chosen.ID)
			if b == nil {
				sc.req = Request{}
				sc.cands = cands[:0]
				r.scratch.Put(sc)
				r.stats.noBackend.Add(1)
				return Result{}, errForeignCandidate
			}
		}
	}
	for _, o := range r.observers {
		o.Picked(req, chosen, now)
	}
	matched, uncached := chosen.MatchedBlocks, chosen.UncachedTokens

	b.load.requests.Add(1)
	if req.Stream && b.load.streams.Add(1) == 1 {
		b.load.heard.Store(now.UnixNano()) // a stream from now: silence counts from here
	}
	if uncached > 0 {
		b.load.prefill.Add(int64(uncached))
	}
	blocks := int64((prompt + bs - 1) / bs)
	b.load.blocks.Add(blocks)
	r.stats.picks.Add(1)

	t := r.tickets.Get().(*ticket)
	t.load = b.load
	t.index = b.index
	t.prefill = int64(uncached)
	t.blocks = blocks
	t.id = b.id
	t.picked = now
	t.stream = req.Stream
	t.matched = matched
	t.adapterSlot = -1
	var predicted Latency
	if len(r.latency) > 0 {
		t.chosen, t.prompt = *chosen, prompt
		predicted.TTFT, predicted.TPOT = r.latency[0].PredictChosen(prompt, &t.chosen)
	}
	if p.adapters != nil {
		t.adapterSlot = r.adapters.add(p.adapterHash, b.id)
	}
	if b.index >= 0 && r.learn != LearnFromEvents {
		t.chain = append(t.chain[:0], req.Chain...)
		if r.learn == LearnOnPick && matched < len(t.chain) {
			if err := r.index.Insert(indexID(b.index), t.chain); err != nil {
				r.stats.insertErrs.Add(1)
			}
		}
	}
	sc.req = Request{}
	sc.cands = cands[:0]
	r.scratch.Put(sc)
	return Result{
		Backend:        &b.state,
		ID:             b.id,
		Score:          score,
		MatchedBlocks:  matched,
		UncachedTokens: uncached,
		Predicted:      predicted,
		t:              t,
		gen:            t.state.Load() >> genShift,
		load:           b.load,
	}, nil
}

// begin is the start of a pick: a pooled scratch holding the private copy of req that filters,
// scorers and pickers see, with the defaults resolved (Now, BlockSize, PromptTokens), and the
// parameters of the candidates, with the prefix match done.
func (r *Router) begin(s *snapshot, req *Request) (*scratch, candParams) {
	now := req.Now
	if now.IsZero() {
		now = r.now()
	}
	bs := req.BlockSize
	if bs <= 0 {
		bs = r.blockSize
	}
	prompt := req.PromptTokens
	if prompt <= 0 {
		prompt = len(req.Chain) * bs
	}
	sc := r.scratch.Get().(*scratch)
	sc.reset(len(s.backends))
	sc.req = *req
	sc.req.Now, sc.req.BlockSize, sc.req.PromptTokens = now, bs, prompt
	sc.req.indexed = r.index != nil
	sc.req.lora, sc.req.modelID, sc.req.adapterID = s.lora, s.lora.id(req.Model), s.lora.id(req.Adapter)
	req = &sc.req
	var match []int32
	if r.index != nil && len(req.Chain) > 0 {
		match = r.index.Match(sc.match[:0], req.Chain)
		sc.match = match[:0]
	}
	p := candParams{nowNs: now.UnixNano(), staleAfter: r.staleAfter, match: match, chain: len(req.Chain), bs: bs,
		prompt: prompt, heard: r.heard.Load()}
	if req.Adapter != "" {
		p.adapters, p.adapterHash = r.adapters, r.adapters.hash(req.Adapter)
	}
	if req.Role != RoleBoth {
		p.roles = r.roles.Load()
	}
	return sc, p
}

// candidates fills cands, whose capacity must be at least len(s.backends), with one Candidate
// for each backend that serves req.Role and req.Model and is not in req.Exclude, in snapshot
// order, and returns them with how many are stale (see candParams). O(n·(len(req.Exclude) +
// log m)) for m models per backend, no allocation.
func (s *snapshot) candidates(cands []Candidate, req *Request, p *candParams) (_ []Candidate, stale int) {
	backends := s.backends
	model := req.Model != "" && s.lora != nil && !s.lora.allAny
	if req.Role == RoleBoth && len(req.Exclude) == 0 && !model {
		// Every backend is a candidate, at its own index.
		cands = cands[:len(backends)]
		return cands, p.fill(cands, backends, 0)
	}
	k := 0
	for i := range backends {
		b := &backends[i]
		if !b.state.Role.serves(req.Role) || (len(req.Exclude) > 0 && slices.Contains(req.Exclude, b.id)) ||
			(model && !b.lora.serves(req.modelID)) {
			continue
		}
		if p.roles != nil && b.state.KVBoth && b.state.Role == RoleBoth && !p.roles.Serves(uint32(b.id), uint8(req.Role)) {
			continue
		}
		cands = cands[:k+1]
		stale += p.fill(cands[k:], backends[i:i+1], i)
		k++
	}
	return cands[:k], stale
}

// candParams is what a pick needs to fill a Candidate or its columns: the time of the pick,
// Options.StaleAfter, the prefix index's result by index id (nil without one), and the
// request's chain length, block size and prompt tokens with the defaults resolved.
type candParams struct {
	nowNs      int64
	staleAfter time.Duration
	match      []int32
	chain      int  // len(req.Chain)
	bs, prompt int  // the request's block size and prompt tokens
	heard      bool // Progress was ever reported: fill the candidates' silence fields
	// adapters and adapterHash: the router's adapter table and the hash of Request.Adapter,
	// when the request names one (adapters is nil otherwise).
	adapters    *adapterTable
	adapterHash uint64
	// roles is the role planner's plan, read for a pick that needs a role (nil otherwise, or
	// without a planner).
	roles *hook.RolePlan
}

// fill sets every field of cands[j] for backends[j], the backend at index first+j of the
// snapshot, for j < len(backends) ≤ len(cands), and returns how many of them are stale.
// O(len(backends)).
func (p *candParams) fill(cands []Candidate, backends []backend, first int) (stale int) {
	cands = cands[:len(backends)]
	for j := range backends {
		b := &backends[j]
		c := &cands[j]
		// Compute every field in locals and store each once: a composite literal would zero
		// the element first and then write most of it again.
		age, fresh, isStale := time.Duration(-1), Signal(0), true
		if b.updated != 0 {
			age = time.Duration(p.nowNs - b.updated)
			if p.staleAfter < 0 || age <= p.staleAfter {
				fresh, isStale = b.state.Known, false
			}
		}
		if isStale {
			stale++
		}
		matched := 0
		if b.index >= 0 && b.index < int64(len(p.match)) {
			matched = min(int(p.match[b.index]), p.chain)
		}
		tokens := matched * p.bs
		c.State = &b.state
		c.ID = b.id
		c.Fresh = fresh
		c.Stale = isStale
		l := b.load
		c.InFlight.Requests = l.requests.Load() + l.peerRequests.Load()
		c.InFlight.PrefillTokens = l.prefill.Load() + l.peerPrefill.Load()
		c.InFlight.Blocks = l.blocks.Load() + l.peerBlocks.Load()
		c.Silence = 0
		if p.heard && l.streams.Load() > 0 {
			c.Silence = max(0, time.Duration(p.nowNs-l.heard.Load()))
		}
		c.MatchedBlocks = matched
		c.MatchedTokens = tokens
		c.UncachedTokens = max(0, p.prompt-tokens)
		c.Age = age
		c.slot = uint32(first + j + 1)
		c.ix = int32(b.index + 1)
		c.lora = b.lora
		c.AdapterInFlight = 0
		if p.adapters != nil {
			c.AdapterInFlight = p.adapters.count(p.adapterHash, b.id)
		}
	}
	return stale
}

// pick seeds the pick's generator and runs the picker, replacing an index out of range by the
// max-score choice (counted). O(picker).
func (r *Router) pick(req *Request, cands []Candidate, totals []float64, sc *scratch) int {
	sc.src.S = r.seed.Add(0x9e3779b97f4a7c15)
	var idx int
	if r.picker == nil {
		idx = rng.MaxIndex(totals, sc.rng)
	} else {
		idx = r.picker.Pick(req, cands, totals, sc.rng)
	}
	if idx < 0 || idx >= len(totals) {
		r.stats.badPicks.Add(1)
		idx = rng.MaxIndex(totals, sc.rng)
	}
	return idx
}

// score fills totals (len(totals) == len(cands) ≤ len(sc.tmp)) with each candidate's combined
// score, Σ weight·clamp(score, 0, 1) over the scorers in order, counting the scores it clamped
// in clampedBy (an atomic add per scorer that had any; none otherwise). The built-in scorers
// read the candidates' columns, taken once for all of them (unitScorer); any other is called
// into sc.tmp, zeroed first, then clamped and added. O(len(cands)·scorers), no allocation.
func (r *Router) score(req *Request, cands []Candidate, totals []float64, sc *scratch) {
	clear(totals)
	if r.need != 0 {
		colsFrom(&sc.cols, cands, r.needFrom)
	}
	for k, w := range r.scorers {
		if u := r.unit[k]; u != nil {
			u.AddCols(req, &sc.cols, w.Weight, totals)
			continue
		}
		tmp := sc.tmp[:len(cands)]
		clear(tmp)
		w.Scorer.Score(req, cands, tmp)
		wt := w.Weight
		tot := totals[:len(tmp)]
		clamped := 0
		for i, v := range tmp {
			if !(v >= 0 && v <= 1) {
				v, _ = clamp01(v)
				clamped++
			}
			tot[i] += wt * v
		}
		if clamped > 0 {
			r.clampedBy[k].Add(uint64(clamped))
		}
	}
}

// Result is the outcome of a successful Pick: the chosen backend and the handle that closes the
// router's books on it. It is a small value; copies share the same handle.
//
// Its contract is flowcontrol.Ticket's: Done must be called exactly once, FirstToken at most
// once matters (later calls and calls after Done do nothing), and the two methods are safe for
// concurrent use from any goroutines — a relay may report the first token while the handler
// finishes the request. Handles are pooled and carry a generation, so a second Done on any
// copy panics as misuse and a late call never touches the request that reuses the handle.
type Result struct {
	// Backend is the chosen backend's published state (immutable: do not write through it).
	Backend *BackendState
	// ID is the chosen backend's stable id.
	ID BackendID
	// Score is the chosen candidate's combined score.
	Score float64
	// MatchedBlocks is how many leading blocks of the chain the backend was believed to hold.
	MatchedBlocks int
	// UncachedTokens is the prompt tokens the backend was expected to prefill; they stay
	// charged to its in-flight prefill counter until FirstToken or Done.
	UncachedTokens int
	// Predicted is what the profile's latency model (routing/latency) predicted for the
	// request on the chosen backend; zero without one.
	Predicted Latency

	t    *ticket
	gen  uint64
	load *inflight // the backend's counters, which outlive the ticket
}

// DoneInfo is what happened to a routed request.
//
// Err and Failure combine as follows:
//
//   - Err == nil: the request succeeded. Failure is ignored, whatever it says.
//   - Err != nil, Failure == FailureNone: the request failed, but not in a way that says
//     anything about the backend (the client went away, the input was bad, or the caller did not
//     classify it). It counts in Stats.Failed and is neutral for passive health: neither a
//     success nor a failure. Code that only sets Err gets exactly this.
//   - Err != nil, Failure == FailureConnect, FailureTimeout or FailureServer: a failure of the
//     backend. Passive health (routing/outlier) counts it towards ejection.
//   - Err != nil, Failure == FailureOverload: the backend refused the work because it is busy.
//     A load signal, not a health failure: passive health does not count it either way.
//
// A Failure outside the constants is read as FailureNone.
type DoneInfo struct {
	// FirstTokenAt is when the first output token arrived; zero if none did.
	FirstTokenAt time.Time
	// PromptTokens and OutputTokens are the usage the server reported (0 when unknown).
	PromptTokens, OutputTokens int
	// Err is the request's error, nil on success.
	Err error
	// Failure classifies a non-nil Err for passive health; see above. Zero: FailureNone.
	Failure Failure
	// End is when the answer ended, for the time per output token a latency model learns.
	// Zero: the router's clock at Done.
	End time.Time
}

// Failure says what a failed request tells about its backend, for passive health. The proxy
// (or whoever finishes a Result) classifies the error; the router only carries it to the
// Completers. The zero value is FailureNone.
type Failure uint8

const (
	// FailureNone: success, or a failure that says nothing about the backend (the client went
	// away, bad input).
	FailureNone Failure = iota
	// FailureConnect: the backend could not be reached or is gone: connection refused or reset
	// before an answer, dial timeout, a connection broken during the answer, or (the proxy's
	// stall timeout) nothing from the backend on any request for that long.
	FailureConnect
	// FailureTimeout: the backend did not answer in time (response-header or stream-idle
	// timeout).
	FailureTimeout
	// FailureServer: the backend answered with a server error (5xx) or broke its stream.
	FailureServer
	// FailureOverload: the backend said it is overloaded (429, or 503 with Retry-After): a load
	// signal, not a health failure.
	FailureOverload
)

// String returns "none", "connect", "timeout", "server" or "overload".
func (f Failure) String() string {
	switch f {
	case FailureNone:
		return "none"
	case FailureConnect:
		return "connect"
	case FailureTimeout:
		return "timeout"
	case FailureServer:
		return "server"
	case FailureOverload:
		return "overload"
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// ticket is the pooled state behind a Result. state packs a generation (state>>genShift)
// with three flags. Done advances the generation, which turns every later call on any copy of
// the Result into misuse (Done) or a no-op (FirstToken). FirstToken and Done may overlap on two
// goroutines: whichever finishes last returns the ticket to the pool, so neither ever sees it
// recycled under it (see recycleRace for the hand-over).
type ticket struct {
	r       *Router
	state   atomic.Uint64
	load    *inflight
	index   int64
	prefill int64
	blocks  int64
	id      BackendID
	picked  time.Time
	matched int  // blocks the backend held at pick time
	stream  bool // counted in load.streams
	// adapterSlot is the word of Router.adapters counting this request, -1 when none.
	adapterSlot int32
	chain       []prefixcache.BlockHash
	// chosen and prompt are the chosen Candidate and the request's prompt tokens, for the
	// latency models (set when there are any, see hook.Latency).
	chosen Candidate
	prompt int
}

const (
	firstTokenBit = 1 << iota // the prefill tokens were released (first token)
	busyBit                   // FirstToken is releasing them now
	doneBit                   // Done has finished with the ticket while FirstToken was busy
	genShift      = iota
)

// FirstToken records that the first output token arrived at at: the backend has finished
// prefilling this request, so its uncached prompt tokens are released from the in-flight prefill
// counter and, with LearnOnFirstToken, the prompt's blocks are inserted into the prefix index
// under the chosen backend (with LearnOnPick they already were, at Pick). Calling it more than
// once is harmless, and so is calling it after Done: a relay goroutine that sees the first
// token as the handler finishes the request may lose that race, and then Done has settled the
// books. It is safe to call concurrently with Done; it never touches a later request that the
// pooled handle serves. O(len(chain)) for an insert, otherwise O(1).
func (p Result) FirstToken(at time.Time) {
	t := p.mustTicket("FirstToken")
	for {
		st := t.state.Load()
		if st>>genShift != p.gen || st&firstTokenBit != 0 {
			return
		}
		if t.state.CompareAndSwap(st, st|firstTokenBit|busyBit) {
			break
		}
	}
	t.releasePrefill(true)
	if r := t.r; len(r.latency) > 0 && t.stream {
		r.learnLatency(t, Latency{TTFT: at.Sub(t.picked)})
	}
	for {
		st := t.state.Load()
		if t.state.CompareAndSwap(st, st&^(busyBit|doneBit)) {
			if st&doneBit != 0 {
				t.recycle() // Done finished while we were busy and left the ticket to us
			}
			return
		}
	}
}

// Progress records that bytes of the answer arrived from the chosen backend at at (response
// headers, a chunk of a stream): the backend is making progress. The router keeps, per backend,
// when it last heard from it on any request, and a pick's Candidate.Silence says how long a
// backend with streamed requests in flight (Request.Stream) has sent nothing on any of them
// (routing/outlier holds new picks off it after its StallAfter). "Any request" because a whole answer's headers come only with the
// answer and a long prefill sends nothing for a while: one live stream shows the server alive.
// Call it as bytes come; it writes at most once per millisecond per backend. A router that
// never hears of progress never counts a backend as silent. Calling it after
// Done does nothing harmful: the time only moves forward. O(1), lock-free, no allocation.
func (p Result) Progress(at time.Time) {
	if p.load == nil {
		return
	}
	p.load.progress(at.UnixNano())
	if r := p.t.r; !r.heard.Load() { // t.r is the same for every use of the ticket
		r.heard.Store(true)
	}
}

// Silence returns how long, at at, the chosen backend has sent nothing on any of this router's
// requests while streamed ones were in flight there (counted from the pick of the first stream
// when nothing came since), or 0 when no stream is in flight (Request.Stream). A caller waiting for an answer can give up on a backend that
// stopped making progress for every request, not only its own. O(1), lock-free.
func (p Result) Silence(at time.Time) time.Duration {
	if p.load == nil || p.load.streams.Load() == 0 {
		return 0
	}
	return max(0, time.Duration(at.UnixNano()-p.load.heard.Load()))
}

// Done closes the books on the request: it releases the in-flight request and its blocks and, unless
// FirstToken already did, the prefill tokens. What the prefix index learns depends on the
// profile's Learn: with LearnOnFirstToken, a request that got a first token (FirstToken was
// called or info.FirstTokenAt is set) or succeeded inserts the prompt's blocks under the chosen
// backend; with LearnOnPick, a request that failed before any token removes the blocks Pick
// predicted (those the backend did not hold then), since the server may never have computed
// them. Then every Completer in the profile hears of it, with info as given (its Failure
// classifies an error for passive health, see DoneInfo). Done must be called exactly once; a
// second call, on any copy, panics. It is safe to call while FirstToken runs on another
// goroutine. O(len(chain)) for an insert or a retraction, otherwise O(1).
func (p Result) Done(info DoneInfo) {
	t := p.mustTicket("Done")
	var st uint64
	for {
		st = t.state.Load()
		if st>>genShift != p.gen {
			panic("routing: Result.Done called twice")
		}
		if t.state.CompareAndSwap(st, (p.gen+1)<<genShift|st&(firstTokenBit|busyBit)) {
			break
		}
	}
	if st&firstTokenBit == 0 {
		t.releasePrefill(info.Err == nil || !info.FirstTokenAt.IsZero())
	}
	t.load.requests.Add(-1)
	if t.stream {
		t.load.streams.Add(-1)
	}
	t.load.blocks.Add(-t.blocks)
	r := t.r
	if t.adapterSlot >= 0 {
		r.adapters.release(t.adapterSlot)
		t.adapterSlot = -1
	}
	r.stats.done.Add(1)
	if info.Err != nil {
		r.stats.failed.Add(1)
	}
	for _, c := range r.completers {
		c.Completed(t.id, t.picked, info)
	}
	if len(r.latency) > 0 && t.stream {
		r.learnLatency(t, observed(t, &info, st&firstTokenBit != 0, r.now))
	}
	t.recycleRace()
}

// recycleRace returns the ticket to the pool once Done is through with it, unless FirstToken
// is still releasing the prefill: then it marks doneBit and FirstToken recycles when it clears
// busyBit. Both steps are CASes on state, so exactly one side sees the other gone.
func (t *ticket) recycleRace() {
	for {
		st := t.state.Load()
		if st&busyBit == 0 {
			t.recycle()
			return
		}
		if t.state.CompareAndSwap(st, st|doneBit) {
			return
		}
	}
}

// recycle returns t to its router's pool; the caller is the last to use it. The flags are
// cleared for the next request, keeping the generation Done gave it.
func (t *ticket) recycle() {
	t.load = nil
	t.chain = t.chain[:0]
	if len(t.r.latency) > 0 {
		t.chosen = Candidate{} // keep no snapshot alive
	}
	t.state.Store(t.state.Load() >> genShift << genShift)
	t.r.tickets.Put(t)
}

func (p Result) mustTicket(op string) *ticket {
	if p.t == nil {
		panic("routing: Result." + op + " on a zero Result")
	}
	return p.t
}

// releasePrefill releases the request's prefill tokens and settles what the index learns:
// computed says whether the backend computed the prompt (a first token, or success).
func (t *ticket) releasePrefill(computed bool) {
	if t.prefill > 0 {
		t.load.prefill.Add(-t.prefill)
	}
	if t.index < 0 || len(t.chain) == 0 {
		return
	}
	r := t.r
	switch {
	case r.learn == LearnOnFirstToken && computed:
		if err := r.index.Insert(indexID(t.index), t.chain); err != nil {
			r.stats.insertErrs.Add(1)
		}
	case r.learn == LearnOnPick && !computed && r.remover != nil && t.matched < len(t.chain):
		if err := r.remover.Remove(indexID(t.index), t.chain[t.matched:]); err != nil {
			r.stats.insertErrs.Add(1)
		}
		r.stats.retracted.Add(1)
	}
}
