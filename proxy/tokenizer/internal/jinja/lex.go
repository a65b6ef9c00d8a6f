package jinja

import (
	"fmt"
	"strings"
)

// tokKind is the kind of a lexed token.
type tokKind uint8

const (
	tEOF tokKind = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // data, name, unquoted string, number text, operator
	pos  int    // byte offset in the source
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tVarEnd:
		return "'}}'"
	case tBlockEnd:
		return "'%}'"
	}
	return fmt.Sprintf("%q", t.val)
}

// lex splits src into tokens the way Jinja2's lexer does with trim_blocks and
// lstrip_blocks: "{%-"/"{{-"/"{#-" strip the whitespace before the tag, "-%}"/"-}}"/"-#}"
// the whitespace after it; a block or comment tag alone on its line after spaces and tabs
// takes them away unless it opens with "{%+"; the first newline after "%}" or "#}" is
// dropped unless the tag closes with "+%}".
func lex(src string) ([]token, error) {
	// Jinja2 normalises newlines to "\n" and, without keep_trailing_newline, drops one
	// trailing newline of the source.
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	src = strings.TrimSuffix(src, "\n")
	var toks []token
	pos := 0
	lineStarting := true
	for pos < len(src) {
		i := nextTag(src, pos)
		text := src[pos:]
		if i >= 0 {
			text = src[pos:i]
		}
		if i < 0 {
			if text != "" {
				toks = append(toks, token{kind: tData, val: text, pos: pos})
			}
			break
		}
		kind := src[i+1] // '{', '%' or '#'
		after := i + 2
		var mod byte
		if after < len(src) && (src[after] == '-' || src[after] == '+') {
			mod = src[after]
			after++
		}
		switch {
		case mod == '-':
			text = rstripPy(text)
		case mod != '+' && kind != '{':
			// lstrip_blocks: the whitespace between the line's start and the tag.
			l := strings.LastIndexByte(text, '\n') + 1
			if l > 0 || lineStarting {
				if strings.Trim(text[l:], " \t") == "" {
					text = text[:l]
				}
			}
		}
		if text != "" {
			toks = append(toks, token{kind: tData, val: text, pos: pos})
		}
		if kind == '#' {
			end := strings.Index(src[after:], "#}")
			if end < 0 {
				return nil, &Error{Pos: i, Msg: "unclosed comment"}
			}
			end += after
			pos = end + 2
			if end > after && src[end-1] == '-' {
				pos = skipSpace(src, pos)
			} else if end > after && src[end-1] == '+' {
			} else if pos < len(src) && src[pos] == '\n' {
				pos++
			}
			lineStarting = src[pos-1] == '\n'
			continue
		}
		if kind == '%' && isRaw(src, after) {
			// {% raw %} ... {% endraw %}: the body verbatim.
			j := strings.Index(src[after:], "%}") + after + 2
			body, next, err := rawBody(src, j)
			if err != nil {
				return nil, err
			}
			if len(body) > 0 {
				toks = append(toks, token{kind: tData, val: body, pos: j})
			}
			pos = next
			lineStarting = pos > 0 && src[pos-1] == '\n'
			continue
		}
		begin, endKind := tVarBegin, tVarEnd
		closer := "}}"
		if kind == '%' {
			begin, endKind, closer = tBlockBegin, tBlockEnd, "%}"
		}
		toks = append(toks, token{kind: begin, pos: i})
		var err error
		toks, pos, err = lexExpr(src, after, toks, closer)
		if err != nil {
			return nil, err
		}
		// pos is at the closer, possibly preceded by '-' or '+' (consumed by lexExpr).
		endPos := pos
		trim := byte(0)
		if src[pos-1] == '-' || src[pos-1] == '+' && kind == '%' {
			if pos-1 >= after && (len(toks) == 0 || toks[len(toks)-1].pos != pos-1) {
				trim = src[pos-1]
			}
		}
		toks = append(toks, token{kind: endKind, pos: endPos})
		pos += 2
		switch {
		case trim == '-':
			pos = skipSpace(src, pos)
		case trim == '+':
		case kind == '%' && pos < len(src) && src[pos] == '\n':
			pos++
		}
		lineStarting = src[pos-1] == '\n'
	}
	toks = append(toks, token{kind: tEOF, pos: len(src)})
	return toks, nil
}

// nextTag returns the offset of the next "{{", "{%" or "{#" at or after pos, or -1.
func nextTag(src string, pos int) int {
	for {
		j := strings.IndexByte(src[pos:], '{')
		if j < 0 || pos+j+1 >= len(src) {
			return -1
		}
		j += pos
		if c := src[j+1]; c == '{' || c == '%' || c == '#' {
			return j
		}
		pos = j + 1
	}
}

func isRaw(src string, i int) bool {
	i = skipSpace(src, i)
	if !strings.HasPrefix(src[i:], "raw") {
		return false
	}
	i = skipSpace(src, i+3)
	if i < len(src) && src[i] == '-' {
		i++
	}
	return strings.HasPrefix(src[i:], "%}")
}

// rawBody finds the "{% endraw %}" closing a raw block whose body starts at i.
func rawBody(src string, i int) (body string, next int, err error) {
	for j := i; ; {
		k := strings.Index(src[j:], "{%")
		if k < 0 {
			return "", 0, &Error{Pos: i, Msg: "missing endraw"}
		}
		k += j
		p := k + 2
		strip := false
		if p < len(src) && (src[p] == '-' || src[p] == '+') {
			strip = src[p] == '-'
			p++
		}
		p = skipSpace(src, p)
		if strings.HasPrefix(src[p:], "endraw") {
			p = skipSpace(src, p+6)
			trim := false
			if p < len(src) && src[p] == '-' {
				trim = true
				p++
			}
			if strings.HasPrefix(src[p:], "%}") {
				body = src[i:k]
				if strip {
					body = rstripPy(body)
				}
				p += 2
				if trim {
					p = skipSpace(src, p)
				} else if p < len(src) && src[p] == '\n' {
					p++
				}
				return body, p, nil
			}
		}
		j = k + 2
	}
}

func skipSpace(src string, i int) int {
	for i < len(src) && isSpaceByte(src[i]) {
		i++
	}
	return i
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// rstripPy strips trailing whitespace as Python's str.rstrip() does.
func rstripPy(s string) string {
	return strings.TrimRightFunc(s, isSpacePy)
}

// lexExpr lexes the expression tokens of a tag starting at i up to closer, returning the
// offset of the closer (after an optional '-' or '+' modifier).
func lexExpr(src string, i int, toks []token, closer string) ([]token, int, error) {
	for {
		i = skipSpace(src, i)
		if i >= len(src) {
			return nil, 0, &Error{Pos: i, Msg: "unexpected end of template, expected " + closer}
		}
		if strings.HasPrefix(src[i:], closer) {
			return toks, i, nil
		}
		// "-}}", "-%}" and "+%}" end a tag; "+}}" does not (the "+" is an operator).
		if (src[i] == '-' || src[i] == '+' && closer == "%}") && strings.HasPrefix(src[i+1:], closer) {
			return toks, i + 1, nil
		}
		c := src[i]
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tName, val: src[i:j], pos: i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
			kind := tInt
			if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				kind = tFloat
				j++
				for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					kind = tFloat
					j = k
					for j < len(src) && src[j] >= '0' && src[j] <= '9' {
						j++
					}
				}
			}
			toks = append(toks, token{kind: kind, val: strings.ReplaceAll(src[i:j], "_", ""), pos: i})
			i = j
		case c == '\'' || c == '"':
			s, j, err := lexString(src, i)
			if err != nil {
				return nil, 0, err
			}
			toks = append(toks, token{kind: tString, val: s, pos: i})
			i = j
		default:
			op := ""
			for _, o := range [...]string{"//", "**", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-/*%~|.,:()[]{}<>=!", rune(c)) {
					return nil, 0, &Error{Pos: i, Msg: fmt.Sprintf("unexpected character %q", c)}
				}
				op = src[i : i+1]
			}
			toks = append(toks, token{kind: tOp, val: op, pos: i})
			i += len(op)
		}
	}
}

// lexString reads a quoted string literal at i with Python's escapes, as Jinja2 does.
func lexString(src string, i int) (string, int, error) {
	q := src[i]
	var b strings.Builder
	j := i + 1
	for j < len(src) {
		c := src[j]
		switch {
		case c == q:
			return b.String(), j + 1, nil
		case c == '\\' && j+1 < len(src):
			j++
			e := src[j]
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case 'a':
				b.WriteByte('\a')
			case '0':
				b.WriteByte(0)
			case '\n':
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if j+n >= len(src) {
					return "", 0, &Error{Pos: j, Msg: "truncated escape"}
				}
				var r rune
				for _, h := range src[j+1 : j+1+n] {
					d := hexVal(h)
					if d < 0 {
						return "", 0, &Error{Pos: j, Msg: "bad escape"}
					}
					r = r<<4 | rune(d)
				}
				b.WriteRune(r)
				j += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
			j++
		default:
			b.WriteByte(c)
			j++
		}
	}
	return "", 0, &Error{Pos: i, Msg: "unterminated string"}
}

func hexVal(c rune) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
