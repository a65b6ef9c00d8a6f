package apicheck

import (
	"sort"
	"strings"
	"testing"
)

// sharedNames may be declared by every package: a package's constructor, its options or
// configuration, and the sentinel for invalid options.
var sharedNames = map[string]bool{"Options": true, "Config": true, "New": true, "ErrInvalidOptions": true}

// maxAllowedNames bounds names.txt: a repeated name is the exception.
const maxAllowedNames = 10

// topLevelName returns the name a surface line declares at top level (a func, type, constant
// or variable), or "" for a method, field or interface method.
func topLevelName(line string) string {
	_, rest, _ := strings.Cut(line, ", ")
	kind, rest, _ := strings.Cut(rest, " ")
	switch kind {
	case "func":
		if strings.HasPrefix(rest, "(") {
			return "" // a method
		}
	case "type":
		if memberOf("type "+rest) != "" {
			return ""
		}
	case "const", "var":
	default:
		return ""
	}
	if i := strings.IndexAny(rest, " ([="); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// readNames parses names.txt: "Name  # reason" a line; blank lines and lines starting with #
// are comments.
func readNames(file string) (map[string]string, error) {
	entries, err := readReasoned(file, 1, "Name  # reason")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, e := range entries {
		m[e.fields[0]] = e.reason
	}
	return m, nil
}

// repeatedNames maps each exported top-level name declared in two or more of the packages to
// those packages, sorted.
func repeatedNames(all map[string][]string) map[string][]string {
	where := map[string][]string{}
	for rel, lines := range all {
		seen := map[string]bool{}
		for _, l := range lines {
			if n := topLevelName(l); n != "" && !seen[n] {
				seen[n] = true
				where[n] = append(where[n], rel)
			}
		}
	}
	for n, pkgs := range where {
		if len(pkgs) < 2 {
			delete(where, n)
			continue
		}
		sort.Strings(pkgs)
	}
	return where
}

// TestNames keeps one meaning per name: an exported top-level name (type, func, constant or
// variable) declared in two or more library packages fails, unless it is in sharedNames or in
// names.txt (at most maxAllowedNames entries, each with its reason).
func TestNames(t *testing.T) {
	allowed, err := readNames("names.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) > maxAllowedNames {
		t.Errorf("names.txt lists %d names, more than %d: rename instead", len(allowed), maxAllowedNames)
	}
	all, _ := surfaces(t)
	rep := repeatedNames(all)
	var names []string
	for n := range rep {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch {
		case sharedNames[n], allowed[n] != "":
		default:
			t.Errorf("%s is declared in %s: a name means one thing across the library; rename it, or list it in names.txt with the reason", n, strings.Join(rep[n], ", "))
		}
	}
	for n := range allowed {
		if _, ok := rep[n]; !ok {
			t.Errorf("names.txt: %s is no longer repeated; remove its line", n)
		}
	}
	t.Logf("%d names repeated across packages, each allowed above: %s", len(names), strings.Join(names, " "))
}

func TestTopLevelName(t *testing.T) {
	for line, want := range map[string]string{
		"pkg p, func New(Options) (*T, error)":          "New",
		"pkg p, func Map[K comparable](map[K]int) []K":  "Map",
		"pkg p, func (*T) Run(int)":                     "",
		"pkg p, type Set[K comparable] struct{...}":     "Set",
		"pkg p, type Alias = Opts":                      "Alias",
		"pkg p, type Opts struct, N int":                "",
		"pkg p, type I interface, Do(int) (int, error)": "",
		"pkg p, type F func(int, string)":               "F",
		"pkg p, const A Kind":                           "A",
		"pkg p, const D":                                "D",
		"pkg p, var ErrX error":                         "ErrX",
	} {
		if got := topLevelName(line); got != want {
			t.Errorf("topLevelName(%q) = %q, want %q", line, got, want)
		}
	}
}
