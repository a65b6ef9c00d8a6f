package bench

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The fairness package's tenant-share scenario (fairness/scenario_test.go, runTenants), on
// the simulator instead of fixed-rate slots: one heavy tenant keeps 16 requests of 3000 prompt
// + 500 output tokens outstanding, three light tenants 4 requests of 500 + 100 each, every
// tenant a closed loop that sends its next request the moment one completes, so that all four
// are backlogged throughout and the max-min fair share of each is 1/4 of the weighted service
// (prompt + 2 × output tokens, VTC's weights) completed after a warm-up. One server with room
// for 6 requests stands for the scenario's slots, so routing plays no part; with 3 gateway
// replicas each admits 2, and arrivals are dealt to them round-robin. The TTL is the
// scenario's 60 s, and a request that expires is replaced at once, as there
// (ContinueAfterShed with no think time).
const (
	tenantShareWarm     = 60 * time.Second
	tenantShareEnd      = 660 * time.Second // the scenario's
	tenantShareShortEnd = 240 * time.Second // the test's
)

// tenantShareWorkload builds the scenario: tenant 0 is the heavy one, 1–3 the light ones; a
// tenant is a session of the workload, so it is a flow of the gateway queue. The chains are
// long enough not to run out before tenantShareEnd. No two prompts share a block.
func tenantShareWorkload() *Workload {
	w := &Workload{Name: "tenant-share", BlockTokens: SynthBlockTokens, Sessions: 4}
	next := uint64(1)
	chain := func(tenant int32, turns int, prompt, output int32) {
		prev := int32(-1)
		for k := range turns {
			ids := make([]uint64, (int(prompt)+w.BlockTokens-1)/w.BlockTokens)
			for i := range ids {
				ids[i] = next
				next++
			}
			w.Requests = append(w.Requests, Request{Prev: prev, Session: tenant, Turn: int32(k + 1), PromptTokens: prompt, OutputTokens: output, IDs: ids})
			prev = int32(len(w.Requests) - 1)
		}
	}
	for range 16 {
		chain(0, 150, 3000, 500)
	}
	for tenant := int32(1); tenant <= 3; tenant++ {
		for range 4 {
			chain(tenant, 600, 500, 100)
		}
	}
	return w
}

// tenantShares is one run of the scenario: each tenant's share of the weighted service
// completed in [warm, end), and the usage deltas the replicas applied.
type tenantShares struct {
	share [4]float64
	light float64 // the mean light-tenant share
	usage int64
}

func runTenantShare(t *testing.T, w *Workload, cfg Config, end time.Duration) tenantShares {
	t.Helper()
	cfg.Servers, cfg.MaxInFlight, cfg.TTL, cfg.ContinueAfterShed, cfg.MaxTime = 1, 6, 60*time.Second, true, end
	s := runSim(t, w, cfg)
	var r tenantShares
	var total float64
	for i := range s.reqs {
		q := &s.reqs[i]
		if q.state == rsDone && q.finish >= tenantShareWarm && q.finish < end {
			v := float64(q.w.PromptTokens) + 2*float64(q.w.OutputTokens)
			r.share[q.w.Session] += v
			total += v
		}
	}
	for k := range r.share {
		r.share[k] /= total
	}
	r.light = (r.share[1] + r.share[2] + r.share[3]) / 3
	r.usage = s.sync.usage
	return r
}

// TestReplicasTenantShare: VTC gives the light tenants their max-min share (0.25) within
// ±0.03 across 3 gateway replicas that share usage (peer.AppendUsage and
// peer.ApplyUsage every 50 ms, applied at once, 10 ms or 200 ms late), as one gateway does; replicas
// that share nothing stay further from it. FCFS, for scale, gives the light tenants far less.
// The short version (240 s) is asserted; the scenario's full 660 s is logged with -v and is in
// bench/README.md.
func TestReplicasTenantShare(t *testing.T) {
	w := tenantShareWorkload()
	vtc := fairnessPolicies()[3]
	if vtc.Name != "vtc" {
		t.Fatalf("policy %q, want vtc", vtc.Name)
	}
	const fair, margin = 0.25, 0.03
	rows := []struct {
		name   string
		cfg    Config
		assert func(r tenantShares) string // "" when the row is as expected
	}{
		{"one gateway", Config{Policy: vtc}, within(fair, margin)},
		{"3 replicas, no sync", Config{Policy: vtc, Replicas: 3, SyncLag: NoSync}, nil},
		{"3 replicas, sync 0", Config{Policy: vtc, Replicas: 3}, within(fair, margin)},
		{"3 replicas, sync 10ms", Config{Policy: vtc, Replicas: 3, SyncLag: 10 * time.Millisecond}, within(fair, margin)},
		{"3 replicas, sync 200ms", Config{Policy: vtc, Replicas: 3, SyncLag: 200 * time.Millisecond}, within(fair, margin)},
		{"one gateway, fcfs", Config{}, func(r tenantShares) string {
			if r.light > 0.15 {
				return fmt.Sprintf("light share %.3f, want well below the fair %.2f", r.light, fair)
			}
			return ""
		}},
	}
	ends := []time.Duration{tenantShareShortEnd}
	if !testing.Short() && !raceEnabled {
		ends = append(ends, tenantShareEnd)
	}
	for _, end := range ends {
		var b strings.Builder
		fmt.Fprintf(&b, "tenant share, %v (warm-up %v), VTC unless said; max-min share of each tenant %.2f\n", end, tenantShareWarm, fair)
		fmt.Fprintf(&b, "| gateways | heavy | light-1 | light-2 | light-3 | light mean | light − max-min | usage deltas applied |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		got := map[string]tenantShares{}
		for _, row := range rows {
			r := runTenantShare(t, w, row.cfg, end)
			got[row.name] = r
			fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %+.3f | %d |\n", row.name, r.share[0], r.share[1], r.share[2], r.share[3], r.light, math.Round((r.light-fair)*1000)/1000+0, r.usage)
			if end != tenantShareShortEnd || row.assert == nil {
				continue
			}
			if msg := row.assert(r); msg != "" {
				t.Errorf("%v, %s: %s (shares %.3f)", end, row.name, msg, r.share)
			}
		}
		t.Log(b.String())
		if end != tenantShareShortEnd {
			continue
		}
		alone, synced := got["3 replicas, no sync"], got["3 replicas, sync 0"]
		if math.Abs(alone.light-fair) <= math.Abs(synced.light-fair) {
			t.Errorf("replicas alone give the light tenants %.3f, synced %.3f: sharing usage should bring them closer to %.2f", alone.light, synced.light, fair)
		}
		if alone.usage != 0 || synced.usage == 0 {
			t.Errorf("usage deltas applied: %d alone, %d synced; want none and some", alone.usage, synced.usage)
		}
	}
}

// within returns a row check: the light tenants' mean share and every tenant's share within
// margin of fair.
func within(fair, margin float64) func(r tenantShares) string {
	return func(r tenantShares) string {
		for k, s := range r.share {
			if math.Abs(s-fair) > margin {
				return fmt.Sprintf("tenant %d's share %.3f, want %.2f ± %.2f", k, s, fair, margin)
			}
		}
		return ""
	}
}
