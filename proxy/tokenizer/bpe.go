package tokenizer

import (
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// pairTable maps a pair of token ids to the rank of their merge and the id of the merged
// token: open addressing over flat arrays with a multiplicative hash, no pointers for the
// collector to scan, one or two probes a lookup.
type pairTable struct {
	slots []pairSlot
	shift uint8
}

// pairSlot keeps a key beside its value: one cache line a probe.
type pairSlot struct {
	key uint64 // a<<32 | b; emptyPair where free
	val uint64 // rank<<32 | merged id
}

const emptyPair = ^uint64(0)

func newPairTable(n int) pairTable {
	size := 8
	for size < 2*n {
		size <<= 1
	}
	t := pairTable{slots: make([]pairSlot, size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.slots {
		t.slots[i].key = emptyPair
	}
	return t
}

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put sets the pair's merge; a later merge of the same pair replaces an earlier one, as a
// Rust HashMap collected from the merge list keeps the last.
func (t *pairTable) put(a, b, rank, id uint32) {
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(t.slots) - 1)
	for h := t.slot(k); ; h = (h + 1) & mask {
		if sl := &t.slots[h]; sl.key == emptyPair || sl.key == k {
			sl.key, sl.val = k, uint64(rank)<<32|uint64(id)
			return
		}
	}
}

// get returns the rank and merged id of the pair (a, b), ok false when no merge joins them.
func (t *pairTable) get(a, b uint32) (rank, id uint32, ok bool) {
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(t.slots) - 1)
	for h := t.slot(k); ; h = (h + 1) & mask {
		sl := &t.slots[h]
		switch sl.key {
		case k:
			return uint32(sl.val >> 32), uint32(sl.val), true
		case emptyPair:
			return 0, 0, false
		}
	}
}

// bpe is the BPE model: the vocabulary and the merges.
type bpe struct {
	// vocab maps a token to its id. For a byte-level model the keys are the tokens' raw bytes
	// (the byte-to-character mapping undone), so that a piece of the input is looked up as it is.
	vocab     map[string]uint32
	merges    pairTable
	byteLevel bool
	byteIDs   [256]uint32 // byte-level: each byte's token; byte fallback: each <0xNN> token
	hasByte   [256]bool
	fallback  bool // byte_fallback
	unk       uint32
	hasUnk    bool
	fuseUnk   bool
	ignore    bool // ignore_merges: a piece found whole in the vocabulary is one token
	asciiIDs  [utf8.RuneSelf]uint32
	hasASCII  [utf8.RuneSelf]bool
	runeIDs   map[rune]uint32 // not byte-level: the single-rune tokens beyond ASCII
	maxToken  int             // the longest key of vocab, in bytes
}

// symbol is one token of a word while it is merged; size 0 marks one merged into its left
// neighbour.
type symbol struct {
	id         uint32
	prev, next int32
	size       int32
}

// word appends the ids of one pre-tokenized piece to dst. It is O(n log n) in the piece's
// length n and allocates only when the scratch buffers grow.
func (m *bpe) word(dst []uint32, s string, sc *scratch) []uint32 {
	if len(s) == 0 {
		return dst
	}
	if out, ok := sc.cache.get(dst, s); ok {
		return out
	}
	start := len(dst)
	if m.ignore && len(s) <= m.maxToken {
		if id, ok := m.vocab[s]; ok {
			dst = append(dst, id)
			sc.cache.put(s, dst[start:])
			return dst
		}
	}
	syms := sc.syms[:0]
	if m.byteLevel {
		for i := 0; i < len(s); i++ {
			syms = append(syms, symbol{id: m.byteIDs[s[i]], size: 1})
		}
	} else {
		syms = m.runeSymbols(syms, s)
	}
	switch {
	case len(syms) == 0:
	case len(syms) <= smallWord:
		dst = m.mergeSmall(dst, syms)
	default:
		for i := range syms {
			syms[i].prev = int32(i - 1)
			syms[i].next = int32(i + 1)
		}
		syms[len(syms)-1].next = -1
		sc.heap = m.mergeAll(syms, sc.heap[:0])
		for i := 0; i >= 0; i = int(syms[i].next) {
			dst = append(dst, syms[i].id)
		}
	}
	sc.syms = syms
	sc.cache.put(s, dst[start:])
	return dst
}

// smallWord is the longest word merged by mergeSmall rather than with a heap.
const smallWord = 48

// mergeSmall merges a short word by scanning for the lowest-ranked pair, leftmost first:
// the order of mergeAll's queue, without the queue. It is O(n²) and appends the ids to dst.
func (m *bpe) mergeSmall(dst []uint32, syms []symbol) []uint32 {
	var idsA [smallWord]uint32
	var ranks [smallWord]uint32 // rank of the pair (ids[i], ids[i+1]); noMerge when none
	var merged [smallWord]uint32
	const noMerge = ^uint32(0)
	n := len(syms)
	ids := idsA[:n]
	for i := range syms {
		ids[i] = syms[i].id
	}
	for i := 0; i+1 < n; i++ {
		ranks[i] = noMerge
		if r, id, ok := m.merges.get(ids[i], ids[i+1]); ok {
			ranks[i], merged[i] = r, id
		}
	}
	for n > 1 {
		best := 0
		for i := 1; i+1 < n; i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == noMerge {
			break
		}
		ids[best] = merged[best]
		copy(ids[best+1:n-1], ids[best+2:n])
		copy(ranks[best+1:n-1], ranks[best+2:n])
		copy(merged[best+1:n-1], merged[best+2:n])
		n--
		ids = ids[:n]
		if best+1 < n {
			ranks[best] = noMerge
			if r, id, ok := m.merges.get(ids[best], ids[best+1]); ok {
				ranks[best], merged[best] = r, id
			}
		}
		if best > 0 {
			ranks[best-1] = noMerge
			if r, id, ok := m.merges.get(ids[best-1], ids[best]); ok {
				ranks[best-1], merged[best-1] = r, id
			}
		}
	}
	return append(dst, ids...)
}

// runeSymbols is the initial split of a SentencePiece-style word: a token per rune when the
// vocabulary has it, else its bytes as <0xNN> tokens (byte_fallback), else the unknown token,
// consecutive unknowns fused into one when fuse_unk is set.
func (m *bpe) runeSymbols(syms []symbol, s string) []symbol {
	unkPending := false
	var unkSize int32
	flushUnk := func() {
		if unkPending {
			syms = append(syms, symbol{id: m.unk, size: unkSize})
			unkPending = false
		}
	}
	for i := 0; i < len(s); {
		var id uint32
		var ok bool
		n := 1
		if b := s[i]; b < utf8.RuneSelf {
			id, ok = m.asciiIDs[b], m.hasASCII[b]
		} else {
			var r rune
			r, n = utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				ok = false
			} else {
				id, ok = m.runeIDs[r]
			}
		}
		if ok {
			flushUnk()
			syms = append(syms, symbol{id: id, size: int32(n)})
			i += n
			continue
		}
		if m.fallback {
			all := true
			for k := i; k < i+n; k++ {
				all = all && m.hasByte[s[k]]
			}
			if all {
				// As the reference: a pending unknown is not flushed before fallback bytes.
				for k := i; k < i+n; k++ {
					syms = append(syms, symbol{id: m.byteIDs[s[k]], size: 1})
				}
				i += n
				continue
			}
		}
		if m.hasUnk {
			switch {
			case unkPending && m.fuseUnk:
				unkSize += int32(n)
			default:
				flushUnk()
				unkPending, unkSize = true, int32(n)
			}
		}
		i += n
	}
	flushUnk()
	return syms
}

// mergeAll applies the merges to syms until none applies, lowest rank first and, among equal
// ranks, leftmost first — the order of the reference's priority queue. heap is scratch; the
// grown heap is returned for reuse.
func (m *bpe) mergeAll(syms []symbol, heap []uint64) []uint64 {
	for i := 0; i+1 < len(syms); i++ {
		if rank, _, ok := m.merges.get(syms[i].id, syms[i+1].id); ok {
			heap = append(heap, uint64(rank)<<32|uint64(i))
		}
	}
	for i := len(heap)/2 - 1; i >= 0; i-- { // heapify, O(n)
		siftDown(heap, i)
	}
	for len(heap) > 0 {
		var top uint64
		heap, top = heapPop(heap)
		rank, pos := uint32(top>>32), int32(uint32(top))
		cur := &syms[pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		r2, id, ok := m.merges.get(cur.id, right.id)
		if !ok || r2 != rank {
			continue // stale: the pair at pos has changed since this entry was queued
		}
		cur.id = id
		cur.size += right.size
		syms[cur.next].size = 0
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if cur.prev >= 0 {
			if r, _, ok := m.merges.get(syms[cur.prev].id, cur.id); ok {
				heap = heapPush(heap, uint64(r)<<32|uint64(cur.prev))
			}
		}
		if cur.next >= 0 {
			if r, _, ok := m.merges.get(cur.id, syms[cur.next].id); ok {
				heap = heapPush(heap, uint64(r)<<32|uint64(pos))
			}
		}
	}
	return heap
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) ([]uint64, uint64) {
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	if len(h) > 0 {
		h[0] = last
		siftDown(h, 0)
	}
	return h, top
}

// siftDown moves h[i] down to its place in the min-heap h.
func siftDown(h []uint64, i int) {
	n := len(h)
	v := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && h[r] < h[l] {
			l = r
		}
		if v <= h[l] {
			break
		}
		h[i] = h[l]
		i = l
	}
	h[i] = v
}

// bytesToUnicode is GPT-2's map of each byte to the character that stands for it in a
// byte-level vocabulary: printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards in byte order.
var bytesToUnicode = func() (t [256]rune) {
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

var unicodeToByte = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range bytesToUnicode {
		m[r] = byte(b)
	}
	return m
}()

// unmapBytes turns a byte-level token back into its raw bytes; ok is false when the token has
// a character outside the map (such a token can never come out of a byte-level merge).
func unmapBytes(tok string, buf []byte) ([]byte, bool) {
	buf = buf[:0]
	for _, r := range tok {
		b, ok := unicodeToByte[r]
		if !ok {
			return buf, false
		}
		buf = append(buf, b)
	}
	return buf, true
}

// buildBPE builds the model from the vocabulary and the merges (pairs of tokens, in rank
// order). A merge naming a token outside the vocabulary, or whose result is outside it, is an
// error, as in the reference.
func buildBPE(vocab map[string]uint32, merges [][2]string, byteLevel bool) (*bpe, error) {
	m := &bpe{byteLevel: byteLevel}
	if byteLevel {
		raw := make(map[string]uint32, len(vocab))
		var buf []byte
		for tok, id := range vocab {
			b, ok := unmapBytes(tok, buf)
			buf = b
			if ok {
				raw[string(b)] = id
			}
		}
		for b := 0; b < 256; b++ {
			id, ok := raw[string([]byte{byte(b)})]
			if !ok {
				return nil, fmt.Errorf("byte-level vocabulary has no token for byte %#02x", b)
			}
			m.byteIDs[b], m.hasByte[b] = id, true
		}
		m.vocab = raw
	} else {
		m.vocab = vocab
		m.runeIDs = map[rune]uint32{}
		for tok, id := range vocab {
			r, n := utf8.DecodeRuneInString(tok)
			if n != len(tok) || r == utf8.RuneError && n <= 1 {
				continue
			}
			if r < utf8.RuneSelf {
				m.asciiIDs[r], m.hasASCII[r] = id, true
			} else {
				m.runeIDs[r] = id
			}
		}
		for b := 0; b < 256; b++ {
			if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				m.byteIDs[b], m.hasByte[b] = id, true
			}
		}
	}
	for tok := range m.vocab {
		m.maxToken = max(m.maxToken, len(tok))
	}
	m.merges = newPairTable(len(merges))
	for rank, p := range merges {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("merge %d (%q %q) names a token outside the vocabulary", rank, p[0], p[1])
		}
		id, ok := vocab[p[0]+p[1]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q) makes a token outside the vocabulary", rank, p[0], p[1])
		}
		m.merges.put(a, b, uint32(rank), id)
	}
	return m, nil
}
