package quota

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// maxSlots bounds the tenants that get a label of their own on /metrics; the others count
// as "other".
const maxSlots = 20

// other is the tenant label of the tenants without a slot.
const other = "other"

// slot is one tenant label's counters (or "other"'s).
type slot struct {
	name              string
	admitted, refused atomic.Int64
	tokens            atomic.Int64 // settled weighted tokens
}

// tally is the Limiter's metrics: a fixed set of tenant slots, given for the process's life
// to the first tenants the sweep finds refused or at half a limit, and "other". Counters stay
// monotonic because a slot, once given, is never taken back.
type tally struct {
	slots [maxSlots + 1]slot // [0] is "other"

	mu     sync.Mutex       // guards byName and n; taken by the sweep and by new tenants
	byName map[string]int16 // tenant → its slot
	n      int              // slots given
	syncOK atomic.Int64     // Syncs that succeeded
	syncKO atomic.Int64     // Syncs that failed
}

func newTally() *tally {
	t := &tally{byName: map[string]int16{}}
	t.slots[0].name = other
	return t
}

// slotOf returns name's slot, 0 ("other") if it has none.
func (t *tally) slotOf(name string) int16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byName[name]
}

// give gives name a slot if one is free, and returns it (0: none).
func (t *tally) give(name string) int16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byName[name]; ok {
		return s
	}
	if t.n >= maxSlots {
		return 0
	}
	t.n++
	s := int16(t.n)
	t.slots[s].name = name
	t.byName[name] = s
	return s
}

var (
	descRequests = prometheus.NewDesc("usher_quota_requests_total",
		"Requests weighed against a tenant's quota, by outcome (admitted, refused with 429); tenants beyond the 20 that first were refused or used half a limit are \"other\".",
		[]string{"tenant", "outcome"}, nil)
	descTokens = prometheus.NewDesc("usher_quota_tokens_total",
		"Weighted tokens the requests of a tenant settled to (input, cached input and output tokens at their costs).",
		[]string{"tenant"}, nil)
	descUtilization = prometheus.NewDesc("usher_quota_utilization",
		"The largest share of one of a tenant's limits used in its current window (1: at the limit); \"other\": the largest among the other tenants.",
		[]string{"tenant"}, nil)
	descTenants = prometheus.NewDesc("usher_quota_tenants",
		"Tenants the quota limiter holds: those with use in a current window or a reservation outstanding.", nil, nil)
	descSyncs = prometheus.NewDesc("usher_quota_syncs_total",
		"Syncs of the quota counters with the replicas' shared store, by result (ok, error); while they fail each replica enforces its share of each limit.",
		[]string{"result"}, nil)
)

// collector is the Limiter's prometheus.Collector.
type collector struct{ l *Limiter }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descTokens, descUtilization, descTenants, descSyncs} {
		ch <- d
	}
}

// Collect reports the slots' counters and, walking every tenant, their utilization.
// O(tenants × their limits).
func (c collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	util := make(map[int16]float64, maxSlots+1)
	util[0] = 0
	tenants := 0
	nowMs := l.now().UnixMilli()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		tenants += len(sh.m)
		for _, t := range sh.m {
			t.mu.Lock()
			u := l.utilizationLocked(t, nowMs)
			s := t.slot
			t.mu.Unlock()
			util[s] = max(util[s], u)
		}
		sh.mu.RUnlock()
	}
	m := l.tally
	m.mu.Lock()
	n := m.n
	m.mu.Unlock()
	for s := range n + 1 {
		sl := &m.slots[s]
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(sl.admitted.Load()), sl.name, "admitted")
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(sl.refused.Load()), sl.name, "refused")
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(sl.tokens.Load()), sl.name)
		ch <- prometheus.MustNewConstMetric(descUtilization, prometheus.GaugeValue, util[int16(s)], sl.name)
	}
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.GaugeValue, float64(tenants))
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(m.syncOK.Load()), "ok")
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(m.syncKO.Load()), "error")
}

// utilizationLocked is the largest share of one of t's limits used in its current window.
func (l *Limiter) utilizationLocked(t *tenant, nowMs int64) float64 {
	u := 0.0
	for p, li := range t.lims {
		lim := &l.limits[li]
		c := &t.ctr[p]
		if c.window != nowMs-nowMs%lim.span {
			continue
		}
		used := l.usedLocked(c)
		for _, k := range [...]struct{ used, cap int64 }{{used.req, l.share(lim.Requests)}, {used.tok, l.share(lim.Tokens)},
			{used.in, l.share(lim.InputTokens)}, {used.out, l.share(lim.OutputTokens)}} {
			if k.cap > 0 {
				u = max(u, float64(k.used)/float64(k.cap))
			}
		}
	}
	return u
}
