package fairness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// The learned distribution against a workload's true one, for bench/gittins-curves.sh: with
// USHER_GITTINS_CURVES set to a directory holding sessions-<workload>.txt (one session a line,
// its turns' prompt and output tokens, "p o p o ..."; written by the simulator's workloads),
// TestGittinsLearnedCurves drives a Gittins policy through a real queue on sessions drawn from
// one workload until 2,000 have ended, then from another until 2,000 more have, and writes
// the policy's learned survival of a session's service (read through the policy, not a copy of
// its estimator) against each workload's true survival, with their Kolmogorov–Smirnov
// distances, to learned-<first>-then-<second>.json. Without the variable it is skipped.

// curveSession is one session of a workload: its turns' prompt and output tokens.
type curveSession struct{ prompt, output []int }

// service is the session's total service as the policy weighs it by default (a prompt token
// 1, an output token 2).
func (s curveSession) service() float64 {
	x := 0.0
	for i := range s.prompt {
		x += float64(s.prompt[i]) + 2*float64(s.output[i])
	}
	return x
}

func readCurveSessions(path string) ([]curveSession, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []curveSession
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || len(fs)%2 != 0 {
			return nil, fmt.Errorf("%s: line %q: want prompt and output tokens of each turn", path, sc.Text())
		}
		var s curveSession
		for i := 0; i < len(fs); i += 2 {
			p, err1 := strconv.Atoi(fs[i])
			o, err2 := strconv.Atoi(fs[i+1])
			if err1 != nil || err2 != nil || p < 0 || o < 0 {
				return nil, fmt.Errorf("%s: line %q: bad tokens", path, sc.Text())
			}
			s.prompt, s.output = append(s.prompt, p), append(s.output, o)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// LearnedCurve is one snapshot of the learned distribution, as the JSON file has it.
type learnedCurve struct {
	Workload string    `json:"workload"` // the workload the sessions came from
	Ended    int64     `json:"ended"`    // sessions ended by then, in all
	Edges    []float64 `json:"edges"`    // service (weighted tokens), the bins' lower edges
	Learned  []float64 `json:"learned"`  // the policy's P(S ≥ edge)
	True     []float64 `json:"true"`     // the workload's P(S ≥ edge)
	KS       float64   `json:"ks"`       // max |Learned − True|
}

// curveRun drives a Gittins policy through a real queue: open sessions take turns in rotation,
// one at a time through its single slot, 100 ms of the fake clock apart, and a session that has
// sent its last turn ends when the policy forgets it (idle past Memory.Forget, which the
// rotation keeps above the gap between a session's turns, so that no session is split).
// A session that has ended is known to have when the policy counts it provisionally (idle past
// four times the median gap, at least forget/16 until 64 gaps are known) or forgets it: the
// longer that takes against the policy's half-life, the later the estimate follows a change of
// workload (see the test's log).
type curveRun struct {
	t    *testing.T
	clk  *flowcontroltest.FakeClock
	q    *flowcontrol.Queue
	core *gittins
	r    *rand.Rand
	open []struct {
		id   flowcontrol.FlowID
		s    curveSession
		next int
	}
	n    int
	step int
}

func newCurveRun(t *testing.T, open int, forget time.Duration) *curveRun {
	c := &curveRun{t: t, clk: new(flowcontroltest.FakeClock), r: rand.New(rand.NewPCG(45, 4))}
	c.clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if forget <= time.Duration(open)*100*time.Millisecond {
		t.Fatalf("forget %v within the %d-turn rotation: sessions would be split", forget, open)
	}
	p, err := NewGittins(GittinsOptions{Memory: Memory{Forget: forget}})
	if err != nil {
		t.Fatal(err)
	}
	c.core = p.(*gittinsPolicy).bw.inner.(*gittins) // the in-package hook: the learned model
	if c.q, err = flowcontrol.New(flowcontrol.Options{Policy: p, MaxInFlight: 1, Clock: c.clk, TTL: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	c.open = make([]struct {
		id   flowcontrol.FlowID
		s    curveSession
		next int
	}, open)
	return c
}

// run goes on, drawing new sessions from w, until n more sessions have ended.
func (c *curveRun) run(w []curveSession, n int64) {
	for i := range c.open {
		if c.open[i].id == "" || c.open[i].next >= len(c.open[i].s.prompt) {
			c.fresh(i, w)
		}
	}
	for end := c.core.model.ended + n; c.core.model.ended < end; {
		i := c.step % len(c.open)
		c.step++
		o := &c.open[i]
		c.clk.Advance(100 * time.Millisecond)
		tk, err := c.q.TryAdmit(flowcontrol.Request{Flow: o.id, PromptTokens: o.s.prompt[o.next]})
		if err != nil {
			c.t.Fatal(err)
		}
		tk.Done(flowcontrol.Usage{PromptTokens: o.s.prompt[o.next], OutputTokens: o.s.output[o.next]})
		if o.next++; o.next == len(o.s.prompt) {
			c.fresh(i, w) // the session sends nothing more: the policy ends it after Forget
		}
	}
}

func (c *curveRun) fresh(i int, w []curveSession) {
	c.n++
	c.open[i].id = flowcontrol.FlowID(fmt.Sprintf("s%d", c.n))
	c.open[i].s, c.open[i].next = w[c.r.IntN(len(w))], 0
}

// snapshot is the learned survival against w's.
func (c *curveRun) snapshot(name string, w []curveSession) learnedCurve {
	var s [gBins + 1]float64
	c.core.model.survival(&s)
	lc := learnedCurve{Workload: name, Ended: c.core.model.ended}
	svc := make([]float64, len(w))
	for i := range w {
		svc[i] = w[i].service()
	}
	// The edges up to the first past every session, and not past the model's last bin.
	for i := 1; i <= gBins; i++ {
		n := 0
		for _, x := range svc {
			if x >= gEdges[i] {
				n++
			}
		}
		truth := float64(n) / float64(len(svc))
		lc.Edges, lc.Learned, lc.True = append(lc.Edges, gEdges[i]), append(lc.Learned, s[i]), append(lc.True, truth)
		lc.KS = max(lc.KS, math.Abs(s[i]-truth))
		if n == 0 && s[i] < 1e-3 {
			break
		}
	}
	return lc
}

func TestGittinsLearnedCurves(t *testing.T) {
	dir := os.Getenv("USHER_GITTINS_CURVES")
	if dir == "" {
		t.Skip("USHER_GITTINS_CURVES not set (bench/gittins-curves.sh sets it)")
	}
	load := func(name string) []curveSession {
		w, err := readCurveSessions(filepath.Join(dir, "sessions-"+name+".txt"))
		if err != nil || len(w) == 0 {
			t.Fatalf("%s: %d sessions, %v", name, len(w), err)
		}
		return w
	}
	names := []string{"trace-sessions", "increasing-hazard"}
	ws := map[string][]curveSession{}
	for _, n := range names {
		ws[n] = load(n)
	}
	// The idle limit against the rotation of 16 open sessions (1.6 s): twice it, and longer.
	for _, forget := range []time.Duration{10 * time.Minute, time.Minute, 5 * time.Second} {
		for _, pair := range [][2]string{{names[0], names[1]}, {names[1], names[0]}} {
			c := newCurveRun(t, 16, forget)
			c.run(ws[pair[0]], 2000)
			before := c.snapshot(pair[0], ws[pair[0]])
			c.run(ws[pair[1]], 2000)
			after := c.snapshot(pair[1], ws[pair[1]])
			t.Logf("forget %v: %s: KS %.4f after %d ended; then %s: KS %.4f after %d", forget, pair[0], before.KS, before.Ended, pair[1], after.KS, after.Ended)
			if forget != 5*time.Second {
				continue
			}
			b, err := json.MarshalIndent([]learnedCurve{before, after}, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "learned-"+pair[0]+"-then-"+pair[1]+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
