package apicheck

import (
	"go/token"
	"path"
	"strings"
	"testing"
)

// interfaces returns the library's exported interface types, as "name" for those of package
// rel and "pkg.Name" (pkg the last element of the package's directory) for all of them.
func interfaces(all map[string][]string) map[string]map[string]bool {
	byPkg := map[string]map[string]bool{}
	for rel, lines := range all {
		for _, l := range lines {
			if n := topLevelName(l); n != "" && (strings.HasSuffix(l, " interface{...}") || strings.HasSuffix(l, " interface{}")) {
				if byPkg[rel] == nil {
					byPkg[rel] = map[string]bool{}
				}
				byPkg[rel][n] = true
			}
		}
	}
	return byPkg
}

// ctorProblem returns what is wrong with the func on surface line l of package rel under the
// constructor rule, or "" when it complies or is not named New*. types holds the package's
// exported types; ifaces the library's interfaces by package.
func ctorProblem(rel, l string, types map[string]bool, ifaces map[string]map[string]bool) string {
	name := topLevelName(l)
	_, rest, _ := strings.Cut(l, ", func ")
	x, isNew := strings.CutPrefix(name, "New")
	if !isNew || (x != "" && !token.IsExported(x)) || !strings.HasPrefix(rest, name) {
		return "" // not a constructor (Newton), or not a func
	}
	sig := strings.TrimPrefix(rest, name)
	if !strings.HasPrefix(sig, "(") {
		return "is generic: a constructor takes its Options struct"
	}
	depth, end := 0, 0
	for i, r := range sig {
		if r == '(' || r == '[' || r == '{' {
			depth++
		} else if r == ')' || r == ']' || r == '}' {
			depth--
		}
		if depth == 0 {
			end = i
			break
		}
	}
	params, results := sig[1:end], strings.TrimSpace(sig[end+1:])
	var bad []string
	if want := x + "Options"; params != want {
		bad = append(bad, "takes ("+params+"), not ("+want+")")
	}
	val, ok := strings.CutSuffix(strings.TrimPrefix(results, "("), ", error)")
	if !ok || !strings.HasPrefix(results, "(") {
		bad = append(bad, "returns "+results+", not a value and an error")
	} else if t, ptr := strings.CutPrefix(val, "*"); ptr && types[t] && !ifaces[rel][t] {
		if x != "" && t != x {
			bad = append(bad, "builds *"+t+": the name is New"+t)
		}
	} else if isIface(rel, val, ifaces) {
		if x == "" {
			bad = append(bad, "New returns the package's main type, *T, not the interface "+val)
		}
	} else {
		bad = append(bad, "returns "+val+", neither *T of this package nor a library interface")
	}
	return strings.Join(bad, "; ")
}

func isIface(rel, t string, ifaces map[string]map[string]bool) bool {
	pkg, name, ok := strings.Cut(t, ".")
	if !ok {
		return ifaces[rel][t]
	}
	for r, m := range ifaces {
		if path.Base(r) == pkg && m[name] {
			return true
		}
	}
	return false
}

// TestConstructors holds every func named New* of the library to the constructor rule of the
// package doc: New(Options) (*T, error), NewT(TOptions) (*T, error), or, for a plug-in,
// NewX(XOptions) (I, error) with I an interface of the library.
func TestConstructors(t *testing.T) {
	all, rels := surfaces(t)
	ifaces := interfaces(all)
	for _, rel := range rels {
		types := map[string]bool{}
		for _, l := range all[rel] {
			if n := topLevelName(l); n != "" && strings.Contains(l, ", type ") {
				types[n] = true
			}
		}
		for _, l := range all[rel] {
			msg := ctorProblem(rel, l, types, ifaces)
			if msg == "" {
				continue
			}
			key := rel + "." + topLevelName(l)
			t.Errorf("%s %s (constructor rule: internal/apicheck package doc)", key, msg)
		}
	}
}

func TestCtorProblem(t *testing.T) {
	types := map[string]bool{"Queue": true, "Keyer": true, "Scorer": true, "Rand": true}
	ifaces := map[string]map[string]bool{"p": {"Scorer": true}, "flowcontrol": {"Policy": true}}
	for _, tc := range []struct{ line, want string }{
		{"pkg p, func New(Options) (*Queue, error)", ""},
		{"pkg p, func NewKeyer(KeyerOptions) (*Keyer, error)", ""},
		{"pkg p, func NewLAS(LASOptions) (flowcontrol.Policy, error)", ""},
		{"pkg p, func NewCost(CostOptions) (Scorer, error)", ""},
		{"pkg p, func Newton(int) float64", ""},
		{"pkg p, func LoadAware(int) Scorer", ""},
		{"pkg p, func (*Queue) NewThing(int) int", ""},
		{"pkg p, func New(Options) (Scorer, error)", "New returns the package's main type, *T, not the interface Scorer"},
		{"pkg p, func NewRand(uint64) *Rand", "takes (uint64), not (RandOptions); returns *Rand, not a value and an error"},
		{"pkg p, func NewCost(CostOptions) Scorer", "returns Scorer, not a value and an error"},
		{"pkg p, func NewKeyer(Options) (*Keyer, error)", "takes (Options), not (KeyerOptions)"},
		{"pkg p, func NewAffinity(AffinityOptions) (*Keyer, error)", "builds *Keyer: the name is NewKeyer"},
		{"pkg p, func NewServer(string, http.Handler) *http.Server", "takes (string, http.Handler), not (ServerOptions); returns *http.Server, not a value and an error"},
		{"pkg p, func NewX(XOptions) (*http.Server, error)", "returns *http.Server, neither *T of this package nor a library interface"},
	} {
		if got := ctorProblem("p", tc.line, types, ifaces); got != tc.want {
			t.Errorf("ctorProblem(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}
