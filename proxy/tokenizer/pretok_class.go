package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// class is a set of the Unicode properties the pre-tokenizer patterns test, one bit each.
type class uint16

const (
	cLu    class = 1 << iota // \p{Lu}
	cLl                      // \p{Ll}
	cLt                      // \p{Lt}
	cLm                      // \p{Lm}
	cLo                      // \p{Lo}
	cM                       // \p{M}
	cN                       // \p{N}
	cSpace                   // \s: the White_Space property
	cP                       // \p{P}
	cS                       // \p{S}
	cCRLF                    // [\r\n]
	cWord                    // \w as Rust's regex crate has it (used by single_word added tokens)

	cL = cLu | cLl | cLt | cLm | cLo
)

// bmpClasses is the class of every rune of the Basic Multilingual Plane, built on first use
// (128 KiB; a lookup instead of the range-table searches of package unicode).
var (
	bmpOnce    sync.Once
	bmpClasses []class
)

// classOf returns the class of r. It is O(1) for runes of the BMP and O(log n) beyond.
func classOf(r rune) class {
	if r < utf8.RuneSelf {
		return asciiClasses[r]
	}
	if r <= 0xFFFF {
		bmpOnce.Do(buildBMP)
		return bmpClasses[r]
	}
	return computeClass(r)
}

var asciiClasses = func() (t [utf8.RuneSelf]class) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = computeClass(r)
	}
	return t
}()

func buildBMP() {
	t := make([]class, 0x10000)
	for r := range t {
		t[r] = computeClass(rune(r))
	}
	bmpClasses = t
}

func computeClass(r rune) class {
	var c class
	if k := sort.Search(len(unicode16), func(k int) bool { return unicode16[k].hi >= r }); k < len(unicode16) && unicode16[k].lo <= r {
		c = unicode16[k].c
	}
	switch {
	case c != 0:
	case unicode.Is(unicode.Lu, r):
		c |= cLu
	case unicode.Is(unicode.Ll, r):
		c |= cLl
	case unicode.Is(unicode.Lt, r):
		c |= cLt
	case unicode.Is(unicode.Lm, r):
		c |= cLm
	case unicode.Is(unicode.Lo, r):
		c |= cLo
	case unicode.Is(unicode.M, r):
		c |= cM
	case unicode.Is(unicode.N, r):
		c |= cN
	case unicode.Is(unicode.P, r):
		c |= cP
	case unicode.Is(unicode.S, r):
		c |= cS
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	// \w in Rust's regex: Alphabetic, M, Nd, Pc, Join_Control.
	if c&(cL|cM) != 0 || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D {
		c |= cWord
	}
	return c
}

// at decodes the rune at s[i] and returns it with its class and width. An invalid byte is a
// rune of width 1 and no class (a Rust string never holds one; Go's may).
func at(s string, i int) (class, int) {
	b := s[i]
	if b < utf8.RuneSelf {
		return asciiClasses[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return 0, 1
	}
	return classOf(r), n
}

// runEnd returns the end of the run of runes from i whose class meets want.
func runEnd(s string, i int, want class) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClasses[b]&want == 0 {
				break
			}
			i++
			continue
		}
		c, n := at(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runEndNot returns the end of the run of runes from i whose class meets none of avoid
// (invalid bytes included).
func runEndNot(s string, i int, avoid class) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClasses[b]&avoid != 0 {
				break
			}
			i++
			continue
		}
		c, n := at(s, i)
		if c&avoid != 0 {
			break
		}
		i += n
	}
	return i
}

// crlfEnd returns the end of the run of '\r' and '\n' bytes from i (and of '/' too when slash).
func crlfEnd(s string, i int, slash bool) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || (slash && s[i] == '/')) {
		i++
	}
	return i
}

// spaceTail matches the three whitespace alternatives every pattern ends with,
// `\s*[\r\n]+|\s+(?!\S)|\s+`, at i, where s[i] is whitespace: the run up to its last line
// break if it has one; else the whole run if it ends the string, the run less its last rune
// if that leaves one, or the whole run.
func spaceTail(s string, i int) int {
	w := runEnd(s, i, cSpace)
	for k := w - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	if w == len(s) {
		return w
	}
	_, n := utf8.DecodeLastRuneInString(s[i:w])
	if w-n > i {
		return w - n
	}
	return w
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i and returns its length, or 0.
// Case folding is Unicode's simple folding, as Oniguruma applies it: 's' also matches U+017F.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return 0
	}
	rest := s[i+1:]
	two := func(b byte) bool { return len(rest) > 1 && rest[1]|0x20 == b } // ASCII letters only
	switch rest[0] | 0x20 {
	case 's', 't', 'm', 'd':
		if isASCIILetter(rest[0]) {
			return 2
		}
	case 'r', 'v':
		if isASCIILetter(rest[0]) && two('e') {
			return 3
		}
	case 'l':
		if isASCIILetter(rest[0]) && two('l') {
			return 3
		}
	}
	if strings.HasPrefix(rest, "\u017F") { // LATIN SMALL LETTER LONG S folds to s
		return 3
	}
	return 0
}

// contractionCS is contraction without case folding ('s|'t|'re|'ve|'m|'ll|'d).
func contractionCS(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return 0
	}
	switch s[i+1] {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2] == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2] == 'l' {
			return 3
		}
	}
	return 0
}

func isASCIILetter(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

// width returns the width of the rune at s[i] (1 for an invalid byte).
func width(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}
