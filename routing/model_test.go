package routing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
)

// The model-based test drives a Router with a stream of operations (updates, picks, first
// tokens, completions) and checks it after every step against a naive reference: in-flight
// counters kept in a map, eligibility computed from the last published states, and the combined
// score of every eligible backend recomputed by hand.

type refPick struct {
	res        Result
	name       string
	uncached   int64
	blocks     int64
	firstToken bool
}

type model struct {
	t        testing.TB
	r        *Router
	now      time.Time
	states   []BackendState
	counts   map[string]*InFlight
	open     []*refPick
	stepDesc string
}

const modelNames = 6

func newModel(t testing.TB) *model {
	m := &model{t: t, now: routingtest.T0, counts: map[string]*InFlight{}}
	m.r = routingtest.MustNew(t, Options{
		Now:        func() time.Time { return m.now },
		StaleAfter: time.Second,
		Profile: Profile{
			Filters: []Filter{outlier.HealthFilter()},
			Scorers: []Weighted{{Scorer: load.Active(), Weight: 2}, {Scorer: load.KV(), Weight: 1}, {Scorer: load.TokenBacklog(1000), Weight: 1}},
			Picker:  pick.MaxScore(),
		},
	})
	return m
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("after %s: %s", m.stepDesc, fmt.Sprintf(format, args...))
}

func (m *model) count(name string) *InFlight {
	c := m.counts[name]
	if c == nil {
		c = new(InFlight)
		m.counts[name] = c
	}
	return c
}

// step applies one operation decoded from op and arg.
func (m *model) step(op, arg byte) {
	switch op % 5 {
	case 0: // update: backends from the bits of arg, with varied signals
		var s []BackendState
		for i := range modelNames {
			if arg&(1<<i) == 0 && i != int(arg)%modelNames {
				continue
			}
			b := BackendState{
				Name: fmt.Sprint("b", i), Role: Role((int(arg) + i) % 3), Health: Health((int(arg) / 7 * (i + 1)) % 3),
				Known: Signal(int(arg)*(i+3)) & AllSignals, KVUtilization: float64((int(arg)*(i+1))%13) / 10,
				Queued: (int(arg) * i) % 5, Running: i, KVCapacityBlocks: 100, BlockSize: 16,
				UpdatedAt: m.now.Add(-time.Duration(int(arg)%3) * 700 * time.Millisecond),
			}
			if (int(arg)+i)%11 == 0 {
				b.KVUtilization = math.NaN()
			}
			s = append(s, b)
		}
		m.stepDesc = fmt.Sprintf("update(%d backends)", len(s))
		if err := m.r.Update(s); err != nil {
			m.fail("update: %v", err)
		}
		m.states = s
	case 1, 2: // pick
		req := &Request{PromptTokens: int(arg) * 3, Role: Role(arg % 4 % 3)}
		m.stepDesc = fmt.Sprintf("pick(role %v, %d tokens)", req.Role, req.PromptTokens)
		m.pick(req)
	case 3: // first token on an open pick
		if len(m.open) == 0 {
			return
		}
		p := m.open[int(arg)%len(m.open)]
		m.stepDesc = "first token on " + p.name
		p.res.FirstToken(m.now)
		if !p.firstToken {
			p.firstToken = true
			m.count(p.name).PrefillTokens -= p.uncached
		}
	case 4: // done, and let time pass
		m.now = m.now.Add(time.Duration(arg) * 10 * time.Millisecond)
		if len(m.open) == 0 {
			return
		}
		i := int(arg) % len(m.open)
		p := m.open[i]
		m.stepDesc = "done on " + p.name
		p.res.Done(DoneInfo{})
		c := m.count(p.name)
		c.Requests--
		c.Blocks -= p.blocks
		if !p.firstToken {
			c.PrefillTokens -= p.uncached
		}
		m.open = append(m.open[:i], m.open[i+1:]...)
	}
	m.check()
}

// eligible returns the states the reference says a pick may choose from.
func (m *model) eligible(req *Request) []BackendState {
	var fresh, stale []BackendState
	for _, s := range m.states {
		if !Serves(s.Role, req.Role) || s.Health == Unhealthy {
			continue
		}
		if s.UpdatedAt.IsZero() || m.now.Sub(s.UpdatedAt) > time.Second {
			stale = append(stale, s)
		} else {
			fresh = append(fresh, s)
		}
	}
	if len(fresh) > 0 {
		return fresh
	}
	return stale
}

// refScores recomputes the combined scores of the eligible backends by hand.
func (m *model) refScores(req *Request, el []BackendState) []float64 {
	n := len(el)
	active := make([]float64, n)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range el {
		active[i] = float64(m.count(s.Name).Requests)
		lo, hi = min(lo, active[i]), max(hi, active[i])
	}
	kv := make([]float64, n)
	sum, known := 0.0, 0
	for i, s := range el {
		freshKV := s.Known&SignalKVUtilization != 0 && s.KVUtilization >= 0 && s.KVUtilization <= 1 &&
			!s.UpdatedAt.IsZero() && m.now.Sub(s.UpdatedAt) <= time.Second
		kv[i] = math.NaN()
		if freshKV {
			kv[i] = 1 - s.KVUtilization
			sum += kv[i]
			known++
		}
	}
	out := make([]float64, n)
	for i, s := range el {
		a := 1.0
		if hi > lo {
			a = (hi - active[i]) / (hi - lo)
		}
		k := kv[i]
		if math.IsNaN(k) {
			k = 0.5
			if known > 0 {
				k = sum / float64(known)
			}
		}
		tl := 1 - min(float64(m.count(s.Name).PrefillTokens+int64(req.PromptTokens)), 1000)/1000
		out[i] = 2*a + k + tl
	}
	return out
}

func (m *model) pick(req *Request) {
	el := m.eligible(req)
	p, err := m.r.Pick(req)
	if len(el) == 0 {
		if err == nil {
			m.fail("picked %s, but nothing is eligible", p.Backend.Name)
		}
		return
	}
	if err != nil {
		m.fail("pick failed with %d eligible backends: %v", len(el), err)
	}
	scores := m.refScores(req, el)
	best, chosen := math.Inf(-1), math.NaN()
	for i, s := range el {
		best = max(best, scores[i])
		if s.Name == p.Backend.Name {
			chosen = scores[i]
		}
	}
	if math.IsNaN(chosen) {
		m.fail("picked %s, which is not eligible", p.Backend.Name)
	}
	if math.Abs(chosen-best) > 1e-9 || math.Abs(p.Score-best) > 1e-9 {
		m.fail("picked %s with score %v (reference %v), best is %v", p.Backend.Name, p.Score, chosen, best)
	}
	c := m.count(p.Backend.Name)
	c.Requests++
	c.PrefillTokens += int64(p.UncachedTokens)
	blocks := int64((req.PromptTokens + 15) / 16)
	c.Blocks += blocks
	if p.UncachedTokens != req.PromptTokens {
		m.fail("uncached %d, want %d without an index", p.UncachedTokens, req.PromptTokens)
	}
	m.open = append(m.open, &refPick{res: p, name: p.Backend.Name, uncached: int64(p.UncachedTokens), blocks: blocks})
}

func (m *model) check() {
	m.t.Helper()
	for name, want := range m.counts {
		got, ok := m.r.InFlight(name)
		if !ok || got != *want {
			m.fail("in flight of %s = %+v, reference %+v", name, got, *want)
		}
	}
}

func (m *model) finish() {
	for _, p := range m.open {
		p.res.Done(DoneInfo{})
	}
	for name := range m.counts {
		if got, _ := m.r.InFlight(name); got != (InFlight{}) {
			m.t.Fatalf("%s left in flight after every Done: %+v", name, got)
		}
	}
}

func TestRouterAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 99))
		m := newModel(t)
		for range 400 {
			m.step(byte(rng.UintN(256)), byte(rng.UintN(256)))
		}
		m.finish()
	}
}

func FuzzRouter(f *testing.F) {
	f.Add([]byte{0, 255, 1, 3, 1, 9, 3, 0, 4, 0})
	f.Add([]byte{0, 7, 2, 200, 2, 100, 0, 12, 4, 1, 3, 1, 1, 50})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newModel(t)
		for i := 0; i+1 < len(ops) && i < 2000; i += 2 {
			m.step(ops[i], ops[i+1])
		}
		m.finish()
	})
}
