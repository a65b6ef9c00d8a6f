package prefixcache

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestHashKnownAnswers pins the hash format: the same inputs give these values on every
// platform and build (fast path or purego). Changing them is a breaking change for anyone who
// persists or shares hashes between processes.
func TestHashKnownAnswers(t *testing.T) {
	s := Seed("qwen3", "lora-a", "salt")
	if got, want := uint64(s), uint64(0x8d0b0aa5edceef33); got != want {
		t.Errorf("Seed = %#x, want %#x", got, want)
	}
	if got, want := uint64(Seed("", "", "")), uint64(0x6cb96bf23006a500); got != want {
		t.Errorf("Seed(empty) = %#x, want %#x", got, want)
	}
	tok := make([]uint32, 40)
	for i := range tok {
		tok[i] = uint32(i * 7919)
	}
	if got, want := HashTokens(nil, s, tok, 16), []BlockHash{0x6841f6c2c68acc72, 0x9d16f8b6e96d2446}; !slices.Equal(got, want) {
		t.Errorf("HashTokens = %#x, want %#x", got, want)
	}
	got := HashBytes(nil, s, []byte("The quick brown fox jumps over the lazy dog."), 16)
	if want := []BlockHash{0x3aa55a831d61342c, 0xd72f9bfc32e6117c}; !slices.Equal(got, want) {
		t.Errorf("HashBytes = %#x, want %#x", got, want)
	}
}

// TestHashBlockPortableAgrees checks the in-place fast path (when built) against the portable
// encoder, and both against xxhash over an explicit little-endian encoding, for block sizes on
// both sides of the portable encoder's chunk.
func TestHashBlockPortableAgrees(t *testing.T) {
	t.Logf("fast path built: %v", fastHash)
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 3, 16, 63, 64, 65, 128, 200, 1000} {
		tok := make([]uint32, n)
		for i := range tok {
			tok[i] = r.Uint32()
		}
		buf := make([]byte, 4*n)
		for i, v := range tok {
			binary.LittleEndian.PutUint32(buf[4*i:], v)
		}
		want := xxhash.Sum64(buf)
		if got := hashBlock(tok); got != want {
			t.Errorf("n=%d: hashBlock = %#x, want %#x", n, got, want)
		}
		if got := hashBlockPortable(tok); got != want {
			t.Errorf("n=%d: hashBlockPortable = %#x, want %#x", n, got, want)
		}
	}
}

// TestHashChainPortableAgrees checks the multi-block loop HashTokens uses (in place when the
// fast path is built) against the portable one that big-endian and purego builds use, so the
// portable path is exercised on every CI machine.
func TestHashChainPortableAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, c := range []struct{ blocks, blockSize int }{{0, 16}, {1, 1}, {5, 16}, {3, 64}, {2, 65}, {4, 200}} {
		tok := make([]uint32, c.blocks*c.blockSize)
		for i := range tok {
			tok[i] = r.Uint32()
		}
		got := make([]BlockHash, c.blocks)
		want := make([]BlockHash, c.blocks)
		seed := r.Uint64()
		hashChain(got, seed, tok, c.blockSize)
		hashChainPortable(want, seed, tok, c.blockSize)
		if !slices.Equal(got, want) {
			t.Errorf("%d blocks of %d: hashChain = %#x, hashChainPortable = %#x", c.blocks, c.blockSize, got, want)
		}
	}
}

func TestHashTokensChaining(t *testing.T) {
	seed := Seed("m", "", "")
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	b := []uint32{1, 2, 3, 4, 5, 6, 7, 9, 9, 10} // differs in block 1 (size 4) only

	ha := HashTokens(nil, seed, a, 4)
	hb := HashTokens(nil, seed, b, 4)
	if len(ha) != 2 || len(hb) != 2 {
		t.Fatalf("got %d and %d hashes, want 2 (full blocks only)", len(ha), len(hb))
	}
	if ha[0] != hb[0] {
		t.Errorf("shared first block hashes differ: %#x vs %#x", ha[0], hb[0])
	}
	if ha[1] == hb[1] {
		t.Errorf("different second blocks hash equal")
	}
	// Continuing a chain from a block's hash equals hashing the whole prompt.
	if got := HashTokens(nil, ha[0], a[4:], 4); !slices.Equal(got, ha[1:]) {
		t.Errorf("continued chain %#x, want %#x", got, ha[1:])
	}
	// A block's hash depends on its parent: the same block after a different prefix differs.
	c := []uint32{9, 9, 9, 9, 5, 6, 7, 8}
	if hc := HashTokens(nil, seed, c, 4); hc[1] == ha[1] {
		t.Errorf("same block after different prefixes hashes equal")
	}
	// Appends to dst.
	dst := []BlockHash{42}
	if got := HashTokens(dst, seed, a, 4); len(got) != 3 || got[0] != 42 || got[1] != ha[0] {
		t.Errorf("append: got %#x", got)
	}
}

func TestSeedSeparates(t *testing.T) {
	seeds := []BlockHash{
		Seed("m", "", ""), Seed("m2", "", ""), Seed("m", "lora", ""), Seed("m", "", "salt"),
		Seed("ab", "c", ""), Seed("a", "bc", ""), Seed("", "", ""),
	}
	for i := range seeds {
		for j := i + 1; j < len(seeds); j++ {
			if seeds[i] == seeds[j] {
				t.Errorf("seeds %d and %d collide", i, j)
			}
		}
	}
	tok := []uint32{1, 2, 3, 4}
	if HashTokens(nil, seeds[0], tok, 4)[0] == HashTokens(nil, seeds[2], tok, 4)[0] {
		t.Errorf("an adapter does not change the hash")
	}
}

func TestHashEdgeCases(t *testing.T) {
	seed := Seed("m", "", "")
	tok := []uint32{1, 2, 3}
	for _, tc := range []struct {
		name   string
		tokens []uint32
		bs     int
		want   int
	}{
		{"zero block size", tok, 0, 0},
		{"negative block size", tok, -4, 0},
		{"empty prompt", nil, 16, 0},
		{"shorter than a block", tok, 4, 0},
		{"exact block", tok, 3, 1},
		{"partial tail dropped", tok, 2, 1},
		{"block size one", tok, 1, 3},
	} {
		if got := HashTokens(nil, seed, tc.tokens, tc.bs); len(got) != tc.want {
			t.Errorf("HashTokens %s: got %d hashes, want %d", tc.name, len(got), tc.want)
		}
		prompt := make([]byte, len(tc.tokens))
		if got := HashBytes(nil, seed, prompt, tc.bs); len(got) != tc.want {
			t.Errorf("HashBytes %s: got %d hashes, want %d", tc.name, len(got), tc.want)
		}
	}
	// Byte mode drops the trailing partial block: a prompt and its extension share hashes.
	p := []byte("0123456789abcdefXYZ")
	h1 := HashBytes(nil, seed, p[:16], 8)
	h2 := HashBytes(nil, seed, p, 8)
	if len(h1) != 2 || len(h2) != 2 || !slices.Equal(h1, h2) {
		t.Errorf("HashBytes partial tail: %#x vs %#x", h1, h2)
	}
}

func TestHashAllocs(t *testing.T) {
	seed := Seed("m", "", "")
	tok := randTokens(rand.New(rand.NewPCG(2, 2)), 2048)
	prompt := make([]byte, 8192)
	dst := make([]BlockHash, 0, 128)
	if a := testing.AllocsPerRun(100, func() { dst = HashTokens(dst[:0], seed, tok, 16) }); a != 0 {
		t.Errorf("HashTokens: %v allocs/op, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { dst = HashBytes(dst[:0], seed, prompt, 64) }); a != 0 {
		t.Errorf("HashBytes: %v allocs/op, want 0", a)
	}
	big := make([]uint32, 1000) // portable path beyond one stack chunk
	if a := testing.AllocsPerRun(100, func() { sinkU64 = hashBlockPortable(big) }); a != 0 {
		t.Errorf("hashBlockPortable: %v allocs/op, want 0", a)
	}
}
