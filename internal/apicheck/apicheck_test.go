package apicheck

import (
	"flag"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the committed API files from the source")

const module = "github.com/usher-llm/usher"

// root is the library module's directory.
var root = filepath.Join("..", "..")

// publicPackages lists the library's packages, as paths relative to root ("." for the root
// package): every directory with non-test Go files of a package other than main, outside
// internal/ and testdata/ and outside any directory with a go.mod of its own (another module).
func publicPackages(t testing.TB, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		base := d.Name()
		if rel != "." && (base == "internal" || base == "testdata" || strings.HasPrefix(base, ".")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); rel != "." && err == nil {
			return filepath.SkipDir // a module of its own
		}
		bp, err := build.Default.ImportDir(p, 0)
		if err != nil || bp.Name == "main" || len(bp.GoFiles) == 0 {
			return nil // no Go files, tests only, or a command
		}
		dirs = append(dirs, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	return dirs
}

// importPath returns the import path of the library package in directory rel.
func importPath(rel string) string {
	if rel == "." {
		return module
	}
	return module + "/" + filepath.ToSlash(rel)
}

// surfaces returns the exported surface of every library package, by directory relative to
// root, and the directories in order; packages with documentation only have an empty surface.
func surfaces(t testing.TB) (map[string][]string, []string) {
	t.Helper()
	rels := publicPackages(t, root)
	m := map[string][]string{}
	for _, rel := range rels {
		lines, err := Surface(filepath.Join(root, rel), importPath(rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		m[rel] = lines
	}
	return m, rels
}

func fileFor(rel string) string {
	if rel == "." {
		return filepath.Join("testdata", "usher.txt")
	}
	return filepath.Join("testdata", strings.ReplaceAll(rel, "/", "_")+".txt")
}

// TestAPI keeps each public package's exported API equal to its committed file, so an API
// change is a reviewed diff. After an intended change: go test ./internal/apicheck -update.
func TestAPI(t *testing.T) {
	var total Count
	seen := map[string]bool{}
	all, rels := surfaces(t)
	for _, rel := range rels {
		path, lines := importPath(rel), all[rel]
		if len(lines) == 0 {
			continue // documentation only
		}
		c := CountOf(lines)
		total = total.Add(c)
		t.Logf("%-28s %4d counted (%d funcs, %d methods, %d types, %d interface methods), %d fields, %d consts, %d vars",
			rel, c.Identifiers(), c.Funcs, c.Methods, c.Types, c.IfaceMethods, c.Fields, c.Consts, c.Vars)
		file := fileFor(rel)
		seen[filepath.Base(file)] = true
		got := strings.Join(lines, "\n") + "\n"
		if *update {
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no committed API file (%v); run go test ./internal/apicheck -update and review the diff", path, err)
			continue
		}
		if d := diff(string(want), got); d != "" {
			t.Errorf("%s: exported API differs from %s (- committed, + source); if intended, run go test ./internal/apicheck -update:\n%s", path, file, d)
		}
	}
	t.Logf("library: %d counted (%d funcs, %d methods, %d types, %d interface methods)",
		total.Identifiers(), total.Funcs, total.Methods, total.Types, total.IfaceMethods)
	entries, _ := os.ReadDir("testdata")
	for _, e := range entries {
		if !seen[e.Name()] {
			if *update {
				_ = os.Remove(filepath.Join("testdata", e.Name()))
				continue
			}
			t.Errorf("testdata/%s names no public package any more; run go test ./internal/apicheck -update", e.Name())
		}
	}
}

// diff lists the lines only in want (-) and only in got (+); both are sorted sets of lines.
func diff(want, got string) string {
	w := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		w[l] = true
	}
	g := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		g[l] = true
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}

func TestSurface(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "time"

const (
	A Kind = iota
	B
	c
)

const D = 3

var ErrX error

type Kind uint8

type Opts struct {
	N      int
	hidden int
	Wait   time.Duration
	*Embedded
}

type Embedded struct{}

type Iface interface {
	Do(x int, y string) (int, error)
	private()
}

type Alias = Opts

func New(o Opts) (*T, error) { return nil, nil }

type T struct{}

func (t *T) Run(n int) {}
func (t *T) run()      {}

type hidden struct{}

func (hidden) Exported() {}

func Map[K comparable, V any](m map[K]V) []K { return nil }
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Surface(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg p, const A Kind",
		"pkg p, const B Kind",
		"pkg p, const D",
		"pkg p, func (*T) Run(int)",
		"pkg p, func Map[K comparable, V any](map[K]V) []K",
		"pkg p, func New(Opts) (*T, error)",
		"pkg p, type Alias = Opts",
		"pkg p, type Embedded struct{}",
		"pkg p, type Iface interface, Do(int, string) (int, error)",
		"pkg p, type Iface interface{...}",
		"pkg p, type Kind uint8",
		"pkg p, type Opts struct, N int",
		"pkg p, type Opts struct, Wait time.Duration",
		"pkg p, type Opts struct, embedded *Embedded",
		"pkg p, type Opts struct{...}",
		"pkg p, type T struct{}",
		"pkg p, var ErrX error",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Surface:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	c := CountOf(got)
	if c.Funcs != 2 || c.Methods != 1 || c.Types != 6 || c.IfaceMethods != 1 || c.Fields != 3 || c.Consts != 3 || c.Vars != 1 {
		t.Errorf("CountOf = %+v", c)
	}
}
