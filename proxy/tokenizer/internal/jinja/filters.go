package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

var globals map[string]any

func init() {
	globals = map[string]any{
		"namespace": builtin(func(r *renderer, args []any, names []string, kargs []any) (any, error) {
			d := NewDict(len(names))
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, &Error{Pos: -1, Msg: "namespace() takes a dict"}
				}
				for _, k := range src.Keys {
					d.Set(k, src.at(k))
				}
			}
			for i, n := range names {
				d.Set(n, kargs[i])
			}
			return &Namespace{d: d}, nil
		}),
		"dict": builtin(func(r *renderer, args []any, names []string, kargs []any) (any, error) {
			d := NewDict(len(names))
			for i, n := range names {
				d.Set(n, kargs[i])
			}
			return d, nil
		}),
		"range": builtin(func(r *renderer, args []any, _ []string, _ []any) (any, error) {
			var b [3]int64
			b[2] = 1
			for i, a := range args {
				n, ok := a.(int64)
				if !ok || i > 2 {
					return nil, &Error{Pos: -1, Msg: "range() takes up to three integers"}
				}
				b[i] = n
			}
			start, stop, step := b[0], b[1], b[2]
			if len(args) == 1 {
				start, stop = 0, b[0]
			}
			if step == 0 {
				return nil, &Error{Pos: -1, Msg: "range() arg 3 must not be zero"}
			}
			var out []any
			for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
				if len(out) >= 100000 { // Jinja2's sandbox MAX_RANGE
					return nil, &Error{Pos: -1, Msg: "range too big"}
				}
				out = append(out, i)
			}
			if out == nil {
				out = []any{}
			}
			return out, nil
		}),
		"raise_exception": builtin(func(r *renderer, args []any, _ []string, _ []any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = pyStr(args[0])
			}
			return nil, &Exception{Msg: msg}
		}),
	}
}

func (r *renderer) applyFilter(e *filterExpr, v any, f *frame) (any, error) {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		x, err := r.eval(a, f)
		if err != nil {
			return nil, err
		}
		args[i] = x
	}
	kw := map[string]any{}
	for i, n := range e.names {
		x, err := r.eval(e.kargs[i], f)
		if err != nil {
			return nil, err
		}
		kw[n] = x
	}
	return r.filter(e.name, v, args, kw)
}

// arg returns positional argument i, else keyword name, else def.
func arg(args []any, kw map[string]any, i int, name string, def any) any {
	if i < len(args) {
		return args[i]
	}
	if v, ok := kw[name]; ok {
		return v
	}
	return def
}

func (r *renderer) filter(name string, v any, args []any, kw map[string]any) (any, error) {
	switch name {
	case "length", "count":
		return length(v)
	case "tojson":
		// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
		// sort_keys=False), which is json.dumps with those arguments.
		o := &jsonOpts{indent: -1, itemSep: ", ", keySep: ": "}
		o.ascii = truthy(arg(args, kw, 0, "ensure_ascii", false))
		switch n := arg(args, kw, 1, "indent", nil).(type) {
		case int64:
			o.indent = int(max(0, min(n, 64)))
			o.indentStr = strings.Repeat(" ", o.indent)
			o.itemSep = ","
		case string:
			o.indent = len(n)
			o.indentStr = n
			o.itemSep = ","
		}
		if seps, ok := untuple(arg(args, kw, 2, "separators", nil)).([]any); ok && len(seps) == 2 {
			o.itemSep, o.keySep = pyStr(seps[0]), pyStr(seps[1])
		}
		o.sortKeys = truthy(arg(args, kw, 3, "sort_keys", false))
		b, err := appendJSON(nil, v, o, 0)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	case "string":
		return pyStr(v), nil
	case "safe":
		return v, nil
	case "upper", "lower", "capitalize", "title", "trim":
		s := pyStr(v)
		switch name {
		case "upper":
			return strings.ToUpper(s), nil
		case "lower":
			return strings.ToLower(s), nil
		case "capitalize":
			return capitalize(s), nil
		case "title":
			return title(s), nil
		}
		if chars, ok := arg(args, kw, 0, "chars", nil).(string); ok {
			return strings.Trim(s, chars), nil
		}
		return strings.TrimFunc(s, isSpacePy), nil
	case "join":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		sep := pyStr(arg(args, kw, 0, "d", ""))
		attr, hasAttr := arg(args, kw, 1, "attribute", nil).(string)
		var b []byte
		for i, x := range items {
			if i > 0 {
				b = append(b, sep...)
			}
			if hasAttr {
				if x, err = getAttr(x, attr); err != nil {
					return nil, err
				}
			}
			b = appendStr(b, x)
		}
		return string(b), nil
	case "first", "last":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: name}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "default", "d":
		def := arg(args, kw, 0, "default_value", "")
		if _, ok := v.(Undefined); ok {
			return def, nil
		}
		if truthy(arg(args, kw, 1, "boolean", false)) && !truthy(v) {
			return def, nil
		}
		return v, nil
	case "items":
		switch x := v.(type) {
		case *Dict:
			return dictItems(x), nil
		case Undefined:
			return []any{}, nil
		}
		return nil, &Error{Pos: -1, Msg: "items filter of a " + typeName(v)}
	case "list":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		return append([]any{}, items...), nil
	case "reverse":
		if s, ok := v.(string); ok {
			rs := []rune(s)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, x := range items {
			out[len(items)-1-i] = x
		}
		return out, nil
	case "replace":
		s := pyStr(v)
		old, _ := arg(args, kw, 0, "old", "").(string)
		nw, _ := arg(args, kw, 1, "new", "").(string)
		n := -1
		if c, ok := arg(args, kw, 2, "count", nil).(int64); ok {
			n = int(c)
		}
		return strings.Replace(s, old, nw, n), nil
	case "int":
		switch x := v.(type) {
		case Undefined:
			return nil, undefinedErr(x)
		case int64:
			return x, nil
		case float64:
			return int64(x), nil
		case bool:
			return b2i(x), nil
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
				return n, nil
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return int64(f), nil
			}
		}
		return arg(args, kw, 0, "default", int64(0)), nil
	case "float":
		switch x := v.(type) {
		case Undefined:
			return nil, undefinedErr(x)
		case bool:
			return float64(b2i(x)), nil
		case int64:
			return float64(x), nil
		case float64:
			return x, nil
		case string:
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return f, nil
			}
		}
		return arg(args, kw, 0, "default", 0.0), nil
	case "abs":
		switch x := v.(type) {
		case bool:
			return b2i(x), nil
		case int64:
			if x < 0 {
				return -x, nil
			}
			return x, nil
		case float64:
			return math.Abs(x), nil
		}
		return nil, &Error{Pos: -1, Msg: "bad operand type for abs()"}
	case "round":
		prec0, _ := arg(args, kw, 0, "precision", int64(0)).(int64)
		switch x := v.(type) {
		case int64:
			if prec0 >= 0 {
				return x, nil
			}
		case bool:
			if prec0 >= 0 {
				return b2i(x), nil
			}
		}
		f, ok := toFloat(v)
		if !ok {
			return nil, &Error{Pos: -1, Msg: "round of a " + typeName(v)}
		}
		prec, _ := arg(args, kw, 0, "precision", int64(0)).(int64)
		p := math.Pow(10, float64(prec))
		return math.RoundToEven(f*p) / p, nil
	case "map", "select", "reject", "selectattr", "rejectattr":
		return r.seqFilter(name, v, args, kw)
	case "unique":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		var out []any
		for _, x := range items {
			switch x.(type) {
			case []any, *Dict:
				return nil, &Error{Pos: -1, Msg: "unhashable type: '" + typeName(x) + "'"}
			}
			dup := false
			for _, y := range out {
				if equal(x, y) {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, x)
			}
		}
		return out, nil
	case "sort", "dictsort":
		var items []any
		if d, ok := v.(*Dict); ok && name == "dictsort" {
			items = dictItems(d)
		} else if name == "dictsort" {
			return nil, &Error{Pos: -1, Msg: "'" + typeName(v) + "' object has no attribute 'items'"}
		} else {
			var err error
			if items, err = r.iterate(v); err != nil {
				return nil, err
			}
			items = append([]any{}, items...)
		}
		attr, _ := arg(args, kw, 2, "attribute", nil).(string)
		rev := truthy(arg(args, kw, 0, "reverse", false))
		var serr error
		sort.SliceStable(items, func(i, j int) bool {
			a, b := items[i], items[j]
			if attr != "" {
				a, _ = getAttr(a, attr)
				b, _ = getAttr(b, attr)
			}
			if name == "dictsort" {
				a, b = untuple(a).([]any)[0], untuple(b).([]any)[0]
			}
			c, err := compare(a, b)
			if err != nil {
				serr = err
			}
			if rev {
				return c > 0
			}
			return c < 0
		})
		return items, serr
	case "indent":
		s, ok := v.(string)
		if !ok {
			if u, isU := v.(Undefined); isU {
				return nil, undefinedErr(u)
			}
			return nil, &Error{Pos: -1, Msg: "indent of a " + typeName(v)}
		}
		width := "    "
		switch w := arg(args, kw, 0, "width", int64(4)).(type) {
		case int64:
			width = strings.Repeat(" ", int(max(0, min(w, 256))))
		case string:
			width = w
		}
		first := truthy(arg(args, kw, 1, "first", false))
		blank := truthy(arg(args, kw, 2, "blank", false))
		lines := strings.Split(s, "\n")
		var b strings.Builder
		for i, l := range lines {
			if i > 0 {
				b.WriteByte('\n')
			}
			if (i > 0 || first) && (blank || strings.TrimFunc(l, isSpacePy) != "") {
				b.WriteString(width)
			}
			b.WriteString(l)
		}
		return b.String(), nil
	case "wordcount":
		return int64(len(strings.FieldsFunc(pyStr(v), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }))), nil
	case "sum":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		var total any = int64(0)
		for _, x := range items {
			if total, err = arith("+", total, x); err != nil {
				return nil, err
			}
		}
		return total, nil
	case "min", "max":
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: name}, nil
		}
		best := items[0]
		for _, x := range items[1:] {
			c, err := compare(x, best)
			if err != nil {
				return nil, err
			}
			if name == "min" && c < 0 || name == "max" && c > 0 {
				best = x
			}
		}
		return best, nil
	case "e", "escape":
		s := pyStr(v)
		s = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;").Replace(s)
		return s, nil
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("no filter named '%s'", name)}
}

func dictItems(d *Dict) []any {
	out := make([]any, len(d.Keys))
	for i, k := range d.Keys {
		out[i] = tuple{k, d.vals[i]}
	}
	return out
}

func (r *renderer) seqFilter(name string, v any, args []any, kw map[string]any) (any, error) {
	if !truthy(v) { // Jinja2 iterates "if seq"
		return []any{}, nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	if name == "map" {
		if attr, ok := kw["attribute"].(string); ok {
			for _, x := range items {
				y, err := getAttr(x, attr)
				if err != nil {
					return nil, err
				}
				if _, undef := y.(Undefined); undef {
					if d, ok := kw["default"]; ok {
						y = d
					}
				}
				out = append(out, y)
			}
			return out, nil
		}
		if len(args) == 0 {
			return nil, &Error{Pos: -1, Msg: "map needs a filter or an attribute"}
		}
		fname := pyStr(args[0])
		for _, x := range items {
			y, err := r.filter(fname, x, args[1:], map[string]any{})
			if err != nil {
				return nil, err
			}
			out = append(out, y)
		}
		return out, nil
	}
	attr := ""
	if name == "selectattr" || name == "rejectattr" {
		if len(args) == 0 {
			return nil, &Error{Pos: -1, Msg: name + " needs an attribute"}
		}
		attr = pyStr(args[0])
		args = args[1:]
	}
	test := ""
	if len(args) > 0 {
		test = pyStr(args[0])
		args = args[1:]
	}
	want := name == "select" || name == "selectattr"
	for _, x := range items {
		y := x
		if attr != "" {
			if y, err = getAttr(x, attr); err != nil {
				return nil, err
			}
		}
		ok := truthy(y)
		if test != "" {
			if ok, err = applyTest(test, y, args); err != nil {
				return nil, err
			}
		}
		if ok == want {
			out = append(out, x)
		}
	}
	return out, nil
}

func length(v any) (any, error) {
	switch x := untuple(v).(type) {
	case string:
		return int64(len([]rune(x))), nil
	case []any:
		return int64(len(x)), nil
	case *Dict:
		return int64(x.Len()), nil
	case Undefined:
		return int64(0), nil
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("object of type '%s' has no len()", typeName(v))}
}

func applyTest(name string, v any, args []any) (bool, error) {
	switch name {
	case "defined":
		_, u := v.(Undefined)
		return !u, nil
	case "undefined":
		_, u := v.(Undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "number":
		switch v.(type) {
		case int64, float64, bool:
			return true, nil
		}
		return false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "sequence":
		switch v.(type) {
		case string, []any, tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "iterable":
		switch v.(type) {
		case string, []any, tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "callable":
		switch v.(type) {
		case *macro, builtin, Func, *boundMethod:
			return true, nil
		}
		return false, nil
	case "odd", "even", "divisibleby":
		// value % 2 == 1, value % 2 == 0, value % num == 0, with Python's numbers.
		d := any(int64(2))
		if name == "divisibleby" {
			if len(args) != 1 {
				return false, &Error{Pos: -1, Msg: "divisibleby takes one argument"}
			}
			d = args[0]
		}
		m, err := arith("%", v, d)
		if err != nil {
			return false, err
		}
		if name == "odd" {
			return equal(m, int64(1)), nil
		}
		return equal(m, int64(0)), nil
	case "lower", "upper":
		s, ok := v.(string)
		if !ok {
			return false, nil
		}
		if name == "lower" {
			return s == strings.ToLower(s), nil
		}
		return s == strings.ToUpper(s), nil
	case "eq", "equalto", "==", "ne", "!=", "sameas", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in":
		if len(args) != 1 {
			return false, &Error{Pos: -1, Msg: "test " + name + " takes one argument"}
		}
		a := args[0]
		switch name {
		case "eq", "equalto", "==":
			return equal(v, a), nil
		case "ne", "!=":
			return !equal(v, a), nil
		case "sameas":
			switch v.(type) {
			case nil, bool:
				return v == a, nil
			}
			return equal(v, a) && typeName(v) == typeName(a), nil
		case "in":
			return contains(a, v)
		}
		c, err := compare(v, a)
		if err != nil {
			return false, err
		}
		switch name {
		case "lt", "<":
			return c < 0, nil
		case "le", "<=":
			return c <= 0, nil
		case "gt", ">":
			return c > 0, nil
		}
		return c >= 0, nil
	}
	return false, &Error{Pos: -1, Msg: fmt.Sprintf("no test named '%s'", name)}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	rs := []rune(strings.ToLower(s))
	rs[0] = unicode.ToUpper(rs[0])
	return string(rs)
}

// title is Jinja2's do_title: the text split before runs of "-", whitespace, "(", "{",
// "[" and "<", each piece's first character upper-cased and the rest lower-cased.
func title(s string) string {
	sep := func(r rune) bool { return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || isSpacePy(r) }
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); {
		j := i
		isSep := sep(rs[i])
		for j < len(rs) && sep(rs[j]) == isSep {
			j++
		}
		piece := rs[i:j]
		b.WriteString(strings.ToUpper(string(piece[0])))
		b.WriteString(strings.ToLower(string(piece[1:])))
		i = j
	}
	return b.String()
}

func callMethod(m *boundMethod, args []any, names []string, kargs []any) (any, error) {
	m.recv = untuple(m.recv)
	kw := map[string]any{}
	for i, n := range names {
		kw[n] = kargs[i]
	}
	switch x := m.recv.(type) {
	case *Dict:
		switch m.name {
		case "items":
			return dictItems(x), nil
		case "keys":
			out := make([]any, len(x.Keys))
			for i, k := range x.Keys {
				out[i] = k
			}
			return out, nil
		case "values":
			out := make([]any, len(x.Keys))
			copy(out, x.vals)
			return out, nil
		case "get":
			if len(args) == 0 {
				return nil, &Error{Pos: -1, Msg: "get expected at least 1 argument"}
			}
			if k, ok := args[0].(string); ok {
				if v, ok := x.Get(k); ok {
					return v, nil
				}
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		}
	case string:
		return strMethod(x, m.name, args, kw)
	case []any:
		switch m.name {
		case "index":
			for i, y := range x {
				if len(args) > 0 && equal(y, args[0]) {
					return int64(i), nil
				}
			}
			return nil, &Error{Pos: -1, Msg: "value is not in list"}
		case "count":
			n := int64(0)
			for _, y := range x {
				if len(args) > 0 && equal(y, args[0]) {
					n++
				}
			}
			return n, nil
		}
	case *loopObj:
		if len(args) == 0 {
			return nil, &Error{Pos: -1, Msg: "no items for cycling given"}
		}
		return args[x.index0%len(args)], nil
	}
	return nil, &Error{Pos: -1, Msg: "unsupported method " + m.name}
}

func strMethod(s, name string, args []any, kw map[string]any) (any, error) {
	sarg := func(i int, n string) (string, bool, error) {
		v := arg(args, kw, i, n, nil)
		if v == nil {
			return "", false, nil
		}
		a, ok := v.(string)
		if !ok {
			return "", false, &Error{Pos: -1, Msg: fmt.Sprintf("%s() argument must be str, not %s", name, typeName(v))}
		}
		return a, true, nil
	}
	switch name {
	case "startswith", "endswith":
		v := untuple(arg(args, kw, 0, "prefix", nil))
		var cands []any
		switch p := v.(type) {
		case string:
			cands = []any{p}
		case []any:
			cands = p
		default:
			return nil, &Error{Pos: -1, Msg: name + " first arg must be str or a tuple of str, not " + typeName(v)}
		}
		for _, c := range cands {
			p, ok := c.(string)
			if !ok {
				return nil, &Error{Pos: -1, Msg: "tuple for " + name + " must only contain str"}
			}
			if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
				return true, nil
			}
		}
		return false, nil
	case "split", "rsplit":
		sep, hasSep, err := sarg(0, "sep")
		if err != nil {
			return nil, err
		}
		n := -1
		if m, ok := arg(args, kw, 1, "maxsplit", nil).(int64); ok {
			n = int(m)
		}
		var parts []string
		switch {
		case hasSep && sep == "":
			return nil, &Error{Pos: -1, Msg: "empty separator"}
		case hasSep && name == "split":
			if n < 0 {
				parts = strings.Split(s, sep)
			} else {
				parts = strings.SplitN(s, sep, n+1)
			}
		case hasSep:
			parts = rsplit(s, sep, n)
		default:
			parts = splitSpace(s, n, name == "rsplit")
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	case "strip", "lstrip", "rstrip":
		chars, has, err := sarg(0, "chars")
		if err != nil {
			return nil, err
		}
		cut := isSpacePy
		if has {
			cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
		}
		switch name {
		case "strip":
			return strings.TrimFunc(s, cut), nil
		case "lstrip":
			return strings.TrimLeftFunc(s, cut), nil
		}
		return strings.TrimRightFunc(s, cut), nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower":
		return strings.ToLower(s), nil
	case "title":
		return title(s), nil
	case "capitalize":
		return capitalize(s), nil
	case "replace":
		old, _, err := sarg(0, "old")
		if err != nil {
			return nil, err
		}
		nw, _, err := sarg(1, "new")
		if err != nil {
			return nil, err
		}
		n := -1
		if c, ok := arg(args, kw, 2, "count", nil).(int64); ok {
			n = int(c)
		}
		return strings.Replace(s, old, nw, n), nil
	case "find", "rfind", "index", "count":
		sub, _, err := sarg(0, "sub")
		if err != nil {
			return nil, err
		}
		switch name {
		case "count":
			if sub == "" {
				return int64(len([]rune(s)) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		case "rfind":
			i := strings.LastIndex(s, sub)
			if i < 0 {
				return int64(-1), nil
			}
			return int64(len([]rune(s[:i]))), nil
		}
		i := strings.Index(s, sub)
		if i < 0 {
			if name == "index" {
				return nil, &Error{Pos: -1, Msg: "substring not found"}
			}
			return int64(-1), nil
		}
		return int64(len([]rune(s[:i]))), nil
	case "join":
		items, ok := untuple(arg(args, kw, 0, "iterable", nil)).([]any)
		if !ok {
			return nil, &Error{Pos: -1, Msg: "join() takes a list"}
		}
		var b []byte
		for i, x := range items {
			xs, ok := x.(string)
			if !ok {
				return nil, &Error{Pos: -1, Msg: "sequence item: expected str instance"}
			}
			if i > 0 {
				b = append(b, s...)
			}
			b = append(b, xs...)
		}
		return string(b), nil
	case "splitlines":
		lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		out := make([]any, len(lines))
		for i, l := range lines {
			out[i] = l
		}
		return out, nil
	case "isdigit", "isalpha", "isspace", "isalnum", "islower", "isupper":
		if s == "" {
			return false, nil
		}
		switch name {
		case "islower":
			return strings.ToLower(s) == s && strings.ToUpper(s) != s, nil
		case "isupper":
			return strings.ToUpper(s) == s && strings.ToLower(s) != s, nil
		}
		for _, r := range s {
			var ok bool
			switch name {
			case "isdigit":
				ok = unicode.IsDigit(r)
			case "isalpha":
				ok = unicode.IsLetter(r)
			case "isspace":
				ok = isSpacePy(r)
			case "isalnum":
				ok = unicode.IsLetter(r) || unicode.IsDigit(r)
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	}
	return nil, &Error{Pos: -1, Msg: "str has no method " + name}
}

func rsplit(s, sep string, n int) []string {
	if n < 0 {
		return strings.Split(s, sep)
	}
	var out []string
	for n > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		n--
	}
	out = append(out, s)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// splitSpace is Python's str.split() / rsplit() without a separator.
func splitSpace(s string, n int, fromRight bool) []string {
	if n < 0 {
		return strings.FieldsFunc(s, isSpacePy)
	}
	fields := []string{}
	if !fromRight {
		rest := strings.TrimLeftFunc(s, isSpacePy)
		for rest != "" && n > 0 {
			i := strings.IndexFunc(rest, isSpacePy)
			if i < 0 {
				break
			}
			fields = append(fields, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], isSpacePy)
			n--
		}
		if rest != "" {
			fields = append(fields, rest)
		}
		return fields
	}
	rest := strings.TrimRightFunc(s, isSpacePy)
	for rest != "" && n > 0 {
		i := strings.LastIndexFunc(rest, isSpacePy)
		if i < 0 {
			break
		}
		_, sz := utf8DecodeAt(rest, i)
		fields = append(fields, rest[i+sz:])
		rest = strings.TrimRightFunc(rest[:i], isSpacePy)
		n--
	}
	if rest != "" {
		fields = append(fields, rest)
	}
	for i, j := 0, len(fields)-1; i < j; i, j = i+1, j-1 {
		fields[i], fields[j] = fields[j], fields[i]
	}
	return fields
}

func utf8DecodeAt(s string, i int) (rune, int) {
	for j, r := range s[i:] {
		_ = j
		return r, len(string(r))
	}
	return 0, 1
}
