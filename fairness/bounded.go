package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/rekey"
)

// UrgentTier is the Key.Tier of a flow that the bounded-wait policy ([NewBoundedWait]) has
// promoted: below every tier an inner policy uses (inner policies must not use math.MinInt64
// themselves).
const UrgentTier = math.MinInt64

// BoundedWaitOptions configures NewBoundedWait.
type BoundedWaitOptions struct {
	// Wait is W, the wait the policy bounds; required, > 0, and below the queue's TTL
	// (otherwise requests expire before the bound applies).
	Wait time.Duration
	// Headroom is how long before W a request is promoted: promotion happens at age
	// Wait − Headroom, leaving Headroom for the gate to admit it. 0 ≤ Headroom < Wait;
	// zero promotes at W itself (then W bounds the wait until promotion, not until dispatch).
	Headroom time.Duration
	// Inner orders the flows that are not urgent; nil means llm-d's turn-priority with its
	// defaults. It must not be a FlowPicker.
	Inner flowcontrol.Policy
	// FirstTurnShare, in [0, 1), reserves that share of the dispatches for first turns —
	// flows with no dispatch in their remembered history — while any are waiting. Zero
	// reserves nothing.
	FirstTurnShare float64
	// FirstTurnMemory bounds the history that decides what a first turn is; its Forget
	// defaults to 120 s (llm-d's turn reset): a flow idle longer starts at its first turn
	// again.
	FirstTurnMemory Memory
}

// boundedWait is the policy NewBoundedWait returns.
type boundedWait struct {
	inner   flowcontrol.Policy
	promote int64 // Wait − Headroom, ns; negative: never (NewGittins without a Wait)
	share   float64
	gen     generational // inner, if its keys can all change at once (Gittins); else nil
	lastGen uint64       // gen's generation when the nodes were last keyed

	hist  table[bwState]
	nodes map[flowRef]*node
	bands []bwBand
	rekey rekey.Timers[*node]
	pool  nodePool
	seq   uint64
	// hinted is inner if it is the Gittins core: its per-flow state holds the flow's node
	// (nodes is then unused), found with the one look-up the core makes per event, and a
	// node's hint saves that look-up at the node's dispatch.
	hinted *gittins
	// picked is the node PickFlow returned, whose dispatch usually follows; nil once any
	// event has been observed since (so never a node returned to the pool).
	picked *node
}

type bwState struct{ dispatched int64 }

type bwBand struct {
	all    nodeHeap // every non-empty flow (slot 0)
	first  nodeHeap // non-empty flows at their first turn (slot 1)
	credit float64
}

var (
	_ flowcontrol.Policy     = (*boundedWait)(nil)
	_ flowcontrol.FlowPicker = (*boundedWait)(nil)
	_ flowcontrol.Ranker     = (*boundedWait)(nil)
	_ peer.UsageSharer       = (*boundedWait)(nil)
)

// newBoundedWait builds the policy NewBoundedWait returns.
func newBoundedWait(o BoundedWaitOptions) (*boundedWait, error) {
	if o.Wait <= 0 {
		return nil, invalid("BoundedWait needs Wait > 0")
	}
	if o.Headroom < 0 || o.Headroom >= o.Wait {
		return nil, invalid("BoundedWait Headroom %v not in [0, Wait)", o.Headroom)
	}
	if !(o.FirstTurnShare >= 0 && o.FirstTurnShare < 1) {
		return nil, invalid("BoundedWait FirstTurnShare %v not in [0, 1)", o.FirstTurnShare)
	}
	if o.Inner == nil {
		tp, _ := newTurnPriority(TurnPriorityOptions{})
		o.Inner = tp
	}
	if g, ok := o.Inner.(*gittinsPolicy); ok && g.bw.promote < 0 {
		o.Inner = g.bw.inner // NewGittins without a Wait: wrap its keyed core
	}
	if _, ok := o.Inner.(flowcontrol.FlowPicker); ok {
		return nil, invalid("BoundedWait cannot wrap a FlowPicker (%T)", o.Inner)
	}
	m, err := o.FirstTurnMemory.resolve(120 * time.Second)
	if err != nil {
		return nil, err
	}
	return newBoundedWaitOver(o.Inner, int64(o.Wait-o.Headroom), o.FirstTurnShare, m), nil
}

// generational is implemented by an inner policy whose keys can all change at once (a
// rebuilt Gittins index table): generation changes when they do.
type generational interface{ generation() uint64 }

// newBoundedWaitOver builds a boundedWait over a keyed inner policy; promote < 0 never
// promotes.
func newBoundedWaitOver(inner flowcontrol.Policy, promote int64, share float64, m Memory) *boundedWait {
	p := &boundedWait{
		inner: inner, promote: promote, share: share,
		hist: newTable[bwState](m.MaxIdle, m.Forget), nodes: make(map[flowRef]*node),
	}
	if g, ok := inner.(generational); ok {
		p.gen, p.lastGen = g, g.generation()
	}
	p.hinted, _ = inner.(*gittins)
	return p
}

// ItemKey orders a flow's requests by arrival (the inner policy's ItemKey is called for
// its bookkeeping and its result not used). O(1) plus the inner call.
func (p *boundedWait) ItemKey(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	p.inner.ItemKey(r, f, now)
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the inner policy's key until the head has waited Wait − Headroom, then
// {UrgentTier, head deadline}. O(1) plus the inner call.
func (p *boundedWait) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	if p.promote < 0 {
		return p.inner.FlowKey(f, now)
	}
	at := f.Head.Arrival.UnixNano() + p.promote
	if now.UnixNano() >= at {
		return flowcontrol.Key{Tier: UrgentTier, Tie: f.Head.Deadline.UnixNano()}, time.Time{}
	}
	k, until := p.inner.FlowKey(f, now)
	if until.IsZero() || until.UnixNano() > at {
		until = time.Unix(0, at)
	}
	return k, until
}

// Rank is the inner policy's rank of the request, if the inner policy is a
// flowcontrol.Ranker — its class, and its flow's key in the order of the flows that are not
// urgent (the flow's own key if it waits already) — with Within the promotion age, Wait −
// Headroom: a request that waits that long is served by deadline among the urgent, so its
// wait is at most about the larger of the two and its wait behind everything waiting when
// it arrived. O(1) plus the inner call; the policy's state is not changed.
func (p *boundedWait) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	rk := flowcontrol.Rank{Within: time.Duration(max(p.promote, 0))}
	in, ok := p.inner.(flowcontrol.Ranker)
	if !ok {
		return rk
	}
	ir := in.Rank(r, f, now)
	rk.Key, rk.Class = ir.Key, ir.Class
	if n := p.node(refOf(f)); n != nil && f.Head != nil && headArrival(r, f) == f.Head.Arrival.UnixNano() {
		rk.Key = n.key // r joins behind the head: the flow keeps its key, urgent or not
	}
	return rk
}

// Ahead counts the requests of band that BoundedWait would serve before a flow of key k:
// those of every flow whose key (urgent or the inner policy's) is not after k, walking the
// band's order and stopping at keys after k; ok is false past limit flows, or when the
// inner policy is not a flowcontrol.Ranker (the keys then mean nothing). The first-turn
// share, which moves first turns ahead, is not counted. O(min(flows ahead, limit)).
func (p *boundedWait) Ahead(band int, k flowcontrol.Key, limit int) (n int, ok bool) {
	if _, ok := p.inner.(flowcontrol.Ranker); !ok {
		return 0, false
	}
	if band >= len(p.bands) {
		return 0, true
	}
	w := nodeWalk{a: p.bands[band].all.a, k: k, budget: limit}
	return w.n, w.from(0)
}

// nodeWalk counts the queued requests of the nodes of a heap whose keys are not after k;
// see flowcontrol's walk of its flow heap, which it mirrors.
type nodeWalk struct {
	a      []*node
	k      flowcontrol.Key
	budget int
	n      int
}

func (w *nodeWalk) from(i int) bool {
	if i >= len(w.a) || w.k.Less(w.a[i].key) {
		return true
	}
	if w.budget == 0 {
		return false
	}
	w.budget--
	w.n += w.a[i].st.Queued
	return w.from(2*i+1) && w.from(2*i+2)
}

func (p *boundedWait) band(b int) *bwBand {
	for len(p.bands) <= b {
		p.bands = append(p.bands, bwBand{first: nodeHeap{slot: 1}})
	}
	return &p.bands[b]
}

// Observe passes the event to the inner policy, counts first turns and keeps the band's
// order. O(log flows) amortised.
func (p *boundedWait) Observe(e *flowcontrol.Event) {
	f := e.Flow
	r := refOf(f)
	picked := p.picked // the flow PickFlow just returned, if this is its dispatch
	p.picked = nil
	if e.Kind != flowcontrol.EventDispatch || picked != nil && (picked.st.ID != f.ID || picked.st.Band != f.Band) {
		picked = nil
	}
	var n *node
	var gs *gState // over the Gittins core: its state of the flow, which holds the flow's node
	if g := p.hinted; g != nil {
		g.hint = -1
		if picked != nil {
			g.hint = picked.hint
		}
		p.inner.Observe(e)
		gs = &g.flows.slots[g.lastSlot].s // kept while the flow has work, and just used
		n = gs.node
	} else {
		p.inner.Observe(e)
		switch {
		case e.Kind == flowcontrol.EventDone && f.Queued == 0, e.Kind == flowcontrol.EventEnqueue && f.Queued == 1:
			// A flow that had none queued before the event has no node: a completion leaves
			// Queued as it was, an enqueue adds one.
		case picked != nil:
			n = picked
		default:
			n = p.nodes[r]
		}
	}
	var h *bwState // first-turn history, kept only for the first-turn share
	if p.share > 0 {
		h = p.hist.use(r)
	}
	bd := p.band(f.Band)
	if e.Kind == flowcontrol.EventDispatch {
		// Credit accrues s per dispatch while first turns wait and pays 1 per first turn
		// dispatched; it is kept in [0, 1] so that it is never banked while none wait.
		if p.share > 0 && bd.first.len() > 0 {
			bd.credit += p.share
		}
		if n != nil && n.first {
			bd.credit--
		}
		bd.credit = min(max(bd.credit, 0), 1)
		if h != nil {
			h.dispatched++
		}
	}
	switch {
	case f.Queued == 0 && n != nil:
		bd.all.remove(n)
		bd.first.remove(n)
		p.rekey.Clear(&n.rekey)
		if gs != nil {
			gs.node = nil
		} else {
			delete(p.nodes, r)
		}
		p.pool.put(n)
	case f.Queued > 0:
		if n == nil {
			n = p.pool.get()
			n.seq = p.seq
			p.seq++
			if gs != nil {
				gs.node = n
			} else {
				p.nodes[r] = n
			}
		}
		n.st = *f
		n.first = h != nil && h.dispatched == 0
		if p.hinted != nil {
			n.hint = p.hinted.lastSlot
		}
		p.keyNode(n, bd, e.Now)
	}
	if h != nil {
		p.hist.settle(f, e.Now.UnixNano())
	}
}

// node is the node of flow r, nil if it has none queued. O(1).
func (p *boundedWait) node(r flowRef) *node {
	if g := p.hinted; g != nil {
		if s := g.state(r); s != nil {
			return s.node
		}
		return nil
	}
	return p.nodes[r]
}

func (p *boundedWait) keyNode(n *node, bd *bwBand, now time.Time) {
	k, until := p.FlowKey(&n.st, now)
	n.key = sanitizeKey(k)
	p.rekey.Set(&n.rekey, validUntil(until, now), n)
	bd.all.fix(n)
	if n.first {
		bd.first.fix(n)
	} else {
		bd.first.remove(n)
	}
}

// PickFlow re-keys the flows whose keys expired, then returns the urgent flow with the
// earliest deadline, else (when the first-turn credit is due) the best first-turn flow,
// else the best flow by the inner policy. O(log flows) per re-keyed flow, O(1) otherwise.
func (p *boundedWait) PickFlow(band int, _ []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	if p.gen != nil && p.gen.generation() != p.lastGen {
		// The inner policy's keys all changed (a rebuilt index table): re-key every waiting
		// flow, O(flows · log flows), which the inner policy amortises over its rebuilds.
		p.lastGen = p.gen.generation()
		for b := range p.bands {
			bd := &p.bands[b]
			for _, n := range bd.all.a {
				k, until := p.FlowKey(&n.st, now)
				n.key = sanitizeKey(k)
				p.rekey.Set(&n.rekey, validUntil(until, now), n)
			}
			bd.all.init()
			bd.first.init()
		}
	}
	for n, ok := p.rekey.Due(now); ok; n, ok = p.rekey.Due(now) {
		p.keyNode(n, p.band(n.st.Band), now)
	}
	bd := p.band(band)
	if bd.all.len() == 0 {
		return "", false
	}
	top := bd.all.top()
	if p.share > 0 && top.key.Tier != UrgentTier && !top.first && bd.credit >= 1 && bd.first.len() > 0 {
		top = bd.first.top()
	}
	p.picked = top
	return top.st.ID, true
}

// AppendUsageDeltas is the inner policy's, if it is a peer.UsageSharer; otherwise it
// returns dst. O(the inner call).
func (p *boundedWait) AppendUsageDeltas(dst []peer.UsageDelta, now time.Time) []peer.UsageDelta {
	if us, ok := p.inner.(peer.UsageSharer); ok {
		return us.AppendUsageDeltas(dst, now)
	}
	return dst
}

// ApplyUsageDeltas hands other replicas' deltas to the inner policy, if it is a
// peer.UsageSharer (otherwise it does nothing), records each flow named by a usable
// delta as dispatched (no longer at its first turn), and re-keys the waiting flows named: the
// queue does not, for a FlowPicker keeps its own order. O(len(ds) · log flows) plus the inner
// call.
func (p *boundedWait) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	us, ok := p.inner.(peer.UsageSharer)
	if !ok {
		return
	}
	us.ApplyUsageDeltas(ds, now)
	ns := now.UnixNano()
	for k := range ds {
		d := &ds[k]
		if !usable(d) {
			continue
		}
		r := deltaRef(d)
		if p.share > 0 {
			p.hist.touch(r, ns).dispatched++
		}
		if n := p.node(r); n != nil {
			n.first = false
			p.keyNode(n, &p.bands[d.Band], now)
		}
	}
}

// keysExact marks BoundedWait as a FlowPicker whose FlowKey alone expresses its order
// (the first-turn share aside), so it can serve as a level of a Hierarchy.
func (p *boundedWait) keysExact() {}

// keyedExactly reports whether p, although a FlowPicker, orders flows by its FlowKey.
func keyedExactly(p flowcontrol.Policy) bool {
	_, ok := p.(interface{ keysExact() })
	return ok
}
