package bench

import (
	"errors"
	"testing"
	"time"
)

// A small LoRA comparison: adapter-affine routing loads fewer adapters and has a lower TTFT
// p99 than adapter-blind routing on the same workload, without piling work on a few servers.
func TestLoRACompareOrdering(t *testing.T) {
	rows, err := LoRACompare(LoRACompareOptions{
		Workload: LoRAOptions{Requests: 1500},
		Seeds:    1,
		Costs:    []time.Duration{DefaultAdapterLoadCost},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	blind, affine := rows[0], rows[1]
	t.Logf("\n%s", FormatLoRATable(rows))
	if affine.LoadsPerMin[0] >= blind.LoadsPerMin[0] {
		t.Errorf("adapter loads/min: affine %.0f, blind %.0f; want fewer with affinity", affine.LoadsPerMin[0], blind.LoadsPerMin[0])
	}
	if affine.TTFTp99[0] >= blind.TTFTp99[0] {
		t.Errorf("TTFT p99: affine %v, blind %v; want lower with affinity", affine.TTFTp99[0], blind.TTFTp99[0])
	}
	if affine.Imbalance[0] > 1.25 {
		t.Errorf("max/mean load with affinity %.2f, want ≤ 1.25 (no pinning)", affine.Imbalance[0])
	}
	if affine.Completed < 1 || blind.Completed < 1 {
		t.Errorf("completed %v and %v, want every request", blind.Completed, affine.Completed)
	}
}

func TestLoRAWorkload(t *testing.T) {
	w := LoRAWorkload(LoRAOptions{Requests: 4000, Adapters: 16, Seed: 3})
	if err := w.validate(); err != nil {
		t.Fatal(err)
	}
	count := make([]int, len(w.Adapters)+1)
	for _, r := range w.Requests {
		count[r.Adapter]++
	}
	// Zipf(1): the most popular adapter is chosen about twice as often as the second.
	if count[1] < count[2] || count[2] < count[16] || count[0] == 0 {
		t.Errorf("requests per adapter (base first) %v: want Zipf popularity and some base-model requests", count)
	}
	if _, err := Run(w, Config{Servers: 2}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("adapters without Config.LoRA: %v, want ErrInvalidConfig", err)
	}
	bad := *w
	bad.Requests = append([]Request(nil), w.Requests...)
	bad.Requests[0].Adapter = int32(len(w.Adapters) + 1)
	if err := bad.validate(); !errors.Is(err, ErrInvalidWorkload) {
		t.Errorf("adapter out of range: %v", err)
	}
}

// The same prompt under two adapters shares nothing in the servers' caches.
func TestLoRAPrefixPerAdapterInSim(t *testing.T) {
	w := LoRAWorkload(LoRAOptions{Requests: 400, Adapters: 2, BaseShare: 1e-9, Rate: 4})
	res, err := Run(w, Config{Servers: 1, LoRA: LoRA{MaxLoRAs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// Every request shares the system prompt, cached once per adapter: one server with room
	// for both reaches the ideal, which counts content per adapter too.
	blind := *w
	blind.Requests = append([]Request(nil), w.Requests...)
	for i := range blind.Requests {
		blind.Requests[i].Adapter = 0
	}
	if res.HitRate <= 0 || res.HitRate > res.IdealHitRate+1e-9 || w.IdealBlockHitRate() >= blind.IdealBlockHitRate() {
		t.Errorf("hit rate %.3f, ideal %.3f; ideal block hit rate %.3f, ignoring adapters %.3f: want 0 < hit ≤ ideal, and adapters to lower the ideal",
			res.HitRate, res.IdealHitRate, w.IdealBlockHitRate(), blind.IdealBlockHitRate())
	}
	if res.AdapterLoads != 2 {
		t.Errorf("%d adapter loads, want 2 (both fit)", res.AdapterLoads)
	}
}
