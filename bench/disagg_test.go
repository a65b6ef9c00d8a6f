package bench

import (
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
)

// conversation is one session of two turns: an 8k-token first prompt, then the same plus 256
// tokens (the answer and a short message), sent 1 s after the first ends.
func conversation() *Workload {
	ids := make([]uint64, 8192/SynthBlockTokens+4)
	for i := range ids {
		ids[i] = uint64(1000 + i)
	}
	return &Workload{Name: "two-turns", BlockTokens: SynthBlockTokens, Sessions: 1, Requests: []Request{
		{At: 0, Prev: -1, Session: 0, Turn: 1, PromptTokens: 8192, OutputTokens: 2, IDs: ids[:8192/SynthBlockTokens]},
		{At: time.Second, Prev: 0, Session: 0, Turn: 2, PromptTokens: 8192 + 256, OutputTokens: 2, IDs: ids},
	}}
}

// runSim runs w under cfg and returns the simulator, so a test can look inside.
func runSim(t *testing.T, w *Workload, cfg Config) *sim {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSim(w, c)
	if err != nil {
		t.Fatal(err)
	}
	s.loop()
	return s
}

// TestDisaggregatedOneRequest: a lone request prefilled elsewhere reaches its first token one
// transfer later than with a free transfer, and its decode server computes one prompt token
// (two steps for two output tokens); the warm second turn is served whole by that decode
// server under the prefix decider; every pick is closed.
func TestDisaggregatedOneRequest(t *testing.T) {
	cfg := Config{Servers: 2, PrefillServers: 1, Decider: disagg.Always, Profile: Qwen3Profile()}
	w := conversation()
	w.Requests = w.Requests[:1]
	free := runSim(t, w, cfg)
	cfg.TransferPerToken, cfg.TransferLatency = 10*time.Microsecond, time.Millisecond
	paid := runSim(t, w, cfg)
	ttft := func(s *sim) time.Duration { return s.reqs[0].firstToken - s.reqs[0].arrival }
	if got, want := ttft(paid)-ttft(free), time.Millisecond+8192*10*time.Microsecond; got != want {
		t.Errorf("the transfer added %v to TTFT, want %v", got, want)
	}
	if st := paid.srv[1].e.Stats(); st.Steps != 2 || st.PrefixHits != 0 {
		t.Errorf("decode server: %d steps, %d hit tokens; want 2 steps (one prompt token, then the second answer token) and no hits", st.Steps, st.PrefixHits)
	}
	if st := paid.srv[0].e.Stats(); st.PromptTokens != 8192 || st.GenerationTokens != 1 {
		t.Errorf("prefill server: %d prompt tokens, %d generated; want 8192 and 1", st.PromptTokens, st.GenerationTokens)
	}
	res := paid.result(0)
	if res.Disaggregated != 1 || res.TransferMean != time.Millisecond+8192*10*time.Microsecond {
		t.Errorf("result: disaggregated %v, transfer mean %v", res.Disaggregated, res.TransferMean)
	}

	cfg.Decider = nil // the prefix decider: the second turn finds 8192 tokens on its decode server
	s := runSim(t, conversation(), cfg)
	if s.reqs[0].phase != phaseDecode || s.reqs[1].phase != phaseWhole || s.reqs[1].server != s.reqs[0].server {
		t.Errorf("turn phases %d, %d on servers %d, %d: want the first disaggregated, the second whole on the same decode server",
			s.reqs[0].phase, s.reqs[1].phase, s.reqs[0].server, s.reqs[1].server)
	}
	if c := s.reqs[1].cached; c < 8192-64 {
		t.Errorf("turn 2 cached %d tokens on its decode server, want the transferred 8192", c)
	}
	settledRouters(t, s)
}

// TestDisaggregatedIndexLearnsBothServers: after a disaggregated request, the router's prefix
// index holds its prompt on the prefill server and on the decode server, whether the router
// learns from its own picks or from the engines' KV events.
func TestDisaggregatedIndexLearnsBothServers(t *testing.T) {
	for _, mode := range []IndexMode{IndexApprox, IndexExact} {
		w := conversation()
		w.Requests = w.Requests[:1]
		s := runSim(t, w, Config{Servers: 3, PrefillServers: 1, Decider: disagg.Always, Profile: Qwen3Profile(),
			Index: mode, EventDelay: -1})
		r := &s.reqs[0]
		chain := s.chainOf(r)
		g := &s.gw[0]
		got := g.index.Match(nil, chain)
		for _, srv := range []int32{r.pserver, r.server} {
			if n := got[g.ixIDs[srv]]; int(n) != len(chain) {
				t.Errorf("%v index: server %d holds %d of the prompt's %d blocks", mode, srv, n, len(chain))
			}
		}
		if r.pserver != 0 || r.server == 0 {
			t.Errorf("%v index: prefilled on %d, decoded on %d; want prefill server 0 and a decode server", mode, r.pserver, r.server)
		}
	}
}

// settledRouters checks that every router closed every pick: nothing in flight anywhere.
func settledRouters(t *testing.T, s *sim) {
	t.Helper()
	for k := range s.gw {
		rs := s.gw[k].router.Stats()
		if rs.Picks != rs.Done {
			t.Errorf("router %d: %d picks, %d done", k, rs.Picks, rs.Done)
		}
		for i := range s.srv {
			if in, _ := s.gw[k].router.InFlight(s.srv[i].name); in != (routing.InFlight{}) {
				t.Errorf("router %d: %s still has %+v in flight", k, s.srv[i].name, in)
			}
		}
	}
}

// TestDisaggregatedConservation: under load, every mode completes every request and closes
// every pick, prefill picks included.
func TestDisaggregatedConservation(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 600, Rate: 8, PrefixTokens: 4096, SuffixTokens: 1024, OutputTokens: 64, Seed: 3})
	for _, d := range []disagg.Decider{disagg.Always, nil, disagg.Never} {
		s := runSim(t, w, Config{Servers: 6, PrefillServers: 2, Decider: d, Profile: Qwen3Profile(), TransferPerToken: 5 * time.Microsecond})
		res := s.result(0)
		if res.Completed != len(w.Requests) {
			t.Errorf("%v: %d of %d completed", d, res.Completed, len(w.Requests))
		}
		if d == disagg.Always && res.Disaggregated != 1 || d == disagg.Never && res.Disaggregated != 0 {
			t.Errorf("disaggregated share %v", res.Disaggregated)
		}
		settledRouters(t, s)
	}
	for _, c := range []Config{
		{Servers: 6, PrefillServers: 2, Decider: mustPool(t)},
		{Servers: 6, Decider: disagg.Always}, // every server both: prefilled on another one
	} {
		c.Profile, c.TransferPerToken = Qwen3Profile(), 5*time.Microsecond
		s := runSim(t, w, c)
		res := s.result(0)
		if res.Completed != len(w.Requests) || res.Disaggregated == 0 {
			t.Errorf("%+v: %d of %d completed, %v disaggregated", c.Decider, res.Completed, len(w.Requests), res.Disaggregated)
		}
		for i := range s.reqs {
			if r := &s.reqs[i]; r.phase == phaseDecode && r.pserver == r.server {
				t.Fatalf("request %d prefilled and decoded on server %d", i, r.server)
			}
		}
		settledRouters(t, s)
	}
	if _, err := (&Config{Servers: 2, PrefillServers: 2}).withDefaults(); err == nil {
		t.Error("a fleet of prefill servers only was accepted")
	}
}

func mustPool(t *testing.T) disagg.Decider {
	d, err := disagg.NewPoolAware(disagg.PoolAwareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDisaggregatedDecodeServersDoNotPrefill: with every request disaggregated, each request
// is submitted once to a prefill server, for one token, and once to a decode server, which
// computes one prompt token of it (engine.Request.RemotePrefill) unless it is preempted — and
// none is. The prefill servers compute the prompts.
func TestDisaggregatedDecodeServersDoNotPrefill(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 600, Rate: 8, PrefixTokens: 4096, SuffixTokens: 1024, OutputTokens: 64, Seed: 3})
	s := runSim(t, w, Config{Servers: 6, PrefillServers: 2, Decider: disagg.Always, Profile: Qwen3Profile(), TransferPerToken: 5 * time.Microsecond})
	var prompts int64
	for i := range w.Requests {
		prompts += int64(w.Requests[i].PromptTokens)
	}
	var pre, dec struct{ submitted, generated, prompt, preempted int64 }
	for i := range s.srv {
		st := s.srv[i].e.Stats()
		c := &dec
		if s.role(i) == routing.RolePrefill {
			c = &pre
		}
		c.submitted += st.Submitted
		c.generated += st.GenerationTokens
		c.prompt += st.PromptTokens
		c.preempted += st.Preemptions
	}
	n := int64(len(w.Requests))
	if pre.submitted != n || pre.generated != n || pre.prompt != prompts {
		t.Errorf("prefill servers: %d submitted, %d generated, %d prompt tokens; want %d, %d (one token each), %d", pre.submitted, pre.generated, pre.prompt, n, n, prompts)
	}
	if dec.submitted != n || dec.preempted != 0 {
		t.Errorf("decode servers: %d submitted, %d preempted; want %d and none (a preempted request recomputes its prompt)", dec.submitted, dec.preempted, n)
	}
	for i := range s.reqs {
		if r := &s.reqs[i]; r.phase != phaseDecode || s.role(int(r.server)) != routing.RoleDecode || s.role(int(r.pserver)) != routing.RolePrefill {
			t.Fatalf("request %d: phase %d, decoded on %d, prefilled on %d", i, r.phase, r.server, r.pserver)
		}
	}
	settledRouters(t, s)
}

// TestDisaggregatedDecodeBusyTime: under always-P/D at load, a decode server computes one
// prompt token per request (the last, whose KV arrived with the rest) and then decodes. With
// a linear cost model (no step base, no attention or context cost) its busy time is exactly
// that: n·PrefillPerToken + Σ(output − 1)·DecodePerSeq; the same servers serving every
// request whole (Never) are busy with the prompts.
func TestDisaggregatedDecodeBusyTime(t *testing.T) {
	p := Qwen3Profile()
	p.StepBase, p.PrefillAttnPerTokenPair, p.DecodePerContextToken = 0, 0, 0
	p.PrefillPerToken, p.DecodePerSeq = 20*time.Microsecond, time.Millisecond
	w := PrefixGroup(PrefixGroupOptions{Requests: 400, Rate: 8, PrefixTokens: 4096, SuffixTokens: 1024, OutputTokens: 64, Seed: 3})
	busy := func(d disagg.Decider) (time.Duration, *sim) {
		s := runSim(t, w, Config{Servers: 6, PrefillServers: 2, Decider: d, Profile: p, TransferPerToken: 5 * time.Microsecond})
		var b time.Duration
		for i := 2; i < 6; i++ {
			if st := s.srv[i].e.Stats(); st.Preemptions != 0 {
				t.Fatalf("%v: decode server %d preempted %d times; the test wants none", d, i, st.Preemptions)
			}
			b += s.srv[i].stepped
		}
		return b, s
	}
	got, s := busy(disagg.Always)
	var want time.Duration
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.state != rsDone || r.phase != phaseDecode {
			t.Fatalf("request %d: state %d, phase %d; want every request done after a remote prefill", i, r.state, r.phase)
		}
		want += p.PrefillPerToken + time.Duration(r.w.OutputTokens-1)*p.DecodePerSeq
	}
	if got != want {
		t.Errorf("always: decode servers busy %v, want %v (one prompt token per request, then decode)", got, want)
	}
	if whole, _ := busy(disagg.Never); whole < got+time.Duration(len(w.Requests))*1000*p.PrefillPerToken {
		t.Errorf("never: decode servers busy %v, want well above always's %v plus the prompts", whole, got)
	}
}
