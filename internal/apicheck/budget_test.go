package apicheck

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
)

// budget is budget.txt: the most counted names (see the package doc) each library package,
// and the library in all, may export.
type budget struct {
	max   map[string]int // by directory relative to the module root, "." for the root package
	total int            // -1 when budget.txt has no total line
}

// reasoned is one entry of a committed list: its fields before the "#", its reason after it,
// and its line number.
type reasoned struct {
	line   int
	fields []string
	reason string
}

// readReasoned parses a committed list of entries "fields  # reason", want fields each (form
// is the shape an error message shows); blank lines and lines starting with # are comments.
// Every entry needs its reason, and no first field may repeat.
func readReasoned(file string, want int, form string) ([]reasoned, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []reasoned
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		entry, reason, _ := strings.Cut(line, "#")
		fields := strings.Fields(entry)
		if len(fields) != want || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want %q, got %q", file, n, form, line)
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("%s:%d: %s has a second line", file, n, fields[0])
		}
		seen[fields[0]] = true
		out = append(out, reasoned{n, fields, strings.TrimSpace(reason)})
	}
	return out, sc.Err()
}

// readBudget parses lines of the form "path max  # reason" and one "total max  # reason".
func readBudget(name string) (budget, error) {
	b := budget{max: map[string]int{}, total: -1}
	entries, err := readReasoned(name, 2, "path max  # reason")
	if err != nil {
		return b, err
	}
	for _, e := range entries {
		max, err := strconv.Atoi(e.fields[1])
		if err != nil || max < 0 {
			return b, fmt.Errorf("%s:%d: %q is not a count", name, e.line, e.fields[1])
		}
		if e.fields[0] == "total" {
			b.total = max
		} else {
			b.max[e.fields[0]] = max
		}
	}
	return b, nil
}

// TestBudget keeps each library package, and the library in all, within budget.txt, counted
// by the rule in the package doc. Every package that exports anything needs a line (one with
// documentation only may have one, at 0). Growth past a budget is a reviewed edit of
// budget.txt.
// maxPackageBudget is the most any one library package may export (DESIGN.md): past it, a
// package is doing several things and its capabilities belong in packages of their own.
const maxPackageBudget = 90

func TestBudget(t *testing.T) {
	b, err := readBudget("budget.txt")
	if err != nil {
		t.Fatal(err)
	}
	if b.total < 0 {
		t.Error("budget.txt has no total line")
	}
	lines := maps.Clone(b.max)
	all, rels := surfaces(t)
	total := 0
	for _, rel := range rels {
		n := CountOf(all[rel]).Identifiers()
		total += n
		max, ok := b.max[rel]
		switch {
		case !ok && n == 0:
			// documentation only, as TestAPI treats it: no line needed
		case !ok:
			t.Errorf("%s: %d counted names and no line in budget.txt", rel, n)
		case n > max:
			t.Errorf("%s: %d counted names, over its budget of %d (budget.txt)", rel, n, max)
		case n < max:
			t.Logf("%s: %d counted names, %d under its budget of %d", rel, n, max-n, max)
		}
		delete(b.max, rel)
	}
	for rel := range b.max {
		t.Errorf("budget.txt: %s is not a library package; remove its line", rel)
	}
	for rel, max := range lines {
		if max > maxPackageBudget {
			t.Errorf("budget.txt: %s's line %d is above %d, the most any one package may export: split it", rel, max, maxPackageBudget)
		}
	}
	if b.total >= 0 && total > b.total {
		t.Errorf("library: %d counted names, over the total budget of %d (budget.txt)", total, b.total)
	}
	t.Logf("library: %d counted names, total budget %d", total, b.total)
}

func TestReadBudget(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"# c\n\nrouting 60  # core\ntotal 450  # all\n", true},
		{"routing 60\n", false},                       // no reason
		{"routing sixty  # core\n", false},            // not a count
		{"routing 60  # a\nrouting 61  # b\n", false}, // twice
		{"total 1  # a\ntotal 2  # b\n", false},
	} {
		name := dir + "/budget.txt"
		if err := os.WriteFile(name, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := readBudget(name)
		if (err == nil) != tc.ok {
			t.Errorf("readBudget(%q): err = %v, want ok = %v", tc.text, err, tc.ok)
		}
		if tc.ok && (b.max["routing"] != 60 || b.total != 450) {
			t.Errorf("readBudget(%q) = %+v", tc.text, b)
		}
	}
}
