package apicheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks the doc comments a reader of `go doc -all` sees: the package's, and those
// of exported types, funcs, methods of exported types, constants, variables, fields of exported
// structs and methods of exported interfaces (a line comment after a field or value included).
//
// Links. Each doc link ([Name], [Type.Member], [pkg.Name], [pkg.Type.Member], as go/doc/comment
// reads them) must name an exported identifier, or an exported method or field of an exported
// type, promoted ones included. A link without a package names one of the package itself; pkg
// is resolved as go doc resolves it, by the imports of the comment's file, then those of the
// package, then the package's own name, or is a full import path. A target in the library's
// module is checked against that package's source and may not be under internal/; a target
// elsewhere (the standard library, a dependency) is accepted when the package imports it.
//
// A bracketed name in capitals that the package does not declare ([DONE], the end of an event
// stream) is literal text, not a link.
//
// Unexported names. Outside code blocks and links, a word of a comment's text that is an
// unexported identifier of the package (top-level, or the name of a method or field of any of
// its types) and not a predeclared one (len, max) is a violation when it reads as code rather
// than English: it has at least four characters and an upper-case letter after the first, an
// underscore or a digit (newEntry, max_len, v2cache), or it is written as code: in backquotes
// (`shard`), or followed by "(" when it is an unexported func of the package (evict()). So
// "the shard" in prose passes where shardFor or `shard` does not, and Python's hash() passes
// where a method hash exists.
func TestDocLinks(t *testing.T) {
	c := newDocChecker(root, module)
	bad := 0
	for _, rel := range publicPackages(t, root) {
		problems, err := c.check(importPath(rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, p := range problems {
			t.Error(p)
			bad++
		}
	}
	if bad > 0 {
		t.Logf("%d doc problems: link with [Name] / [pkg.Name] to what exists and is exported, and explain an exported name without naming unexported ones", bad)
	}
}

// docChecker checks the doc comments of the packages of one module.
type docChecker struct {
	root, module string
	fset         *token.FileSet
	pkgs         map[string]*pkgInfo // by import path; nil when there is no such package
}

func newDocChecker(root, module string) *docChecker {
	return &docChecker{root: root, module: module, fset: token.NewFileSet(), pkgs: map[string]*pkgInfo{}}
}

// pkgInfo is what the check knows of one package of the module, from its non-test source.
type pkgInfo struct {
	name       string
	files      []*ast.File
	exported   map[string]bool     // "Name", and "Type.Member" for an exported member of an exported type
	embeds     map[string][]string // type -> the types it embeds, as written ("T", "pkg.T")
	unexported map[string]bool     // unexported top-level identifiers and unexported member names
	funcs      map[string]bool     // unexported top-level funcs
	imports    map[string]string   // name -> import path over all files; "" when two differ
}

// load parses the package with import path p of the module, or returns nil if there is none.
func (c *docChecker) load(p string) (*pkgInfo, error) {
	if info, ok := c.pkgs[p]; ok {
		return info, nil
	}
	rel, ok := strings.CutPrefix(p, c.module)
	if !ok || (rel != "" && rel[0] != '/') {
		return nil, fmt.Errorf("%s is not in module %s", p, c.module)
	}
	dir := filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil || len(bp.GoFiles) == 0 {
		c.pkgs[p] = nil
		return nil, nil
	}
	info := &pkgInfo{
		name:       bp.Name,
		exported:   map[string]bool{},
		embeds:     map[string][]string{},
		unexported: map[string]bool{},
		funcs:      map[string]bool{},
		imports:    map[string]string{},
	}
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(c.fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		info.files = append(info.files, f)
		for name, ip := range c.fileImports(f) {
			if old, ok := info.imports[name]; ok && old != ip {
				info.imports[name] = ""
			} else {
				info.imports[name] = ip
			}
		}
		for _, d := range f.Decls {
			info.declare(d)
		}
	}
	c.pkgs[p] = info
	return info, nil
}

// name records an identifier: exported ones under key, unexported ones by their name alone.
func (info *pkgInfo) name1(id string, key string, exported bool) {
	if !token.IsExported(id) {
		info.unexported[id] = true
		return
	}
	if exported {
		info.exported[key] = true
	}
}

func (info *pkgInfo) declare(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil {
			info.name1(d.Name.Name, d.Name.Name, true)
			if !d.Name.IsExported() {
				info.funcs[d.Name.Name] = true
			}
			return
		}
		r, ok := recv(d.Recv)
		r = strings.TrimPrefix(r, "*")
		info.name1(d.Name.Name, r+"."+d.Name.Name, ok)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					info.name1(n.Name, n.Name, true)
				}
			case *ast.TypeSpec:
				tn := s.Name.Name
				info.name1(tn, tn, true)
				exp := s.Name.IsExported()
				for _, f := range members(s.Type) {
					if len(f.Names) == 0 { // embedded: its name is its type's
						e := typeName(f.Type)
						if e == "" {
							continue
						}
						info.embeds[tn] = append(info.embeds[tn], e)
						n := unqualified(e)
						info.name1(n, tn+"."+n, exp)
						continue
					}
					for _, n := range f.Names {
						info.name1(n.Name, tn+"."+n.Name, exp)
					}
				}
			}
		}
	}
}

// typeName returns an embedded type as "T" or "pkg.T", or "" for anything else.
func typeName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name + "." + x.Sel.Name
		}
	}
	return ""
}

// fileImports maps the names a file's imports are known by to their paths.
func (c *docChecker) fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, s := range f.Imports {
		ip, _ := strconv.Unquote(s.Path.Value)
		name := ""
		if s.Name != nil {
			name = s.Name.Name
		} else {
			name = c.importName(ip)
		}
		if name != "_" && name != "." {
			m[name] = ip
		}
	}
	return m
}

// importName is the name a package is imported by without a rename: read from the source for
// the module's packages, guessed from the path for others (the last element, without a major
// version or a "go-" prefix).
func (c *docChecker) importName(ip string) string {
	if ip == c.module || strings.HasPrefix(ip, c.module+"/") {
		if info, err := c.load(ip); err == nil && info != nil {
			return info.name
		}
	}
	elems := strings.Split(ip, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = elems[len(elems)-2]
	}
	if i := strings.Index(last, ".v"); i > 0 {
		last = last[:i]
	}
	last = strings.TrimPrefix(last, "go-")
	return strings.ReplaceAll(last, "-", "_")
}

// has reports whether the exported member Type.Member or top-level Name exists in the
// package, looking through embedded types for promoted members.
func (c *docChecker) has(info *pkgInfo, recv, name string, depth int) bool {
	if recv == "" {
		return info.exported[name]
	}
	if !info.exported[recv] {
		return false
	}
	if info.exported[recv+"."+name] {
		return true
	}
	if depth > 4 {
		return false
	}
	for _, e := range info.embeds[recv] {
		pkg, typ, ok := strings.Cut(e, ".")
		if !ok {
			if token.IsExported(e) && c.has(info, e, name, depth+1) {
				return true
			}
			continue
		}
		ip := info.imports[pkg]
		if ip == c.module || strings.HasPrefix(ip, c.module+"/") {
			if other, err := c.load(ip); err == nil && other != nil && c.has(other, typ, name, depth+1) {
				return true
			}
			continue
		}
		if ip != "" {
			return true // promoted from outside the module: not checked
		}
	}
	return false
}

// docComment is one doc comment a reader sees, and what it documents.
type docComment struct {
	of   string // "package", or the documented name
	text *ast.CommentGroup
	file *ast.File
}

// comments lists the doc comments of the package that `go doc -all` shows.
func (info *pkgInfo) comments() []docComment {
	var out []docComment
	add := func(of string, cg *ast.CommentGroup, f *ast.File) {
		if cg != nil {
			out = append(out, docComment{of, cg, f})
		}
	}
	for _, f := range info.files {
		add("package "+info.name, f.Doc, f)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					add(d.Name.Name, d.Doc, f)
				} else if r, ok := recv(d.Recv); ok && d.Name.IsExported() {
					add(strings.TrimPrefix(r, "*")+"."+d.Name.Name, d.Doc, f)
				}
			case *ast.GenDecl:
				anyExported := false
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						anyExported = true
						add(s.Name.Name, s.Doc, f)
						add(s.Name.Name, s.Comment, f)
						for _, fl := range members(s.Type) {
							name := unqualified(typeName(fl.Type))
							if len(fl.Names) > 0 {
								name = fl.Names[0].Name
							}
							if token.IsExported(name) {
								add(s.Name.Name+"."+name, fl.Doc, f)
								add(s.Name.Name+"."+name, fl.Comment, f)
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								anyExported = true
								add(n.Name, s.Doc, f)
								add(n.Name, s.Comment, f)
								break
							}
						}
					}
				}
				if anyExported {
					of := d.Tok.String() + " group"
					if !d.Lparen.IsValid() && len(d.Specs) == 1 {
						of = specName(d.Specs[0])
					}
					add(of, d.Doc, f)
				}
			}
		}
	}
	return out
}

// specName is the (first) name a spec declares.
func specName(s ast.Spec) string {
	switch s := s.(type) {
	case *ast.TypeSpec:
		return s.Name.Name
	case *ast.ValueSpec:
		return s.Names[0].Name
	}
	return ""
}

// check returns the doc problems of the module's package p, one line each, in the order of
// the source.
func (c *docChecker) check(p string) ([]string, error) {
	info, err := c.load(p)
	if err != nil || info == nil {
		return nil, err
	}
	var links []*comment.DocLink
	parser := &comment.Parser{
		// Take every [x.Y] and [Y] as a link; check resolves them itself.
		LookupPackage: func(name string) (string, bool) { return name, token.IsIdentifier(name) },
		LookupSym:     func(recv, name string) bool { return true },
	}
	var problems []string
	for _, dc := range info.comments() {
		pos := c.fset.Position(dc.text.Pos())
		where := fmt.Sprintf("%s:%d: %s", path.Join(strings.TrimPrefix(strings.TrimPrefix(p, c.module), "/"), filepath.Base(pos.Filename)), pos.Line, dc.of)
		doc := parser.Parse(dc.text.Text())
		links = links[:0]
		var words []string
		walkDoc(doc, func(l *comment.DocLink) { links = append(links, l) }, func(s string) { words = append(words, codeWords(s, info)...) })
		for _, l := range links {
			if l.ImportPath == "" && l.Recv == "" && !info.exported[l.Name] && strings.ToUpper(l.Name) == l.Name {
				continue // [DONE], [EOF]: literal text in capitals, not a link
			}
			if msg := c.resolve(info, dc.file, l); msg != "" {
				problems = append(problems, fmt.Sprintf("%s: link %s: %s", where, linkText(l), msg))
			}
		}
		for _, w := range words {
			problems = append(problems, fmt.Sprintf("%s: names unexported %s", where, w))
		}
	}
	return problems, nil
}

func linkText(l *comment.DocLink) string {
	s := l.Name
	if l.Recv != "" {
		s = l.Recv + "." + s
	}
	if l.ImportPath != "" {
		s = l.ImportPath + "." + s
	}
	return "[" + s + "]"
}

// resolve returns why link l in file f of the package does not resolve, or "".
func (c *docChecker) resolve(info *pkgInfo, f *ast.File, l *comment.DocLink) string {
	target := info
	if pkg := l.ImportPath; pkg != "" {
		ip := ""
		switch {
		case strings.Contains(pkg, "/"):
			ip = pkg
		default:
			if m := c.fileImports(f); m[pkg] != "" {
				ip = m[pkg]
			} else if v, ok := info.imports[pkg]; ok && v != "" {
				ip = v
			} else if pkg != info.name {
				return fmt.Sprintf("the package imports no %s", pkg)
			}
		}
		if ip != "" {
			inModule := ip == c.module || strings.HasPrefix(ip, c.module+"/")
			if !inModule {
				for _, v := range info.imports {
					if v == ip {
						return "" // imported from outside the module: not checked
					}
				}
				if !strings.Contains(strings.Split(ip, "/")[0], ".") {
					if _, err := os.Stat(filepath.Join(build.Default.GOROOT, "src", filepath.FromSlash(ip))); err == nil {
						return "" // the standard library
					}
				}
				return fmt.Sprintf("the package does not import %s", ip)
			}
			if strings.Contains(ip+"/", "/internal/") {
				return "links into an internal package"
			}
			other, err := c.load(ip)
			if err != nil || other == nil {
				return fmt.Sprintf("no package %s in the module", ip)
			}
			target = other
		}
	}
	if !c.has(target, l.Recv, l.Name, 0) {
		what := "no exported " + l.Name
		if l.Recv != "" {
			what = "no exported " + l.Recv + "." + l.Name
		}
		return what
	}
	return ""
}

// walkDoc calls link for each doc link and text for each run of plain text of d, outside code
// blocks and the text of links.
func walkDoc(d *comment.Doc, link func(*comment.DocLink), text func(string)) {
	var walkText func([]comment.Text)
	walkText = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case comment.Plain:
				text(string(t))
			case comment.Italic:
				text(string(t))
			case *comment.DocLink:
				link(t)
			case *comment.Link:
				// a URL or a [text]: link; its text is not prose about the code
			}
		}
	}
	var walkBlocks func([]comment.Block)
	walkBlocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				walkText(b.Text)
			case *comment.Heading:
				walkText(b.Text)
			case *comment.List:
				for _, it := range b.Items {
					walkBlocks(it.Content)
				}
			case *comment.Code:
				// code blocks may show anything
			}
		}
	}
	walkBlocks(d.Content)
}

// codeWords returns the words of s that are names in unexported and read as code (the rule on
// TestDocLinks).
func codeWords(s string, info *pkgInfo) []string {
	var out []string
	isIdent := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	rs := []rune(s)
	for i := 0; i < len(rs); {
		if !isIdent(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && isIdent(rs[j]) {
			j++
		}
		w := string(rs[i:j])
		if info.unexported[w] && types.Universe.Lookup(w) == nil {
			quoted := i > 0 && rs[i-1] == '`' && j < len(rs) && rs[j] == '`'
			call := j < len(rs) && rs[j] == '(' && info.funcs[w]
			if quoted || call || codeShaped(w) {
				out = append(out, w)
			}
		}
		i = j
	}
	return out
}

// codeShaped reports whether w has four or more characters and an upper-case letter after the
// first, an underscore or a digit: a word no English sentence uses.
func codeShaped(w string) bool {
	if len(w) < 4 {
		return false
	}
	for i, r := range w {
		if r == '_' || unicode.IsDigit(r) || (i > 0 && unicode.IsUpper(r)) {
			return true
		}
	}
	return false
}

// TestDocChecker runs the doc check on a small module with one problem of each kind and the
// links and words it must accept.
func TestDocChecker(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module m\n",
		"b/b.go": `// Package b is linked to.
package b

// T is a type.
type T struct{ F int }

// M is a method.
func (T) M() {}

// E embeds T.
type E struct{ T }
`,
		"internal/i/i.go": "// Package i is hidden.\npackage i\n\n// X is exported from a hidden package.\nvar X int\n",
		"a/a.go": `// Package a links [b.T], [b.T.M], [b.T.F], [b.E.M], [time.Duration], [T], [*T], [T.Do],
// [I.Get], [a.T] and [m/b.T]; it may say [DONE] and [0, 1], a[i], the shard, and Python's
// hash().
//
// Bad: [b.Missing], [b.T.Missing], [Missing], [T.Missing], [fmt.Println], [i.X], [t.Do].
//
//	newThing and shardFor may appear in code.
package a

import (
	"time"

	"m/b"
	"m/internal/i"
)

var _ = i.X

// T holds a Duration; it is made by newThing.
type T struct {
	// D is built by shardFor and evict() and ` + "`shard`" + `.
	D time.Duration
	b b.T
}

// Do does it; lock_order holds.
func (T) Do() {}

func (T) hash() {}

// I gets.
type I interface {
	// Get via getV2.
	Get() int
}

type shard struct{}

func newThing() *T        { return nil }
func shardFor() *shard    { return nil }
func evict()              {}
func getV2()              {}

var lock_order int

// unexported docs are not read: [Nothing], newThing.
func helper() {}
`,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := newDocChecker(dir, "m").check("m/a")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a/a.go:1: package a: link [b.Missing]: no exported Missing",
		"a/a.go:1: package a: link [b.T.Missing]: no exported T.Missing",
		"a/a.go:1: package a: link [Missing]: no exported Missing",
		"a/a.go:1: package a: link [T.Missing]: no exported T.Missing",
		"a/a.go:1: package a: link [fmt.Println]: the package imports no fmt",
		"a/a.go:1: package a: link [i.X]: links into an internal package",
		"a/a.go:1: package a: link [t.Do]: the package imports no t",
		"a/a.go:19: T: names unexported newThing",
		"a/a.go:21: T.D: names unexported shardFor",
		"a/a.go:21: T.D: names unexported evict",
		"a/a.go:21: T.D: names unexported shard",
		"a/a.go:26: T.Do: names unexported lock_order",
		"a/a.go:33: I.Get: names unexported getV2",
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("check:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// members returns the fields of a struct type or the methods of an interface type, and nil for
// any other type expression.
func members(t ast.Expr) []*ast.Field {
	switch t := t.(type) {
	case *ast.StructType:
		return t.Fields.List
	case *ast.InterfaceType:
		return t.Methods.List
	}
	return nil
}

// unqualified strips a package qualifier: "Name" for "pkg.Name" and for "Name".
func unqualified(name string) string {
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[i+1:]
	}
	return name
}
