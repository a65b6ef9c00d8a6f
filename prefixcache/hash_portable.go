//go:build !((386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm) && !purego)

package prefixcache

// fastHash reports whether hashBlock hashes tokens in place.
const fastHash = false

// hashBlock hashes the little-endian encoding of tokens; on this platform (big-endian, or
// built with the purego tag) it encodes through a stack buffer.
func hashBlock(tokens []uint32) uint64 { return hashBlockPortable(tokens) }

// hashChain stores in out[i] the chained hash of tokens' block i; see hashChainPortable.
func hashChain(out []BlockHash, h uint64, tokens []uint32, blockSize int) {
	hashChainPortable(out, h, tokens, blockSize)
}
