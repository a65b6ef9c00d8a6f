package fairness

import (
	"strings"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/rekey"
)

// HierarchyOptions configures NewHierarchy.
type HierarchyOptions struct {
	// Tenants orders tenants; nil means VTC with its defaults. It sees each tenant as one
	// flow whose id is the tenant id, whose Queued, QueuedBytes and InFlight are the sums
	// over the tenant's sessions and whose head is the head of the tenant's next session;
	// it is told every event of every session, with that tenant flow as Event.Flow. Its
	// ItemKey result is not used. It must not be a FlowPicker.
	Tenants flowcontrol.Policy
	// Sessions orders the flows (sessions) within one tenant, and the requests within a
	// flow; nil means llm-d's turn-priority with its defaults. It must not be a FlowPicker,
	// except BoundedWait, whose keys carry its order (without the first-turn share).
	// It must not be the same instance as Tenants.
	Sessions flowcontrol.Policy
	// Tenant maps a flow id to its tenant id; nil means the part before the first "/"
	// (the whole id if there is none): flow "acme/chat-42" belongs to tenant "acme".
	Tenant func(id flowcontrol.FlowID) flowcontrol.FlowID
}

// hierarchy is the policy NewHierarchy returns.
type hierarchyPolicy struct {
	tenants  flowcontrol.Policy
	sessions flowcontrol.Policy
	tenantOf func(flowcontrol.FlowID) flowcontrol.FlowID

	nodes   map[flowRef]*node // sessions with requests queued
	tnodes  map[flowRef]*node // tenants with requests queued or in flight
	bands   []nodeHeap        // per band, tenants with requests queued
	rekey   rekey.Timers[*node]
	pool    nodePool
	seq     uint64
	scratch flowcontrol.Event
	tds     []peer.UsageDelta // ApplyUsageDeltas' scratch: the tenant-level deltas
	sds     []peer.UsageDelta // and the session-level ones
}

var (
	_ flowcontrol.Policy     = (*hierarchyPolicy)(nil)
	_ flowcontrol.FlowPicker = (*hierarchyPolicy)(nil)
	_ peer.UsageSharer       = (*hierarchyPolicy)(nil)
)

// tenantBeforeSlash is the default HierarchyOptions.Tenant: the part of id before its first
// "/", or id itself. O(len(id)); it does not allocate.
func tenantBeforeSlash(id flowcontrol.FlowID) flowcontrol.FlowID {
	t, _, _ := strings.Cut(string(id), "/")
	return flowcontrol.FlowID(t)
}

// newHierarchy builds the policy NewHierarchy returns.
func newHierarchy(o HierarchyOptions) (*hierarchyPolicy, error) {
	if o.Tenants == nil {
		v, _ := newVTC(VTCOptions{})
		o.Tenants = v
	}
	if o.Sessions == nil {
		tp, _ := newTurnPriority(TurnPriorityOptions{})
		o.Sessions = tp
	}
	if o.Tenants == o.Sessions {
		return nil, invalid("Hierarchy needs distinct Tenants and Sessions policy instances")
	}
	for _, p := range []flowcontrol.Policy{o.Tenants, o.Sessions} {
		if _, ok := p.(flowcontrol.FlowPicker); ok && !keyedExactly(p) {
			return nil, invalid("Hierarchy level policy %T is a FlowPicker", p)
		}
	}
	if o.Tenant == nil {
		o.Tenant = tenantBeforeSlash
	}
	return &hierarchyPolicy{
		tenants: o.Tenants, sessions: o.Sessions, tenantOf: o.Tenant,
		nodes: make(map[flowRef]*node), tnodes: make(map[flowRef]*node),
	}, nil
}

// ItemKey is the Sessions policy's item key. O(1) plus the level policies' calls.
func (p *hierarchyPolicy) ItemKey(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	t := p.tenant(f.ID, f.Band)
	p.tenants.ItemKey(r, &t.st, now)
	return p.sessions.ItemKey(r, f, now)
}

// FlowKey is the Sessions policy's flow key (the queue does not call it; Hierarchy picks
// flows itself). O(1) plus the Sessions call.
func (p *hierarchyPolicy) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	return p.sessions.FlowKey(f, now)
}

// tenant returns the record of f's tenant, creating it.
func (p *hierarchyPolicy) tenant(id flowcontrol.FlowID, band int) *node {
	r := flowRef{p.tenantOf(id), band}
	t := p.tnodes[r]
	if t == nil {
		t = p.pool.get()
		t.st.ID, t.st.Band = r.id, band
		t.seq = p.seq
		p.seq++
		p.tnodes[r] = t
	}
	return t
}

func (p *hierarchyPolicy) band(b int) *nodeHeap {
	for len(p.bands) <= b {
		p.bands = append(p.bands, nodeHeap{})
	}
	return &p.bands[b]
}

// Observe updates both levels. O(log tenants + log sessions) amortised.
func (p *hierarchyPolicy) Observe(e *flowcontrol.Event) {
	p.sessions.Observe(e)
	f := e.Flow
	t := p.tenant(f.ID, f.Band)
	ts := &t.st
	switch e.Kind {
	case flowcontrol.EventEnqueue:
		ts.Queued++
		ts.QueuedBytes += e.Request.Bytes
	case flowcontrol.EventDispatch:
		ts.Queued--
		ts.QueuedBytes -= e.Request.Bytes
		ts.InFlight++
	case flowcontrol.EventExpire, flowcontrol.EventCancel, flowcontrol.EventClose:
		ts.Queued--
		ts.QueuedBytes -= e.Request.Bytes
	case flowcontrol.EventDone:
		ts.InFlight--
	}
	r := refOf(f)
	n := p.nodes[r]
	switch {
	case f.Queued == 0 && n != nil:
		t.kids.remove(n)
		p.rekey.Clear(&n.rekey)
		delete(p.nodes, r)
		p.pool.put(n)
	case f.Queued > 0:
		if n == nil {
			n = p.pool.get()
			n.parent = t
			n.seq = p.seq
			p.seq++
			p.nodes[r] = n
		}
		n.st = *f
		p.keySession(n, e.Now)
	}
	p.setHead(t)
	p.scratch = *e
	p.scratch.Flow = ts
	p.tenants.Observe(&p.scratch)
	p.scratch = flowcontrol.Event{}
	p.keyTenant(t, e.Now)
}

func (p *hierarchyPolicy) setHead(t *node) {
	if t.kids.len() == 0 {
		t.st.Head, t.st.HeadKey = nil, flowcontrol.Key{}
		return
	}
	k := t.kids.top()
	t.st.Head, t.st.HeadKey = k.st.Head, k.st.HeadKey
}

// validUntil is a key's until as a re-key time: the zero Time (no limit) unless it is after
// now.
func validUntil(until, now time.Time) time.Time {
	if !until.After(now) {
		return time.Time{}
	}
	return until
}

func (p *hierarchyPolicy) keySession(n *node, now time.Time) {
	k, until := p.sessions.FlowKey(&n.st, now)
	n.key = sanitizeKey(k)
	p.rekey.Set(&n.rekey, validUntil(until, now), n)
	n.parent.kids.fix(n)
}

// keyTenant places t in its band's order, or takes it out (and forgets it) when it has
// nothing queued.
func (p *hierarchyPolicy) keyTenant(t *node, now time.Time) {
	bh := p.band(t.st.Band)
	if t.st.Queued == 0 {
		bh.remove(t)
		p.rekey.Clear(&t.rekey)
		if t.st.InFlight == 0 {
			delete(p.tnodes, flowRef{t.st.ID, t.st.Band})
			p.pool.put(t)
		}
		return
	}
	k, until := p.tenants.FlowKey(&t.st, now)
	if top := t.kids.top(); top.key.Tier == UrgentTier {
		// A session promoted by BoundedWait makes its tenant urgent too, so the wait bound
		// holds across tenants; urgent tenants go by their urgent session's deadline.
		k = top.key
	}
	t.key = sanitizeKey(k)
	p.rekey.Set(&t.rekey, validUntil(until, now), t)
	bh.fix(t)
}

// PickFlow re-keys what expired, then returns the best session of the best tenant.
// O(log) per re-keyed node, O(1) otherwise.
func (p *hierarchyPolicy) PickFlow(band int, _ []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	for n, ok := p.rekey.Due(now); ok; n, ok = p.rekey.Due(now) {
		if t := n.parent; t != nil {
			p.keySession(n, now)
			p.setHead(t)
			p.keyTenant(t, now)
		} else {
			p.keyTenant(n, now)
		}
	}
	bh := p.band(band)
	if bh.len() == 0 {
		return "", false
	}
	t := bh.top()
	return t.kids.top().st.ID, true
}

// AppendUsageDeltas appends the Tenants policy's deltas (those naming a tenant id), then the
// Sessions policy's (those naming a flow that is not a tenant id), for each level policy that
// is a peer.UsageSharer. O(the level calls).
func (p *hierarchyPolicy) AppendUsageDeltas(dst []peer.UsageDelta, now time.Time) []peer.UsageDelta {
	if us, ok := p.tenants.(peer.UsageSharer); ok {
		n := len(dst)
		dst = p.keep(us.AppendUsageDeltas(dst, now), n, true)
	}
	if us, ok := p.sessions.(peer.UsageSharer); ok {
		n := len(dst)
		dst = p.keep(us.AppendUsageDeltas(dst, now), n, false)
	}
	return dst
}

// keep filters the deltas of ds from index n on, in place, to those whose flow id is a tenant
// id (tenants) or is not (sessions). O(len(ds) − n).
func (p *hierarchyPolicy) keep(ds []peer.UsageDelta, n int, tenants bool) []peer.UsageDelta {
	out := ds[:n]
	for _, d := range ds[n:] {
		if (p.isTenant(d.Flow)) == tenants {
			out = append(out, d)
		}
	}
	clear(ds[len(out):])
	return out
}

// ApplyUsageDeltas splits other replicas' deltas by level — a flow id that is its own tenant
// names a tenant — hands each level's to its policy (if a peer.UsageSharer), and
// re-keys the waiting sessions and tenants named. Unusable deltas (not finite and positive,
// a negative band) are dropped. O(len(ds) · (log tenants + log sessions)) plus the level calls.
func (p *hierarchyPolicy) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	tds, sds := p.tds[:0], p.sds[:0]
	for k := range ds {
		if d := &ds[k]; usable(d) {
			if p.isTenant(d.Flow) {
				tds = append(tds, *d)
			} else {
				sds = append(sds, *d)
			}
		}
	}
	if us, ok := p.tenants.(peer.UsageSharer); ok && len(tds) > 0 {
		us.ApplyUsageDeltas(tds, now)
	}
	if us, ok := p.sessions.(peer.UsageSharer); ok && len(sds) > 0 {
		us.ApplyUsageDeltas(sds, now)
	}
	for _, d := range sds {
		if n := p.nodes[deltaRef(&d)]; n != nil {
			p.keySession(n, now)
			p.setHead(n.parent)
			p.keyTenant(n.parent, now)
		}
	}
	for _, d := range tds {
		if t := p.tnodes[deltaRef(&d)]; t != nil && t.st.Queued > 0 {
			p.keyTenant(t, now)
		}
	}
	clear(tds) // let go of the flow ids
	clear(sds)
	p.tds, p.sds = tds[:0], sds[:0]
}

// isTenant reports whether the flow id of another replica's delta names a tenant: it is its
// own tenant.
func (p *hierarchyPolicy) isTenant(flow string) bool {
	id := flowcontrol.FlowID(flow)
	return p.tenantOf(id) == id
}
