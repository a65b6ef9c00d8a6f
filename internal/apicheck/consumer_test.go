package apicheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestConsumerFloor keeps .ci/consumer, the module .ci/run builds at a controller-runtime
// project's pins, importing every public package of the library module, so that a new package
// cannot raise an importer's floor unnoticed.
func TestConsumerFloor(t *testing.T) {
	root := filepath.Join("..", "..")
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, ".ci", "consumer", "main.go"), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if strings.HasPrefix(p, module+"/") {
			imported[p] = true
		}
	}
	var missing []string
	for _, rel := range publicPackages(t, root) {
		if rel == "." {
			continue // documentation only
		}
		p := module + "/" + filepath.ToSlash(rel)
		if !imported[p] {
			missing = append(missing, p)
		}
		delete(imported, p)
	}
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf(".ci/consumer/main.go does not import %s: add it, so that the consumer-floor build covers it", p)
	}
	for p := range imported {
		t.Errorf(".ci/consumer/main.go imports %s, which is not a public package of the library module", p)
	}
}
