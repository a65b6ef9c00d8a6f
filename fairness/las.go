package fairness

import (
	"math"
	"slices"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/refpolicy"
)

// LASOptions configures NewLAS. The zero value uses llm-d's cost weights and half-life.
type LASOptions struct {
	// HalfLife is the time in which attained service halves; zero means 60 s.
	HalfLife time.Duration
	// PromptWeight and OutputWeight price a token of prompt and of output; zero means 1
	// and 2.
	PromptWeight, OutputWeight float64
	// Memory bounds the per-flow history; Memory.Forget defaults to one hour.
	Memory Memory
}

func (o *LASOptions) resolve() (Memory, error) {
	if o.HalfLife < 0 || o.PromptWeight < 0 || o.OutputWeight < 0 {
		return Memory{}, invalid("negative LAS option")
	}
	if o.HalfLife == 0 {
		o.HalfLife = 60 * time.Second
	}
	if o.PromptWeight == 0 {
		o.PromptWeight = 1
	}
	if o.OutputWeight == 0 {
		o.OutputWeight = 2
	}
	return o.Memory.resolve(time.Hour)
}

// lAS is the policy NewLAS returns.
type lasPolicy struct {
	wp, wo float64
	h      float64 // half-life in ns
	epoch  int64
	flows  table[lasState]
}

type lasState struct {
	logS    float64 // log₂ S(t₀) + (t₀ − epoch)/h; −Inf without service
	set     bool
	grownAt int64 // unix ns at which the slot's unreported growth is valued
}

var (
	_ flowcontrol.Policy = (*lasPolicy)(nil)
	_ flowcontrol.Ranker = (*lasPolicy)(nil)
	_ peer.UsageSharer   = (*lasPolicy)(nil)
)

// newLAS builds the policy NewLAS returns.
func newLAS(o LASOptions) (*lasPolicy, error) {
	m, err := o.resolve()
	if err != nil {
		return nil, err
	}
	return &lasPolicy{wp: o.PromptWeight, wo: o.OutputWeight, h: float64(o.HalfLife), flows: newTable[lasState](m.MaxIdle, m.Forget)}, nil
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *lasPolicy) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	if p.epoch == 0 {
		p.epoch = now.UnixNano()
	}
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the flow's time-invariant log service, then its head's arrival; valid until
// the flow is charged again. O(1).
func (p *lasPolicy) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	s := p.flows.use(refOf(f))
	return flowcontrol.Key{Value: s.value(), Tie: f.Head.Arrival.UnixNano()}, time.Time{}
}

// Rank is the flow key the request's flow would have, without a class. O(1); the policy's
// state is not changed.
func (p *lasPolicy) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, _ time.Time) flowcontrol.Rank {
	v := math.Inf(-1)
	if s := p.flows.get(refOf(f)); s != nil {
		v = s.value()
	}
	return flowcontrol.Rank{Key: flowcontrol.Key{Value: v, Tie: headArrival(r, f)}}
}

func (s *lasState) value() float64 {
	if !s.set {
		return math.Inf(-1)
	}
	return s.logS
}

// charge adds c (possibly negative, a correction) to the service at now.
func (p *lasPolicy) charge(s *lasState, c float64, now int64) {
	if c == 0 {
		return
	}
	tau := float64(now-p.epoch) / p.h
	cur := 0.0
	if s.set {
		cur = math.Exp2(s.logS - tau)
	}
	cur += c
	if cur <= 0 {
		s.logS, s.set = 0, false
		return
	}
	s.logS, s.set = math.Log2(cur)+tau, true
}

// decayed is growth g valued at time at, decayed to now.
func decayed(g float64, at, now int64, h float64) float64 {
	if g == 0 || at == now {
		return g
	}
	return g * math.Exp2(-float64(now-at)/h)
}

// grow adds c, charged at now, to the unreported growth of slot i, which decays like
// service: it is kept as a value at s.grownAt.
func (p *lasPolicy) grow(s *lasState, i int32, c float64, now int64) {
	if c == 0 {
		return
	}
	g := p.flows.grow(i)
	*g = decayed(*g, s.grownAt, now, p.h) + c
	s.grownAt = now
}

// AppendUsageDeltas appends, for every flow charged since the previous call, the service it
// attained here since then, decayed to now, and forgets it (a flow whose corrections
// outweigh its service carries the difference into the next call). O(flows charged).
func (p *lasPolicy) AppendUsageDeltas(dst []peer.UsageDelta, now time.Time) []peer.UsageDelta {
	ns := now.UnixNano()
	return p.flows.report(dst, func(grown float64, s *lasState) float64 { return decayed(grown, s.grownAt, ns, p.h) })
}

// ApplyUsageDeltas charges other replicas' service (weighted tokens) as attained now, as
// Observe charges local service but without reporting it back; a flow this policy does not
// remember is created idle, within Memory. Deltas that are not finite and positive, or
// name a negative band, are ignored. The queue re-keys the waiting flows named. O(len(ds)).
func (p *lasPolicy) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	ns := now.UnixNano()
	if p.epoch == 0 {
		p.epoch = ns
	}
	for k := range ds {
		if d := &ds[k]; usable(d) {
			p.charge(p.flows.touch(deltaRef(d), ns), d.Amount, ns)
		}
	}
}

// Service returns the decayed service attained by flow (id, band) at now, in weighted
// tokens, and false if the flow is not remembered. Call it only while the queue is idle or
// from the goroutine operating it (the policy is not synchronised). O(1).
func (p *lasPolicy) Service(id flowcontrol.FlowID, band int, now time.Time) (float64, bool) {
	s := p.flows.get(flowRef{id, band})
	if s == nil {
		return 0, false
	}
	if !s.set {
		return 0, true
	}
	return math.Exp2(s.logS - float64(now.UnixNano()-p.epoch)/p.h), true
}

// Observe charges service: prompt estimate at dispatch, output and prompt correction at
// completion. O(1) amortised.
func (p *lasPolicy) Observe(e *flowcontrol.Event) {
	now := e.Now.UnixNano()
	s, i := p.flows.useAt(refOf(e.Flow))
	var c float64
	switch e.Kind {
	case flowcontrol.EventDispatch:
		c = p.wp * float64(e.Request.PromptTokens)
	case flowcontrol.EventDone:
		c = p.wo*float64(e.Usage.OutputTokens) + p.wp*float64(e.Usage.PromptTokens-e.Request.PromptTokens)
	}
	p.charge(s, c, now)
	p.grow(s, i, c, now)
	p.flows.settle(e.Flow, now)
}

// lasReferenceOptions configures newLASReference. The zero value is llm-d's default.
type lasReferenceOptions struct {
	// HalfLife is the time in which attained service halves; zero means 60 s.
	HalfLife time.Duration
	// PromptWeight and OutputWeight price a token of prompt and of output; zero means 1
	// and 2.
	PromptWeight, OutputWeight float64
	// ServiceWeight and WaitWeight weigh normalised service and normalised head wait in the
	// score; both zero means 0.8 and 0.2.
	ServiceWeight, WaitWeight float64
	// Memory bounds the per-flow history; Memory.Forget defaults to 3600 s, llm-d's.
	Memory Memory
}

type lasRefState struct {
	service float64 // at time at
	at      int64
	grownAt int64 // unix ns at which the slot's unreported growth is valued
}

// lasReference is llm-d's least-attained-service fairness (its flow-control default),
// reproduced exactly as a reference, off the API: internal/refpolicy hands it to the policy
// tables of internal/glue/builtin ("las-reference"). Each completed request costs prompt
// tokens + 2 × completion tokens, charged at completion; a flow's service decays by
// 2^−elapsed/60 s; the waiting flow with the highest
//
//	score = 0.8 · (1 − normalised service) + 0.2 · normalised head wait
//
// goes next, both terms min-max normalised over the flows waiting in the band (a term whose
// values are all equal normalises to 0). Ties go to the longer head wait, then the smaller
// flow id. Flows idle for 3600 s are forgotten. Requests of a flow go in arrival order.
//
// Its promise is llm-d's: light flows overtake heavy ones, tempered by wait. Because the
// normalisation spans every waiting flow, the order cannot be a per-flow key: it is a
// FlowPicker that scans every waiting flow of the band on each pick, computing a decayed
// service (one exp2) and a map look-up per flow. Cost: O(flows in the band) per pick, with a
// cache miss per flow once the flows outgrow the cache, allocation-free. With the queue's
// built-in limits (Options.MaxInFlight, Saturation), which answer per band, the queue asks
// for a pick only when the band can dispatch, so a dispatch costs one scan; with only an
// Options.Gate every enqueue and completion still costs a scan. BenchmarkPolicy measures it
// against LAS (bench/BENCHMARKS.md); LAS is the O(log flows) form.
//
// It is a peer.UsageSharer with LAS's semantics: a delta is the cost completed on one
// replica since the last exchange, decayed to the exchange; applying it charges it as if
// completed then. It serves one queue; it is not safe for concurrent use except through the
// queue.
type lasReference struct {
	wp, wo, ws, ww float64
	h              float64
	flows          table[lasRefState]
	scratch        []float64 // decayed services of the flows being picked among
}

var (
	_ flowcontrol.Policy     = (*lasReference)(nil)
	_ flowcontrol.FlowPicker = (*lasReference)(nil)
	_ peer.UsageSharer       = (*lasReference)(nil)
)

func init() {
	refpolicy.LAS = func() any {
		p, err := newLASReference(lasReferenceOptions{})
		if err != nil {
			panic("fairness: " + err.Error()) // the defaults are valid
		}
		return p
	}
}

// newLASReference returns llm-d's LAS, or an error wrapping ErrInvalidOptions.
func newLASReference(o lasReferenceOptions) (*lasReference, error) {
	lo := LASOptions{HalfLife: o.HalfLife, PromptWeight: o.PromptWeight, OutputWeight: o.OutputWeight, Memory: o.Memory}
	m, err := lo.resolve()
	if err != nil {
		return nil, err
	}
	if o.ServiceWeight < 0 || o.WaitWeight < 0 {
		return nil, invalid("negative LAS score weight")
	}
	if o.ServiceWeight == 0 && o.WaitWeight == 0 {
		o.ServiceWeight, o.WaitWeight = 0.8, 0.2
	}
	return &lasReference{
		wp: lo.PromptWeight, wo: lo.OutputWeight, ws: o.ServiceWeight, ww: o.WaitWeight,
		h: float64(lo.HalfLife), flows: newTable[lasRefState](m.MaxIdle, m.Forget),
	}, nil
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *lasReference) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is not used by the queue (LASReference is a FlowPicker); it returns the head's
// key so that the policy still orders flows FCFS where a FlowKey is needed. O(1).
func (p *lasReference) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

func (p *lasReference) service(s *lasRefState, now int64) float64 {
	if s == nil || s.service == 0 {
		return 0
	}
	return s.service * math.Exp2(-float64(now-s.at)/p.h)
}

// Observe charges prompt + 2 × output tokens at completion. O(1) amortised.
func (p *lasReference) Observe(e *flowcontrol.Event) {
	now := e.Now.UnixNano()
	s, i := p.flows.useAt(refOf(e.Flow))
	if e.Kind == flowcontrol.EventDone {
		c := p.wp*float64(e.Usage.PromptTokens) + p.wo*float64(e.Usage.OutputTokens)
		s.service = p.service(s, now) + c
		s.at = now
		if c != 0 {
			g := p.flows.grow(i)
			*g = decayed(*g, s.grownAt, now, p.h) + c
			s.grownAt = now
		}
	}
	p.flows.settle(e.Flow, now)
}

// AppendUsageDeltas appends, for every flow that completed work since the previous call,
// its cost completed here since then, decayed to now, and forgets it. O(flows charged).
func (p *lasReference) AppendUsageDeltas(dst []peer.UsageDelta, now time.Time) []peer.UsageDelta {
	ns := now.UnixNano()
	return p.flows.report(dst, func(grown float64, s *lasRefState) float64 { return decayed(grown, s.grownAt, ns, p.h) })
}

// ApplyUsageDeltas charges other replicas' completed cost as completed now; see
// LAS.ApplyUsageDeltas. No re-keying is needed: every pick scans. O(len(ds)).
func (p *lasReference) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	ns := now.UnixNano()
	for k := range ds {
		if d := &ds[k]; usable(d) {
			s := p.flows.touch(deltaRef(d), ns)
			s.service = p.service(s, ns) + d.Amount
			s.at = ns
		}
	}
}

// PickFlow scores every waiting flow of the band and returns the best. O(flows).
func (p *lasReference) PickFlow(band int, flows []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	if len(flows) == 0 {
		return "", false
	}
	ns := now.UnixNano()
	minS, maxS := math.Inf(1), math.Inf(-1)
	minW, maxW := int64(math.MaxInt64), int64(math.MinInt64)
	p.scratch = slices.Grow(p.scratch[:0], len(flows))[:len(flows)]
	for i, f := range flows {
		sv := p.service(p.flows.get(refOf(f)), ns)
		p.scratch[i] = sv
		minS, maxS = min(minS, sv), max(maxS, sv)
		w := ns - f.Head.Arrival.UnixNano()
		minW, maxW = min(minW, w), max(maxW, w)
	}
	best, bestScore, bestWait := -1, math.Inf(-1), int64(0)
	for i, f := range flows {
		sv := p.scratch[i]
		w := ns - f.Head.Arrival.UnixNano()
		var nsv, nw float64
		if maxS > minS {
			nsv = (sv - minS) / (maxS - minS)
		}
		if maxW > minW {
			nw = float64(w-minW) / float64(maxW-minW)
		}
		score := p.ws*(1-nsv) + p.ww*nw
		if best < 0 || score > bestScore || (score == bestScore && (w > bestWait || (w == bestWait && f.ID < flows[best].ID))) {
			best, bestScore, bestWait = i, score, w
		}
	}
	return flows[best].ID, true
}

// Service returns the decayed service attained by flow (id, band) at now, and false if
// the flow is not remembered. Same synchronisation rule as LAS.Service. O(1).
func (p *lasReference) Service(id flowcontrol.FlowID, band int, now time.Time) (float64, bool) {
	s := p.flows.get(flowRef{id, band})
	if s == nil {
		return 0, false
	}
	return p.service(s, now.UnixNano()), true
}
