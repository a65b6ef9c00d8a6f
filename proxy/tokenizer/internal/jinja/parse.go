package jinja

import (
	"fmt"
	"strconv"
)

// Error is a template parse or render error.
type Error struct {
	Pos int // byte offset in the template source, -1 when unknown
	Msg string
}

func (e *Error) Error() string {
	if e.Pos < 0 {
		return "jinja: " + e.Msg
	}
	return fmt.Sprintf("jinja: at byte %d: %s", e.Pos, e.Msg)
}

// maxNesting bounds the depth of nested statements and expressions the parser accepts.
const maxNesting = 256

// node is a statement.
type node interface{}

type (
	dataNode   struct{ text string }
	outputNode struct {
		e      expr
		concat []expr // the operands of e when it is a chain a + b + ..., in order
	}
	ifNode struct {
		conds  []expr
		bodies [][]node // len(bodies) == len(conds) or len(conds)+1 (else)
	}
	forNode struct {
		targets []string
		iter    expr
		filter  expr // nil when absent
		body    []node
		els     []node
	}
	setNode struct {
		targets []string // one name, or several for tuple unpacking
		attr    string   // set ns.attr = ...: targets[0] is ns
		value   expr
		body    []node // block set
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned to the tail of params
		body     []node
	}
	callBlockNode struct {
		call expr
		body []node
	}
	breakNode    struct{}
	continueNode struct{}
)

// expr is an expression.
type expr interface{}

type (
	constExpr struct{ v any }
	nameExpr  struct{ name string }
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
	attrExpr  struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct {
		obj               expr
		start, stop, step expr // nil when absent
	}
	callExpr struct {
		fn    expr
		args  []expr
		names []string // keyword argument names
		kargs []expr
	}
	filterExpr struct {
		arg   expr // nil inside a filter block
		name  string
		args  []expr
		names []string
		kargs []expr
	}
	testExpr struct {
		arg    expr
		name   string
		args   []expr
		negate bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string
		x  expr
	}
	condExpr struct{ cond, yes, no expr } // no is nil when absent
)

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errf(format string, args ...any) error {
	return &Error{Pos: p.cur().pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(n string) bool {
	t := p.cur()
	return t.kind == tName && t.val == n
}

func (p *parser) expectOp(op string) error {
	if !p.isOp(op) {
		return p.errf("expected '%s', got %s", op, p.cur())
	}
	p.i++
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.errf("expected a name, got %s", t)
	}
	p.i++
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.errf("expected end of statement, got %s", p.cur())
	}
	p.i++
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errf("nesting deeper than %d", maxNesting)
	}
	return nil
}

// parseBody parses statements until a block tag whose keyword is one of ends (consumed up
// to and including the keyword), or to the end of the template when ends is empty.
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer func() { p.depth-- }()
	var body []node
	for {
		t := p.next()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				p.i--
				return nil, "", p.errf("unexpected end of template, expected %q", ends)
			}
			return body, "", nil
		case tData:
			body = append(body, &dataNode{t.val})
		case tVarBegin:
			e, err := p.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.errf("expected '}}', got %s", p.cur())
			}
			p.i++
			body = append(body, &outputNode{e: e, concat: concatOperands(e)})
		case tBlockBegin:
			kw := p.cur()
			if kw.kind != tName {
				return nil, "", p.errf("expected a statement keyword, got %s", kw)
			}
			for _, e := range ends {
				if kw.val == e {
					p.i++
					return body, e, nil
				}
			}
			p.i++
			n, err := p.parseStmt(kw.val)
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			p.i--
			return nil, "", p.errf("unexpected %s", t)
		}
	}
}

func (p *parser) parseStmt(kw string) (node, error) {
	switch kw {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if kw == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "generation":
		// transformers' AssistantTracker: renders its body unchanged.
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		return &ifNode{conds: []expr{&constExpr{true}}, bodies: [][]node{body}}, nil
	case "filter":
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		f := &filterExpr{name: name}
		if p.isOp("(") {
			if f.args, f.names, f.kargs, err = p.parseArgs(); err != nil {
				return nil, err
			}
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endfilter")
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		return &setNode{targets: []string{"\x00filter"}, value: f, body: body}, nil
	}
	p.i--
	return nil, p.errf("unknown statement %q", kw)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, c)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			body, _, err := p.parseBody("endif")
			if err != nil {
				return nil, err
			}
			n.bodies = append(n.bodies, body)
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor() (node, error) {
	n := &forNode{}
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, name)
		if !p.isOp(",") {
			break
		}
		p.i++
	}
	if !p.isName("in") {
		return nil, p.errf("expected 'in', got %s", p.cur())
	}
	p.i++
	var err error
	if n.iter, err = p.parseTuple(false, true); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.i++
		if n.filter, err = p.parseExpr(); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errf("recursive loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet() (node, error) {
	n := &setNode{}
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n.targets = []string{name}
	if p.isOp(".") {
		p.i++
		if n.attr, err = p.expectName(); err != nil {
			return nil, err
		}
	} else {
		for p.isOp(",") {
			p.i++
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, name)
		}
	}
	if p.cur().kind == tBlockEnd && n.attr == "" && len(n.targets) == 1 {
		p.i++
		if n.body, _, err = p.parseBody("endset"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	}
	if err := p.expectOp("="); err != nil {
		return nil, err
	}
	if n.value, err = p.parseTuple(false, false); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		pn, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.params = append(n.params, pn)
		if p.isOp("=") {
			p.i++
			d, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			n.defaults = append(n.defaults, d)
		} else if len(n.defaults) > 0 {
			return nil, p.errf("non-default argument follows default argument")
		}
	}
	p.i++
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody("endmacro"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseCallBlock() (node, error) {
	c, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if _, ok := c.(*callExpr); !ok {
		return nil, p.errf("expected a call")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody("endcall")
	if err != nil {
		return nil, err
	}
	return &callBlockNode{call: c, body: body}, p.expectBlockEnd()
}

// parseTuple parses an expression or an unparenthesised tuple of them.
func (p *parser) parseTuple(simplified, noCond bool) (expr, error) {
	var items []expr
	comma := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.i++
			comma = true
		}
		if t := p.cur(); t.kind == tBlockEnd || t.kind == tVarEnd || p.isOp(")") || p.isOp("]") || (t.kind == tName && (t.val == "in" || t.val == "if" && noCond || t.val == "recursive")) {
			break
		}
		var e expr
		var err error
		if noCond {
			e, err = p.parseOr()
		} else {
			e, err = p.parseExpr()
		}
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !comma {
		if len(items) == 0 {
			return nil, p.errf("expected an expression, got %s", p.cur())
		}
		return items[0], nil
	}
	return &tupleExpr{items}, nil
}

func (p *parser) parseExpr() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.i++
		c, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		ce := &condExpr{cond: c, yes: e}
		if p.isName("else") {
			p.i++
			if ce.no, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		e = ce
	}
	return e, nil
}

// binary parses one left-associative level of binary operators: operands parsed by next,
// joined while op consumes an operator at the current token (it returns the operator, or ""
// when there is none, consuming nothing).
func (p *parser) binary(next func() (expr, error), op func() string) (expr, error) {
	l, err := next()
	if err != nil {
		return nil, err
	}
	for o := op(); o != ""; o = op() {
		r, err := next()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: o, l: l, r: r}
	}
	return l, nil
}

// items parses comma-separated items with item up to the operator closer (a trailing comma
// allowed) and consumes the closer.
func (p *parser) items(closer string, item func() error) error {
	for n := 0; !p.isOp(closer); n++ {
		if n > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(closer) {
				break
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
	p.i++
	return nil
}

// keyword is an op for binary: the keyword operator n ("or", "and").
func (p *parser) keyword(n string) func() string {
	return func() string {
		if !p.isName(n) {
			return ""
		}
		p.i++
		return n
	}
}

// symbol is an op for binary: any of the symbol operators ops.
func (p *parser) symbol(ops ...string) func() string {
	return func() string {
		for _, o := range ops {
			if p.isOp(o) {
				p.i++
				return o
			}
		}
		return ""
	}
}

func (p *parser) parseOr() (expr, error) { return p.binary(p.parseAnd, p.keyword("or")) }

func (p *parser) parseAnd() (expr, error) { return p.binary(p.parseNot, p.keyword("and")) }

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.i++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", x: x}, nil
	}
	return p.parseCompare()
}

// parseCompare parses comparisons. Chained comparisons (a < b < c) are rare in templates;
// they evaluate pairwise, as Python does only for two operands.
func (p *parser) parseCompare() (expr, error) {
	return p.binary(p.parseMath1, func() string {
		t := p.cur()
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			p.i++
			return t.val
		case p.isName("in"):
			p.i++
			return "in"
		case p.isName("not") && p.toks[p.i+1].kind == tName && p.toks[p.i+1].val == "in":
			p.i += 2
			return "notin"
		}
		return ""
	})
}

func (p *parser) parseMath1() (expr, error) { return p.binary(p.parseConcat, p.symbol("+", "-")) }

func (p *parser) parseConcat() (expr, error) { return p.binary(p.parseMath2, p.symbol("~")) }

func (p *parser) parseMath2() (expr, error) {
	return p.binary(p.parsePow, p.symbol("*", "/", "//", "%"))
}

func (p *parser) parsePow() (expr, error) {
	return p.binary(func() (expr, error) { return p.parseUnary(true) }, p.symbol("**"))
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var e expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		op := p.next().val
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: op, x: x}
	} else {
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
		if e, err = p.parsePostfix(e); err != nil {
			return nil, err
		}
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tName:
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{t.val}, nil
	case tString:
		s := t.val
		for p.cur().kind == tString { // adjacent literals concatenate
			s += p.next().val
		}
		return &constExpr{s}, nil
	case tInt:
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(t.val, 64)
			return &constExpr{f}, nil
		}
		return &constExpr{n}, nil
	case tFloat:
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			p.i--
			return nil, p.errf("bad number %s", t.val)
		}
		return &constExpr{f}, nil
	case tOp:
		switch t.val {
		case "(":
			if p.isOp(")") {
				p.i++
				return &tupleExpr{}, nil
			}
			e, err := p.parseTuple(false, false)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			l := &listExpr{}
			err := p.items("]", func() error {
				e, err := p.parseExpr()
				l.items = append(l.items, e)
				return err
			})
			if err != nil {
				return nil, err
			}
			return l, nil
		case "{":
			d := &dictExpr{}
			err := p.items("}", func() error {
				k, err := p.parseExpr()
				if err != nil {
					return err
				}
				if err := p.expectOp(":"); err != nil {
					return err
				}
				v, err := p.parseExpr()
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				return err
			})
			if err != nil {
				return nil, err
			}
			return d, nil
		}
	}
	p.i--
	return nil, p.errf("unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.i++
			t := p.next()
			switch t.kind {
			case tName:
				e = &attrExpr{obj: e, name: t.val}
			case tInt:
				n, _ := strconv.ParseInt(t.val, 10, 64)
				e = &itemExpr{obj: e, key: &constExpr{n}}
			default:
				p.i--
				return nil, p.errf("expected a name after '.', got %s", t)
			}
		case p.isOp("["):
			p.i++
			var err error
			if e, err = p.parseSubscript(e); err != nil {
				return nil, err
			}
		case p.isOp("("):
			c := &callExpr{fn: e}
			var err error
			if c.args, c.names, c.kargs, err = p.parseArgs(); err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if p.isOp(":") {
			isSlice = true
			n++
			if n > 2 {
				return nil, p.errf("bad slice")
			}
			p.i++
			continue
		}
		if p.isOp("]") {
			p.i++
			break
		}
		if parts[n] != nil {
			return nil, p.errf("expected ']' got %s", p.cur())
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		parts[n] = e
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, p.errf("empty subscript")
		}
		return &itemExpr{obj: obj, key: parts[0]}, nil
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseArgs() (args []expr, names []string, kargs []expr, err error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, err
	}
	for !p.isOp(")") {
		if len(args)+len(kargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if t := p.cur(); t.kind == tName && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].val == "=" {
			p.i += 2
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, nil, err
			}
			names = append(names, t.val)
			kargs = append(kargs, v)
			continue
		}
		if len(kargs) > 0 {
			return nil, nil, nil, p.errf("positional argument after keyword argument")
		}
		v, err := p.parseExpr()
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, v)
	}
	p.i++
	return args, names, kargs, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.i++
			name, err := p.dottedName()
			if err != nil {
				return nil, err
			}
			f := &filterExpr{arg: e, name: name}
			if p.isOp("(") {
				if f.args, f.names, f.kargs, err = p.parseArgs(); err != nil {
					return nil, err
				}
			}
			e = f
		case p.isName("is"):
			p.i++
			t := &testExpr{arg: e}
			if p.isName("not") {
				p.i++
				t.negate = true
			}
			name, err := p.dottedName()
			if err != nil {
				return nil, err
			}
			t.name = name
			c := p.cur()
			switch {
			case p.isOp("("):
				var names []string
				if t.args, names, _, err = p.parseArgs(); err != nil {
					return nil, err
				}
				if len(names) > 0 {
					return nil, p.errf("keyword arguments to tests are not supported")
				}
			case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat || p.isOp("[") || p.isOp("{")) &&
				!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			e = t
		case p.isOp("("):
			c := &callExpr{fn: e}
			var err error
			if c.args, c.names, c.kargs, err = p.parseArgs(); err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) dottedName() (string, error) {
	n, err := p.expectName()
	if err != nil {
		return "", err
	}
	for p.isOp(".") && p.toks[p.i+1].kind == tName {
		n += "." + p.toks[p.i+1].val
		p.i += 2
	}
	return n, nil
}

// concatOperands returns the operands of a left-nested chain of "+" (a + b + c is
// (a + b) + c), or nil when e is not a "+".
func concatOperands(e expr) []expr {
	b, ok := e.(*binExpr)
	if !ok || b.op != "+" {
		return nil
	}
	var rev []expr
	for ok && b.op == "+" {
		rev = append(rev, b.r)
		e = b.l
		b, ok = e.(*binExpr)
	}
	rev = append(rev, e)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}
