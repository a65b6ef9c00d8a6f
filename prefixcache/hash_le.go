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

// hashBlocks stores in out[i] the content hash of tokens' block i (blockSize tokens), hashing
// the tokens in place. len(tokens) == len(out)·blockSize.
func hashBlocks(out []BlockHash, tokens []uint32, blockSize int) {
	all := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*4)
	step := blockSize * 4
	for i := range out {
		out[i] = BlockHash(xxhash.Sum64(all[:step]))
		all = all[step:]
	}
}
