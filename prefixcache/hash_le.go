//go:build (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm) && !purego

package prefixcache

import (
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// fastHash reports whether hashBlock hashes tokens in place.
const fastHash = true

// hashBlock hashes the little-endian encoding of tokens. On this little-endian platform a
// []uint32 already is that encoding in memory, so it is hashed in place with no copy.
// (unsafe.Slice of a nil pointer and length 0 is nil, so an empty block needs no special case.)
func hashBlock(tokens []uint32) uint64 {
	return xxhash.Sum64(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*4))
}

// hashChain stores in out[i] the chained hash of tokens' block i (blockSize tokens), the chain
// starting from h, hashing the tokens in place: each block's content hash is chained as soon as
// it is computed, so that the chain's multiplies overlap the next block's hashing instead of
// running as a second, latency-bound pass. len(tokens) == len(out)·blockSize.
func hashChain(out []BlockHash, h uint64, tokens []uint32, blockSize int) {
	all := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*4)
	step := blockSize * 4
	for i := range out {
		h = combine(h, xxhash.Sum64(all[:step]))
		out[i] = BlockHash(h)
		all = all[step:]
	}
}
