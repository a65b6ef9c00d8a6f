package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Template is a parsed template. It is immutable: any number of goroutines may render it
// at once.
type Template struct {
	body []node
}

// Parse parses a template written in the subset of Jinja2 that chat templates use, with
// the whitespace rules of trim_blocks and lstrip_blocks. It runs in O(len(src)) and never
// panics; a template nested deeper than 256 levels is an error.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Limits bound a render. The zero value means the defaults.
type Limits struct {
	Steps  int // statements and loop iterations executed; 0: 1<<24
	Output int // bytes written; 0: 1<<28
	Calls  int // macro call depth; 0: 64
}

// Func is a function the template can call, given its positional and keyword arguments.
type Func func(args []any, kwargs map[string]any) (any, error)

// Exception is the error raise_exception(msg) returns.
type Exception struct{ Msg string }

func (e *Exception) Error() string { return "jinja: template raised: " + e.Msg }

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type frame struct {
	vars   map[string]any
	parent *frame
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (f *frame) set(name string, v any) {
	if f.vars == nil {
		f.vars = make(map[string]any, 4)
	}
	f.vars[name] = v
}

type renderer struct {
	out    []byte
	lim    Limits
	steps  int
	calls  int
	caller *macro
}

type macro struct {
	n      *macroNode
	root   *frame
	caller []node // the body of a call block, for caller()
	cframe *frame
}

type loopObj struct {
	index0 int
	items  []any
}

// Render appends the template's output for vars to dst. Values in vars are those
// documented for the package (nil, bool, int64, float64, string, []any, *Dict, Func).
// Render does not retain vars or dst.
func (t *Template) Render(dst []byte, vars map[string]any, lim Limits) ([]byte, error) {
	if lim.Steps == 0 {
		lim.Steps = 1 << 24
	}
	if lim.Output == 0 {
		lim.Output = 1 << 28
	}
	if lim.Calls == 0 {
		lim.Calls = 64
	}
	r := &renderer{out: dst, lim: lim}
	root := &frame{vars: make(map[string]any, 8), parent: &frame{vars: vars}}
	err := r.exec(t.body, root)
	if err == errBreak || err == errContinue {
		err = &Error{Pos: -1, Msg: "break or continue outside a loop"}
	}
	return r.out, err
}

func (r *renderer) step() error {
	r.steps++
	if r.steps > r.lim.Steps {
		return &Error{Pos: -1, Msg: "render exceeds its step limit"}
	}
	if len(r.out) > r.lim.Output {
		return &Error{Pos: -1, Msg: "render exceeds its output limit"}
	}
	return nil
}

func (r *renderer) exec(body []node, f *frame) error {
	for _, n := range body {
		if err := r.step(); err != nil {
			return err
		}
		switch n := n.(type) {
		case *dataNode:
			r.out = append(r.out, n.text...)
		case *outputNode:
			if n.concat != nil {
				if err := r.outputConcat(n.concat, f); err != nil {
					return err
				}
				continue
			}
			v, err := r.eval(n.e, f)
			if err != nil {
				return err
			}
			r.out = appendStr(r.out, v)
		case *ifNode:
			done := false
			for i, c := range n.conds {
				v, err := r.eval(c, f)
				if err != nil {
					return err
				}
				if truthy(v) {
					if err := r.exec(n.bodies[i], f); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done && len(n.bodies) > len(n.conds) {
				if err := r.exec(n.bodies[len(n.conds)], f); err != nil {
					return err
				}
			}
		case *forNode:
			if err := r.execFor(n, f); err != nil {
				return err
			}
		case *setNode:
			if err := r.execSet(n, f); err != nil {
				return err
			}
		case *macroNode:
			f.set(n.name, &macro{n: n, root: f})
		case *callBlockNode:
			c := n.call.(*callExpr)
			fn, err := r.eval(c.fn, f)
			if err != nil {
				return err
			}
			m, ok := fn.(*macro)
			if !ok {
				return &Error{Pos: -1, Msg: "call block of something that is not a macro"}
			}
			withCaller := &macro{n: m.n, root: m.root, caller: n.body, cframe: f}
			v, err := r.callValue(withCaller, c, f)
			if err != nil {
				return err
			}
			r.out = appendStr(r.out, v)
		case *breakNode:
			return errBreak
		case *continueNode:
			return errContinue
		}
	}
	return nil
}

// outputConcat writes a + b + ...: when every operand is a string, each is appended to
// the output as it is, without building the intermediate strings; otherwise the
// operands are added left to right, as Python does.
func (r *renderer) outputConcat(ops []expr, f *frame) error {
	var buf [8]any
	vals := buf[:0]
	strs := true
	for _, e := range ops {
		v, err := r.eval(e, f)
		if err != nil {
			return err
		}
		_, isStr := v.(string)
		strs = strs && isStr
		vals = append(vals, v)
	}
	if strs {
		for _, v := range vals {
			r.out = append(r.out, v.(string)...)
		}
		return nil
	}
	acc := vals[0]
	for _, v := range vals[1:] {
		var err error
		if acc, err = arith("+", acc, v); err != nil {
			return err
		}
		if acc, err = r.bounded(acc); err != nil {
			return err
		}
	}
	r.out = appendStr(r.out, acc)
	return nil
}

func (r *renderer) execSet(n *setNode, f *frame) error {
	var v any
	if n.body != nil {
		save := r.out
		r.out = nil
		if err := r.exec(n.body, f); err != nil {
			r.out = save
			return err
		}
		v = string(r.out)
		r.out = save
		if n.targets[0] == "\x00filter" {
			fe := n.value.(*filterExpr)
			out, err := r.applyFilter(fe, v, f)
			if err != nil {
				return err
			}
			r.out = appendStr(r.out, out)
			return nil
		}
	} else {
		var err error
		if v, err = r.eval(n.value, f); err != nil {
			return err
		}
	}
	if n.attr != "" {
		obj, _ := f.lookup(n.targets[0])
		ns, ok := obj.(*Namespace)
		if !ok {
			return &Error{Pos: -1, Msg: "cannot assign attribute on non-namespace object"}
		}
		ns.d.Set(n.attr, v)
		return nil
	}
	if len(n.targets) == 1 {
		f.set(n.targets[0], v)
		return nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(n.targets) {
		return &Error{Pos: -1, Msg: fmt.Sprintf("cannot unpack %d values into %d names", len(items), len(n.targets))}
	}
	for i, t := range n.targets {
		f.set(t, items[i])
	}
	return nil
}

func (r *renderer) execFor(n *forNode, f *frame) error {
	it, err := r.eval(n.iter, f)
	if err != nil {
		return err
	}
	items, err := r.iterate(it)
	if err != nil {
		return err
	}
	lf := &frame{parent: f, vars: make(map[string]any, 4)}
	if n.filter != nil {
		kept := make([]any, 0, len(items))
		for _, x := range items {
			if err := r.bind(lf, n.targets, x); err != nil {
				return err
			}
			v, err := r.eval(n.filter, lf)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, x)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if n.els != nil {
			return r.exec(n.els, f)
		}
		return nil
	}
	loop := &loopObj{items: items}
	lf.vars["loop"] = loop
	for i, x := range items {
		if err := r.step(); err != nil {
			return err
		}
		loop.index0 = i
		// Each iteration starts from the enclosing scope: what the body set in the
		// previous one is gone (Jinja2 resolves such names from the outer scope anew).
		clear(lf.vars)
		lf.vars["loop"] = loop
		if err := r.bind(lf, n.targets, x); err != nil {
			return err
		}
		err := r.exec(n.body, lf)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (r *renderer) bind(f *frame, targets []string, x any) error {
	if len(targets) == 1 {
		f.vars[targets[0]] = x
		return nil
	}
	parts, err := r.iterate(x)
	if err != nil {
		return err
	}
	if len(parts) != len(targets) {
		return &Error{Pos: -1, Msg: fmt.Sprintf("cannot unpack %d values into %d names", len(parts), len(targets))}
	}
	for i, t := range targets {
		f.vars[t] = parts[i]
	}
	return nil
}

// iterate returns the items iterating v yields: a list's elements, a dict's keys, a
// string's characters; nothing for Undefined.
func (r *renderer) iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *Dict:
		out := make([]any, len(x.Keys))
		for i, k := range x.Keys {
			out[i] = k
		}
		return out, nil
	case string:
		out := make([]any, 0, len(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Namespace:
		return nil, &Error{Pos: -1, Msg: "'Namespace' object is not iterable"}
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("'%s' object is not iterable", typeName(v))}
}

func undefinedErr(u Undefined) error {
	return &Error{Pos: -1, Msg: fmt.Sprintf("'%s' is undefined", u.Name)}
}

func (r *renderer) eval(e expr, f *frame) (any, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := f.lookup(e.name); ok {
			return v, nil
		}
		if b, ok := globals[e.name]; ok {
			return b, nil
		}
		return Undefined{Name: e.name}, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, e.name)
	case *itemExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(e.key, f)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return r.evalSlice(e, f)
	case *listExpr:
		out := make([]any, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, f)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *tupleExpr:
		out := make(tuple, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, f)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
		d := NewDict(len(e.keys))
		for i := range e.keys {
			k, err := r.eval(e.keys[i], f)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, &Error{Pos: -1, Msg: "dict keys must be strings"}
			}
			v, err := r.eval(e.vals[i], f)
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	case *callExpr:
		fn, err := r.eval(e.fn, f)
		if err != nil {
			return nil, err
		}
		return r.callValue(fn, e, f)
	case *filterExpr:
		v, err := r.eval(e.arg, f)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v, f)
	case *testExpr:
		v, err := r.eval(e.arg, f)
		if err != nil {
			return nil, err
		}
		args := make([]any, len(e.args))
		for i, a := range e.args {
			if args[i], err = r.eval(a, f); err != nil {
				return nil, err
			}
		}
		ok, err := applyTest(e.name, v, args)
		if err != nil {
			return nil, err
		}
		return ok != e.negate, nil
	case *condExpr:
		c, err := r.eval(e.cond, f)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.yes, f)
		}
		if e.no == nil {
			return Undefined{Name: "inline if"}, nil
		}
		return r.eval(e.no, f)
	case *unaryExpr:
		x, err := r.eval(e.x, f)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch n := x.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			case bool:
				return -b2i(n), nil
			}
		case "+":
			switch x.(type) {
			case int64, float64:
				return x, nil
			case bool:
				return b2i(x.(bool)), nil
			}
		}
		if u, ok := x.(Undefined); ok {
			return nil, undefinedErr(u)
		}
		return nil, &Error{Pos: -1, Msg: "bad operand type for unary " + e.op + ": " + typeName(x)}
	case *binExpr:
		return r.evalBin(e, f)
	}
	return nil, &Error{Pos: -1, Msg: "unknown expression"}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (r *renderer) evalBin(e *binExpr, f *frame) (any, error) {
	l, err := r.eval(e.l, f)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r, f)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r, f)
	}
	rv, err := r.eval(e.r, f)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "==":
		return equal(l, rv), nil
	case "!=":
		return !equal(l, rv), nil
	case "<", "<=", ">", ">=":
		c, err := compare(l, rv)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	case "in", "notin":
		ok, err := contains(rv, l)
		if err != nil {
			return nil, err
		}
		return ok == (e.op == "in"), nil
	case "~":
		b := appendStr(nil, l)
		b = appendStr(b, rv)
		return r.bounded(string(b))
	}
	v, err := arith(e.op, l, rv)
	if err != nil {
		return nil, err
	}
	return r.bounded(v)
}

// bounded fails when v, a string or list an operator built, is larger than the output
// limit: templates that double a value in a loop stop there.
func (r *renderer) bounded(v any) (any, error) {
	switch x := untuple(v).(type) {
	case string:
		if len(x) > r.lim.Output {
			return nil, &Error{Pos: -1, Msg: "string exceeds the output limit"}
		}
	case []any:
		if len(x) > r.lim.Output/8 {
			return nil, &Error{Pos: -1, Msg: "list exceeds the output limit"}
		}
	}
	return v, nil
}

func arith(op string, l, r any) (any, error) {
	if u, ok := l.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if b, ok := l.(bool); ok {
		l = b2i(b)
	}
	if b, ok := r.(bool); ok {
		r = b2i(b)
	}
	if lt, ok := l.(tuple); ok {
		switch rt := r.(type) {
		case tuple:
			if op == "+" {
				return append(append(tuple{}, lt...), rt...), nil
			}
		case int64:
			if op == "*" {
				v, err := arith("*", []any(lt), rt)
				if err != nil {
					return nil, err
				}
				return tuple(v.([]any)), nil
			}
		}
		return nil, &Error{Pos: -1, Msg: fmt.Sprintf("unsupported operand types for %s: 'tuple' and '%s'", op, typeName(r))}
	}
	if _, ok := r.(tuple); ok {
		return nil, &Error{Pos: -1, Msg: fmt.Sprintf("unsupported operand types for %s: '%s' and 'tuple'", op, typeName(l))}
	}
	switch op {
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				return x + y, nil
			}
		case []any:
			if y, ok := r.([]any); ok {
				out := make([]any, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
		}
	case "*":
		if xs, ok := l.([]any); ok {
			if n, ok := r.(int64); ok {
				var out []any
				for range max(0, min(n, 1<<20/int64(max(1, len(xs))))) {
					out = append(out, xs...)
				}
				if out == nil {
					out = []any{}
				}
				return out, nil
			}
		}
		if s, ok := l.(string); ok {
			if n, ok := r.(int64); ok {
				return strings.Repeat(s, int(max(0, min(n, 1<<20)))), nil
			}
		}
		if s, ok := r.(string); ok {
			if n, ok := l.(int64); ok {
				return strings.Repeat(s, int(max(0, min(n, 1<<20)))), nil
			}
		}
	}
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "/":
			if ri == 0 {
				return nil, &Error{Pos: -1, Msg: "division by zero"}
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, &Error{Pos: -1, Msg: "integer division or modulo by zero"}
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if ri == 0 {
				return nil, &Error{Pos: -1, Msg: "integer division or modulo by zero"}
			}
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, nil
		case "**":
			if ri >= 0 {
				p := int64(1)
				for range min(ri, 64) {
					p *= li
				}
				return p, nil
			}
			return math.Pow(float64(li), float64(ri)), nil
		}
	}
	lf, lok := toFloat(l)
	rf, rok := toFloat(r)
	if lok && rok {
		switch op {
		case "+":
			return lf + rf, nil
		case "-":
			return lf - rf, nil
		case "*":
			return lf * rf, nil
		case "/":
			if rf == 0 {
				return nil, &Error{Pos: -1, Msg: "division by zero"}
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, &Error{Pos: -1, Msg: "division by zero"}
			}
			return math.Floor(lf / rf), nil
		case "%":
			if rf == 0 {
				return nil, &Error{Pos: -1, Msg: "modulo by zero"}
			}
			m := math.Mod(lf, rf)
			if m != 0 && (m < 0) != (rf < 0) {
				m += rf
			}
			return m, nil
		case "**":
			return math.Pow(lf, rf), nil
		}
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("unsupported operand types for %s: '%s' and '%s'", op, typeName(l), typeName(r))}
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		return float64(b2i(x)), true
	}
	return 0, false
}

func equal(a, b any) bool {
	ta, aT := a.(tuple)
	tb, bT := b.(tuple)
	if aT || bT {
		return aT && bT && equal([]any(ta), []any(tb))
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int64, float64, bool:
		xf, _ := toFloat(x)
		yf, ok := toFloat(b)
		return ok && xf == yf
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.Keys {
			yv, ok := y.Get(k)
			if !ok || !equal(x.at(k), yv) {
				return false
			}
		}
		return true
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	}
	return a == b
}

func compare(a, b any) (int, error) {
	a, b = untuple(a), untuple(b)
	if xs, ok := a.(string); ok {
		if ys, ok := b.(string); ok {
			return strings.Compare(xs, ys), nil
		}
	}
	xf, ok1 := toFloat(a)
	yf, ok2 := toFloat(b)
	if ok1 && ok2 {
		switch {
		case xf < yf:
			return -1, nil
		case xf > yf:
			return 1, nil
		}
		return 0, nil
	}
	if xl, ok := a.([]any); ok {
		if yl, ok := b.([]any); ok {
			for i := 0; i < len(xl) && i < len(yl); i++ {
				if !equal(xl[i], yl[i]) {
					return compare(xl[i], yl[i])
				}
			}
			return len(xl) - len(yl), nil
		}
	}
	if u, ok := a.(Undefined); ok {
		return 0, undefinedErr(u)
	}
	if u, ok := b.(Undefined); ok {
		return 0, undefinedErr(u)
	}
	return 0, &Error{Pos: -1, Msg: fmt.Sprintf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))}
}

func contains(container, item any) (bool, error) {
	switch c := untuple(container).(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, ok := item.(Undefined); ok {
				return false, undefinedErr(u)
			}
			return false, &Error{Pos: -1, Msg: "'in <string>' requires string as left operand, not " + typeName(item)}
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, x := range c {
			if equal(x, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		s, ok := item.(string)
		if !ok {
			return false, nil
		}
		_, found := c.Get(s)
		return found, nil
	case Undefined:
		return false, nil
	case *Namespace:
		return false, &Error{Pos: -1, Msg: "argument of type 'Namespace' is not iterable"}
	}
	return false, &Error{Pos: -1, Msg: fmt.Sprintf("argument of type '%s' is not iterable", typeName(container))}
}

var dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true}
var strMethods = map[string]bool{
	"startswith": true, "endswith": true, "split": true, "rsplit": true, "strip": true, "lstrip": true,
	"rstrip": true, "upper": true, "lower": true, "title": true, "capitalize": true, "replace": true,
	"find": true, "rfind": true, "count": true, "join": true, "splitlines": true, "isdigit": true,
	"isalpha": true, "isspace": true, "isalnum": true, "islower": true, "isupper": true, "index": true,
}

// getAttr is Jinja2's getattr: the Python attribute, else the item of that name, else
// Undefined.
func getAttr(obj any, name string) (any, error) {
	switch x := untuple(obj).(type) {
	case Undefined:
		return nil, &Error{Pos: -1, Msg: fmt.Sprintf("'%s' has no attribute '%s'", undefName(x), name)}
	case *Dict:
		if dictMethods[name] {
			return &boundMethod{recv: x, name: name}, nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
	case string:
		if strMethods[name] {
			return &boundMethod{recv: x, name: name}, nil
		}
	case *Namespace:
		if v, ok := x.d.Get(name); ok {
			return v, nil
		}
	case *loopObj:
		return x.attr(name), nil
	case []any:
		if name == "index" || name == "count" {
			return &boundMethod{recv: x, name: name}, nil
		}
	}
	return Undefined{Name: name}, nil
}

func undefName(u Undefined) string {
	if u.Name == "" {
		return "None"
	}
	return u.Name
}

func (l *loopObj) attr(name string) any {
	n := len(l.items)
	i := l.index0
	switch name {
	case "index0":
		return int64(i)
	case "index":
		return int64(i + 1)
	case "revindex":
		return int64(n - i)
	case "revindex0":
		return int64(n - i - 1)
	case "first":
		return i == 0
	case "last":
		return i == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if i > 0 {
			return l.items[i-1]
		}
	case "nextitem":
		if i+1 < n {
			return l.items[i+1]
		}
	case "cycle":
		return &boundMethod{recv: l, name: "cycle"}
	}
	return Undefined{Name: name}
}

// getItem is Jinja2's getitem: the item, else the attribute of that name when key is a
// string, else Undefined.
func getItem(obj, key any) (any, error) {
	switch x := untuple(obj).(type) {
	case Undefined:
		return nil, &Error{Pos: -1, Msg: fmt.Sprintf("'%s' has no attribute '%s'", undefName(x), pyStr(key))}
	case *Dict:
		if k, ok := key.(string); ok {
			if v, ok := x.Get(k); ok {
				return v, nil
			}
		}
	case []any:
		if i, ok := index(key, len(x)); ok {
			return x[i], nil
		}
	case string:
		if _, ok := key.(int64); ok {
			rs := []rune(x)
			if i, ok := index(key, len(rs)); ok {
				return string(rs[i]), nil
			}
		}
	}
	if k, ok := key.(string); ok {
		return getAttr(obj, k)
	}
	return Undefined{Name: pyStr(key)}, nil
}

func index(key any, n int) (int, bool) {
	var i int64
	switch k := key.(type) {
	case int64:
		i = k
	case bool:
		i = b2i(k)
	default:
		return 0, false
	}
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
}

func (r *renderer) evalSlice(e *sliceExpr, f *frame) (any, error) {
	obj, err := r.eval(e.obj, f)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, x := range [3]expr{e.start, e.stop, e.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, f)
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case nil:
		case int64:
			bounds[i] = &n
		case bool:
			b := b2i(n)
			bounds[i] = &b
		default:
			return nil, &Error{Pos: -1, Msg: "slice indices must be integers or None"}
		}
	}
	switch x := obj.(type) {
	case []any, tuple:
		xs := untuple(x).([]any)
		idx, err := sliceIndices(len(xs), bounds)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(idx))
		for i, j := range idx {
			out[i] = xs[j]
		}
		if _, isT := x.(tuple); isT {
			return tuple(out), nil
		}
		return out, nil
	case string:
		rs := []rune(x)
		idx, err := sliceIndices(len(rs), bounds)
		if err != nil {
			return nil, err
		}
		b := make([]byte, 0, len(idx))
		for _, j := range idx {
			b = utf8.AppendRune(b, rs[j])
		}
		return string(b), nil
	case Undefined:
		return nil, undefinedErr(x)
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("'%s' object is not subscriptable", typeName(obj))}
}

// sliceIndices returns the indices seq[start:stop:step] selects, as Python computes them.
func sliceIndices(n int, b [3]*int64) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
		if step == 0 {
			return nil, &Error{Pos: -1, Msg: "slice step cannot be zero"}
		}
	}
	ln := int64(n)
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += ln
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		}
		if v >= ln {
			if step < 0 {
				return ln - 1
			}
			return ln
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start, stop = clamp(b[0], 0), clamp(b[1], ln)
	} else {
		start, stop = clamp(b[0], ln-1), clamp(b[1], -1)
	}
	var out []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, int(i))
	}
	return out, nil
}

func (r *renderer) evalArgs(c *callExpr, f *frame) ([]any, []any, error) {
	args := make([]any, len(c.args))
	for i, a := range c.args {
		v, err := r.eval(a, f)
		if err != nil {
			return nil, nil, err
		}
		args[i] = v
	}
	var kargs []any
	if len(c.kargs) > 0 {
		kargs = make([]any, len(c.kargs))
		for i, a := range c.kargs {
			v, err := r.eval(a, f)
			if err != nil {
				return nil, nil, err
			}
			kargs[i] = v
		}
	}
	return args, kargs, nil
}

func (r *renderer) callValue(fn any, c *callExpr, f *frame) (any, error) {
	args, kargs, err := r.evalArgs(c, f)
	if err != nil {
		return nil, err
	}
	switch x := fn.(type) {
	case *macro:
		return r.callMacro(x, args, c.names, kargs)
	case builtin:
		return x(r, args, c.names, kargs)
	case *boundMethod:
		return callMethod(x, args, c.names, kargs)
	case Func:
		kw := make(map[string]any, len(kargs))
		for i, n := range c.names {
			kw[n] = kargs[i]
		}
		return x(args, kw)
	case Undefined:
		return nil, undefinedErr(x)
	}
	return nil, &Error{Pos: -1, Msg: fmt.Sprintf("'%s' object is not callable", typeName(fn))}
}

func (r *renderer) callMacro(m *macro, args []any, names []string, kargs []any) (any, error) {
	if r.calls >= r.lim.Calls {
		return nil, &Error{Pos: -1, Msg: "macro calls nested too deep"}
	}
	r.calls++
	defer func() { r.calls-- }()
	mf := &frame{parent: m.root, vars: make(map[string]any, len(m.n.params)+1)}
	nd := len(m.n.params) - len(m.n.defaults)
	var varargs []any
	for i, a := range args {
		if i < len(m.n.params) {
			mf.vars[m.n.params[i]] = a
		} else {
			varargs = append(varargs, a)
		}
	}
	kw := NewDict(0)
	for i, n := range names {
		found := false
		for _, p := range m.n.params {
			if p == n {
				mf.vars[n] = kargs[i]
				found = true
			}
		}
		if !found {
			kw.Set(n, kargs[i])
		}
	}
	for i, p := range m.n.params {
		if _, ok := mf.vars[p]; ok {
			continue
		}
		if i >= nd {
			v, err := r.eval(m.n.defaults[i-nd], mf)
			if err != nil {
				return nil, err
			}
			mf.vars[p] = v
		} else {
			mf.vars[p] = Undefined{Name: p}
		}
	}
	mf.vars["varargs"] = tuple(varargs)
	mf.vars["kwargs"] = kw
	if m.caller != nil {
		body, cf := m.caller, m.cframe
		mf.vars["caller"] = builtin(func(r *renderer, _ []any, _ []string, _ []any) (any, error) {
			save := r.out
			r.out = nil
			err := r.exec(body, &frame{parent: cf})
			out := string(r.out)
			r.out = save
			return out, err
		})
	}
	save := r.out
	r.out = nil
	err := r.exec(m.n.body, mf)
	out := string(r.out)
	r.out = save
	if err == errBreak || err == errContinue {
		err = &Error{Pos: -1, Msg: "break or continue outside a loop"}
	}
	return out, err
}

// IteratesContent reports whether the template loops over a "content" attribute or item
// ({% for part in message.content %}): what vLLM's content-format detection looks for to
// choose between passing message content as a list of parts ("openai") and as one string.
// It runs in O(size of the template).
func (t *Template) IteratesContent() bool {
	found := false
	var walk func([]node)
	walk = func(body []node) {
		for _, n := range body {
			switch n := n.(type) {
			case *forNode:
				switch e := n.iter.(type) {
				case *attrExpr:
					found = found || e.name == "content"
				case *itemExpr:
					if k, ok := e.key.(*constExpr); ok && k.v == "content" {
						found = true
					}
				}
				walk(n.body)
				walk(n.els)
			case *ifNode:
				for _, b := range n.bodies {
					walk(b)
				}
			case *macroNode:
				walk(n.body)
			case *setNode:
				walk(n.body)
			case *callBlockNode:
				walk(n.body)
			}
		}
	}
	walk(t.body)
	return found
}
