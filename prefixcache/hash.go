package prefixcache

import (
	"encoding/binary"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// BlockHash identifies a block of a prompt together with everything before it: the hash of
// block i covers the seed and blocks 0..i. Two prompts share a BlockHash at position i exactly
// when (barring a 64-bit collision) they share the seed and their first i+1 blocks.
type BlockHash uint64

// Mixing constants (odd, high-entropy 64-bit values taken from the xxhash and wyhash families).
const (
	mixK1 = 0xa0761d6478bd642f
	mixK2 = 0xe7037ed1a0b428db
	mixK3 = 0x8ebc6af09c88c6e3
	mixK4 = 0x589965cc75374cc3
)

// seedDomain separates usher's seeds from any other use of xxhash over similar strings.
const seedDomain = "usher/prefixcache/seed/v1"

// Seed returns the hash that starts every chain for the given model, LoRA adapter and cache
// salt (empty strings are allowed). Prompts hashed under different seeds never share a
// BlockHash, so different models, adapters or tenants that salt their cache never match each
// other's blocks. The encoding is length-prefixed, so ("ab", "c") and ("a", "bc") differ.
//
// Seed is safe for concurrent use; it is O(len(model)+len(lora)+len(salt)).
func Seed(model, lora, salt string) BlockHash {
	var d xxhash.Digest
	d.Reset()
	var n [8]byte
	_, _ = d.WriteString(seedDomain)
	for _, s := range [...]string{model, lora, salt} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		_, _ = d.Write(n[:])
		_, _ = d.WriteString(s)
	}
	return BlockHash(d.Sum64())
}

// combine chains a block's content hash onto its parent's chained hash: the XOR of two
// 64×64→128-bit multiplies, each folded to 64 bits (the wyhash "mum"), of the pair under two
// different key pairs. Either product alone collapses to 0 when one of its operands happens to
// be 0; the other product still depends on both inputs, so the chain never loses its parent.
// The two multiplies are independent, so the chain's critical path through a block is one
// multiply (about 5 cycles) — far less than a second xxhash call over parent ‖ block.
func combine(parent, block uint64) uint64 {
	hi1, lo1 := bits.Mul64(parent^mixK1, block^mixK2)
	hi2, lo2 := bits.Mul64(parent^mixK3, bits.RotateLeft64(block, 29)^mixK4)
	return hi1 ^ lo1 ^ hi2 ^ lo2
}

// HashTokens appends to dst the chained hashes of the full blocks of tokens, blockSize tokens
// each, starting the chain from seed (from Seed, or the chained hash of the block preceding
// tokens when continuing a chain). A trailing partial block is not hashed: engines cache full
// blocks only. It returns dst unchanged when blockSize <= 0 or tokens holds no full block.
//
// Block i's content hash is xxhash64 over the little-endian encoding of its token ids
// (4 bytes each), so results are the same on every platform; on little-endian machines the
// tokens are hashed in place, elsewhere (or with the purego build tag) they are encoded through
// a small stack buffer. A block's chained hash mixes the chained hash before it with the
// block's content hash, as the package documentation describes.
//
// HashTokens is safe for concurrent use, allocates nothing when dst has room, and is
// O(len(tokens)).
func HashTokens(dst []BlockHash, seed BlockHash, tokens []uint32, blockSize int) []BlockHash {
	if blockSize <= 0 {
		return dst
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return dst
	}
	dst = grow(dst, n)
	hashChain(dst[len(dst):len(dst)+n], uint64(seed), tokens[:n*blockSize], blockSize)
	return dst[:len(dst)+n]
}

// HashBytes is HashTokens for gateways without a tokenizer: it appends the chained hashes of
// the full blockSize-byte blocks of prompt. A trailing partial block is NOT hashed, as in token
// mode: its hash would change with every byte appended to the prompt, so it could never be
// matched by a longer follow-up prompt, and it is never worth an index entry. Prompts shorter
// than blockSize therefore yield no hashes; choose a block size of roughly the engine's block in
// bytes (about 4 bytes per token: 64 bytes for 16-token blocks). It returns dst unchanged when
// blockSize <= 0.
//
// Byte-mode and token-mode chains never coincide in practice because their content hashes
// cover different bytes; still, give them distinct seeds (e.g. a different salt) if one index
// holds both.
//
// HashBytes is safe for concurrent use, allocates nothing when dst has room, and is
// O(len(prompt)).
func HashBytes(dst []BlockHash, seed BlockHash, prompt []byte, blockSize int) []BlockHash {
	if blockSize <= 0 {
		return dst
	}
	n := len(prompt) / blockSize
	if n == 0 {
		return dst
	}
	dst = grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	h := uint64(seed)
	for i := range out {
		h = combine(h, xxhash.Sum64(prompt[:blockSize]))
		out[i] = BlockHash(h)
		prompt = prompt[blockSize:]
	}
	return dst[:len(dst)+n]
}

// grow makes room for n more elements in one allocation at most.
func grow(dst []BlockHash, n int) []BlockHash {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]BlockHash, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}

// hashChainPortable stores in out[i] the chained hash of tokens' block i (blockSize tokens),
// the chain starting from h, without unsafe. len(tokens) == len(out)·blockSize.
func hashChainPortable(out []BlockHash, h uint64, tokens []uint32, blockSize int) {
	for i := range out {
		h = combine(h, hashBlockPortable(tokens[i*blockSize:(i+1)*blockSize]))
		out[i] = BlockHash(h)
	}
}

// hashBlockPortable hashes the little-endian encoding of tokens without unsafe, encoding
// through a stack buffer. It is the reference the in-place fast path is tested against.
func hashBlockPortable(tokens []uint32) uint64 {
	const chunk = 64
	if len(tokens) <= chunk {
		var buf [chunk * 4]byte
		for i, t := range tokens {
			binary.LittleEndian.PutUint32(buf[i*4:], t)
		}
		return xxhash.Sum64(buf[:len(tokens)*4])
	}
	var d xxhash.Digest
	d.Reset()
	var buf [chunk * 4]byte
	for len(tokens) > 0 {
		m := min(len(tokens), chunk)
		for i, t := range tokens[:m] {
			binary.LittleEndian.PutUint32(buf[i*4:], t)
		}
		_, _ = d.Write(buf[:m*4])
		tokens = tokens[m:]
	}
	return d.Sum64()
}
