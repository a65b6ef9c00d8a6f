package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/routing/profiles"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
)

// TestOneReplicaIsOneGateway: Replicas 1 is the single gateway, whatever SyncLag says, to the
// last figure — on a synthetic workload with usher's router, with a router on KV events (exact
// mode), and on the trace's head. (Before/after runs of compare on the whole trace and the
// agentic and prefix-group matrices printed identical tables when Replicas was added.)
func TestOneReplicaIsOneGateway(t *testing.T) {
	rs, err := SelectRouters("usher,dynamo")
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name string
		w    *Workload
		cfg  Config
	}
	cases := []tc{
		{"chat/usher", small(), Config{Servers: 4, Router: rs[0]}},
		{"chat/dynamo", small(), Config{Servers: 4, Router: rs[1]}},
	}
	if w, err := traceOnce(); err == nil && !raceEnabled {
		cases = append(cases, tc{"trace", w.Head(600).Scaled(4), Config{}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := Run(c.w, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if want.Replicas != 1 || want.SyncLag != 0 {
				t.Errorf("Result.Replicas, SyncLag = %d, %v; want 1, 0", want.Replicas, want.SyncLag)
			}
			for _, lag := range []time.Duration{0, NoSync, 200 * time.Millisecond} {
				cfg := c.cfg
				cfg.Replicas, cfg.SyncLag = 1, lag
				got, err := Run(c.w, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Deterministic(), want.Deterministic()) {
					t.Errorf("Replicas 1, SyncLag %v differs from the default:\n got %+v\nwant %+v", lag, got.Deterministic(), want.Deterministic())
				}
			}
		})
	}
}

// TestReplicasShareState runs three gateway replicas on agentic sessions, whose turns the
// round-robin deals to every replica: synced with no lag they keep the single gateway's hit
// rate (at least 95% of it), alone they lose much of it (below 95% of the synced replicas'),
// the accounting holds either way, and each run is deterministic.
func TestReplicasShareState(t *testing.T) {
	w := Agentic(AgenticOptions{Sessions: 60, Seed: 3}).Scaled(4)
	if raceEnabled {
		w = Agentic(AgenticOptions{Sessions: 30, Seed: 3}).Scaled(4)
	}
	base := Config{Servers: 4}
	one, err := Run(w, base)
	if err != nil {
		t.Fatal(err)
	}
	hit := map[time.Duration]float64{}
	for _, lag := range []time.Duration{0, NoSync} {
		cfg := base
		cfg.Replicas, cfg.SyncLag = 3, lag
		a, err := Run(w, cfg)
		if err != nil {
			t.Fatal(err)
		}
		name := "3 replicas, lag " + SyncLagString(3, lag)
		checkAccounting(t, name, w, a)
		if a.Completed != a.Sent {
			t.Errorf("%s: completed %d of %d", name, a.Completed, a.Sent)
		}
		if a.Replicas != 3 || a.SyncLag != lag {
			t.Errorf("%s: Result.Replicas, SyncLag = %d, %v", name, a.Replicas, a.SyncLag)
		}
		b, err := Run(w, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Deterministic(), b.Deterministic()) {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", name, a.Deterministic(), b.Deterministic())
		}
		hit[lag] = a.HitRate
		t.Logf("%s: hit %.3f (one gateway %.3f), p99 TTFT %v (%v)", name, a.HitRate, one.HitRate, a.TTFT.P99, one.TTFT.P99)
	}
	if hit[0] < 0.95*one.HitRate {
		t.Errorf("synced replicas: hit rate %.3f, want ≥ 95%% of one gateway's %.3f", hit[0], one.HitRate)
	}
	if hit[NoSync] > 0.95*hit[0] {
		t.Errorf("replicas alone: hit rate %.3f, want clearly below the synced replicas' %.3f", hit[NoSync], hit[0])
	}
}

// TestSyncLag steps two replicas through virtual time: a chain, a session placement and an
// in-flight request learnt by replica 0 at time 0 are flushed at the first SyncInterval (50 ms)
// and reach replica 1 exactly SyncLag later — never without sync — and replica 0 hears nothing
// back of its own.
func TestSyncLag(t *testing.T) {
	// One request far in the future keeps the run going without touching the servers.
	w := &Workload{Name: "idle", BlockTokens: 512, Sessions: 0, Requests: []Request{
		{At: time.Hour, PromptTokens: 512, OutputTokens: 1, IDs: []uint64{1}, Prev: -1, Session: -1},
	}}
	for _, tc := range []struct {
		lag  time.Duration
		seen time.Duration // when replica 1 first sees it; 0: never
	}{
		{0, 50 * time.Millisecond},
		{120 * time.Millisecond, 170 * time.Millisecond},
		{NoSync, 0},
	} {
		t.Run(SyncLagString(2, tc.lag), func(t *testing.T) {
			s, err := newSimFor(w, Config{Servers: 2, Replicas: 2, SyncLag: tc.lag, Router: sessionAwareRouter()})
			if err != nil {
				t.Fatal(err)
			}
			chain := []prefixcache.BlockHash{11, 12, 13}
			r0, r1 := s.gw[0].router, s.gw[1].router
			res, err := r0.Pick(&routing.Request{Chain: chain, PromptTokens: 3 * 64, BlockSize: 64, Session: "conv", Now: s.clock.now})
			if err != nil {
				t.Fatal(err)
			}
			server := s.srv[res.ID].name
			seen := func() (matched int32, placed int64, inflight int64) {
				ix := s.gw[1].index
				id, _ := ix.Lookup(server)
				m := ix.Match(nil, chain)
				if int(id) < len(m) {
					matched = m[id]
				}
				return matched, s.sync.placements, peer.PeerLoad(r1, server).Requests
			}
			for _, at := range []time.Duration{10 * time.Millisecond, 49 * time.Millisecond, 50 * time.Millisecond,
				169 * time.Millisecond, 170 * time.Millisecond, 171 * time.Millisecond, time.Second} {
				s.cfg.MaxTime = at
				s.loop()
				m, p, f := seen()
				want := tc.seen > 0 && at >= tc.seen
				if got := m == 3 && p == 1 && f == 1; got != want {
					t.Errorf("at %v: replica 1 matched %d blocks, learnt %d placements, sees %d peer requests; want all of it %v", at, m, p, f, want)
				}
				if back := peer.PeerLoad(r0, server).Requests; back != 0 {
					t.Errorf("at %v: replica 0 sees %d peer requests on %s, its own echoed back", at, back, server)
				}
			}
			res.Done(routing.DoneInfo{})
		})
	}
}

// TestExactModeReplicas: in exact mode every replica's index follows every engine's KV events
// itself, and holds exactly what the engines hold.
func TestExactModeReplicas(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 1200, Rate: 40, Groups: 40, Seed: 3})
	s, err := newSimFor(w, Config{
		Servers: 4, Replicas: 3, Router: Router{Name: "llm-d-precise", New: profiles.LLMDPrecise, Events: true},
		Profile: smallProfile(600),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.loop()
	s.setNow(s.now + time.Hour)
	s.deliverKV()
	for k := range s.gw {
		if s.gw[k].feed != nil {
			t.Errorf("replica %d has a prefix feed in exact mode", k)
		}
	}
	checkIndexEqualsEngines(t, s, w)
}

func TestReplicasInvalidConfig(t *testing.T) {
	w := tiny()
	for _, c := range []Config{
		{Replicas: -1},
		{Replicas: MaxReplicas + 1},
		{Replicas: 2, SyncInterval: -time.Millisecond},
	} {
		if _, err := Run(w, c); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", c)
		}
	}
}

func TestSpreadArrivals(t *testing.T) {
	w := &Workload{Name: "bunched", BlockTokens: 512, Sessions: 1, Requests: []Request{
		{At: 0, Prev: -1, Session: -1},
		{At: 0, Prev: -1, Session: 0},
		{At: 0, Prev: -1, Session: -1},
		{At: 2 * time.Second, Prev: 1, Session: 0}, // closed loop: a think time, unchanged
		{At: 3 * time.Second, Prev: -1, Session: -1},
		{At: 3 * time.Second, Prev: -1, Session: -1},
	}}
	got := w.SpreadArrivals()
	want := []time.Duration{0, time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second, 4500 * time.Millisecond}
	for i, r := range got.Requests {
		if r.At != want[i] {
			t.Errorf("request %d: At = %v, want %v", i, r.At, want[i])
		}
	}
	if w.Requests[1].At != 0 {
		t.Error("SpreadArrivals changed its receiver")
	}
}

func TestWriteReplicaTable(t *testing.T) {
	mk := func(n int, lag time.Duration, hit float64, p99 time.Duration) *Result {
		return &Result{Rate: 4, Policy: "fcfs", Router: "usher", Replicas: n, SyncLag: lag, ReqPerSec: 13.6,
			HitRate: hit, IdealHitRate: 0.4, TTFT: Percentiles{P99: p99}, LoadImbalance: 1.05}
	}
	var b strings.Builder
	err := WriteReplicaTable(&b, []*Result{
		mk(1, 0, 0.16, 8*time.Second), mk(3, NoSync, 0.10, 16*time.Second), mk(3, 10*time.Millisecond, 0.152, 12*time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| 1 | – | fcfs | usher | ×4 | 13.60 | 8.00s | 16.0% | 0.40 | 1.05 |  |  |",
		"| 3 | none | fcfs | usher | ×4 | 13.60 | 16.0s | 10.0% | 0.25 | 1.05 | 0.62 | 2.00 |",
		"| 3 | 10ms | fcfs | usher | ×4 | 13.60 | 12.0s | 15.2% | 0.38 | 1.05 | 0.95 | 1.50 |",
	} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("table lacks\n%s\n%s", row, b.String())
		}
	}
}
