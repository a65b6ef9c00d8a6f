package openai

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the lexer: one forward pass over the body, validating JSON as RFC 8259
// defines it (no NaN, no comments, no trailing commas, strings without raw control
// characters) and counting the nesting depth. Positions are byte offsets into the body;
// nothing is copied.

// parser is the state of one Parse. It lives on Parse's stack.
type parser struct {
	b        []byte
	depth    int // containers open at the current position
	maxDepth int
	lim      ParseLimits
	ep       API
}

// Contexts for syntax errors: what the parser was looking for.
const (
	forValue  = "looking for a value"
	forKey    = "looking for an object key"
	forColon  = "after an object key (expected ':')"
	forMember = "after an object member (expected ',' or '}')"
	forElem   = "after an array element (expected ',' or ']')"
)

// ws returns the index of the first non-whitespace byte at or after i.
func (p *parser) ws(i int) int {
	for i < len(p.b) {
		switch p.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// unexpected reports the byte at i (or the end of the body) as a syntax error.
func (p *parser) unexpected(i int, context string) *Error {
	if i >= len(p.b) {
		return syntaxError(i, "unexpected end of input %s", context)
	}
	r, _ := utf8.DecodeRune(p.b[i:])
	return syntaxError(i, "unexpected %q %s", r, context)
}

// push enters a container that starts at i.
func (p *parser) push(i int) *Error {
	p.depth++
	if p.depth > p.maxDepth {
		return syntaxError(i, "nesting deeper than %d", p.maxDepth)
	}
	return nil
}

// openObject consumes the '{' at i. It returns the index of the first key, or done and the
// index after the '}' of an empty object.
func (p *parser) openObject(i int) (next int, done bool, err *Error) {
	if err := p.push(i); err != nil {
		return i, false, err
	}
	i = p.ws(i + 1)
	if i < len(p.b) && p.b[i] == '}' {
		p.depth--
		return i + 1, true, nil
	}
	return i, false, nil
}

// openArray consumes the '[' at i. It returns the index of the first element, or done and
// the index after the ']' of an empty array.
func (p *parser) openArray(i int) (next int, done bool, err *Error) {
	if err := p.push(i); err != nil {
		return i, false, err
	}
	i = p.ws(i + 1)
	if i >= len(p.b) {
		return i, false, p.unexpected(i, forValue)
	}
	if p.b[i] == ']' {
		p.depth--
		return i + 1, true, nil
	}
	return i, false, nil
}

// key reads the member key at i and the ':' after it. It returns the key's raw bytes
// (between the quotes, escapes not decoded), whether they hold an escape, and the index of
// the value, which is inside the body.
func (p *parser) key(i int) (raw []byte, esc bool, val int, err *Error) {
	if i >= len(p.b) || p.b[i] != '"' {
		return nil, false, i, p.unexpected(i, forKey)
	}
	end, esc, err := p.str(i)
	if err != nil {
		return nil, false, end, err
	}
	j := p.ws(end)
	if j >= len(p.b) || p.b[j] != ':' {
		return nil, false, j, p.unexpected(j, forColon)
	}
	j = p.ws(j + 1)
	if j >= len(p.b) {
		return nil, false, j, p.unexpected(j, forValue)
	}
	return p.b[i+1 : end-1], esc, j, nil
}

// next consumes what follows a member or element ending at i: ',' and the whitespace
// after it, returning the index of the next key or element (inside the body), or close
// (one of '}' ']'), returning done and the index after it.
func (p *parser) next(i int, close byte) (next int, done bool, err *Error) {
	i = p.ws(i)
	if i < len(p.b) {
		switch p.b[i] {
		case ',':
			i = p.ws(i + 1)
			if i >= len(p.b) {
				return i, false, p.unexpected(i, forValue)
			}
			return i, false, nil
		case close:
			p.depth--
			return i + 1, true, nil
		}
	}
	if close == '}' {
		return i, false, p.unexpected(i, forMember)
	}
	return i, false, p.unexpected(i, forElem)
}

// skip validates the value at i and returns the index after it. It recurses once per
// level of nesting, at most maxDepth deep.
func (p *parser) skip(i int) (int, *Error) {
	if i >= len(p.b) {
		return i, p.unexpected(i, forValue)
	}
	switch p.b[i] {
	case '"':
		end, _, err := p.str(i)
		return end, err
	case '{':
		i, done, err := p.openObject(i)
		for err == nil && !done {
			if _, _, i, err = p.key(i); err != nil {
				break
			}
			if i, err = p.skip(i); err != nil {
				break
			}
			i, done, err = p.next(i, '}')
		}
		return i, err
	case '[':
		i, done, err := p.openArray(i)
		for err == nil && !done {
			if i, err = p.skip(i); err != nil {
				break
			}
			i, done, err = p.next(i, ']')
		}
		return i, err
	case 't':
		return p.literal(i, "true")
	case 'f':
		return p.literal(i, "false")
	case 'n':
		return p.literal(i, "null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		end, _, err := p.number(i)
		return end, err
	}
	return i, p.unexpected(i, forValue)
}

// literal validates the literal lit ("true", "false", "null") at i.
func (p *parser) literal(i int, lit string) (int, *Error) {
	if len(p.b)-i >= len(lit) && string(p.b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	j := i
	for j < len(p.b) && j-i < len(lit) && p.b[j] == lit[j-i] {
		j++
	}
	return j, p.unexpected(j, "in the literal "+lit)
}

// number validates the number at i. It reports whether it is an integer: no fraction, no
// exponent.
func (p *parser) number(i int) (end int, integer bool, err *Error) {
	b := p.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, false, p.unexpected(i, "in a number (expected a digit)")
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		if i+1 >= len(b) || b[i+1] < '0' || b[i+1] > '9' {
			return i + 1, false, p.unexpected(i+1, "in a number (expected a digit after '.')")
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false, p.unexpected(i, "in a number (expected a digit in the exponent)")
		}
		i = digits(b, i)
	}
	return i, integer, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// parseInt returns the value of the JSON integer s ('-'? digits, no leading zero), and
// false when it does not fit in an int64.
func parseInt(s []byte) (int64, bool) {
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) > 19 { // without leading zeros, 20 digits are at least 1e19 > MaxInt64
		return 0, false
	}
	var u uint64
	for _, c := range s {
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= -math.MinInt64:
		return -int64(u), true
	}
	return 0, false
}

// SWAR constants: a byte repeated in each of the eight lanes of a word.
const (
	lanes1  = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// special flags the lanes of x (eight bytes of a string, little-endian) that end a run of
// plain string bytes: '"', '\\' and control characters. The lowest flag is exact, which is
// all str needs; higher ones may be spurious.
func special(x uint64) uint64 {
	q := x ^ (lanes1 * '"')
	s := x ^ (lanes1 * '\\')
	return ((x - lanes1*0x20) | (q - lanes1) | (s - lanes1)) & ^x & lanes80
}

// str validates the string at i (b[i] is '"'). It returns the index after the closing
// quote and whether the string holds an escape. The body is already known to be valid
// UTF-8, so only ASCII bytes matter; plain runs are skipped eight bytes at a time.
func (p *parser) str(i int) (end int, esc bool, err *Error) {
	b := p.b
	i++
	for {
		for i+8 <= len(b) {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return i, esc, p.unexpected(i, "in a string")
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i, err = p.escape(i); err != nil {
				return i, esc, err
			}
		case c < 0x20:
			return i, esc, p.unexpected(i, "in a string (control characters must be escaped)")
		default:
			i++
		}
	}
}

// escape validates the escape sequence at i (b[i] is '\\') and returns the index after it.
func (p *parser) escape(i int) (int, *Error) {
	b := p.b
	if i+1 >= len(b) {
		return i + 1, p.unexpected(i+1, "in a string escape")
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
		for j := i + 2; j < i+6; j++ {
			if j >= len(b) || unhex(b[j]) < 0 {
				return j, p.unexpected(j, "in a \\u escape (expected a hexadecimal digit)")
			}
		}
		return i + 6, nil
	}
	return i + 1, p.unexpected(i+1, "in a string escape")
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// hex4 decodes the four hexadecimal digits at the start of s, or returns -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		d := unhex(c)
		if d < 0 {
			return -1
		}
		r = r<<4 | d
	}
	return r
}

// appendUnescaped appends the text of the JSON string whose bytes between the quotes are s.
// It decodes escapes as encoding/json does: a \u escape of a surrogate that is not half of
// a pair becomes U+FFFD. It never fails: a malformed escape (s is not from a validated
// body) is appended as it stands. It runs in O(len(s)).
func appendUnescaped(dst, s []byte) []byte {
	for {
		j := bytes.IndexByte(s, '\\')
		if j < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:j]...)
		s = s[j:]
		if len(s) < 2 {
			return append(dst, s...)
		}
		n := 2 // bytes of s the escape takes
		switch c := s[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[2:])
			if r < 0 {
				dst = append(dst, s[:2]...)
				break
			}
			n = 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
					r2 = hex4(s[8:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r, n = d, 12
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, s[:2]...)
		}
		s = s[n:]
	}
}
