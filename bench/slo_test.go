package bench

import (
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
)

// TestSLOCountsEveryRequestOnce runs an overloaded cluster with latency targets and checks
// that every sent request is counted in exactly one of the SLO outcomes, per turn class and
// overall, agreeing with the run's own counts; and that the outcomes a loaded run should see
// (met, missed, shed on arrival) are all there, for routers with and without a latency model.
func TestSLOCountsEveryRequestOnce(t *testing.T) {
	w := Chat(ChatOptions{Sessions: 150, Rate: 12, Turns: 4, Think: 2 * time.Second, Seed: 7})
	for _, tc := range []struct {
		router, policy string
		later          routing.Latency
	}{
		{"usher", "fcfs", routing.Latency{}},
		{"usher+latency", "fcfs", routing.Latency{}},
		{"round-robin", "fcfs", routing.Latency{}},
		{"usher+latency", "slo", routing.Latency{TTFT: 4 * time.Second, TPOT: 200 * time.Millisecond}},
	} {
		t.Run(tc.router+"/"+tc.policy, func(t *testing.T) {
			rs, err := SelectRouters(tc.router)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := SelectPolicies(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(w, Config{
				Servers: 2, MaxInFlight: 4, Router: rs[0], Policy: ps[0], TTL: 20 * time.Second,
				Targets:      routing.Latency{TTFT: time.Second, TPOT: 60 * time.Millisecond},
				LaterTargets: tc.later, ContinueAfterShed: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				t    TurnStats
			}{{"first", res.First}, {"later", res.Later}} {
				s := c.t.SLO
				if got := s.Met + s.Missed + s.Shed + s.Expired + s.Failed + s.Unfinished; got != s.Sent {
					t.Errorf("%s turns: met %d + missed %d + shed %d + expired %d + failed %d + unfinished %d = %d, want sent %d",
						c.name, s.Met, s.Missed, s.Shed, s.Expired, s.Failed, s.Unfinished, got, s.Sent)
				}
				if s.Sent != c.t.Sent || s.Met+s.Missed != c.t.Completed || s.Shed != c.t.Rejected || s.Expired != c.t.Expired || s.Failed != c.t.Failed {
					t.Errorf("%s turns: SLO %+v against the run's sent %d, completed %d, rejected %d, expired %d, failed %d",
						c.name, s, c.t.Sent, c.t.Completed, c.t.Rejected, c.t.Expired, c.t.Failed)
				}
			}
			s := res.SLO
			if s.Sent != res.Sent || s.Sent != len(w.Requests) || s.Sent != res.First.SLO.Sent+res.Later.SLO.Sent {
				t.Errorf("SLO sent %d, run sent %d, workload %d requests, first + later %d", s.Sent, res.Sent, len(w.Requests), res.First.SLO.Sent+res.Later.SLO.Sent)
			}
			if s.Met == 0 || s.Shed == 0 || s.Missed+s.Expired == 0 {
				t.Errorf("SLO %+v: want some met, shed, and missed or expired in an overloaded run", s)
			}
			if got, want := res.SLO.Attainment(), float64(s.Met)/float64(s.Sent); got != want {
				t.Errorf("attainment %v, want %v", got, want)
			}
		})
	}
}

// TestSLODeadline steps through the admission deadline of a request with a TTFT target: the
// gateway's rule, arrival + T − p̂ floored at 50 ms and left to the TTL (zero) at or beyond it,
// with p̂ = 0 for a router without a latency model.
func TestSLODeadline(t *testing.T) {
	w := small()
	for _, tc := range []struct {
		router string
		ttft   time.Duration
		want   time.Duration // from arrival; 0: the TTL (zero deadline); -1: T − p̂ with p̂ > 0
	}{
		{"usher", 2 * time.Second, 2 * time.Second},
		{"usher", 10 * time.Millisecond, slo.MinWait},
		{"usher", 60 * time.Second, 0},
		{"usher", 90 * time.Second, 0},
		{"usher-latency", 2 * time.Second, -1},
		{"usher-latency", time.Millisecond, slo.MinWait},
	} {
		rs, err := SelectRouters(tc.router)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSim(w, mustDefaults(t, Config{Router: rs[0], Targets: routing.Latency{TTFT: tc.ttft}}))
		if err != nil {
			t.Fatal(err)
		}
		if !s.cfg.EarlyShed.Enabled {
			t.Errorf("%s: targets set, early shedding off", tc.router)
		}
		r := &s.reqs[0]
		r.targets = s.cfg.targetsOf(r.w)
		got, _ := s.sloDeadline(r)
		switch {
		case tc.want == 0 && !got.IsZero():
			t.Errorf("%s, T %v: deadline %v after arrival, want the TTL (zero)", tc.router, tc.ttft, got.Sub(epoch))
		case tc.want > 0 && got.Sub(epoch) != tc.want:
			t.Errorf("%s, T %v: deadline %v after arrival, want %v", tc.router, tc.ttft, got.Sub(epoch), tc.want)
		case tc.want < 0:
			rr := s.routingRequest(r, s.chainOf(r))
			p, ok := latency.Predict(s.gw[0].router, &rr)
			if !ok || p.TTFT <= 0 || got.Sub(epoch) != tc.ttft-p.TTFT {
				t.Errorf("%s, T %v: deadline %v after arrival, want T − p̂ = %v (p̂ %v, %v)", tc.router, tc.ttft, got.Sub(epoch), tc.ttft-p.TTFT, p.TTFT, ok)
			}
		}
	}
}
