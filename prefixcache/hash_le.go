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
func hashBlock(tokens []uint32) uint64 {
	if len(tokens) == 0 {
		return xxhash.Sum64(nil)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*4)
	return xxhash.Sum64(b)
}
