package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are Go values standing for Python's: nil (None), bool, int64, float64, string,
// []any (list), tuple, *Dict (dict, keys in insertion order), Undefined, *Namespace,
// and callables (*macro, builtin).

// Dict is a dict with string keys kept in insertion order, as Python's dicts are. Small
// dicts (the messages and schemas of chat templates) are searched linearly; a map is
// built past dictMapAt keys.
type Dict struct {
	Keys []string
	vals []any
	m    map[string]int // index into Keys and vals; nil while small
}

const dictMapAt = 12

// NewDict returns an empty Dict with room for n keys.
func NewDict(n int) *Dict { return &Dict{Keys: make([]string, 0, n), vals: make([]any, 0, n)} }

func (d *Dict) index(k string) int {
	if d.m != nil {
		if i, ok := d.m[k]; ok {
			return i
		}
		return -1
	}
	for i, key := range d.Keys {
		if key == k {
			return i
		}
	}
	return -1
}

// Set sets key k to v, appending k to the order when it is new.
func (d *Dict) Set(k string, v any) {
	if i := d.index(k); i >= 0 {
		d.vals[i] = v
		return
	}
	d.Keys = append(d.Keys, k)
	d.vals = append(d.vals, v)
	if d.m != nil {
		d.m[k] = len(d.Keys) - 1
	} else if len(d.Keys) > dictMapAt {
		d.m = make(map[string]int, len(d.Keys))
		for i, key := range d.Keys {
			d.m[key] = i
		}
	}
}

// Get returns the value of key k.
func (d *Dict) Get(k string) (any, bool) {
	if i := d.index(k); i >= 0 {
		return d.vals[i], true
	}
	return nil, false
}

// at returns the value of key k, nil when absent.
func (d *Dict) at(k string) any {
	v, _ := d.Get(k)
	return v
}

// Len returns the number of keys.
func (d *Dict) Len() int { return len(d.Keys) }

// Undefined is the value of a name or attribute that does not exist (Jinja2's default
// Undefined: it prints as nothing, is false, iterates as empty, and fails when an
// attribute is taken of it or it is used in arithmetic).
type Undefined struct{ Name string }

// Namespace is the object namespace() returns, whose attributes set can assign.
type Namespace struct{ d *Dict }

// tuple is a Python tuple: it prints as (a, b) and is never equal to a list; elsewhere it
// behaves as a list.
type tuple []any

// untuple returns a tuple's items as a list, and any other value as it is.
func untuple(v any) any {
	if t, ok := v.(tuple); ok {
		return []any(t)
	}
	return v
}

type builtin func(r *renderer, args []any, names []string, kargs []any) (any, error)

// boundMethod is a method of a value, such as a string's startswith.
type boundMethod struct {
	recv any
	name string
}

func truthy(v any) bool {
	switch x := untuple(v).(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case Undefined:
		return false
	}
	return true
}

// pyStr returns str(v) as Python prints it.
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case Undefined:
		return ""
	}
	var b []byte
	b = appendRepr(b, v)
	return string(b)
}

func appendStr(b []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return append(b, x...)
	case Undefined:
		return b
	case int64:
		return strconv.AppendInt(b, x, 10)
	}
	return appendRepr(b, v)
}

// appendRepr appends repr(v) as Python writes it.
func appendRepr(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "None"...)
	case bool:
		if x {
			return append(b, "True"...)
		}
		return append(b, "False"...)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float64:
		return appendPyFloat(b, x)
	case string:
		return appendPyStrRepr(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendRepr(b, e)
		}
		return append(b, ']')
	case tuple:
		b = append(b, '(')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendRepr(b, e)
		}
		if len(x) == 1 {
			b = append(b, ',')
		}
		return append(b, ')')
	case *Dict:
		b = append(b, '{')
		for i, k := range x.Keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyStrRepr(b, k)
			b = append(b, ": "...)
			b = appendRepr(b, x.at(k))
		}
		return append(b, '}')
	case Undefined:
		return append(b, "Undefined"...)
	case *Namespace:
		return append(b, "<Namespace>"...)
	}
	return append(b, "<object>"...)
}

// appendPyFloat appends a float as Python's repr does.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	case math.IsNaN(f):
		return append(b, "nan"...)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exps, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		b = append(b, mant...)
		b = append(b, 'e')
		if exp < 0 {
			b = append(b, '-')
			exp = -exp
		} else {
			b = append(b, '+')
		}
		if exp < 10 {
			b = append(b, '0')
		}
		return strconv.AppendInt(b, int64(exp), 10)
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	b = append(b, s...)
	if !strings.ContainsAny(s, ".") {
		b = append(b, ".0"...)
	}
	return b
}

func appendPyStrRepr(b []byte, s string) []byte {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b = append(b, q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r < 0x20 || r == 0x7f:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[r>>4], "0123456789abcdef"[r&15])
		case r < 0x80 || isPrintablePy(r):
			b = utf8.AppendRune(b, r)
		case r < 0x100:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[r>>4], "0123456789abcdef"[r&15])
		case r < 0x10000:
			b = append(b, `\u`...)
			b = appendHex(b, uint32(r), 4)
		default:
			b = append(b, `\U`...)
			b = appendHex(b, uint32(r), 8)
		}
	}
	return append(b, q)
}

func isPrintablePy(r rune) bool {
	return unicode.IsPrint(r) && r != 0xad
}

func appendHex(b []byte, v uint32, n int) []byte {
	for i := n - 1; i >= 0; i-- {
		b = append(b, "0123456789abcdef"[(v>>(4*uint(i)))&15])
	}
	return b
}

// isSpacePy reports whether r is whitespace as Python's str.isspace sees it.
func isSpacePy(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

// jsonOpts are the arguments of transformers' tojson filter.
type jsonOpts struct {
	indent    int // -1: none
	indentStr string
	itemSep   string
	keySep    string
	sortKeys  bool
	ascii     bool
}

// appendJSON appends json.dumps(v, ...) as Python writes it.
func appendJSON(b []byte, v any, o *jsonOpts, level int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case float64:
		switch {
		case math.IsInf(x, 1):
			return append(b, "Infinity"...), nil
		case math.IsInf(x, -1):
			return append(b, "-Infinity"...), nil
		case math.IsNaN(x):
			return append(b, "NaN"...), nil
		}
		return appendPyFloat(b, x), nil
	case string:
		return appendJSONString(b, x, o.ascii), nil
	case []any:
		if len(x) == 0 {
			return append(b, "[]"...), nil
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, o.itemSep...)
			}
			b = jsonNewline(b, o, level+1)
			var err error
			if b, err = appendJSON(b, e, o, level+1); err != nil {
				return nil, err
			}
		}
		b = jsonNewline(b, o, level)
		return append(b, ']'), nil
	case *Dict:
		if x.Len() == 0 {
			return append(b, "{}"...), nil
		}
		keys := x.Keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sortStrings(keys)
		}
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, o.itemSep...)
			}
			b = jsonNewline(b, o, level+1)
			b = appendJSONString(b, k, o.ascii)
			b = append(b, o.keySep...)
			var err error
			if b, err = appendJSON(b, x.at(k), o, level+1); err != nil {
				return nil, err
			}
		}
		b = jsonNewline(b, o, level)
		return append(b, '}'), nil
	case *Namespace:
		return appendJSON(b, x.d, o, level)
	case tuple:
		return appendJSON(b, []any(x), o, level)
	}
	return nil, &Error{Pos: -1, Msg: "tojson: object of type " + typeName(v) + " is not JSON serializable"}
}

func jsonNewline(b []byte, o *jsonOpts, level int) []byte {
	if o.indent < 0 {
		return b
	}
	b = append(b, '\n')
	for range level {
		b = append(b, o.indentStr...)
	}
	return b
}

// appendJSONString writes s as Python's json module does: '"', '\\' and control
// characters escaped, the rest kept (or \u-escaped when ascii is set).
func appendJSONString(b []byte, s string, ascii bool) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch r {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		default:
			switch {
			case r < 0x20 || ascii && r >= 0x7f && r < 0x10000:
				b = append(b, `\u`...)
				b = appendHex(b, uint32(r), 4)
			case ascii && r >= 0x10000:
				r -= 0x10000
				b = append(b, `\u`...)
				b = appendHex(b, uint32(0xd800+(r>>10)), 4)
				b = append(b, `\u`...)
				b = appendHex(b, uint32(0xdc00+(r&0x3ff)), 4)
			default:
				b = utf8.AppendRune(b, r)
			}
		}
	}
	return append(b, '"')
}

func sortStrings(s []string) {
	// Python sorts str by code point, which is byte order in UTF-8.
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case Undefined:
		return "Undefined"
	case *Namespace:
		return "Namespace"
	}
	return "function"
}

// ParseJSON decodes one JSON value into template values: objects become *Dict in the
// order of their keys, integers int64 (floats when they overflow), other numbers float64.
// It runs in O(len(data)).
func ParseJSON(data []byte) (any, error) {
	d := jsonDecoder{b: data}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.err("trailing data")
	}
	return v, nil
}

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) err(msg string) error {
	return &Error{Pos: -1, Msg: "json at byte " + strconv.Itoa(d.i) + ": " + msg}
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if depth > 512 {
		return nil, d.err("nesting too deep")
	}
	if d.i >= len(d.b) {
		return nil, d.err("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		obj := NewDict(4)
		d.space()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return obj, nil
		}
		for {
			d.space()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return nil, d.err("expected a key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.space()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return nil, d.err("expected ':'")
			}
			d.i++
			d.space()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj.Set(k, v)
			d.space()
			if d.i < len(d.b) && d.b[d.i] == ',' {
				d.i++
				continue
			}
			if d.i < len(d.b) && d.b[d.i] == '}' {
				d.i++
				return obj, nil
			}
			return nil, d.err("expected ',' or '}'")
		}
	case c == '[':
		d.i++
		list := []any{}
		d.space()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return list, nil
		}
		for {
			d.space()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			d.space()
			if d.i < len(d.b) && d.b[d.i] == ',' {
				d.i++
				continue
			}
			if d.i < len(d.b) && d.b[d.i] == ']' {
				d.i++
				return list, nil
			}
			return nil, d.err("expected ',' or ']'")
		}
	case c == '"':
		return d.str()
	case c == 't' && strings.HasPrefix(string(d.b[d.i:min(d.i+4, len(d.b))]), "true"):
		d.i += 4
		return true, nil
	case c == 'f' && strings.HasPrefix(string(d.b[d.i:min(d.i+5, len(d.b))]), "false"):
		d.i += 5
		return false, nil
	case c == 'n' && strings.HasPrefix(string(d.b[d.i:min(d.i+4, len(d.b))]), "null"):
		d.i += 4
		return nil, nil
	case c == '-' || c >= '0' && c <= '9':
		s := d.i
		isFloat := false
		if d.b[d.i] == '-' {
			d.i++
		}
		for d.i < len(d.b) {
			c := d.b[d.i]
			if c >= '0' && c <= '9' {
			} else if c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
				isFloat = true
			} else {
				break
			}
			d.i++
		}
		t := string(d.b[s:d.i])
		if !isFloat {
			if n, err := strconv.ParseInt(t, 10, 64); err == nil {
				return n, nil
			}
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, d.err("bad number")
		}
		return f, nil
	}
	return nil, d.err("unexpected character")
}

func (d *jsonDecoder) str() (string, error) {
	d.i++ // opening quote
	s := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' && d.b[d.i] != '\\' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '"' {
		d.i++
		return string(d.b[s : d.i-1]), nil
	}
	buf := append([]byte(nil), d.b[s:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), nil
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return "", d.err("bad escape")
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.err("bad \\u escape")
				}
				if r >= 0xd800 && r < 0xdc00 && d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					if r2, ok := d.hex4(); ok && r2 >= 0xdc00 && r2 < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
					} else {
						d.i = save
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", d.err("bad escape")
			}
		default:
			buf = append(buf, c)
			d.i++
		}
	}
	return "", d.err("unterminated string")
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		h := hexVal(rune(c))
		if h < 0 {
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	d.i += 4
	return r, true
}

// AppendJSON appends v as Python's json.dumps(v, ensure_ascii=False) writes it.
func AppendJSON(dst []byte, v any) ([]byte, error) {
	return appendJSON(dst, v, &jsonOpts{indent: -1, itemSep: ", ", keySep: ": "}, 0)
}

// Str returns str(v) as Python writes it (repr for containers).
func Str(v any) string { return pyStr(v) }

// Truthy reports whether Python's bool(v) is true.
func Truthy(v any) bool { return truthy(v) }
