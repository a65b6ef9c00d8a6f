package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normStep is one normalizer of a tokenizer.json normalizer (a Sequence is flattened).
type normStep struct {
	form norm.Form // for kind normForm
	kind normKind
	from string // Replace's pattern; Prepend's text is in to
	to   string
}

type normKind uint8

const (
	normForm normKind = iota
	normPrepend
	normReplace
)

type normJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content string `json:"content"`
}

// parseNormalizer flattens a normalizer into steps; null is none.
func parseNormalizer(raw json.RawMessage, steps []normStep) ([]normStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return steps, nil
	}
	var n normJSON
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "Sequence":
		for _, sub := range n.Normalizers {
			var err error
			if steps, err = parseNormalizer(sub, steps); err != nil {
				return nil, err
			}
		}
		return steps, nil
	case "NFC":
		return append(steps, normStep{kind: normForm, form: norm.NFC}), nil
	case "NFD":
		return append(steps, normStep{kind: normForm, form: norm.NFD}), nil
	case "NFKC":
		return append(steps, normStep{kind: normForm, form: norm.NFKC}), nil
	case "NFKD":
		return append(steps, normStep{kind: normForm, form: norm.NFKD}), nil
	case "Prepend":
		return append(steps, normStep{kind: normPrepend, to: n.Prepend}), nil
	case "Replace":
		if n.Pattern.String == nil {
			return nil, fmt.Errorf("normalizer Replace: only a String pattern is supported")
		}
		if *n.Pattern.String == "" {
			return nil, fmt.Errorf("normalizer Replace: empty pattern")
		}
		return append(steps, normStep{kind: normReplace, from: *n.Pattern.String, to: n.Content}), nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported", n.Type)
}

// normalize applies the steps to s. It returns s itself when no step changes it, else one new
// string; the buffers are scratch, returned grown for reuse.
func normalize(steps []normStep, s string, a, b []byte) (string, []byte, []byte) {
	var it norm.Iter
	out, changed, a, b := normalizeBytes(steps, &it, s, a, b)
	if !changed {
		return s, a, b
	}
	return string(out), a, b
}

// normalizeBytes applies the steps to s. When a step changes it, it returns the result, which
// is one of the buffers a and b (scratch, returned grown for reuse), and changed true.
// it is scratch too: x/text's iterator, which allocates nothing where its Append does.
func normalizeBytes(steps []normStep, it *norm.Iter, s string, a, b []byte) (out []byte, changed bool, _, _ []byte) {
	if len(s) == 0 {
		return nil, false, a, b
	}
	// once changed, the text is in a
	for _, st := range steps {
		switch st.kind {
		case normForm:
			// QuickSpan, unlike IsNormal, allocates nothing; a short span only costs the full pass.
			if changed {
				if st.form.QuickSpan(a) == len(a) {
					continue
				}
				b = appendForm(b[:0], it, st.form, string(a))
			} else {
				if st.form.QuickSpanString(s) == len(s) {
					continue
				}
				b = appendForm(b[:0], it, st.form, s)
			}
		case normPrepend:
			// Prepend adds its text to a string that is not empty.
			b = append(b[:0], st.to...)
			if changed {
				b = append(b, a...)
			} else {
				b = append(b, s...)
			}
		case normReplace:
			if !changed {
				if !strings.Contains(s, st.from) {
					continue
				}
				a = append(a[:0], s...)
			} else if !bytes.Contains(a, []byte(st.from)) {
				continue
			}
			b = b[:0]
			cur := a
			for {
				i := bytes.Index(cur, []byte(st.from))
				if i < 0 {
					break
				}
				b = append(append(b, cur[:i]...), st.to...)
				cur = cur[i+len(st.from):]
			}
			b = append(b, cur...)
		}
		a, b = b, a
		changed = true
	}
	if !changed {
		return nil, false, a, b
	}
	return a, true, a, b
}

// appendForm appends the normal form f of s to dst as the reference computes it: the stretches
// between the runes it does not know (normBarriers) normalized apart, those runes kept.
func appendForm(dst []byte, it *norm.Iter, f norm.Form, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r >= normBarriers[0] && isBarrier(r, s[i:i+n]) {
			dst = appendFormPart(dst, it, f, s[start:i])
			dst = append(dst, s[i:i+n]...)
			start = i + n
		}
		i += n
	}
	return appendFormPart(dst, it, f, s[start:])
}

// appendFormPart appends f(s) to dst.
func appendFormPart(dst []byte, it *norm.Iter, f norm.Form, s string) []byte {
	if s == "" {
		return dst
	}
	if longMarks(f, s) {
		return appendFormSlow(dst, f, s)
	}
	it.InitString(f, s)
	for !it.Done() {
		dst = append(dst, it.Next()...)
	}
	return dst
}

// isBarrier reports whether r (whose encoding is enc) is normalized apart: a rune the
// reference does not know (normBarriers), or one that x/text would compose wrongly. x/text
// looks compositions up by the low 16 bits of both runes, so a supplementary starter
// followed by a combining mark can come out as a BMP letter (U+10061 U+0311 as U+0203), and a
// BMP rune before a supplementary mark as a supplementary letter (U+1099 U+110BA as
// U+1109A). Such runes are starters that neither decompose nor compose, so a stretch may end at them.
func isBarrier(r rune, enc string) bool {
	if r >= 0x10000 {
		if _, ok := suppComposing[r]; ok {
			return false
		}
		if p := norm.NFC.PropertiesString(enc); p.CCC() == 0 && p.Decomposition() == nil {
			return true
		}
	}
	if _, ok := bmpAliases[r]; ok {
		return true
	}
	k := sort.Search(len(normBarriers), func(k int) bool { return normBarriers[k] >= r })
	return k < len(normBarriers) && normBarriers[k] == r
}

// suppComposing are the supplementary runes that take part in canonical compositions
// (Kaithi, Chakma, Grantha, Tirhuta, Siddham, Dives Akuru); bmpAliases are the BMP runes
// whose low 16 bits are those of a supplementary first rune of one.
var (
	suppComposing = map[rune]struct{}{
		0x11099: {}, 0x1109B: {}, 0x110A5: {}, 0x110BA: {}, 0x11127: {}, 0x11131: {}, 0x11132: {},
		0x1133E: {}, 0x11347: {}, 0x11357: {}, 0x114B0: {}, 0x114B9: {}, 0x114BA: {}, 0x114BD: {},
		0x115AF: {}, 0x115B8: {}, 0x115B9: {},
	}
	bmpAliases = map[rune]struct{}{
		0x1099: {}, 0x109B: {}, 0x10A5: {}, 0x1131: {}, 0x1132: {}, 0x1347: {}, 0x14B9: {},
		0x15B8: {}, 0x15B9: {}, 0x1935: {},
	}
)

// maxMarks is the longest run of non-starters x/text normalizes as Unicode does: past 30 it
// inserts U+034F (the Stream-Safe Text Format), which the reference does not.
const maxMarks = 28

// longMarks reports whether s may hold a run of more than maxMarks non-starters, counting
// the non-starters of each rune's decomposition. It is O(len(s)).
func longMarks(f norm.Form, s string) bool {
	run := 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			run = 0
			i++
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		p := f.PropertiesString(s[i : i+n])
		k := 1
		if d := p.Decomposition(); d != nil {
			k = utf8.RuneCount(d)
		}
		switch {
		case !p.BoundaryBefore() || p.LeadCCC() != 0 || p.CCC() != 0:
			run += k // x/text counts on through runes that may combine backward
		case p.TrailCCC() != 0:
			run = k
		default:
			run = 0
		}
		if run > maxMarks {
			return true
		}
		i += n
	}
	return false
}

// appendFormSlow normalizes s by the book, for the text x/text would not: full decomposition,
// canonical ordering, then canonical composition (NFC, NFKC) with the composition of each
// pair taken from x/text. It allocates; it serves only runs of more than maxMarks
// combining marks.
func appendFormSlow(dst []byte, f norm.Form, s string) []byte {
	dec := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		dec = norm.NFKD
	}
	var rs []rune
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch d := dec.PropertiesString(s[i : i+n]).Decomposition(); {
		case r >= hangulBase && r < hangulBase+hangulCount:
			k := r - hangulBase
			rs = append(rs, 0x1100+k/(21*28), 0x1161+k%(21*28)/28)
			if t := k % 28; t != 0 {
				rs = append(rs, 0x11A7+t)
			}
		case d != nil:
			for _, x := range string(d) {
				rs = append(rs, x)
			}
		default:
			rs = append(rs, r)
		}
		i += n
	}
	ccc := func(r rune) uint8 {
		if r >= normBarriers[0] && isBarrier(r, string(r)) {
			return 0
		}
		return norm.NFD.PropertiesString(string(r)).CCC()
	}
	// Canonical ordering: a stable sort of each run of non-starters by combining class.
	for i := 1; i < len(rs); i++ {
		c := ccc(rs[i])
		if c == 0 {
			continue
		}
		for j := i; j > 0; j-- {
			p := ccc(rs[j-1])
			if p == 0 || p <= c {
				break
			}
			rs[j-1], rs[j] = rs[j], rs[j-1]
		}
	}
	if f == norm.NFC || f == norm.NFKC {
		out := rs[:0]
		starter, last := -1, -1 // last: the class of the last rune kept after the starter, -1 if none
		for _, r := range rs {
			c := int(ccc(r))
			if starter >= 0 && (last == -1 || last < c) {
				if p, ok := composePair(out[starter], r); ok {
					out[starter] = p
					continue
				}
			}
			if c == 0 {
				starter, last = len(out), -1
			} else {
				last = c
			}
			out = append(out, r)
		}
		rs = out
	}
	for _, r := range rs {
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

const (
	hangulBase  = 0xAC00
	hangulCount = 11172
)

// composePair returns the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	if isBarrier(a, string(a)) || isBarrier(b, string(b)) {
		return 0, false
	}
	c := norm.NFC.String(string(a) + string(b))
	r, n := utf8.DecodeRuneInString(c)
	if n != len(c) || r == a {
		return 0, false
	}
	return r, true
}
