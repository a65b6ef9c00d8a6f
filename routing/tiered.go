package routing

import (
	"sync"

	"github.com/usher-llm/usher/prefixcache"
)

// MediumIndex is the part of prefixcache.Index that TieredPrefix uses: a match over blocks held
// in a given medium (CPU offload memory, a remote store). It must be safe for concurrent use and
// must not block.
type MediumIndex interface {
	MatchMedium(dst []int32, chain []prefixcache.BlockHash, m prefixcache.Medium) []int32
}

var _ MediumIndex = (*prefixcache.Index)(nil)

// TieredOptions configures TieredPrefix. Zero values are the documented defaults.
type TieredOptions struct {
	// BlockBytes is the KV cache size of one block in bytes. Zero: 4 MiB (Qwen3-32B in 16-bit:
	// 64 layers × 8 KV heads × 128 dims × 2 (K and V) × 2 bytes × 16 tokens).
	BlockBytes float64
	// CPUBandwidth is the host-to-device copy rate in bytes per second. Zero: 25e9 (PCIe 4.0 x16).
	CPUBandwidth float64
	// RemoteBandwidth is the fetch rate from a shared or remote store in bytes per second. Zero:
	// 1.25e9 (a 10 Gb/s link).
	RemoteBandwidth float64
	// PrefillThroughput is the prefill rate of one backend in tokens per second. Zero:
	// DefaultPeakPrefillThroughput (15928).
	PrefillThroughput float64
}

// tieredPrefix is the scorer NewTieredPrefix returns.
type tieredPrefix struct {
	ix                  MediumIndex
	bytes, cpuBW, remBW float64
	prefill             float64
	pool                sync.Pool // *[2][]int32
}

// newTieredPrefix builds the scorer NewTieredPrefix returns.
func newTieredPrefix(ix MediumIndex, opts TieredOptions) *tieredPrefix {
	t := &tieredPrefix{ix: ix, bytes: opts.BlockBytes, cpuBW: opts.CPUBandwidth, remBW: opts.RemoteBandwidth, prefill: opts.PrefillThroughput}
	if t.bytes <= 0 {
		t.bytes = 4 << 20
	}
	if t.cpuBW <= 0 {
		t.cpuBW = 25e9
	}
	if t.remBW <= 0 {
		t.remBW = 1.25e9
	}
	if t.prefill <= 0 {
		t.prefill = DefaultPeakPrefillThroughput
	}
	t.pool.New = func() any { return new([2][]int32) }
	return t
}

// Credit returns the worth of one block held in medium m relative to one on GPU, for blocks of
// blockSize tokens: 1 for GPU, k_m (above) otherwise. O(1).
func (t *tieredPrefix) Credit(m prefixcache.Medium, blockSize int) float64 {
	var bw float64
	switch m {
	case prefixcache.GPU:
		return 1
	case prefixcache.CPU:
		bw = t.cpuBW
	default:
		bw = t.remBW
	}
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return max(0, 1-(t.bytes/bw)/(float64(blockSize)/t.prefill))
}

// Score implements Scorer.
func (t *tieredPrefix) Score(req *Request, cands []Candidate, dst []float64) {
	n := len(req.Chain)
	if n == 0 {
		clear(dst)
		return
	}
	kc, kr := t.Credit(prefixcache.CPU, req.BlockSize), t.Credit(prefixcache.Remote, req.BlockSize)
	buf := t.pool.Get().(*[2][]int32)
	var cpu, rem []int32
	if kc > 0 {
		cpu = t.ix.MatchMedium(buf[0][:0], req.Chain, prefixcache.CPU)
		buf[0] = cpu[:0]
	}
	if kr > 0 {
		rem = t.ix.MatchMedium(buf[1][:0], req.Chain, prefixcache.Remote)
		buf[1] = rem[:0]
	}
	for i := range cands {
		g := float64(min(cands[i].MatchedBlocks, n))
		c, r := g, g
		if k := cands[i].ix - 1; k >= 0 {
			if int(k) < len(cpu) {
				c = max(g, float64(min(int(cpu[k]), n)))
			}
			if int(k) < len(rem) {
				r = max(c, float64(min(int(rem[k]), n)))
			} else {
				r = c
			}
		}
		dst[i] = (g + kc*(c-g) + kr*(r-c)) / float64(n)
	}
	t.pool.Put(buf)
}
