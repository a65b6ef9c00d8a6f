package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/internal/glue/quotaseam"
)

// ErrInvalidOptions is returned (wrapped) by [New] for options it cannot use; the message
// names the limit and the field.
var ErrInvalidOptions = errors.New("quota: invalid options")

// A Limit caps one tenant's use of one model (or of all models) in one band set per window:
// requests, weighted tokens, uncached input tokens and output tokens. A zero cap caps nothing.
// Several Limits of a tenant apply at once (a per-minute and a per-day limit, say): a request
// is admitted only if it fits every one that matches it.
type Limit struct {
	// Tenant is the tenant the limit belongs to (proxy.Identity.Tenant). Empty: the default
	// limit, which every tenant that no Limit names gets, each tenant counted on its own.
	Tenant string
	// Model restricts the limit to the requests that name this model. Empty: all of the
	// tenant's requests, whatever their model, count together.
	Model string
	// Bands restricts the limit to the requests of these priority bands (0..63), counted
	// together. Nil: every band.
	Bands []int
	// Window is the limit's window: at least 1 ms, whole milliseconds. Windows are fixed and
	// aligned to the Unix epoch, so that every replica agrees on when one starts.
	Window time.Duration
	// Requests caps the requests admitted in a window.
	Requests int64
	// Tokens caps the weighted tokens of a window: input, cached input and output tokens
	// weighted by [Options]' costs.
	Tokens int64
	// InputTokens caps the uncached input tokens of a window, OutputTokens the output tokens
	// (Anthropic's input- and output-token limits), both unweighted.
	InputTokens, OutputTokens int64
}

// Options configures a [Limiter]. Zero values are the documented defaults.
type Options struct {
	// Limits are the limits, per tenant, model and band set; at most 16 may apply to one
	// tenant (its own, or the default ones). Nil: nothing is limited.
	Limits []Limit
	// InputCost, CachedCost and OutputCost weigh the tokens a [Limit]'s Tokens counts:
	// uncached input, cached input and output tokens. All three zero: 1 each; otherwise as
	// given (a zero cost makes that kind free). None may be negative.
	InputCost, CachedCost, OutputCost float64
	// Shared, if set, carries the Limiter's use to the other replicas of the gateway (package
	// replica's store): Run syncs every Interval, and admission weighs what the cluster used
	// as last synced plus what this replica used since. Nil: this gateway alone.
	Shared Shared
	// Interval is how often Run syncs with Shared. Zero: 50 ms.
	Interval time.Duration
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Limiter holds the limits of [Options] and each tenant's use of them, and decides at a
// request's admission whether it fits (see the package doc for the accounting). A Handler
// given one (proxy.Options.Quota) asks it at every admission, before the queue, and answers a
// request that does not fit with 429 at once. A Limiter keeps one entry per active tenant: Run
// drops the tenants whose windows have all ended and that hold no reservation. It is safe
// for concurrent use; admission takes two short locks (a shard's, shared, and the tenant's)
// and is O(limits of the tenant), with no allocation once the tenant is known.
type Limiter struct {
	limits   []limit
	named    map[string][]uint8 // tenant → its limits; the others get defaults
	defaults []uint8
	costs    [3]float64 // input, cached, output
	shared   Shared
	interval time.Duration
	now      func() time.Time

	expect   atomic.Int64 // learned output tokens of requests without max_tokens, ×16
	degraded atomic.Bool  // the last Sync failed: enforce limit ÷ live on local use
	live     atomic.Int64 // the replicas Shared reported live, ≥ 1

	shards [shardCount]shard
	tally  *tally

	// Touched only by Run's goroutine.
	tenants []*tenant
	deltas  []Delta
	refs    []syncRef
}

// limit is a Limit compiled: its window in ms, its bands as a mask, its description.
type limit struct {
	Limit
	span  int64  // window in ms
	bands uint64 // 0: every band
	desc  string // the limit in words, for refusals
	key   string // the counter key's limit part
}

const shardCount = 64

type shard struct {
	mu sync.RWMutex
	m  map[string]*tenant
	_  [40]byte // keep shards on separate cache lines
}

// vals are one counter's figures: requests, weighted tokens, input and output tokens.
type vals struct{ req, tok, in, out int64 }

func (v *vals) add(w vals) { v.req += w.req; v.tok += w.tok; v.in += w.in; v.out += w.out }

// counter is one tenant's use of one limit in the current window.
type counter struct {
	window int64 // the window's start (Unix ms) the figures below are for
	local  vals  // this replica's use of the window
	// With Shared: unsynced is this replica's use not yet sent, sending what Run is sending,
	// cluster the cluster's totals as the last Sync returned them (for window clusterWin).
	unsynced, sending, cluster vals
	clusterWin                 int64
	keys                       [3]string // Shared keys: requests and tokens, input, output (built by Run)
}

// tenant is one tenant's counters. Lock discipline: name, lims and the Limiter never change;
// mu guards the rest.
type tenant struct {
	l    *Limiter
	name string
	lims []uint8 // indexes into Limiter.limits, as many as ctr

	mu       sync.Mutex
	ctr      []counter
	inflight int   // reservations not settled
	dead     bool  // dropped from its shard: look it up again
	slot     int16 // its metrics' slot (0: "other")
	refused  bool  // refused since it was created: the sweep may give it a slot
}

// New returns a Limiter of o, validated. It starts nothing: call Run.
func New(o Options) (*Limiter, error) {
	l := &Limiter{shared: o.Shared, interval: o.Interval, now: o.Now, named: map[string][]uint8{}}
	if l.interval == 0 {
		l.interval = 50 * time.Millisecond
	}
	if l.now == nil {
		l.now = time.Now
	}
	bad := func(format string, args ...any) (*Limiter, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case l.interval < 0:
		return bad("sync_interval %v: want > 0", o.Interval)
	case o.InputCost < 0 || o.CachedCost < 0 || o.OutputCost < 0 || math.IsNaN(o.InputCost+o.CachedCost+o.OutputCost) || math.IsInf(o.InputCost+o.CachedCost+o.OutputCost, 0):
		return bad("input_cost, cached_cost, output_cost (%v, %v, %v): want finite and ≥ 0", o.InputCost, o.CachedCost, o.OutputCost)
	}
	l.costs = [3]float64{o.InputCost, o.CachedCost, o.OutputCost}
	if l.costs == [3]float64{} {
		l.costs = [3]float64{1, 1, 1}
	}
	for i, lim := range o.Limits {
		c := limit{Limit: lim, span: lim.Window.Milliseconds()}
		c.Bands = append([]int(nil), lim.Bands...)
		who := fmt.Sprintf("limits[%d] (tenant %q, model %q)", i, lim.Tenant, lim.Model)
		switch {
		case lim.Window < time.Millisecond || lim.Window%time.Millisecond != 0:
			return bad("%s.window %v: want whole milliseconds, at least 1ms", who, lim.Window)
		case lim.Requests < 0 || lim.Tokens < 0 || lim.InputTokens < 0 || lim.OutputTokens < 0:
			return bad("%s: negative requests, tokens, input_tokens or output_tokens", who)
		case lim.Requests == 0 && lim.Tokens == 0 && lim.InputTokens == 0 && lim.OutputTokens == 0:
			return bad("%s: no requests, tokens, input_tokens or output_tokens to cap", who)
		}
		for _, b := range lim.Bands {
			if b < 0 || b > 63 {
				return bad("%s.bands: band %d: want 0..63", who, b)
			}
			c.bands |= 1 << b
		}
		c.desc = describe(lim)
		c.key = strconv.Itoa(len(lim.Model)) + ":" + lim.Model + "|" + strconv.FormatUint(c.bands, 16) + "|" + strconv.FormatInt(c.span, 10)
		for _, prev := range l.limits {
			if prev.Tenant == lim.Tenant && prev.key == c.key {
				return bad("%s: a limit of the same tenant, model, bands and window is given twice (put its caps in one)", who)
			}
		}
		l.limits = append(l.limits, c)
		if lim.Tenant == "" {
			l.defaults = append(l.defaults, uint8(min(i, 255)))
		} else {
			l.named[lim.Tenant] = append(l.named[lim.Tenant], uint8(min(i, 255)))
		}
		if len(l.defaults) > quotaseam.MaxLimits || len(l.named[lim.Tenant]) > quotaseam.MaxLimits {
			return bad("%s: more than %d limits for one tenant", who, quotaseam.MaxLimits)
		}
	}
	for i := range l.shards {
		l.shards[i].m = map[string]*tenant{}
	}
	l.tally = newTally()
	l.expect.Store(256 * 16)
	l.live.Store(1)
	return l, nil
}

// describe is a limit in words: "tokens per 1m0s on model \"m\" in bands [1]".
func describe(lim Limit) string {
	var kinds []string
	for _, k := range []struct {
		n    int64
		name string
	}{{lim.Requests, "requests"}, {lim.Tokens, "tokens"}, {lim.InputTokens, "input tokens"}, {lim.OutputTokens, "output tokens"}} {
		if k.n > 0 {
			kinds = append(kinds, k.name)
		}
	}
	s := " per " + lim.Window.String()
	if lim.Model != "" {
		s += fmt.Sprintf(" on model %q", lim.Model)
	}
	if lim.Bands != nil {
		s += fmt.Sprintf(" in bands %v", lim.Bands)
	}
	return strings.Join(kinds, " and ") + s
}

// lookup returns name's tenant, creating it. Allocates only when the tenant is new.
func (l *Limiter) lookup(name string) *tenant {
	sh := &l.shards[fnv(name)%shardCount]
	sh.mu.RLock()
	t := sh.m[name]
	sh.mu.RUnlock()
	if t != nil {
		return t
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t = sh.m[name]; t == nil {
		lims, ok := l.named[name]
		if !ok {
			lims = l.defaults
		}
		t = &tenant{l: l, name: name, lims: lims, ctr: make([]counter, len(lims)), slot: l.tally.slotOf(name)}
		sh.m[name] = t
	}
	return t
}

// fnv is FNV-1a of s.
func fnv(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// applies reports whether lim counts a request of model and band.
func (lim *limit) applies(model string, band int) bool {
	if lim.Model != "" && lim.Model != model {
		return false
	}
	return lim.bands == 0 || (band >= 0 && band < 64 && lim.bands&(1<<band) != 0)
}

// rollLocked moves c to the window that starts at win, forgetting what an earlier window held.
func (c *counter) rollLocked(win int64) {
	if c.window == win {
		return
	}
	keys := c.keys
	*c = counter{window: win, keys: keys}
}

// usedLocked is what counts against the limit in c's window: with Shared and in sync, the
// cluster's last totals plus what was used here since; otherwise this replica's use.
func (l *Limiter) usedLocked(c *counter) vals {
	if l.shared == nil || l.degraded.Load() {
		return c.local
	}
	u := c.unsynced
	u.add(c.sending)
	if c.clusterWin == c.window {
		u.add(c.cluster)
	}
	return u
}

// share is a cap as enforced now: the cap, or its share of the live replicas while Sync fails.
func (l *Limiter) share(n int64) int64 {
	if n <= 0 || l.shared == nil || !l.degraded.Load() {
		return n
	}
	return max(1, n/max(1, l.live.Load()))
}

// weigh is the weighted tokens of a usage.
func (l *Limiter) weigh(prompt, cached, output int64) int64 {
	uncached := max(prompt-cached, 0)
	return int64(math.Ceil(l.costs[0]*float64(uncached) + l.costs[1]*float64(min(cached, prompt)) + l.costs[2]*float64(output)))
}

// reserve is quotaseam.Reserve.
func (l *Limiter) reserve(a *quotaseam.Ask, g *quotaseam.Grant) {
	*g = quotaseam.Grant{}
	if len(l.defaults) == 0 {
		if _, named := l.named[a.Tenant]; !named {
			return // no limit for this tenant: nothing to hold, no entry to keep
		}
	}
	out := max(a.OutputTokens, 0)
	if a.OutputTokens == 0 {
		out = (l.expect.Load() + 15) / 16
		g.LearnOutput = true
	}
	in := max(a.PromptTokens, 0)
	want := vals{req: 1, tok: l.weigh(in, 0, out), in: in, out: out}
	nowMs := a.Now.UnixMilli()
	var t *tenant
	for {
		t = l.lookup(a.Tenant)
		t.mu.Lock()
		if !t.dead {
			break
		}
		t.mu.Unlock()
	}
	defer t.mu.Unlock()
	// Weigh every limit first; hold in all of them only if the request fits each.
	var worst time.Duration
	for i, li := range t.lims {
		lim := &l.limits[li]
		if !lim.applies(a.Model, a.Band) {
			continue
		}
		c := &t.ctr[i]
		win := nowMs - nowMs%lim.span
		c.rollLocked(win)
		used := l.usedLocked(c)
		reset := time.Duration(win+lim.span-nowMs) * time.Millisecond
		if over := l.overLocked(lim, used, want); over != "" && reset > worst {
			worst = reset
			g.Refused, g.RetryAfter = true, reset
			wait := reset
			if wait >= time.Second {
				wait = (wait + time.Second - 1).Truncate(time.Second)
			}
			g.Message = fmt.Sprintf("Rate limit reached for tenant %q on %s (%s). Please try again in %v.", a.Tenant, lim.desc, over, wait)
		}
	}
	// The headers: after this request's reservation, or (refused) the use as it stands.
	sl := &l.tally.slots[t.slot]
	if g.Refused {
		want = vals{}
		t.refused = true
		sl.refused.Add(1)
	} else {
		sl.admitted.Add(1)
	}
	for i, li := range t.lims {
		lim := &l.limits[li]
		if !lim.applies(a.Model, a.Band) {
			continue
		}
		c := &t.ctr[i]
		after := l.usedLocked(c)
		after.add(want)
		reset := time.Duration(c.window+lim.span-nowMs) * time.Millisecond
		tighten(&g.Requests, lim.Requests, l.share(lim.Requests), after.req, reset)
		tighten(&g.Tokens, lim.Tokens, l.share(lim.Tokens), after.tok, reset)
		tighten(&g.Input, lim.InputTokens, l.share(lim.InputTokens), after.in, reset)
		tighten(&g.Output, lim.OutputTokens, l.share(lim.OutputTokens), after.out, reset)
		if !g.Refused {
			g.Pos[g.N], g.Window[g.N] = uint8(i), c.window
			g.N++
		}
	}
	if g.N == 0 {
		return
	}
	for k := range g.N {
		c := &t.ctr[g.Pos[k]]
		c.local.add(want)
		if l.shared != nil {
			c.unsynced.add(want)
		}
	}
	t.inflight++
	g.Ref, g.Held = t, quotaseam.Held{Tokens: want.tok, In: want.in, Out: want.out}
}

// overLocked says which of lim's caps the request's want would pass, given used; "" if none.
func (l *Limiter) overLocked(lim *limit, used, want vals) string {
	switch {
	case lim.Requests > 0 && used.req+want.req > l.share(lim.Requests):
		return fmt.Sprintf("requests: limit %d, used %d, requested %d", l.share(lim.Requests), used.req, want.req)
	case lim.Tokens > 0 && used.tok+want.tok > l.share(lim.Tokens):
		return fmt.Sprintf("tokens: limit %d, used %d, requested %d", l.share(lim.Tokens), used.tok, want.tok)
	case lim.InputTokens > 0 && used.in+want.in > l.share(lim.InputTokens):
		return fmt.Sprintf("input tokens: limit %d, used %d, requested %d", l.share(lim.InputTokens), used.in, want.in)
	case lim.OutputTokens > 0 && used.out+want.out > l.share(lim.OutputTokens):
		return fmt.Sprintf("output tokens: limit %d, used %d, requested %d", l.share(lim.OutputTokens), used.out, want.out)
	}
	return ""
}

// tighten makes cap the tightest of its kind: the one with the least remaining.
func tighten(c *quotaseam.Cap, configured, enforced, used int64, reset time.Duration) {
	if configured <= 0 {
		return
	}
	rem := max(enforced-used, 0)
	if c.Limit == 0 || rem < c.Remaining {
		*c = quotaseam.Cap{Limit: enforced, Remaining: rem, Reset: reset}
	}
}

// settle is quotaseam.Settle.
func (l *Limiter) settle(g *quotaseam.Grant, u quotaseam.Usage) {
	t, _ := g.Ref.(*tenant)
	if t == nil {
		return
	}
	g.Ref = nil
	used := vals{tok: l.weigh(u.Prompt, u.Cached, u.Output), in: max(u.Prompt-u.Cached, 0), out: max(u.Output, 0)}
	diff := vals{tok: used.tok - g.Held.Tokens, in: used.in - g.Held.In, out: used.out - g.Held.Out}
	if g.LearnOutput && u.Output > 0 {
		// An exponentially weighted mean (1/8) of the output of requests without max_tokens.
		for {
			old := l.expect.Load()
			if l.expect.CompareAndSwap(old, old+(u.Output*16-old)/8) {
				break
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l.tally.slots[t.slot].tokens.Add(used.tok)
	t.inflight--
	for k := range g.N {
		c := &t.ctr[g.Pos[k]]
		if c.window != g.Window[k] {
			continue // the window ended: its count limits nothing any more
		}
		c.local.add(diff)
		if l.shared != nil {
			c.unsynced.add(diff)
		}
	}
}

// syncRef is a Delta's counter, for the totals Sync returns.
type syncRef struct {
	t      *tenant
	pos    uint8
	kind   uint8 // 0: requests and tokens, 1: input, 2: output
	window int64
}

// Run syncs with Options.Shared every Interval (when it is set) and, every second, drops the
// tenants whose windows have all ended and that hold no reservation and gives the metrics'
// tenant labels (20 at most, for the process's life) to tenants refused or at half a limit,
// until ctx ends; it returns ctx's
// error. Call it once. Sync runs here, never on a request's path; while it fails, admission
// enforces each limit ÷ Shared.Live() on this replica's own use, and what accrued is pushed
// when Sync succeeds again.
func (l *Limiter) Run(ctx context.Context) error {
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	lastSweep := l.now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if l.shared != nil {
			l.sync(ctx)
		}
		if now := l.now(); now.Sub(lastSweep) >= time.Second {
			lastSweep = now
			l.sweep(now)
		}
	}
}

// sync sends every counter used in its current window and reads back the cluster's totals.
// O(active tenants × their limits).
func (l *Limiter) sync(ctx context.Context) {
	nowMs := l.now().UnixMilli()
	l.deltas, l.refs = l.deltas[:0], l.refs[:0]
	for i := range l.shards {
		sh := &l.shards[i]
		l.tenants = l.tenants[:0]
		sh.mu.RLock()
		for _, t := range sh.m {
			l.tenants = append(l.tenants, t)
		}
		sh.mu.RUnlock()
		for _, t := range l.tenants {
			t.mu.Lock()
			for p, li := range t.lims {
				lim := &l.limits[li]
				c := &t.ctr[p]
				if c.window != nowMs-nowMs%lim.span || (c.local.req == 0 && c.unsynced == (vals{})) {
					continue // no use in the current window
				}
				if c.keys[0] == "" {
					base := strconv.Itoa(len(t.name)) + ":" + t.name + "|" + lim.key
					c.keys = [3]string{base, base + "|in", base + "|out"}
				}
				c.sending.add(c.unsynced)
				send := c.unsynced
				c.unsynced = vals{}
				span := time.Duration(lim.span) * time.Millisecond
				l.deltas = append(l.deltas, Delta{Key: c.keys[0], Window: c.window, Span: span, Requests: send.req, Tokens: send.tok})
				l.refs = append(l.refs, syncRef{t: t, pos: uint8(p), kind: 0, window: c.window})
				if lim.InputTokens > 0 {
					l.deltas = append(l.deltas, Delta{Key: c.keys[1], Window: c.window, Span: span, Tokens: send.in})
					l.refs = append(l.refs, syncRef{t: t, pos: uint8(p), kind: 1, window: c.window})
				}
				if lim.OutputTokens > 0 {
					l.deltas = append(l.deltas, Delta{Key: c.keys[2], Window: c.window, Span: span, Tokens: send.out})
					l.refs = append(l.refs, syncRef{t: t, pos: uint8(p), kind: 2, window: c.window})
				}
			}
			t.mu.Unlock()
		}
	}
	l.live.Store(int64(max(1, l.shared.Live())))
	if len(l.deltas) == 0 {
		return
	}
	totals, err := l.shared.Sync(ctx, l.deltas)
	ok := err == nil && len(totals) == len(l.deltas)
	l.degraded.Store(!ok)
	if ok {
		l.tally.syncOK.Add(1)
	} else {
		l.tally.syncKO.Add(1)
	}
	for i, r := range l.refs {
		r.t.mu.Lock()
		c := &r.t.ctr[r.pos]
		if c.window == r.window {
			if ok {
				applyTotals(c, r.kind, totals[i])
			} else if r.kind == 0 {
				// Pushed again with the next Sync; the window's use stays counted locally.
				c.unsynced.add(c.sending)
				c.sending = vals{}
			}
		}
		r.t.mu.Unlock()
	}
	for i := range l.refs {
		l.refs[i].t = nil
	}
}

// applyTotals records the cluster's totals of one of c's keys: what was sending is in them.
func applyTotals(c *counter, kind uint8, tot Totals) {
	if c.clusterWin != c.window {
		c.cluster, c.clusterWin = vals{}, c.window
	}
	switch kind {
	case 0:
		c.cluster.req, c.cluster.tok = tot.Requests, tot.Tokens
		c.sending.req, c.sending.tok = 0, 0
	case 1:
		c.cluster.in, c.sending.in = tot.Tokens, 0
	case 2:
		c.cluster.out, c.sending.out = tot.Tokens, 0
	}
}

// sweep drops the tenants that hold no reservation and whose windows have all ended.
// O(tenants).
func (l *Limiter) sweep(now time.Time) {
	nowMs := now.UnixMilli()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for name, t := range sh.m {
			t.mu.Lock()
			idle := t.inflight == 0
			for p, li := range t.lims {
				lim := &l.limits[li]
				c := &t.ctr[p]
				if c.window+lim.span > nowMs { // an ended window has nothing left to push
					idle = false
					break
				}
			}
			if idle {
				t.dead = true
				delete(sh.m, name)
			} else if t.slot == 0 && (t.refused || l.utilizationLocked(t, nowMs) >= 0.5) {
				t.slot = l.tally.give(name)
			}
			t.mu.Unlock()
		}
		sh.mu.Unlock()
	}
}

// tenantCount is the number of tenants the Limiter holds.
func (l *Limiter) tenantCount() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// init installs the seam package proxy reads a Limiter through.
func init() {
	quotaseam.Reserve = func(l any, a *quotaseam.Ask, g *quotaseam.Grant) { l.(*Limiter).reserve(a, g) }
	quotaseam.Settle = func(g *quotaseam.Grant, u quotaseam.Usage) {
		if t, _ := g.Ref.(*tenant); t != nil {
			t.l.settle(g, u)
		}
	}
	quotaseam.Collector = func(l any) prometheus.Collector { return collector{l.(*Limiter)} }
}
