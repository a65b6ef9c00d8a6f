package latency

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/routing"
)

// Features are what a latency model knows of one candidate for one request at the time of the
// pick. Polled signals that are not fresh are −1.
type Features struct {
	// Backend is the candidate's id in the router.
	Backend routing.BackendID
	// PromptTokens is the request's prompt; UncachedTokens the part of it this backend would
	// prefill ([routing.Candidate.UncachedTokens]).
	PromptTokens, UncachedTokens int
	// PrefillTokens is the prefill already sent to the backend and not yet done (the router's
	// and its peers', [routing.InFlight.PrefillTokens] of the candidate), not counting this
	// request's.
	PrefillTokens int64
	// InFlight is the requests in flight there ([routing.InFlight.Requests] of the candidate),
	// not counting this one.
	InFlight int64
	// Waiting and Running are the backend's polled queue and batch
	// ([routing.BackendState.Queued], [routing.BackendState.Running]), −1 when not fresh.
	Waiting, Running int
	// KVUtilization is the polled KV-cache use in [0, 1], −1 when not fresh.
	KVUtilization float64
}

// FeaturesOf returns c's features for req. O(1), no allocation.
func FeaturesOf(req *routing.Request, c *routing.Candidate) Features {
	return featuresOf(req.PromptTokens, c)
}

// featuresOf is FeaturesOf for a request of prompt tokens.
func featuresOf(prompt int, c *routing.Candidate) Features {
	f := Features{
		Backend: c.ID, PromptTokens: prompt, UncachedTokens: c.UncachedTokens,
		PrefillTokens: c.InFlight.PrefillTokens, InFlight: c.InFlight.Requests,
		Waiting: -1, Running: -1, KVUtilization: -1,
	}
	if f.PromptTokens <= 0 {
		f.PromptTokens = c.UncachedTokens + c.MatchedTokens
	}
	if c.State == nil {
		return f
	}
	if c.Fresh&routing.SignalQueued != 0 {
		f.Waiting = c.State.Queued
	}
	if c.Fresh&routing.SignalRunning != 0 {
		f.Running = c.State.Running
	}
	if u := c.State.KVUtilization; c.Fresh&routing.SignalKVUtilization != 0 && u >= 0 && u <= 1 {
		f.KVUtilization = u
	}
	return f
}

// Model predicts the latency a request would get on a candidate, and learns from what
// requests got. A [routing.Router] whose profile holds a scorer of [NewScorer] feeds its
// model: at every Pick it keeps the chosen candidate and records the model's prediction for it
// ([routing.Result.Predicted]); at [routing.Result.FirstToken] and [routing.Result.Done] it
// calls Learn with what was observed, with the [Features] the candidate had at the pick.
//
// Predict runs on the Pick path, once per candidate: it must be safe for concurrent use, must
// not block and should not allocate. Learn is called from FirstToken and Done, concurrently
// from any goroutine, at most twice per request that observed anything; it must be safe for
// concurrent use and keep its memory and CPU bounded.
type Model interface {
	// Predict returns the expected TTFT and TPOT of a request with features f.
	Predict(f *Features) routing.Latency
	// Learn records that a request with features f (as they were at its pick) got observed.
	// A zero field of observed was not observed (TTFT: no first token of a streamed answer;
	// TPOT: fewer than two output tokens, or a failure).
	Learn(f *Features, observed routing.Latency)
}

// Defaults of [LinearOptions].
const (
	// DefaultFitWindow is the outcomes the shared fit fades over ([LinearOptions.Window]).
	DefaultFitWindow = 4096
	// DefaultRefit is the outcomes between two fits ([LinearOptions.Refit]).
	DefaultRefit = 16
	// DefaultPrefillRate is the prior's prefill speed, tokens per second: an H100-class server
	// on a 32B model (bench's profile prefills ≈16k tokens per second).
	DefaultPrefillRate = 16000
	// DefaultDecodeStep is the prior's time per output token on an idle server.
	DefaultDecodeStep = 20 * time.Millisecond
	// DefaultAdapt is the weight of the newest outcome in a backend's speed factor.
	DefaultAdapt = 0.1
	// ColdOutcomes is how many observations ([routing.Stats.LatencyOutcomes]) a router's
	// latency model needs before an admission step should refuse work on its predictions
	// alone: before, they are mostly the prior's, which may predict every request to miss.
	ColdOutcomes = 200
)

// LinearOptions configures [NewLinear]. Zero values are the defaults.
type LinearOptions struct {
	// Window is how many recent outcomes the shared model is fitted to: each outcome's
	// weight fades by the factor 1 − 1/Window per later outcome. Zero: [DefaultFitWindow].
	Window int `json:"window"`
	// Refit is how many outcomes arrive between two fits. Zero: [DefaultRefit].
	Refit int `json:"refit"`
	// PrefillRate (tokens per second) and DecodeStep set the prior, the prediction before
	// any outcome: TTFT is the prefill in front of the request and its own at PrefillRate,
	// TPOT is DecodeStep. Zero: [DefaultPrefillRate], [DefaultDecodeStep].
	PrefillRate float64       `json:"prefill_rate"`
	DecodeStep  time.Duration `json:"-"`
	// Adapt is the weight, in (0, 1], of a backend's newest outcome in its speed factor: how
	// fast the model follows a server that slows down or recovers. Zero: [DefaultAdapt].
	Adapt float64 `json:"adapt"`
}

// The shared model's inputs. TTFT: 1, the prefill in front of the request and its own
// (thousands of tokens), its own alone, waiting, running, KV use, requests in flight, and
// the prefill work times the batch (chunked prefill shares each step with the decodes).
// TPOT: 1, running, in flight, KV use, prefill in front (which interleaves with decodes).
const (
	ttftDims = 8
	tpotDims = 5
)

// vec holds either; TPOT uses the first tpotDims entries.
type vec [ttftDims]float64

// latencyInputs is what both predictions start from, with unknown signals as 0.
type latencyInputs struct {
	work, own, waiting, running, kv, inflight float64
}

func inputsOf(f *Features) latencyInputs {
	in := latencyInputs{
		work:     float64(f.PrefillTokens+int64(f.UncachedTokens)) * 1e-3,
		own:      float64(f.UncachedTokens) * 1e-3,
		inflight: float64(f.InFlight),
	}
	if f.Waiting > 0 {
		in.waiting = float64(f.Waiting)
	}
	if f.Running > 0 {
		in.running = float64(f.Running)
	}
	if f.KVUtilization > 0 {
		in.kv = f.KVUtilization
	}
	return in
}

func (in *latencyInputs) ttft() vec {
	return vec{1, in.work, in.own, in.waiting, in.running, in.kv, in.inflight, in.work * in.running / 64}
}

func (in *latencyInputs) tpot() vec {
	return vec{1, in.running, in.inflight, in.kv, in.work}
}

// vec is ttft (k = 0) or tpot (k = 1).
func (in *latencyInputs) vec(k int) vec {
	if k == 0 {
		return in.ttft()
	}
	return in.tpot()
}

// dims are the inputs of TTFT and TPOT.
var dims = [2]int{ttftDims, tpotDims}

// linearCoef is one fit, immutable once published.
type linearCoef struct {
	ttft, tpot vec
}

// speed is a backend's factors, the ratio of what it did to what the shared model predicted,
// as float64 bits: TTFT, then TPOT.
type speed [2]atomic.Uint64

// factor returns target k's factor (0: TTFT, 1: TPOT).
func (s *speed) factor(k int) float64 { return math.Float64frombits(s[k].Load()) }

// clampFactor keeps a speed factor within [1/20, 20].
func clampFactor(f float64) float64 { return min(max(f, 1.0/20), 20) }

// Linear is usher's built-in [Model]: a ridge regression of TTFT and TPOT on the
// candidate's features, shared by the fleet and refitted to recent outcomes (an exponentially
// fading window, each weighted by 1/latency), times a speed factor per backend that follows
// each server's own ratio of observed to predicted latency. The shared fit learns how load
// turns into latency; the factor catches a server that is slower (or faster) than its load
// says, within about 1/Adapt of its requests. Before any outcome it predicts from its prior
// ([LinearOptions]), and the fit is drawn towards the prior until outcomes outweigh it. See
// "The built-in model" in the package documentation for the inputs and the measured error.
//
// Predict is O(1), lock-free and allocates nothing (about 20 ns; a pick's scorer computes the
// same over its columns in a few ns per candidate). Learn takes a mutex for O(d²) work (d = 8
// inputs), plus a refit every Refit outcomes: two Cholesky solves, O(d³), and one allocation
// for the published coefficients, paid by the caller whose outcome triggers it. Memory is
// O(backends), whatever the window. Safe for concurrent use. Give one model to one Router:
// the speed factors are kept by [routing.BackendID].
type Linear struct {
	coef   atomic.Pointer[linearCoef]
	speeds atomic.Pointer[[]speed]
	prior  linearCoef
	adapt  float64

	mu    sync.Mutex
	decay float64 // 1 − 1/Window
	refit int
	// eqs are the fading normal equations of TTFT and TPOT (k = 0, 1), each target normalised
	// by the backend's factor at learn time.
	eqs      [2]normal
	since    int
	outcomes int // outcomes learned, fleet-wide
	fits     uint64
	// per backend: decayed sums of observed and predicted, TTFT then TPOT.
	sums []speedSums
}

type speedSums struct {
	y, p [2]float64
	last int // the fleet's outcome count (Linear.outcomes) at the backend's last outcome
}

// NewLinear returns a model with the options' prior, or an error wrapping
// [routing.ErrInvalidOptions].
func NewLinear(o LinearOptions) (*Linear, error) {
	if o.Window < 0 || o.Refit < 0 || o.PrefillRate < 0 || o.DecodeStep < 0 || o.Adapt < 0 || o.Adapt > 1 ||
		math.IsNaN(o.PrefillRate) || math.IsInf(o.PrefillRate, 0) || math.IsNaN(o.Adapt) {
		return nil, fmt.Errorf("%w: LinearOptions %+v: want Window, Refit, PrefillRate, DecodeStep ≥ 0 and Adapt in [0, 1]",
			routing.ErrInvalidOptions, o)
	}
	if o.Window == 0 {
		o.Window = DefaultFitWindow
	}
	if o.Refit == 0 {
		o.Refit = DefaultRefit
	}
	if o.PrefillRate == 0 {
		o.PrefillRate = DefaultPrefillRate
	}
	if o.DecodeStep == 0 {
		o.DecodeStep = DefaultDecodeStep
	}
	if o.Adapt == 0 {
		o.Adapt = DefaultAdapt
	}
	m := &Linear{adapt: o.Adapt, decay: 1 - 1/float64(o.Window), refit: o.Refit}
	// The prior: 20 ms of overhead, the prefill work at PrefillRate; one decode step per token,
	// growing slowly with the batch.
	step := o.DecodeStep.Seconds()
	m.prior.ttft = vec{0.02, 1000 / o.PrefillRate}
	m.prior.tpot = vec{step, step / 100}
	c := m.prior
	m.coef.Store(&c)
	empty := []speed{}
	m.speeds.Store(&empty)
	return m, nil
}

// Predict implements [Model]. O(1), lock-free, no allocation.
func (m *Linear) Predict(f *Features) routing.Latency {
	in := inputsOf(f)
	t, d := m.predict(&in, f.Backend)
	return routing.Latency{TTFT: seconds(t), TPOT: seconds(d)}
}

// predict returns TTFT and TPOT in seconds for in on backend id.
func (m *Linear) predict(in *latencyInputs, id routing.BackendID) (ttft, tpot float64) {
	return m.coef.Load().eval(in, *m.speeds.Load(), id)
}

// eval is the prediction with coefficients c and speed factors sp: the shared prediction,
// floored at 1 ms and 0.1 ms, times the backend's factors. Written out rather than looped, for
// the pick path. O(1).
func (c *linearCoef) eval(in *latencyInputs, sp []speed, id routing.BackendID) (ttft, tpot float64) {
	// linearScorer.AddCols repeats this arithmetic for the columns.
	a, b := &c.ttft, &c.tpot
	ttft = a[0] + a[1]*in.work + a[2]*in.own + a[3]*in.waiting + a[4]*in.running + a[5]*in.kv + a[6]*in.inflight +
		a[7]*(in.work*in.running/64)
	tpot = b[0] + b[1]*in.running + b[2]*in.inflight + b[3]*in.kv + b[4]*in.work
	if ttft < 1e-3 {
		ttft = 1e-3
	}
	if tpot < 1e-4 {
		tpot = 1e-4
	}
	if int(id) < len(sp) {
		ttft *= sp[id].factor(0)
		tpot *= sp[id].factor(1)
	}
	return ttft, tpot
}

// base is the shared prediction alone.
func (c *linearCoef) base(in *latencyInputs) (ttft, tpot float64) { return c.eval(in, nil, 0) }

func seconds(s float64) time.Duration { return time.Duration(s * 1e9) }

// Learn implements [Model]. O(1) amortised, plus a refit every Refit outcomes.
func (m *Linear) Learn(f *Features, observed routing.Latency) {
	if observed.TTFT <= 0 && observed.TPOT <= 0 {
		return
	}
	in := inputsOf(f)
	id := int(f.Backend)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id >= len(m.sums) {
		m.sums = append(m.sums, speedSums{})
	}
	sp := *m.speeds.Load()
	if id >= len(sp) {
		grown := make([]speed, max(id+1, 2*len(sp)))
		for i := range grown {
			for k := range grown[i] {
				v := math.Float64bits(1)
				if i < len(sp) {
					v = sp[i][k].Load()
				}
				grown[i][k].Store(v)
			}
		}
		sp = grown
		m.speeds.Store(&grown)
	}
	var pred [2]float64
	pred[0], pred[1] = m.coef.Load().base(&in)
	s := &m.sums[id]
	for k, o := range [2]time.Duration{observed.TTFT, observed.TPOT} {
		if o <= 0 {
			continue
		}
		y := o.Seconds()
		f := s.update(k, y, pred[k], m.adapt)
		sp[id][k].Store(math.Float64bits(f))
		x := in.vec(k)
		m.eqs[k].add(&x, y/f, dims[k], m.decay)
	}
	s.last = m.outcomes
	m.outcomes++
	m.since++
	if m.since >= m.refit || (m.fits < 4 && m.since >= 8) {
		m.since = 0
		m.fit()
		m.forget(sp)
	}
}

// forget draws the speed factor of every backend that has had no outcome among the fleet's
// last forgetAfter a quarter of the way back to 1. A backend the model has come to predict
// slow is picked less, and so tells the model less: without this, one bad stretch would keep
// it out of the rotation after it recovered. Backends in use refresh their factor with every
// outcome and are left alone. Under mu; O(backends), once per refit.
func (m *Linear) forget(sp []speed) {
	const forgetAfter = 64
	for id := range m.sums {
		s := &m.sums[id]
		if m.outcomes-s.last < forgetAfter || id >= len(sp) {
			continue
		}
		for k := range s.y {
			if s.p[k] > 0 {
				s.y[k] = 0.75*s.y[k] + 0.25*s.p[k]
				sp[id][k].Store(math.Float64bits(clampFactor(s.y[k] / s.p[k])))
			}
		}
	}
}

// update folds one outcome (observed y against the shared prediction p) into the decayed sums
// of target k and returns the backend's factor, the ratio of the sums, kept within [1/20, 20].
// A backend's first outcome starts both sums at two outcomes' worth of ratio 1, a prior that
// decays away with the outcomes.
func (s *speedSums) update(k int, y, p, adapt float64) float64 {
	if s.p[k] == 0 {
		s.y[k], s.p[k] = 2*p, 2*p
	}
	d := 1 - adapt
	s.y[k] = d*s.y[k] + y
	s.p[k] = d*s.p[k] + p
	return clampFactor(s.y[k] / s.p[k])
}

// fit solves both ridge regressions and publishes the coefficients. Under mu. O(d³), the
// sums being kept current.
func (m *Linear) fit() {
	next := *m.coef.Load()
	if m.eqs[0].n > 0 {
		next.ttft = m.eqs[0].solve(&m.prior.ttft, ttftDims)
	}
	if m.eqs[1].n > 0 {
		next.tpot = m.eqs[1].solve(&m.prior.tpot, tpotDims)
	}
	m.fits++
	m.coef.Store(&next)
}

// normal holds the weighted normal equations XᵀWX (lower triangle) and XᵀWy of the samples
// (x, y) seen so far, each sample's weight decaying by the factor decay per later sample: an
// exponentially fading window of about 1/(1 − decay) samples, in O(d²) memory whatever the
// count. The decay is applied lazily: a new sample is folded in with the growing weight g,
// and the sums are brought back to scale when g grows large.
type normal struct {
	n   int     // samples seen
	g   float64 // the weight of the next sample, relative to the sums' scale
	ata [ttftDims][ttftDims]float64
	atb vec
}

// add folds (x, y) in, with weight 1/y (floored at 5 ms) on top of the decay: the fit
// minimises Σ (y − ŷ)²/y, between absolute error, where a queueing tail of seconds drags every
// prediction of the bulk towards it, and relative error, where the tail is ignored. O(d²).
func (w *normal) add(x *vec, y float64, d int, decay float64) {
	if w.n == 0 {
		w.g = 1
	}
	k := w.g / max(y, 0.005)
	for i := range d {
		xi := k * x[i]
		w.atb[i] += xi * y
		for j := 0; j <= i; j++ {
			w.ata[i][j] += xi * x[j]
		}
	}
	w.n++
	if w.g /= decay; w.g > 1e100 {
		for i := range d {
			w.atb[i] /= w.g
			for j := 0; j <= i; j++ {
				w.ata[i][j] /= w.g
			}
		}
		w.g = 1
	}
}

// solve returns the w minimising Σ weight·(y − w·x)² + λ‖w − prior‖², by Cholesky,
// or prior when the system is singular. O(d³).
func (w *normal) solve(prior *vec, d int) vec {
	const lambda = 1.0
	a, b := w.ata, w.atb
	// The sums at the scale where the newest sample weighs 1/y, against the prior.
	scale := w.g
	for i := range d {
		b[i] = b[i]/scale + lambda*prior[i]
		for j := 0; j <= i; j++ {
			a[i][j] /= scale
		}
		a[i][i] += lambda
	}
	// Cholesky: a = L·Lᵀ, in place in the lower triangle.
	for j := range d {
		s := a[j][j]
		for k := range j {
			s -= a[j][k] * a[j][k]
		}
		if !(s > 1e-12) {
			return *prior
		}
		a[j][j] = math.Sqrt(s)
		for i := j + 1; i < d; i++ {
			s := a[i][j]
			for k := range j {
				s -= a[i][k] * a[j][k]
			}
			a[i][j] = s / a[j][j]
		}
	}
	var z, x vec
	for i := range d {
		s := b[i]
		for k := range i {
			s -= a[i][k] * z[k]
		}
		z[i] = s / a[i][i]
	}
	for i := d - 1; i >= 0; i-- {
		s := z[i]
		for k := i + 1; k < d; k++ {
			s -= a[k][i] * x[k]
		}
		x[i] = s / a[i][i]
	}
	for i := range d {
		if math.IsNaN(x[i]) || math.IsInf(x[i], 0) {
			return *prior
		}
	}
	return x
}
