// Package apicheck writes down a package's exported API, one declaration per line, so that the
// module can keep its public surface in committed files and a change to it shows up as a
// reviewed diff (the habit of the Go project's api/ files and of gorelease).
//
// Surface reads a package's source (its non-test files for the current platform) and lists
// every exported constant, variable, function, type, struct field, interface method and method
// of an exported type. It works from the syntax tree alone, so it needs no type checking and no
// network: types are printed as written, and parameter names are dropped, so renaming a
// parameter is not an API change. TestAPI compares the surface of every public package of the
// module with its file under testdata; `go test ./internal/apicheck -update` rewrites them.
//
// The library is every package of the root go.mod's module that is neither a command nor under
// internal/ or testdata/; a directory with a go.mod of its own (examples, bench, kube, test
// modules) is another module and is skipped with everything below it.
//
// # Counting rule
//
// A package's size is the number of names a reader of `go doc -all` has to learn:
//
//	exported funcs + exported types + methods of exported types + methods of exported interfaces
//
// Constants, variables, struct fields and embedded types are not counted. A method counts once
// whatever its receiver (T or *T); an interface's method counts once, on the interface. The
// committed budget.txt gives each library package a maximum and the library a total; TestBudget
// fails when a package or the library is over its budget or a package has none. Raising a
// budget is a reviewed edit of budget.txt, never done by -update.
//
// # Doc comments
//
// TestDocLinks parses every doc comment a reader sees (the package's, and those of exported
// types, funcs, methods, constants, variables, struct fields and interface methods) with
// go/doc/comment and fails on a doc link ([Name], [pkg.Name], [Type.Method],
// [pkg.Type.Method]) that does not resolve, and on prose that names an unexported identifier
// of the package (the rule is spelled out on TestDocLinks).
//
// # Names
//
// TestNames fails when an exported top-level name (type, func, constant or variable) is
// declared in two library packages, except Options, Config, New and ErrInvalidOptions, which
// every package may have, and the at most ten names in names.txt, each with its reason.
//
// # Constructors
//
// One way to build each kind of thing (the rule the root package's doc states, made exact):
//
//   - A type with state that callers drive is built by New(Options) (*T, error) when it is
//     the package's main type, and by NewT(TOptions) (*T, error) otherwise; T is a type of
//     the same package, and the one parameter is T's own Options struct, by value.
//   - A part that plugs into an interface I of the library (a flowcontrol.Policy, a routing
//     Scorer, Filter or Picker) and has settings is built by NewX(XOptions) (I, error); it
//     returns the interface, not its type, unless callers also drive it (then it is the
//     first kind).
//   - A plug-in with nothing to set, or one or two numbers, that cannot fail is X() I or
//     X(n) I, never named New*.
//   - A type with nothing to configure has a useful zero value and no constructor.
//
// Whether a type's state is driven by callers is a judgement, so TestConstructors checks
// what can be read from the surface: every func named New or New<Upper>... takes exactly
// its own Options struct (Options for New, XOptions for NewX) and returns either (*X, error),
// X a type of the package (any type for New), or, for NewX, (I, error) with I an interface of
// the library.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// Surface returns the exported API of the package in dir, one sorted line per declaration,
// each starting with "pkg <path>, ".
func Surface(dir, path string) ([]string, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	w := &writer{fset: fset, prefix: "pkg " + path + ", "}
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			w.decl(d)
		}
	}
	sort.Strings(w.lines)
	return w.lines, nil
}

// Count is the size of a surface by kind: what the counting rule counts (funcs, methods,
// types and interface methods), and the rest. Fields holds struct fields and embedded types.
type Count struct {
	Funcs, Methods, Types, IfaceMethods, Fields, Consts, Vars int
}

// Identifiers is what the counting rule counts: Funcs + Methods + Types + IfaceMethods.
func (c Count) Identifiers() int { return c.Funcs + c.Methods + c.Types + c.IfaceMethods }

// Add returns the sum of two counts.
func (c Count) Add(d Count) Count {
	return Count{c.Funcs + d.Funcs, c.Methods + d.Methods, c.Types + d.Types,
		c.IfaceMethods + d.IfaceMethods, c.Fields + d.Fields, c.Consts + d.Consts, c.Vars + d.Vars}
}

// CountOf tallies the lines of a surface by kind.
func CountOf(lines []string) Count {
	var c Count
	for _, l := range lines {
		_, rest, _ := strings.Cut(l, ", ")
		switch {
		case strings.HasPrefix(rest, "func ("):
			c.Methods++
		case strings.HasPrefix(rest, "func "):
			c.Funcs++
		case strings.HasPrefix(rest, "type ") && memberOf(rest) == "interface" &&
			!strings.Contains(rest, " interface, embedded "):
			c.IfaceMethods++
		case strings.HasPrefix(rest, "type ") && memberOf(rest) != "":
			c.Fields++ // a struct field, an embedded struct or an embedded interface
		case strings.HasPrefix(rest, "type "):
			c.Types++
		case strings.HasPrefix(rest, "const "):
			c.Consts++
		case strings.HasPrefix(rest, "var "):
			c.Vars++
		}
	}
	return c
}

// memberOf returns "struct" or "interface" when rest ("type ...") is the line of a struct
// field or an interface method or embedding ("type T struct, F int"), and "" for the line
// of a type itself.
func memberOf(rest string) string {
	f := strings.SplitN(rest, " ", 4)
	if len(f) < 4 {
		return ""
	}
	switch f[2] {
	case "struct,":
		return "struct"
	case "interface,":
		return "interface"
	}
	return ""
}

type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

// expr prints a type expression on one line, without parameter names.
func (w *writer) expr(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.FuncType:
		return "func" + w.signature(t)
	case *ast.StructType:
		if t.Fields == nil || len(t.Fields.List) == 0 {
			return "struct{}"
		}
		return "struct{...}"
	case *ast.InterfaceType:
		if t.Methods == nil || len(t.Methods.List) == 0 {
			return "interface{}"
		}
		return "interface{...}"
	}
	var b bytes.Buffer
	_ = printer.Fprint(&b, w.fset, e)
	return strings.Join(strings.Fields(b.String()), " ")
}

func (w *writer) list(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		n := max(len(f.Names), 1)
		for range n {
			parts = append(parts, w.expr(f.Type))
		}
	}
	return strings.Join(parts, ", ")
}

func (w *writer) signature(t *ast.FuncType) string {
	s := ""
	if t.TypeParams != nil {
		s = "[" + w.typeParams(t.TypeParams) + "]"
	}
	s += "(" + w.list(t.Params) + ")"
	switch r := t.Results; {
	case r == nil || len(r.List) == 0:
	case len(r.List) == 1 && len(r.List[0].Names) <= 1:
		s += " " + w.list(r)
	default:
		s += " (" + w.list(r) + ")"
	}
	return s
}

func (w *writer) typeParams(fl *ast.FieldList) string {
	var parts []string
	for _, f := range fl.List {
		var names []string
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		parts = append(parts, strings.Join(names, ", ")+" "+w.expr(f.Type))
	}
	return strings.Join(parts, ", ")
}

// recv names a method's receiver type, and whether that type is exported.
func recv(fl *ast.FieldList) (string, bool) {
	if fl == nil || len(fl.List) == 0 {
		return "", false
	}
	t, ptr := fl.List[0].Type, ""
	if s, ok := t.(*ast.StarExpr); ok {
		t, ptr = s.X, "*"
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	if !ok {
		return "", false
	}
	return ptr + id.Name, id.IsExported()
}

func (w *writer) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		if d.Recv == nil {
			w.add("func %s%s", d.Name.Name, w.signature(d.Type))
			return
		}
		if r, ok := recv(d.Recv); ok {
			w.add("func (%s) %s%s", r, d.Name.Name, w.signature(d.Type))
		}
	case *ast.GenDecl:
		var last ast.Expr // a const group's type carries over to specs without one
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				w.typeSpec(s)
			case *ast.ValueSpec:
				kind := d.Tok.String()
				if s.Type != nil || len(s.Values) > 0 {
					last = s.Type
				}
				for _, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					if last != nil {
						w.add("%s %s %s", kind, n.Name, w.expr(last))
					} else {
						w.add("%s %s", kind, n.Name)
					}
				}
			}
		}
	}
}

func (w *writer) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.TypeParams != nil {
		name += "[" + w.typeParams(s.TypeParams) + "]"
	}
	if s.Assign.IsValid() {
		w.add("type %s = %s", name, w.expr(s.Type))
		return
	}
	w.add("type %s %s", name, w.expr(s.Type))
	switch t := s.Type.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				e := f.Type
				if st, ok := e.(*ast.StarExpr); ok {
					e = st.X
				}
				if id, ok := e.(*ast.SelectorExpr); ok && !id.Sel.IsExported() {
					continue
				}
				if id, ok := e.(*ast.Ident); ok && !id.IsExported() {
					continue
				}
				w.add("type %s struct, embedded %s", s.Name.Name, w.expr(f.Type))
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add("type %s struct, %s %s", s.Name.Name, n.Name, w.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				w.add("type %s interface, embedded %s", s.Name.Name, w.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
					w.add("type %s interface, %s%s", s.Name.Name, n.Name, w.signature(ft))
				}
			}
		}
	}
}
