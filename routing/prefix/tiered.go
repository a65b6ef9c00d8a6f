package prefix

import (
	"fmt"
	"sync"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// DefaultPrefillThroughput is the prefill tokens per second of one backend that NewTiered
// assumes (Qwen3-32B on 2×H100 in llm-d's calibration).
const DefaultPrefillThroughput = 15928.0

// MediumIndex is the part of [prefixcache.Index] that the scorer of NewTiered uses: a match over blocks held
// in a given medium (CPU offload memory, a remote store). It must be safe for concurrent use and
// must not block.
type MediumIndex interface {
	MatchMedium(dst []int32, chain []prefixcache.BlockHash, m prefixcache.Medium) []int32
}

var _ MediumIndex = (*prefixcache.Index)(nil)

// TieredOptions configures the scorer NewTiered returns. Zero values are the documented
// defaults.
type TieredOptions struct {
	// Index is where the scorer matches blocks held outside GPU memory, normally the same
	// index as routing.Options.Index. Required.
	Index MediumIndex
	// BlockBytes is the KV cache size of one block in bytes. Zero: 4 MiB (Qwen3-32B in 16-bit:
	// 64 layers × 8 KV heads × 128 dims × 2 (K and V) × 2 bytes × 16 tokens).
	BlockBytes float64
	// CPUBandwidth is the host-to-device copy rate in bytes per second. Zero: 25e9 (PCIe 4.0 x16).
	CPUBandwidth float64
	// RemoteBandwidth is the fetch rate from a shared or remote store in bytes per second. Zero:
	// 1.25e9 (a 10 Gb/s link).
	RemoteBandwidth float64
	// PrefillThroughput is the prefill rate of one backend in tokens per second. Zero:
	// DefaultPrefillThroughput (15928).
	PrefillThroughput float64
}

// NewTiered returns a prefix scorer that counts blocks held outside GPU memory at their transfer
// cost instead of as free hits or as misses. With the request's chain of n blocks, and g, c, r
// the leading blocks a candidate holds on GPU, in CPU memory and in a remote store:
//
//	score = (g + k_cpu·(c′ − g) + k_remote·(r′ − c′)) / n,  c′ = max(c, g), r′ = max(r, c′)
//	k_m   = max(0, 1 − transfer time of a block from m / prefill time of a block)
//
// where a block's transfer time is BlockBytes / bandwidth and its prefill time is block size /
// PrefillThroughput. With the defaults a CPU block is worth 0.83 of a GPU block and a remote
// block nothing (fetching it is slower than recomputing it). g comes from the router's own match
// ([routing.Candidate].MatchedBlocks); c and r cost one MatchMedium each per pick. The scratch slices come
// from a pool: no allocation once warm. Safe for concurrent use.
//
// It fails with [routing.ErrInvalidOptions] without an Index or when a rate or size is
// negative or not a number.
func NewTiered(opts TieredOptions) (routing.Scorer, error) {
	if opts.Index == nil {
		return nil, fmt.Errorf("%w: tiered prefix scorer without an Index", routing.ErrInvalidOptions)
	}
	for _, v := range []float64{opts.BlockBytes, opts.CPUBandwidth, opts.RemoteBandwidth, opts.PrefillThroughput} {
		if !(v >= 0) {
			return nil, fmt.Errorf("%w: tiered prefix options %+v", routing.ErrInvalidOptions, opts)
		}
	}
	return newTieredPrefix(opts), nil
}

// tieredPrefix is the scorer NewTiered returns.
type tieredPrefix struct {
	ix                  MediumIndex
	bytes, cpuBW, remBW float64
	prefill             float64
	pool                sync.Pool // *[2][]int32
}

// newTieredPrefix builds the scorer NewTiered returns.
func newTieredPrefix(opts TieredOptions) *tieredPrefix {
	t := &tieredPrefix{ix: opts.Index, bytes: opts.BlockBytes, cpuBW: opts.CPUBandwidth, remBW: opts.RemoteBandwidth, prefill: opts.PrefillThroughput}
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
		t.prefill = DefaultPrefillThroughput
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
		blockSize = routing.DefaultBlockSize
	}
	return max(0, 1-(t.bytes/bw)/(float64(blockSize)/t.prefill))
}

// Score implements routing.Scorer.
func (t *tieredPrefix) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
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
		if k, ok := hook.IndexID(&cands[i]); ok {
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
