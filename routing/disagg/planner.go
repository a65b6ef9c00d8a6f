package disagg

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// PlannerOptions configures [NewPlanner]. Every zero value is the documented default;
// negative values are an error.
type PlannerOptions struct {
	// MinUncachedTokens is the shortest uncached part of a prompt that is ever prefilled on
	// another server, as for [NewPrefix]; shorter ones are prefilled where they are decoded and
	// are not counted as prefill demand. Zero: 1 (any prompt may go to a prefill server: a
	// short local prefill still stalls the answers running where it is decoded).
	MinUncachedTokens int `json:"min_uncached_tokens"`
	// PrefillRate is how many prompt tokens one server prefills per second. Zero: 20,000
	// (Qwen3-32B on two H100s, about 42 µs a token).
	PrefillRate float64 `json:"prefill_rate"`
	// DecodeBatch is how many answers, and DecodeTokens how many tokens of their context (KV
	// in use, as scraped), one server decodes at once within the TPOT target: they measure
	// the decode work in servers for the work balance, and the plan always leaves enough
	// servers out of prefill for the answers running and their context. Zero: 64 and
	// 229,376 (Qwen3-32B on two H100s: 80% of its 288k tokens of KV, about 22 ms a token;
	// bench/README's phase run measured 131,072, 196,608 and 262,144 worse).
	DecodeBatch  int `json:"decode_batch"`
	DecodeTokens int `json:"decode_tokens"`
	// TTFT is the first-token target the planner's prefill queue is held to: a server moves
	// into prefill while the predicted queue there is over TTFT/3, and one leaves it only while
	// the queue is under TTFT/10. Zero: 1 s.
	TTFT time.Duration `json:"ttft"`
	// Window is the time constant of the demand's moving average. Zero: 10 s.
	Window time.Duration `json:"window"`
	// Dwell is the shortest time between two role changes of one server; a server's first
	// change, out of the all-both start, does not count, nor does a move into prefill while
	// the predicted prefill queue is over TTFT/3. Zero: 30 s.
	Dwell time.Duration `json:"dwell"`
}

// Planner keeps a role for each server that declares KV transfer both ways
// ([routing.BackendState].KVBoth with Role [routing.RoleBoth]) and moves servers between
// prefill and both as the measured demand changes; it is also the [Decider] that uses those
// roles. The router it plans for applies the roles to its picks: [Planner.Plan] hands it
// each new plan, which every pick that needs a role reads with one atomic load.
//
// A server in prefill takes only prefill picks. A server in both takes decode picks and
// prefills its own requests; it prefills for others only while no server is in prefill (with
// a prefill pool, one that prefilled for others would stall its answers as an aggregated
// server does). Servers that are not KVBoth keep their Role, untouched.
//
// The host calls [Planner.Plan] on a tick (every scrape, say); it reads the router's
// backends and in-flight counts and the prefill demand the decider measured since the last
// tick, and publishes a new plan. The plan shares the servers out by a work balance: the
// prefill work (the demand, a moving average over Window of the uncached tokens the decider
// saw, over PrefillRate) against the decode work (the answers running on the servers in both
// over DecodeBatch, or their context over DecodeTokens, whichever is more), each in servers;
// prefill gets its share of the servers, or every server but twice the decode work if that is
// more (spare servers wait in prefill, where a surge of prompts finds them), moving by one
// when the share is more than three quarters of a server away. A server also moves into
// prefill while the predicted prefill queue (the prefill in flight there over PrefillRate, a
// 1 s moving average) is over TTFT/3, and none leaves it unless the queue is under TTFT/10.
// Enough servers stay out of prefill to decode the answers running and their context: a move
// into prefill needs that room with a fifth to spare, and a server leaves prefill for it only
// once it is used up. It moves servers one way at once and none more than once per Dwell,
// except a server's first move (the all-both start is a guess, not a plan) and a move into
// prefill while the queue is over TTFT/3 (the queue is the signal that cannot wait); a
// request in flight is never moved: a server leaving decode finishes the answers it has, one
// leaving prefill the prefills it has.
//
// Disaggregate sends every prefill away while there is a prefill pool: a long prefill on a
// server in both stalls its answers past any TPOT target worth setting (an 8,192-token
// chunk costs about 400 ms against 25 ms), and the pool grows with its queue instead.
//
// Disaggregate is on the pick path: lock-free (an atomic load of the current plan),
// allocation-free, O(1). Plan and Stats take a lock and are O(backends). All methods are safe
// for concurrent use. A Planner serves one [routing.Router], the one passed to Plan: its roles
// are indexed by that router's BackendIDs.
type Planner struct {
	o     PlannerOptions
	cur   atomic.Pointer[plan]
	seen  atomic.Int64 // uncached tokens of long prompts the decider saw since the last Plan
	sent  atomic.Uint64
	kept  atomic.Uint64
	moves atomic.Uint64

	mu sync.Mutex // guards the fields below, Plan's state
	// by BackendID: the role, when it last changed, and the name
	roles   []routing.Role
	changed []time.Time
	names   []string
	last    time.Time // the last Plan
	demand  float64   // tokens per second, moving average
	backlog float64   // prefill tokens in flight on the servers in prefill, moving average
	states  []routing.BackendState
	kv      []member
	moved   []bool // by BackendID: the server has changed role before (its first change sets no dwell)
}

// queueWindow is the time constant of the predicted prefill queue's moving average: short,
// so that a queue building up moves a server into prefill within a second or two (with the
// demand's Window, 10 s, the pool grew too late in bench/README's runs).
const queueWindow = time.Second

// balanceSlack is how far, in servers, prefill's share of the work balance must be from the
// servers in prefill before one moves: 0.75 halved the role changes of 0.5 in bench/README's
// phase run and measured as well.
const balanceSlack = 0.75

// decodeHeadroom is how many times the decode work the servers left out of prefill must
// cover before the rest, idle by the work balance, go to the prefill pool too: spare servers
// wait in prefill, where a surge of prompts finds them, rather than in both, where a surge
// would first have to move them (bench/README's phase run: the planner then holds five of
// eight servers in prefill through chat, as the best static split does).
const decodeHeadroom = 2

// capMargin is the margin of decode room a move into prefill needs beyond the answers and
// context running; a server leaves prefill for that room only when it is used up. Without it,
// context that hovers at a server's room moved one server back and forth every few seconds.
const capMargin = 1.2

// minPrefillWork is the prefill work, in servers, below which the work balance gives prefill
// no share: with no answers running, any demand at all would otherwise claim every server
// but one, and an idle fleet would keep its pool (the demand's average only decays).
const minPrefillWork = 0.1

// plan is an immutable snapshot the decider reads.
type plan struct {
	prefillers int // KVBoth servers in prefill
}

// member is one KVBoth server during Plan.
type member struct {
	id      routing.BackendID
	running int
	backlog int64
	kv      int // KV tokens in use, as scraped (0: unknown)
}

// PlannerStats is a snapshot of a [Planner]'s roles and counters.
type PlannerStats struct {
	// Roles is each KVBoth server's current role, by name.
	Roles map[string]routing.Role
	// Changes counts role changes since the Planner was made.
	Changes uint64
	// Disaggregated and Local count Disaggregate's answers: prefills sent to another server
	// and prefills kept where the answer is decoded.
	Disaggregated, Local uint64
	// Demand is the measured prefill demand, uncached prompt tokens per second (a moving
	// average).
	Demand float64
}

// NewPlanner returns a Planner with every KVBoth server in both until the first
// [Planner.Plan].
func NewPlanner(o PlannerOptions) (*Planner, error) {
	if o.MinUncachedTokens < 0 || o.PrefillRate < 0 || o.DecodeBatch < 0 || o.DecodeTokens < 0 ||
		o.TTFT < 0 || o.Window < 0 || o.Dwell < 0 ||
		math.IsNaN(o.PrefillRate) || math.IsInf(o.PrefillRate, 0) {
		return nil, fmt.Errorf("%w: planner %+v", ErrInvalidOptions, o)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.MinUncachedTokens == 0 {
		o.MinUncachedTokens = 1
	}
	if o.PrefillRate == 0 {
		o.PrefillRate = 20000
	}
	if o.DecodeBatch == 0 {
		o.DecodeBatch = 64
	}
	if o.DecodeTokens == 0 {
		o.DecodeTokens = 229376
	}
	def(&o.TTFT, time.Second)
	def(&o.Window, 10*time.Second)
	def(&o.Dwell, 30*time.Second)
	p := &Planner{o: o}
	p.cur.Store(&plan{})
	return p, nil
}

// managed reports whether the planner sets s's role.
func managed(s *routing.BackendState) bool { return s.KVBoth && s.Role == routing.RoleBoth }

// Disaggregate implements [Decider]. A prompt whose uncached part is shorter than
// MinUncachedTokens is prefilled locally; a longer one counts as prefill demand, and goes to
// a prefill server whenever there is one. (Keeping a prefill local when the decode server
// was idle, or when the pool's predicted queue missed the TTFT target, measured worse in
// bench/README: the local prefill stalls the answers that come to that server during it.)
// O(1), no allocation.
func (p *Planner) Disaggregate(req *routing.Request, decode *routing.Result) bool {
	u := decode.UncachedTokens
	if u < p.o.MinUncachedTokens {
		p.kept.Add(1)
		return false
	}
	p.seen.Add(int64(u))
	pl := p.cur.Load()
	if pl.prefillers == 0 {
		p.kept.Add(1)
		return false
	}
	p.sent.Add(1)
	return true
}

// Plan is the planner's tick: it measures the prefill demand since the last call and the
// router's load, moves servers between prefill and both as the [Planner] doc says, and publishes
// the new plan. It returns the number of servers whose role changed. Call it from one
// goroutine or several (it takes a lock), off the pick path, every scrape or so. O(backends),
// allocates the plan it publishes.
func (p *Planner) Plan(now time.Time, r *routing.Router) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := p.seen.Swap(0)
	qa := 0.0 // the queue average's weight of this tick
	if !p.last.IsZero() {
		if dt := now.Sub(p.last); dt > 0 {
			a := 1 - math.Exp(-float64(dt)/float64(p.o.Window))
			p.demand += a * (float64(seen)/dt.Seconds() - p.demand)
			qa = 1 - math.Exp(-float64(dt)/float64(queueWindow))
		}
	}
	p.last = now
	p.states = r.Backends(p.states[:0])
	p.kv = p.kv[:0]
	clear(p.names)    // the KVBoth servers of this set fill it again
	var backlog int64 // prefill tokens in flight on the KVBoth servers in prefill
	running, context, cur := 0, 0, 0
	for i := range p.states {
		s := &p.states[i]
		if !managed(s) || s.Health == routing.Unhealthy {
			continue
		}
		id, ok := r.Lookup(s.Name)
		if !ok {
			continue
		}
		for int(id) >= len(p.roles) {
			p.moved = append(p.moved, false)
			p.roles = append(p.roles, routing.RoleBoth)
			p.changed = append(p.changed, time.Time{})
			p.names = append(p.names, "")
		}
		p.names[id] = s.Name
		in, _ := r.InFlight(s.Name)
		m := member{id: id, backlog: in.PrefillTokens, running: int(in.Requests)}
		if s.Known&routing.SignalRunning != 0 {
			m.running = max(m.running, s.Running)
		}
		if s.Known.Has(routing.SignalKVUtilization | routing.SignalKVCapacity) {
			m.kv = int(s.KVUtilization * float64(s.KVCapacityBlocks*s.BlockSize))
		}
		if p.roles[id] == routing.RolePrefill {
			backlog += m.backlog
			cur++
		} else {
			running += m.running
			context += m.kv
		}
		p.kv = append(p.kv, m)
	}
	// The prefill servers' predicted queue: their backlog (a moving average over queueWindow)
	// over their rate. Up a server when prefill's share of the work balance is above the
	// servers in prefill by more than balanceSlack or the queue passes TTFT/3; down when the
	// queue is under TTFT/10 and the share is below them by more than balanceSlack. One
	// server a tick.
	p.backlog += qa * (float64(backlog) - p.backlog)
	queue := time.Duration(0)
	if cur > 0 {
		queue = time.Duration(p.backlog / float64(cur) / p.o.PrefillRate * float64(time.Second))
	}
	// The work balance: prefill's share of the servers, from the prefill and decode work,
	// each in servers.
	pw := p.demand / p.o.PrefillRate
	dw := max(float64(running)/float64(p.o.DecodeBatch), float64(context)/float64(p.o.DecodeTokens))
	share := 0.0
	if pw >= minPrefillWork {
		share = max(float64(len(p.kv))*pw/(pw+dw), float64(len(p.kv))-math.Ceil(decodeHeadroom*dw))
	}
	urgent := cur > 0 && queue > p.o.TTFT/3
	want := cur
	switch {
	case share > float64(cur)+balanceSlack || urgent:
		want = cur + 1
	case cur > 0 && queue < p.o.TTFT/10 && share < float64(cur)-balanceSlack:
		want = cur - 1
	}
	// The decode room: servers enough for the answers running and their context. A move up
	// needs it with capMargin to spare; a move down happens only when it is used up.
	rooms := func(m float64) int {
		return max(1, int(math.Ceil(m*float64(running)/float64(p.o.DecodeBatch))),
			int(math.Ceil(m*float64(context)/float64(p.o.DecodeTokens))))
	}
	if want > cur {
		want = max(cur, min(want, len(p.kv)-rooms(capMargin)))
	}
	want = max(0, min(want, len(p.kv)-rooms(1)))
	changes := 0
	for want > cur {
		// Into prefill: the eligible server with the fewest answers running.
		best := -1
		for i, m := range p.kv {
			if p.roles[m.id] != routing.RolePrefill && (urgent || p.free(m.id, now)) &&
				(best < 0 || m.running < p.kv[best].running) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		p.set(p.kv[best].id, routing.RolePrefill, now)
		cur++
		changes++
	}
	for want < cur {
		// Out of prefill: the eligible server with the least prefill in flight.
		best := -1
		for i, m := range p.kv {
			if p.roles[m.id] == routing.RolePrefill && p.free(m.id, now) &&
				(best < 0 || m.backlog < p.kv[best].backlog) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		p.set(p.kv[best].id, routing.RoleBoth, now)
		cur--
		changes++
	}
	rp := &hook.RolePlan{Roles: make([]uint8, len(p.roles)), Prefillers: cur}
	for id, role := range p.roles {
		rp.Roles[id] = uint8(role)
	}
	hook.SetRolePlan(r, rp)
	next := &plan{prefillers: cur}
	p.cur.Store(next)
	return changes
}

// free reports whether server id may change role at now. Called with p.mu held.
func (p *Planner) free(id routing.BackendID, now time.Time) bool {
	return p.changed[id].IsZero() || now.Sub(p.changed[id]) >= p.o.Dwell
}

// set changes server id's role. Called with p.mu held.
func (p *Planner) set(id routing.BackendID, role routing.Role, now time.Time) {
	p.roles[id] = role
	if p.moved[id] {
		p.changed[id] = now
	}
	p.moved[id] = true
	p.moves.Add(1)
}

// Stats returns the current roles and the counters. O(backends); it allocates the map.
func (p *Planner) Stats() PlannerStats {
	p.mu.Lock()
	roles := make(map[string]routing.Role, len(p.names))
	for id, n := range p.names {
		if n != "" {
			roles[n] = p.roles[id]
		}
	}
	demand := p.demand
	p.mu.Unlock()
	return PlannerStats{Roles: roles, Changes: p.moves.Load(), Disaggregated: p.sent.Load(), Local: p.kept.Load(), Demand: demand}
}
