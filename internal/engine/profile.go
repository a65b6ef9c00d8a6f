package engine

import (
	"fmt"
	"time"
)

// Profile holds the capacity and cost parameters of one model server. A Profile is a plain
// value; the named profiles below are starting points to copy and adjust.
//
// The cost of one engine step (one forward pass over a batch) is
//
//	StepBase
//	+ Σ over prefill chunks of n tokens starting at context c:
//	      n·PrefillPerToken + n·(c + n/2)·PrefillAttnPerTokenPair
//	+ (decoding sequences)·DecodePerSeq + (their total context tokens)·DecodePerContextToken
//
// StepBase stands for the fixed cost of a forward pass (reading the weights once, kernel
// launches, scheduling); the prefill terms are the linear layers' compute per token plus the
// attention over the tokens before it; the decode terms are the per-sequence compute and the
// reading of each decoding sequence's KV cache.
type Profile struct {
	// Name identifies the profile in logs and in the simulated server's engine label.
	Name string
	// Model is the model name a server built on this profile reports.
	Model string

	// BlockSize is the number of tokens per KV block (vLLM's --block-size).
	BlockSize int
	// NumBlocks is the number of KV blocks on the device (vLLM's num_gpu_blocks).
	NumBlocks int
	// MaxNumSeqs caps the running batch (vLLM's --max-num-seqs).
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step; longer prompts are prefilled in
	// chunks (vLLM's --max-num-batched-tokens with chunked prefill).
	MaxNumBatchedTokens int
	// MaxModelLen caps prompt plus output tokens of one request (vLLM's --max-model-len).
	MaxModelLen int

	// StepBase is the fixed cost of every step.
	StepBase time.Duration
	// PrefillPerToken is the compute cost of one prompt token, without attention.
	PrefillPerToken time.Duration
	// PrefillAttnPerTokenPair is the attention cost of one prompt token per token of context
	// before it, in picoseconds (a Duration would round the realistic values to zero).
	PrefillAttnPerTokenPair Picoseconds
	// DecodePerSeq is the cost of one decoding sequence in a step.
	DecodePerSeq time.Duration
	// DecodePerContextToken is the cost of reading one context token's KV cache in a decode
	// step, in picoseconds.
	DecodePerContextToken Picoseconds
}

// Picoseconds is a duration in units of 10⁻¹² s, for per-token costs too small for
// time.Duration's nanoseconds.
type Picoseconds int64

// Qwen3_32B_H100 models Qwen3-32B (bf16) served by vLLM with tensor parallelism 2 on two H100
// 80 GB GPUs, calibrated from the llm-d figures in ANCHORS §3:
//
//   - one uncached 8192-token chunk from an empty context takes ≈ 0.40 s
//     (12 ms + 8192 × 41.7 µs + 8192 × 4096 × 1.38 ns);
//   - at saturation, 8k-token prompts with 128-token answers (decode mixed into the prefill
//     steps) sustain ≈ 16,600 tok/s of prefill, against llm-d's default peak prefill
//     throughput of 15,928 tok/s (4k–16k prompts with 64–200-token answers: 14,100–19,500);
//   - KV blocks of 16 tokens; 18,000 blocks (288k tokens: 2×80 GB at 0.9 utilisation, minus
//     64 GB of weights, at 256 KiB of KV per token for 64 layers × 8 KV heads × 128 dims × bf16);
//   - decode costs 12 ms per step (reading 32 GB of weights per GPU at ≈3 TB/s) plus 60 µs per
//     sequence plus 40 ns per context token read: ≈ 12 ms per token alone, ≈ 40 ms at a batch of
//     128 sequences with 4k-token contexts.
//
// The attention term is the ratio of attention to linear FLOPs for this architecture
// (4 × 64 layers × 8192 query dims per context token against 2 × 32 B per token ≈ 3.3·10⁻⁵).
var Qwen3_32B_H100 = Profile{
	Name:                    "qwen3-32b-h100",
	Model:                   "Qwen/Qwen3-32B",
	BlockSize:               16,
	NumBlocks:               18000,
	MaxNumSeqs:              256,
	MaxNumBatchedTokens:     8192,
	MaxModelLen:             40960,
	StepBase:                12 * time.Millisecond,
	PrefillPerToken:         41700 * time.Nanosecond,
	PrefillAttnPerTokenPair: 1380,
	DecodePerSeq:            60 * time.Microsecond,
	DecodePerContextToken:   40000,
}

// Demo is a small, fast profile for running simulated servers in real time on a laptop: a
// 200-token answer takes about half a second and a 2,000-token prompt about 10 ms of prefill.
// It is the default profile.
var Demo = Profile{
	Name:                    "demo",
	Model:                   "usher/demo",
	BlockSize:               16,
	NumBlocks:               2048,
	MaxNumSeqs:              32,
	MaxNumBatchedTokens:     2048,
	MaxModelLen:             8192,
	StepBase:                2 * time.Millisecond,
	PrefillPerToken:         4 * time.Microsecond,
	PrefillAttnPerTokenPair: 100,
	DecodePerSeq:            20 * time.Microsecond,
	DecodePerContextToken:   500,
}

// ProfileByName returns the named profile ("demo", "qwen3-32b-h100").
func ProfileByName(name string) (Profile, bool) {
	for _, p := range []Profile{Demo, Qwen3_32B_H100} {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// validate reports the first parameter that makes p unusable.
func (p Profile) validate() error {
	switch {
	case p.BlockSize <= 0:
		return fmt.Errorf("%w: BlockSize %d must be positive", ErrInvalidOptions, p.BlockSize)
	case p.NumBlocks <= 0:
		return fmt.Errorf("%w: NumBlocks %d must be positive", ErrInvalidOptions, p.NumBlocks)
	case p.NumBlocks > 1<<30:
		return fmt.Errorf("%w: NumBlocks %d exceeds 2^30", ErrInvalidOptions, p.NumBlocks)
	case p.MaxNumSeqs <= 0:
		return fmt.Errorf("%w: MaxNumSeqs %d must be positive", ErrInvalidOptions, p.MaxNumSeqs)
	case p.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("%w: MaxNumBatchedTokens %d must be positive", ErrInvalidOptions, p.MaxNumBatchedTokens)
	case p.MaxModelLen <= 0:
		return fmt.Errorf("%w: MaxModelLen %d must be positive", ErrInvalidOptions, p.MaxModelLen)
	case p.StepBase < 0 || p.PrefillPerToken < 0 || p.PrefillAttnPerTokenPair < 0 ||
		p.DecodePerSeq < 0 || p.DecodePerContextToken < 0:
		return fmt.Errorf("%w: negative cost in profile %q", ErrInvalidOptions, p.Name)
	case p.StepBase == 0 && p.PrefillPerToken == 0 && p.DecodePerSeq == 0:
		return fmt.Errorf("%w: profile %q has no cost: steps would take no time", ErrInvalidOptions, p.Name)
	}
	return nil
}

// stepCost is the duration of a step with the given prefill work and decode batch.
// prefillPairs is Σ n·(c + n/2) over the chunks, kept in tokens² (int64 is ample: 2^63 ps is
// 106 days).
func (p *Profile) stepCost(prefillTokens int, prefillPairs int64, decodeSeqs int, decodeContext int64) time.Duration {
	d := p.StepBase
	d += time.Duration(prefillTokens) * p.PrefillPerToken
	d += time.Duration(int64(p.PrefillAttnPerTokenPair) * prefillPairs / 1000)
	d += time.Duration(decodeSeqs) * p.DecodePerSeq
	d += time.Duration(int64(p.DecodePerContextToken) * decodeContext / 1000)
	return d
}
