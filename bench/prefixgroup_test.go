package bench

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// calls splits w's requests into calls: runs of requests that arrive at the same instant
// (PrefixGroup never lets two calls share one). It returns each call's first index, and a
// final len(w.Requests).
func calls(w *Workload) []int {
	var starts []int
	for i := range w.Requests {
		if i == 0 || w.Requests[i].At != w.Requests[i-1].At {
			starts = append(starts, i)
		}
	}
	return append(starts, len(w.Requests))
}

func commonPrefix(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestPrefixGroupShape checks the structure of the default workload (shortened): single open
// -loop requests without sessions; siblings arrive at the same instant with the same prompt,
// or with the same prompt up to their own tails when SiblingTokens is set; the requests of a
// group share its prefix and nothing beyond it across calls; the groups' shared lengths have
// the configured median.
func TestPrefixGroupShape(t *testing.T) {
	for _, sib := range []int{0, 200} {
		w := PrefixGroup(PrefixGroupOptions{Requests: 2000, SiblingTokens: sib, Seed: 1})
		if err := w.validate(); err != nil {
			t.Fatal(err)
		}
		if w.Name != "prefix-group" || w.Sessions != 0 || len(w.Requests) < 2000 || len(w.Requests) >= 2008 {
			t.Fatalf("name %q, %d sessions, %d requests; want prefix-group, 0, 2000..2007", w.Name, w.Sessions, len(w.Requests))
		}
		for i := range w.Requests {
			if r := &w.Requests[i]; r.Session != -1 || r.Prev != -1 || r.Turn != 1 {
				t.Fatalf("request %d: session %d prev %d turn %d; want -1 -1 1", i, r.Session, r.Prev, r.Turn)
			}
		}
		cs := calls(w)
		for c := range len(cs) - 1 {
			first := &w.Requests[cs[c]]
			for i := cs[c] + 1; i < cs[c+1]; i++ {
				r := &w.Requests[i]
				switch {
				case sib == 0 && !reflect.DeepEqual(r.IDs, first.IDs):
					t.Fatalf("sibling %d of request %d (call at %v) has another prompt", i, cs[c], r.At)
				case sib > 0 && (r.IDs[len(r.IDs)-1] == first.IDs[len(first.IDs)-1] || r.IDs[0] != first.IDs[0]):
					t.Fatalf("sibling %d of request %d: want the same group and its own tail", i, cs[c])
				}
			}
		}
		// Across calls, the requests of a group (named by its first id) share the group's
		// full prefix blocks and nothing more (suffix ids are fresh), so the common prefix of
		// a group's calls is its prefix length in blocks.
		ref := map[uint64][]uint64{}
		shared := map[uint64]int{}
		for c := range len(cs) - 1 {
			ids := w.Requests[cs[c]].IDs
			g := ids[0]
			if r, ok := ref[g]; !ok {
				ref[g], shared[g] = ids, len(ids)
			} else {
				shared[g] = min(shared[g], commonPrefix(ids, r))
			}
		}
		var logs []float64
		for g, n := range shared {
			if n == len(ref[g]) {
				continue // one call only: its prefix length is not observable
			}
			logs = append(logs, math.Log(float64(n*w.BlockTokens)))
		}
		median := math.Exp(SpreadOf(logs).Median)
		_, sd := meanSD(logs)
		// 1.25·σ/√n ≈ 0.09 in log space for ~100 groups: 25% is about 3 standard errors.
		if len(logs) < 50 || math.Abs(median/4096-1) > 0.25 || math.Abs(sd-0.75) > 0.2 {
			t.Errorf("SiblingTokens %d: %d groups seen twice; prefix median %.0f (want 4096 ± 25%%), log σ %.2f (want 0.75 ± 0.2)", sib, len(logs), median, sd)
		}
		t.Logf("SiblingTokens %d: %d calls, %d groups seen twice, prefix median %.0f tokens, log σ %.2f", sib, len(cs)-1, len(logs), median, sd)
	}
}

func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// zipfMeanLog is E[log k] for k in 1..n with P(k) ∝ k^−s.
func zipfMeanLog(s float64, n int) float64 {
	var z, m float64
	for k := 1; k <= n; k++ {
		p := math.Pow(float64(k), -s)
		z += p
		m += p * math.Log(float64(k))
	}
	return m / z
}

// TestPrefixGroupZipf estimates the popularity exponent from the groups the calls chose, by
// maximum likelihood (the exponent whose E[log rank] equals the sample's mean log rank,
// found by bisection), and wants it within 0.05 of the configured one; the most popular
// group's share must be within 4 binomial standard deviations of k=1's probability. Prefixes
// of one block and single requests keep it cheap: 10,000 calls, about two ids each.
func TestPrefixGroupZipf(t *testing.T) {
	const groups, n = 100, 10000
	for _, s := range []float64{0.7, 1, 1.4} {
		w := PrefixGroup(PrefixGroupOptions{
			Requests: n, Groups: groups, ZipfExponent: s, PrefixTokens: SynthBlockTokens, PrefixSigma: 1e-9,
			SuffixTokens: 16, FanOut: []float64{1}, Seed: 3,
		})
		// Group k's prefix is one id, made before anything else: ids 1..groups, by rank.
		sumLog, top := 0.0, 0
		for i := range w.Requests {
			k := w.Requests[i].IDs[0]
			if k < 1 || k > groups {
				t.Fatalf("request %d starts with id %d, not a group prefix", i, k)
			}
			sumLog += math.Log(float64(k))
			if k == 1 {
				top++
			}
		}
		obs := sumLog / float64(len(w.Requests))
		lo, hi := 0.01, 5.0
		for range 60 {
			mid := (lo + hi) / 2
			if zipfMeanLog(mid, groups) > obs {
				lo = mid
			} else {
				hi = mid
			}
		}
		got := (lo + hi) / 2
		if math.Abs(got-s) > 0.05 {
			t.Errorf("s = %v: estimated exponent %.3f, want within 0.05", s, got)
		}
		z := 0.0
		for k := 1; k <= groups; k++ {
			z += math.Pow(float64(k), -s)
		}
		p := 1 / z
		if sd := math.Sqrt(p * (1 - p) / n); math.Abs(float64(top)/n-p) > 4*sd {
			t.Errorf("s = %v: top group's share %.4f, want %.4f ± %.4f", s, float64(top)/n, p, 4*sd)
		}
		t.Logf("s = %v: estimated %.3f, top group %.4f (expected %.4f)", s, got, float64(top)/n, p)
	}
}

// TestPrefixGroupArrivals checks the arrival process on a workload of 125 burst/idle cycles:
// the calls' rate in bursts over their rate while idle is the configured factor within 15%,
// the bursts' share of the time is Burst/(Burst+Idle) within 0.08 (about 3 standard errors
// with exponential phases), the mean request rate is Rate within 10%, and the fan-out sizes
// follow the default weights within 0.03. With BurstFactor +Inf nothing arrives while idle.
func TestPrefixGroupArrivals(t *testing.T) {
	o := PrefixGroupOptions{
		Requests: 20000, Rate: 40, Burst: time.Second, Idle: 3 * time.Second, BurstFactor: 8,
		PrefixTokens: SynthBlockTokens, PrefixSigma: 1e-9, SuffixTokens: 16, Seed: 5,
	}
	w, phases := prefixGroup(o)
	cs := calls(w)
	var inBurst, inIdle int
	var burstTime, idleTime time.Duration
	for i, p := range phases {
		if p.to < p.from || i == 0 && p.from != 0 || i > 0 && (p.from != phases[i-1].to || p.burst == phases[i-1].burst) {
			t.Fatalf("phase %d of %d, %+v, does not follow the one before", i, len(phases), p)
		}
		if p.burst {
			burstTime += p.to - p.from
		} else {
			idleTime += p.to - p.from
		}
	}
	k := 0
	sizes := map[int]int{}
	for c := range len(cs) - 1 {
		at := w.Requests[cs[c]].At
		for k < len(phases)-1 && at >= phases[k].to {
			k++
		}
		if phases[k].burst {
			inBurst++
		} else {
			inIdle++
		}
		sizes[cs[c+1]-cs[c]]++
	}
	ratio := (float64(inBurst) / burstTime.Seconds()) / (float64(inIdle) / idleTime.Seconds())
	share := burstTime.Seconds() / (burstTime + idleTime).Seconds()
	rate := float64(len(w.Requests)) / w.Stats().Span.Seconds()
	if math.Abs(ratio/8-1) > 0.15 || math.Abs(share-0.25) > 0.08 || math.Abs(rate/40-1) > 0.1 {
		t.Errorf("burst/idle call rate %.2f (want 8 ± 15%%), burst share %.3f (want 0.25 ± 0.08), %.1f req/s (want 40 ± 10%%)", ratio, share, rate)
	}
	t.Logf("%d phases, %d calls: burst/idle call rate %.2f, burst share %.3f, %.1f req/s, sizes %v", len(phases), len(cs)-1, ratio, share, rate, sizes)
	n := float64(len(cs) - 1)
	for size, want := range map[int]float64{1: 0.7, 2: 0.1, 3: 0, 4: 0.1, 8: 0.1} {
		if got := float64(sizes[size]) / n; math.Abs(got-want) > 0.03 {
			t.Errorf("calls of %d siblings: %.3f, want %.2f ± 0.03", size, got, want)
		}
	}
	o.BurstFactor, o.Requests = math.Inf(1), 3000
	w, phases = prefixGroup(o)
	k = 0
	for i := range w.Requests {
		for k < len(phases)-1 && w.Requests[i].At >= phases[k].to {
			k++
		}
		if !phases[k].burst {
			t.Fatalf("on/off: request %d arrives at %v, in an idle phase %+v", i, w.Requests[i].At, phases[k])
		}
	}
}

// TestPrefixGroupSeeds: the same options and seed give the same workload, another seed
// another one; the registry builds the same workload as the generator.
func TestPrefixGroupSeeds(t *testing.T) {
	o := PrefixGroupOptions{Requests: 500, Seed: 8}
	a, b := PrefixGroup(o), PrefixGroup(o)
	if !reflect.DeepEqual(a, b) {
		t.Error("PrefixGroup is not deterministic for a seed")
	}
	o.Seed = 9
	c := PrefixGroup(o)
	if reflect.DeepEqual(a.Requests, c.Requests) || a.Requests[0].At == c.Requests[0].At {
		t.Error("seeds 8 and 9 give the same workload")
	}
	got, err := LoadWorkload("prefix-group", LoadOptions{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := PrefixGroup(PrefixGroupOptions{Seed: 4})
	if n := len(want.Requests); len(got.Requests) != n || !reflect.DeepEqual(got.Requests[:50], want.Requests[:50]) ||
		!reflect.DeepEqual(got.Requests[n-1], want.Requests[n-1]) {
		t.Error(`LoadWorkload("prefix-group") differs from PrefixGroup with the defaults`)
	}
	if _, err := LoadWorkload("no-such", LoadOptions{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("LoadWorkload(unknown) error = %v, want ErrInvalidConfig", err)
	}
}

// TestPrefixGroupRun simulates a short prefix-group workload: everything is served, siblings
// and groups find cached prefixes, the accounting adds up.
func TestPrefixGroupRun(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 300, Rate: 4, Groups: 20, Seed: 2})
	res, err := Run(w, Config{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, "prefix-group", w, res)
	if res.Completed != res.Sent || res.HitRate < 0.5 {
		t.Errorf("completed %d of %d, hit rate %.3f (ideal %.3f)", res.Completed, res.Sent, res.HitRate, res.IdealHitRate)
	}
}
