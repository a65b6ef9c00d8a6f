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

// publicPackages lists the module's importable packages: every directory with non-test Go
// files of a package other than main, outside internal/ and testdata/.
func publicPackages(t *testing.T, root string) []string {
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
		bp, err := build.Default.ImportDir(p, 0)
		if err != nil || bp.Name == "main" {
			return nil // no Go files, or a command
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

func fileFor(rel string) string {
	if rel == "." {
		return filepath.Join("testdata", "usher.txt")
	}
	return filepath.Join("testdata", strings.ReplaceAll(rel, "/", "_")+".txt")
}

// TestAPI keeps each public package's exported API equal to its committed file, so an API
// change is a reviewed diff. After an intended change: go test ./internal/apicheck -update.
func TestAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	var total Count
	seen := map[string]bool{}
	for _, rel := range publicPackages(t, root) {
		path := module
		if rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		lines, err := Surface(filepath.Join(root, rel), path)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(lines) == 0 {
			continue // documentation only
		}
		c := CountOf(lines)
		total.Funcs += c.Funcs
		total.Methods += c.Methods
		total.Types += c.Types
		t.Logf("%-24s %4d identifiers (%d funcs, %d methods, %d types), %d fields, %d consts, %d vars",
			path[len(module):], c.Identifiers(), c.Funcs, c.Methods, c.Types, c.Fields, c.Consts, c.Vars)
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
	t.Logf("module: %d identifiers (%d funcs, %d methods, %d types)", total.Identifiers(), total.Funcs, total.Methods, total.Types)
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
	if c.Funcs != 2 || c.Methods != 1 || c.Types != 6 || c.Fields != 4 || c.Consts != 3 || c.Vars != 1 {
		t.Errorf("CountOf = %+v", c)
	}
}
