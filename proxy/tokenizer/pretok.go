package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// A scanner is one Split pre-tokenizer's regular expression, written out by hand: it returns
// the end of the match that starts at s[i], or -1 when none starts there. It is what Rust's
// Oniguruma would match at i with the leftmost-first (backtracking) alternation of the
// pattern, lookahead included; the caller finds the leftmost match by trying each i in turn.
type scanner func(s string, i int) int

// A split is a Split pre-tokenizer: its scanner, and the bytes a match can start with (nil
// for any), so that the text between matches is skipped a byte at a time.
type split struct {
	scan  scanner
	first *[256]bool
}

// firstBytes returns the table of the bytes for which ok holds.
func firstBytes(ok func(b byte) bool) *[256]bool {
	var t [256]bool
	for b := range t {
		t[b] = ok(byte(b))
	}
	return &t
}

var (
	// A number starts with an ASCII digit or a multi-byte rune.
	digitFirst = firstBytes(func(b byte) bool { return b >= '0' && b <= '9' || b >= 0xC0 })
	// [一-龥぀-ゟ゠-ヿ] encode in three bytes from E3 to E9.
	cjkFirst = firstBytes(func(b byte) bool { return b >= 0xE3 && b <= 0xE9 })
)

// Patterns known by their exact text in tokenizer.json, and their scanners.
const (
	// Qwen2 and Qwen3 (and, with \p{N}{1,3}, Llama 3).
	patQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200k (GPT-4o, GPT-OSS's o200k_harmony).
	patO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek-V3's three, in its order. The third holds a literal CR and LF in two classes.
	patDigits3 = `\p{N}{1,3}`
	patCJK     = `[一-龥぀-ゟ゠-ヿ]+`
	patDSWords = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// GPT-2's, which the ByteLevel pre-tokenizer applies itself when use_regex is set.
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// scannerFor returns the scanner of a Split pattern, or an error naming a pattern it does not
// know: a wrong split would give wrong ids, so an unknown pattern refuses to load.
func scannerFor(pattern string) (split, error) {
	switch pattern {
	case patQwen:
		return split{scan: scanQwen}, nil
	case patLlama3:
		return split{scan: scanLlama3}, nil
	case patO200k:
		return split{scan: scanO200k}, nil
	case patDigits3:
		return split{scan: scanDigits3, first: digitFirst}, nil
	case patCJK:
		return split{scan: scanCJK, first: cjkFirst}, nil
	case patDSWords:
		return split{scan: scanDSWords}, nil
	case patGPT2:
		return split{scan: scanGPT2}, nil
	}
	return split{}, fmt.Errorf("Split pattern %q has no scanner (known: Qwen, Llama 3, o200k, DeepSeek-V3's three, GPT-2)", pattern)
}

// other is [^\s\p{L}\p{N}].
const notOther = cSpace | cL | cN

func scanQwen(s string, i int) int   { return scanQwenN(s, i, 1) }
func scanLlama3(s string, i int) int { return scanQwenN(s, i, 3) }

// scanQwenN is the Qwen / Llama 3 pattern with \p{N}{1,maxDigits}.
func scanQwenN(s string, i int, maxDigits int) int {
	c0, n0 := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if n := contraction(s, i); n > 0 {
		return i + n
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&cL != 0 {
		return runEnd(s, i, cL)
	}
	if c0&(cCRLF|cL|cN) == 0 && i+n0 < len(s) {
		if c1, _ := at(s, i+n0); c1&cL != 0 {
			return runEnd(s, i+n0, cL)
		}
	}
	// \p{N}{1,maxDigits}
	if c0&cN != 0 {
		j := i + n0
		for k := 1; k < maxDigits && j < len(s); k++ {
			c, n := at(s, j)
			if c&cN == 0 {
				break
			}
			j += n
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if j := otherRun(s, i); j > 0 {
		return crlfEnd(s, j, false)
	}
	if c0&cSpace != 0 {
		return spaceTail(s, i)
	}
	return -1
}

// otherRun matches ` ?[^\s\p{L}\p{N}]+` at i and returns its end, or -1.
func otherRun(s string, i int) int {
	j := i
	if s[i] == ' ' {
		j++
	}
	if j >= len(s) {
		return -1
	}
	if c, _ := at(s, j); c&notOther != 0 {
		return -1
	}
	return runEndNot(s, j, notOther)
}

// The o200k classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
const (
	cUpper = cLu | cLt | cLm | cLo | cM
	cLower = cLl | cLm | cLo | cM
)

func scanO200k(s string, i int) int {
	c0, n0 := at(s, i)
	prefix := c0&(cCRLF|cL|cN) == 0 && i+n0 < len(s)
	// [^\r\n\p{L}\p{N}]?[Upper]*[Lower]+(?i:...)?, with the prefix, then without.
	if prefix {
		if e := o200kFirst(s, i+n0); e > 0 {
			return e
		}
	}
	if e := o200kFirst(s, i); e > 0 {
		return e
	}
	// [^\r\n\p{L}\p{N}]?[Upper]+[Lower]*(?i:...)?
	if prefix {
		if c1, _ := at(s, i+n0); c1&cUpper != 0 {
			return o200kSecond(s, i+n0)
		}
	}
	if c0&cUpper != 0 {
		return o200kSecond(s, i)
	}
	// \p{N}{1,3}
	if c0&cN != 0 {
		return digits3(s, i)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n/]*
	if j := otherRun(s, i); j > 0 {
		return crlfEnd(s, j, true)
	}
	if c0&cSpace != 0 {
		return spaceTail(s, i)
	}
	return -1
}

// o200kFirst matches [Upper]*[Lower]+(?i:'s|...)? at p, as a backtracking matcher would: the
// greedy upper run, then a lower run after it; failing that, the run gives back runes until
// one that is also lower (Lm, Lo, M), which alone ends the match.
func o200kFirst(s string, p int) int {
	if p >= len(s) {
		return -1
	}
	j := runEnd(s, p, cUpper)
	e := -1
	if j < len(s) {
		if c, _ := at(s, j); c&cLower != 0 {
			e = runEnd(s, j, cLower)
		}
	}
	if e < 0 {
		// Give back: the last rune of s[p:j] in the lower class ends the match.
		for k := j; k > p; {
			_, n := utf8.DecodeLastRuneInString(s[p:k])
			k -= n
			if c, _ := at(s, k); c&cLower != 0 {
				e = k + n
				break
			}
		}
	}
	if e < 0 {
		return -1
	}
	return e + contraction(s, e)
}

// o200kSecond matches [Upper]+[Lower]*(?i:'s|...)? at p, where s[p] is upper.
func o200kSecond(s string, p int) int {
	e := runEnd(s, runEnd(s, p, cUpper), cLower)
	return e + contraction(s, e)
}

func digits3(s string, i int) int {
	j := i
	for k := 0; k < 3 && j < len(s); k++ {
		c, n := at(s, j)
		if c&cN == 0 {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

func scanDigits3(s string, i int) int { return digits3(s, i) }

// scanCJK is [一-龥぀-ゟ゠-ヿ]+: U+4E00–U+9FA5, U+3040–U+309F, U+30A0–U+30FF.
func scanCJK(s string, i int) int {
	j := i
	for j < len(s) && s[j] >= 0xE3 && s[j] <= 0xE9 { // all three ranges encode in 3 bytes starting E3..E9
		r, n := utf8.DecodeRuneInString(s[j:])
		if !(r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x30FF) {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

// scanDSWords is DeepSeek-V3's third pattern.
func scanDSWords(s string, i int) int {
	c0, n0 := at(s, i)
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 1
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	const word = cL | cM
	if c0&(cCRLF|cL|cP|cS) == 0 && i+n0 < len(s) {
		if c1, _ := at(s, i+n0); c1&word != 0 {
			return runEnd(s, i+n0, word)
		}
	}
	if c0&word != 0 {
		return runEnd(s, i, word)
	}
	//  ?[\p{P}\p{S}]+[\r\n]*
	j := i
	if s[i] == ' ' {
		j++
	}
	if j < len(s) {
		if c, _ := at(s, j); c&(cP|cS) != 0 {
			return crlfEnd(s, runEnd(s, j, cP|cS), false)
		}
	}
	if c0&cSpace != 0 {
		return spaceTail(s, i)
	}
	return -1
}

func isASCIIPunct(b byte) bool {
	return b >= '!' && b <= '/' || b >= ':' && b <= '@' || b >= '[' && b <= '`' || b >= '{' && b <= '~'
}

// scanGPT2 is GPT-2's pattern (ByteLevel's use_regex).
func scanGPT2(s string, i int) int {
	if n := contractionCS(s, i); n > 0 {
		return i + n
	}
	c0, _ := at(s, i)
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		j = i + 1
	}
	cj, _ := at(s, j)
	switch {
	case cj&cL != 0:
		return runEnd(s, j, cL)
	case cj&cN != 0:
		return runEnd(s, j, cN)
	case cj&notOther == 0 && (j > i || c0&notOther == 0):
		return runEndNot(s, j, notOther)
	}
	if c0&cSpace != 0 {
		w := runEnd(s, i, cSpace)
		if w == len(s) {
			return w
		}
		_, n := utf8.DecodeLastRuneInString(s[i:w])
		if w-n > i {
			return w - n
		}
		return w
	}
	return -1
}
