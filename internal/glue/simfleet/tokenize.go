package simfleet

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// VocabSize is the size of the simulated vocabulary: token ids are in [0, VocabSize).
// It matches Qwen's 151,643 regular tokens; the figure only sets the id range.
const VocabSize = 151643

// maxPiece caps a token's length in bytes, so long words split into several tokens the way
// byte-pair encodings split rare words.
const maxPiece = 8

// Tokenize splits text into tokens deterministically, like a byte-pair tokenizer in the
// ways that matter to a KV cache: a token is a word with its leading space, a run of up to three
// digits, a run of punctuation, a run of whitespace, or a chat-template marker such as
// <|im_start|>; words longer than 8 bytes are split every 8 bytes. A token's id is a hash of its
// text. Tokenizing a text that extends another gives the other's tokens except possibly its
// last one (when the shorter text ends on a character boundary and not inside a marker), so
// equal text prefixes share their token (and so KV block) prefixes.
//
// Tokenize allocates the result; AppendTokens fills a caller's buffer. O(len(text)).
func Tokenize(text string) []uint32 {
	return AppendTokens(make([]uint32, 0, len(text)/4+1), text)
}

// AppendTokens appends the tokens of text to dst and returns it; it allocates only if dst must
// grow. O(len(text)). See Tokenize.
func AppendTokens(dst []uint32, text string) []uint32 {
	for i := 0; i < len(text); {
		n := nextPiece(text[i:])
		dst = append(dst, tokenID(text[i:i+n]))
		i += n
	}
	return dst
}

// TokenCount returns len(Tokenize(text)) without allocating. O(len(text)).
func TokenCount(text string) int {
	n := 0
	for i := 0; i < len(text); n++ {
		i += nextPiece(text[i:])
	}
	return n
}

func tokenID(piece string) uint32 {
	return uint32(xxhash.Sum64String(piece) % VocabSize)
}

type class uint8

const (
	clsSpace class = iota
	clsLetter
	clsDigit
	clsPunct
)

// asciiClass holds classOf for ASCII, the common case.
var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOfRune(r)
	}
	return t
}()

func classOf(r rune) class {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return classOfRune(r)
}

func classOfRune(r rune) class {
	switch {
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return clsLetter
	case unicode.IsDigit(r):
		return clsDigit
	}
	return clsPunct
}

// nextPiece returns the byte length of the token at the start of s (len(s) > 0).
func nextPiece(s string) int {
	if n := markerLen(s); n > 0 {
		return n
	}
	r, w := utf8.DecodeRuneInString(s)
	start := 0
	c := classOf(r)
	if r == ' ' && len(s) > w && markerLen(s[w:]) == 0 {
		// A single space joins the word, number or punctuation that follows it.
		if r2, w2 := utf8.DecodeRuneInString(s[w:]); classOf(r2) != clsSpace {
			start, c, w = w, classOf(r2), w+w2
		}
	}
	i := w
	switch c {
	case clsSpace:
		// A run of whitespace, leaving a last space that precedes a non-space to the next token.
		for i < len(s) && i < maxPiece {
			r, rw := utf8.DecodeRuneInString(s[i:])
			if classOf(r) != clsSpace {
				break
			}
			if r == ' ' && i+rw < len(s) {
				if r2, _ := utf8.DecodeRuneInString(s[i+rw:]); classOf(r2) != clsSpace {
					break
				}
			}
			i += rw
		}
	case clsDigit:
		for digits := 1; i < len(s) && digits < 3; digits++ {
			r, rw := utf8.DecodeRuneInString(s[i:])
			if classOf(r) != clsDigit {
				break
			}
			i += rw
		}
	default:
		for i < len(s) && i-start < maxPiece {
			r, rw := utf8.DecodeRuneInString(s[i:])
			if classOf(r) != c || (r == '<' && markerLen(s[i:]) > 0) {
				break
			}
			if i+rw-start > maxPiece {
				break
			}
			i += rw
		}
	}
	return i
}

// markerLen returns the length of the chat-template marker (<|name|>, name up to 32 bytes
// without spaces) at the start of s, or 0.
func markerLen(s string) int {
	if !strings.HasPrefix(s, "<|") {
		return 0
	}
	end := strings.Index(s[2:min(len(s), 36)], "|>")
	if end <= 0 || strings.ContainsAny(s[2:2+end], " \t\r\n<") {
		return 0
	}
	return end + 4
}
