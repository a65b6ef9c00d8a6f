package bench

import (
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
)

// treeLatency is the stronger latency model issue 31 asks to compare latency.Linear
// with: gradient-boosted regression trees on the candidate's features, one ensemble for TTFT and
// one for TPOT, refitted to a sliding window of recent outcomes, times a speed factor per
// backend kept as LinearLatency keeps its own (the decayed ratio of observed to the ensemble's
// prediction), so it follows one server that slows down.
//
// The ensembles fit log(latency) by least squares, boosted from the prior rather than from a
// constant: each starts at log(prior(x)) plus the mean residual, and the trees learn a
// multiplicative correction. In log space a tree's leaf is a ratio, which suits latencies whose
// noise grows with their size, and the least-squares fit of a log is the median of a
// log-symmetric noise, which is what a median absolute error rewards; starting from the prior
// keeps the prior's slope in the prefill work beyond the range the window has seen, where trees
// alone would predict flat. Measured on the synthetic servers of the tests: seconds instead of
// the log (treeOptions.raw, TestTreeLatencyTransform) cost up to 10% more median TTFT error on
// a knee and as much or slightly more elsewhere; a constant start instead of the prior cost
// 10–20% more TTFT error on every case.
//
// Split finding is by histogram: at each refit every input is cut at up to treeOptions.Bins−1
// quantiles of the window, and a level of a tree is grown in one pass over the window per
// input, so a refit costs O(Trees·Depth·Window·inputs) plus O(inputs·Window·log Window) to
// find the cuts, independent of the data. Trees are complete and stored flat (input index and
// threshold per inner node, value per leaf, level by level): a prediction is Trees·Depth
// comparisons and no pointer is followed. A node that finds no split sends everything left.
//
// Predict is lock-free (the fitted ensembles are an immutable snapshot behind an
// atomic.Pointer) and allocates nothing. Learn takes a mutex; the refit runs inside the Learn
// call whose outcome triggers it, synchronously, so the simulator stays deterministic. Memory
// is O(Window + backends + Trees·2^Depth). At the defaults a prediction takes about 0.5 µs and
// a refit of both ensembles on a full window about 10 ms of CPU (BenchmarkTreeLatencyPredict,
// BenchmarkTreeLatencyRefit), some 40 µs per outcome amortised, against LinearLatency's tens
// of nanoseconds for either. Safe for concurrent use; give one model to one Router (the speed factors are kept by
// BackendID).
type treeLatency struct {
	fit    atomic.Pointer[treeFit]
	speeds atomic.Pointer[[]treeSpeed]
	o      treeOptions
	prior  treeFit // no trees: the prior alone

	mu      sync.Mutex
	ttft    treeRing // outcomes, targets divided by the backend's factor at learn time
	tpot    treeRing
	since   int // outcomes since the last refit
	fits    int
	sums    []treeSpeedSums // per backend, decayed; guarded by mu
	scratch treeScratch
}

// treeOptions configures newTreeLatency. Zero values are the defaults.
type treeOptions struct {
	// Window is how many recent outcomes each ensemble is fitted to. Zero: 4096.
	Window int
	// Refit is how many outcomes arrive between two fits once warm. While cold, a fit follows
	// every max(32, n/4) outcomes, n the outcomes seen, so the first fit comes after 32 and the
	// interval grows to Refit. Zero: 256.
	Refit int
	// Trees and Depth shape each ensemble. Zero: 32 trees of depth 3 (8 leaves).
	Trees, Depth int
	// Rate is the learning rate, the shrinkage of each tree. Zero: 0.15.
	Rate float64
	// Bins is the number of quantile bins per input for split finding, at most 256. Zero: 32.
	Bins int
	// PrefillRate (tokens per second) and DecodeStep set the prior: 20 ms plus the prefill
	// work at PrefillRate for TTFT, DecodeStep for TPOT. Zero: 16000, 20 ms.
	PrefillRate float64
	DecodeStep  time.Duration
	// Adapt is the weight of a backend's newest outcome in its speed factor. Zero: 0.1.
	Adapt float64

	// raw fits the latency in seconds instead of its log (for TestTreeLatencyTransform).
	raw bool
}

// The ensembles' inputs, in this order in a treeX: the prefill work in front of the request and
// its own (tokens), its own alone, the polled waiting and running (−1 unknown), KV use (−1
// unknown), requests in flight, the prompt. Unknown polled signals stay −1: a tree can cut them
// off from the known values, which a linear model cannot.
const treeInputs = 7

type treeX [treeInputs]float64

func treeInputsOf(f *latency.Features) treeX {
	return treeX{
		float64(f.PrefillTokens + int64(f.UncachedTokens)),
		float64(f.UncachedTokens),
		float64(f.Waiting),
		float64(f.Running),
		f.KVUtilization,
		float64(f.InFlight),
		float64(f.PromptTokens),
	}
}

// treeFit is one refit of both ensembles, immutable once published.
type treeFit struct {
	ttft, tpot forest
}

// forest is one boosted ensemble. Its prediction for x, before the inverse transform, is
// offset + g(a + b·x[0]) + Σ trees, where g is log (or the identity with raw) and a + b·work is
// the prior. Tree t's inner nodes are feat/thr[t·inner : (t+1)·inner], level by level (node i's
// children are 2i+1 and 2i+2), and its leaves leaf[t·2^depth : (t+1)·2^depth].
type forest struct {
	a, b   float64
	offset float64
	raw    bool
	depth  int
	trees  int
	feat   []uint8
	thr    []float64 // x[feat] > thr goes right
	leaf   []float64
}

// eval returns the forest's prediction for x in seconds, before any speed factor. O(trees·depth).
func (e *forest) eval(x *treeX) float64 {
	p := e.a + e.b*x[0]
	s := e.offset
	if e.raw {
		s += p
	} else {
		s += math.Log(p)
	}
	inner := 1<<e.depth - 1
	leaves := inner + 1
	feat, thr, leaf := e.feat, e.thr, e.leaf
	for t := range e.trees {
		f, h := feat[t*inner:(t+1)*inner], thr[t*inner:(t+1)*inner]
		i := 0
		for range e.depth {
			if x[f[i]] > h[i] {
				i = 2*i + 2
			} else {
				i = 2*i + 1
			}
		}
		s += leaf[t*leaves+i-inner]
	}
	if e.raw {
		return s
	}
	return math.Exp(s)
}

// treeSpeed is a backend's factors as float64 bits, TTFT then TPOT.
type treeSpeed struct{ ttft, tpot atomic.Uint64 }

type treeSpeedSums struct{ y, p [2]float64 }

// update folds one outcome (observed y against the ensemble's p) into target k's decayed sums
// and returns the factor, the ratio of the sums, kept within [1/20, 20]. A backend's first
// outcome starts both sums at two outcomes' worth of ratio 1, a prior that decays away — as
// latency.Linear does. (Shrinking the ratio towards 1 by a fixed two outcomes against
// the decayed weight, which saturates at 1/adapt, would leave a server slowed 3× predicted
// 2.7× for good.)
func (s *treeSpeedSums) update(k int, y, p, adapt float64) float64 {
	if s.p[k] == 0 {
		s.y[k], s.p[k] = 2*p, 2*p
	}
	d := 1 - adapt
	s.y[k] = d*s.y[k] + y
	s.p[k] = d*s.p[k] + p
	return min(max(s.y[k]/s.p[k], 1.0/20), 20)
}

// treeRing is a window of outcomes of one target.
type treeRing struct {
	xs []treeX
	ys []float64 // seconds, divided by the backend's factor
	n  int       // outcomes seen; the next goes to n % len(xs)
}

func (r *treeRing) add(window int, x *treeX, y float64) {
	if r.xs == nil {
		r.xs, r.ys = make([]treeX, window), make([]float64, window)
	}
	k := r.n % window
	r.xs[k], r.ys[k] = *x, y
	r.n++
}

// newTreeLatency returns a model with o's defaults filled in. Options out of range are taken
// as their defaults.
func newTreeLatency(o treeOptions) *treeLatency {
	if o.Window <= 0 {
		o.Window = 4096
	}
	if o.Refit <= 0 {
		o.Refit = 256
	}
	if o.Trees <= 0 {
		o.Trees = 32
	}
	if o.Depth <= 0 || o.Depth > 8 {
		o.Depth = 3
	}
	if !(o.Rate > 0 && o.Rate <= 1) {
		o.Rate = 0.15
	}
	if o.Bins < 2 || o.Bins > 256 {
		o.Bins = 32
	}
	if !(o.PrefillRate > 0) || math.IsInf(o.PrefillRate, 0) {
		o.PrefillRate = 16000
	}
	if o.DecodeStep <= 0 {
		o.DecodeStep = 20 * time.Millisecond
	}
	if !(o.Adapt > 0 && o.Adapt <= 1) {
		o.Adapt = 0.1
	}
	m := &treeLatency{o: o}
	m.prior = treeFit{
		ttft: forest{a: 0.02, b: 1 / o.PrefillRate, raw: o.raw, depth: o.Depth},
		tpot: forest{a: o.DecodeStep.Seconds(), raw: o.raw, depth: o.Depth},
	}
	p := m.prior
	m.fit.Store(&p)
	empty := []treeSpeed{}
	m.speeds.Store(&empty)
	return m
}

var _ latency.Model = (*treeLatency)(nil)

// Predict implements latency.Model. O(Trees·Depth), lock-free, no allocation.
func (m *treeLatency) Predict(f *latency.Features) routing.Latency {
	x := treeInputsOf(f)
	c := m.fit.Load()
	t, d := c.ttft.eval(&x), c.tpot.eval(&x)
	if sp := *m.speeds.Load(); int(f.Backend) < len(sp) {
		t *= math.Float64frombits(sp[f.Backend].ttft.Load())
		d *= math.Float64frombits(sp[f.Backend].tpot.Load())
	}
	return routing.Latency{TTFT: treeSeconds(max(t, 1e-3)), TPOT: treeSeconds(max(d, 1e-4))}
}

func treeSeconds(s float64) time.Duration { return time.Duration(s * 1e9) }

// Learn implements latency.Model. O(1) amortised, plus, in the call that triggers it, a
// refit: O(Trees·Depth·Window·inputs) every Refit outcomes (see treeOptions.Refit for the
// cold start).
func (m *treeLatency) Learn(f *latency.Features, observed routing.Latency) {
	if observed.TTFT <= 0 && observed.TPOT <= 0 {
		return
	}
	x := treeInputsOf(f)
	id := int(f.Backend)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id >= len(m.sums) {
		m.sums = append(m.sums, treeSpeedSums{})
	}
	sp := *m.speeds.Load()
	if id >= len(sp) {
		grown := make([]treeSpeed, max(id+1, 2*len(sp)))
		for i := range grown {
			t, d := math.Float64bits(1), math.Float64bits(1)
			if i < len(sp) {
				t, d = sp[i].ttft.Load(), sp[i].tpot.Load()
			}
			grown[i].ttft.Store(t)
			grown[i].tpot.Store(d)
		}
		sp = grown
		m.speeds.Store(&grown)
	}
	c := m.fit.Load()
	s := &m.sums[id]
	if observed.TTFT > 0 {
		y := observed.TTFT.Seconds()
		k := s.update(0, y, max(c.ttft.eval(&x), 1e-3), m.o.Adapt)
		sp[id].ttft.Store(math.Float64bits(k))
		m.ttft.add(m.o.Window, &x, y/k)
	}
	if observed.TPOT > 0 {
		y := observed.TPOT.Seconds()
		k := s.update(1, y, max(c.tpot.eval(&x), 1e-4), m.o.Adapt)
		sp[id].tpot.Store(math.Float64bits(k))
		m.tpot.add(m.o.Window, &x, y/k)
	}
	m.since++
	n := max(m.ttft.n, m.tpot.n)
	if m.since >= min(m.o.Refit, max(32, n/4)) {
		m.since = 0
		m.refitLocked()
	}
}

// refitLocked fits both ensembles to their windows and publishes them. Under mu.
func (m *treeLatency) refitLocked() {
	next := m.prior
	if n := min(m.ttft.n, m.o.Window); n >= 16 {
		next.ttft = m.scratch.boost(&m.o, m.ttft.xs[:n], m.ttft.ys[:n], m.prior.ttft)
	}
	if n := min(m.tpot.n, m.o.Window); n >= 16 {
		next.tpot = m.scratch.boost(&m.o, m.tpot.xs[:n], m.tpot.ys[:n], m.prior.tpot)
	}
	m.fits++
	m.fit.Store(&next)
}

// treeScratch is the refit's working memory, reused across refits. Guarded by the model's mu.
type treeScratch struct {
	bins   []treeRow // sample i's bin of each input
	edges  [treeInputs][]float64
	sorted []float64
	y, r   []float64 // transformed targets, residuals
	pos    []uint32  // sample i's node within the level being grown
	hist   []treeBin // the level's histograms: node, input, bin
	parent []treeBin // the previous level's
	leafs  []treeBin
	split  []uint8 // per node of the level: the bin of its input whose samples go left (≤)
}

// treeRow is a sample's bins, one byte per input, stored by row so that one sample's updates go
// to different histograms and do not wait on each other.
type treeRow [treeInputs]uint8

type treeBin struct {
	s float64
	n int32
}

// treeQuantileSample is how many of the window's values the cuts are taken from.
const treeQuantileSample = 1024

// boost fits a forest to xs, ys (seconds) starting from prior (a forest without trees). It
// allocates only the returned forest's arrays (and the scratch's on first use).
// O(Trees·Depth·n·inputs + inputs·n·log Bins).
func (s *treeScratch) boost(o *treeOptions, xs []treeX, ys []float64, prior forest) forest {
	n := len(xs)
	s.grow(n, o)
	// Cut each input at up to Bins−1 quantiles of (a stride through) the window and bin every
	// sample.
	bins := s.bins[:n]
	stride := max(1, n/treeQuantileSample)
	for f := range treeInputs {
		v := s.sorted[:0]
		for i := 0; i < n; i += stride {
			v = append(v, xs[i][f])
		}
		slices.Sort(v)
		m := len(v)
		e := s.edges[f][:0]
		for k := 1; k < o.Bins; k++ {
			c := v[k*m/o.Bins]
			// An edge at the maximum would send everything left; equal edges are one cut.
			if c < v[m-1] && (len(e) == 0 || c > e[len(e)-1]) {
				e = append(e, c)
			}
		}
		s.edges[f] = e
		for i := range xs {
			bins[i][f] = uint8(sort.SearchFloat64s(e, xs[i][f]))
		}
	}
	// Start from the prior plus the mean residual.
	e := prior
	e.trees = o.Trees
	inner, leaves := 1<<o.Depth-1, 1<<o.Depth
	e.feat = make([]uint8, o.Trees*inner)
	e.thr = make([]float64, o.Trees*inner)
	e.leaf = make([]float64, o.Trees*leaves)
	y, r := s.y[:n], s.r[:n]
	mean := 0.0
	for i := range xs {
		p := prior.a + prior.b*xs[i][0]
		if o.raw {
			y[i] = ys[i]
		} else {
			y[i], p = math.Log(ys[i]), math.Log(p)
		}
		r[i] = y[i] - p
		mean += r[i]
	}
	mean /= float64(n)
	e.offset = mean
	for i := range r {
		r[i] -= mean
	}
	// A leaf needs this many samples: fewer would fit the noise of a small window.
	minLeaf := int32(min(max(n/128, 4), 32))
	const lambda = 1.0 // shrinks a leaf of few samples towards 0
	pos := s.pos[:n]
	nb := o.Bins
	stripe := treeInputs * nb // one node's histograms
	for t := range o.Trees {
		feat, thr := e.feat[t*inner:(t+1)*inner], e.thr[t*inner:(t+1)*inner]
		clear(pos)
		for d := range o.Depth {
			level := 1 << d
			hist := s.hist[:level*stripe]
			clear(hist)
			// Accumulate the left children only; a right child is its parent less its sibling.
			for i := range bins {
				j := pos[i]
				if j&1 != 0 {
					continue
				}
				h, ri := hist[int(j)*stripe:int(j+1)*stripe], r[i]
				for f, b := range &bins[i] {
					k := f*nb + int(b)
					h[k].s += ri
					h[k].n++
				}
			}
			if d > 0 {
				for j := 0; j < level; j += 2 {
					p, l, rt := s.parent[j/2*stripe:(j/2+1)*stripe], hist[j*stripe:(j+1)*stripe], hist[(j+1)*stripe:(j+2)*stripe]
					for k := range rt {
						rt[k] = treeBin{p[k].s - l[k].s, p[k].n - l[k].n}
					}
				}
			}
			split := s.split[:level]
			for j := range level {
				node := level - 1 + j
				feat[node], thr[node], split[j] = 0, math.Inf(1), math.MaxUint8
				h := hist[j*stripe : (j+1)*stripe]
				var tot treeBin
				for _, b := range h[:nb] {
					tot.s += b.s
					tot.n += b.n
				}
				if tot.n < 2*minLeaf {
					continue
				}
				parent := tot.s * tot.s / (float64(tot.n) + lambda)
				best := 1e-12 * (1 + parent)
				for f := range treeInputs {
					var left treeBin
					for b, hb := range h[f*nb : f*nb+len(s.edges[f])] {
						left.s += hb.s
						left.n += hb.n
						rn := tot.n - left.n
						if left.n < minLeaf {
							continue
						}
						if rn < minLeaf {
							break
						}
						rs := tot.s - left.s
						gain := left.s*left.s/(float64(left.n)+lambda) + rs*rs/(float64(rn)+lambda) - parent
						if gain > best {
							best = gain
							feat[node], thr[node], split[j] = uint8(f), s.edges[f][b], uint8(b)
						}
					}
				}
			}
			for i := range pos {
				j := pos[i]
				right := uint32(0)
				if bins[i][feat[level-1+int(j)]] > split[j] {
					right = 1
				}
				pos[i] = 2*j + right
			}
			s.hist, s.parent = s.parent, s.hist
		}
		leafs := s.leafs[:leaves]
		clear(leafs)
		for i, j := range pos {
			leafs[j].s += r[i]
			leafs[j].n++
		}
		leaf := e.leaf[t*leaves : (t+1)*leaves]
		for j, l := range leafs {
			leaf[j] = o.Rate * l.s / (float64(l.n) + lambda)
		}
		for i, j := range pos {
			r[i] -= leaf[j]
		}
	}
	return e
}

// grow sizes the scratch for n samples.
func (s *treeScratch) grow(n int, o *treeOptions) {
	if len(s.y) >= n {
		return
	}
	n = max(n, o.Window)
	s.bins = make([]treeRow, n)
	for f := range treeInputs {
		s.edges[f] = make([]float64, 0, o.Bins)
	}
	s.sorted = make([]float64, 0, treeQuantileSample+1)
	s.y, s.r = make([]float64, n), make([]float64, n)
	s.pos = make([]uint32, n)
	nodes := 1 << (o.Depth - 1) // of the deepest level grown
	s.hist = make([]treeBin, nodes*treeInputs*o.Bins)
	s.parent = make([]treeBin, nodes*treeInputs*o.Bins)
	s.leafs = make([]treeBin, 1<<o.Depth)
	s.split = make([]uint8, nodes)
}
