package apicheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const mod = "github.com/usher-llm/usher"

// listPackages runs go list in the library module alone (GOWORK=off, as an importer builds
// it) and returns each package's import path with its imports.
func listPackages(t *testing.T, format string, patterns ...string) map[string][]string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command("go", append([]string{"list", "-f", format}, patterns...)...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m
}

// rel strips the module path: "routing/session" for mod+"/routing/session", "." for mod.
func rel(p string) string {
	if p == mod {
		return "."
	}
	return strings.TrimPrefix(p, mod+"/")
}

// under reports whether the module-relative path p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// ground reports whether p is a ground-floor helper: under internal/ but not internal/glue/.
func ground(p string) bool { return under(p, "internal") && !under(p, "internal/glue") }

// core reports whether p is one of the core packages an embedder builds on and their
// capability packages: prefixcache, flowcontrol, fairness and routing with everything below.
func core(p string) bool {
	return (under(p, "prefixcache") && !under(p, "prefixcache/kvevents")) || under(p, "flowcontrol") || under(p, "fairness") || under(p, "routing")
}

// TestHouse keeps the library's packages in floors, drawn from their imports, with no import
// running back up a floor:
//
//   - the ground floor, internal/ (but internal/glue/), imports no other package of the module
//     outside internal/;
//   - the core (prefixcache, flowcontrol, fairness, routing and the capability packages
//     below routing) imports only itself and the ground floor;
//   - routing imports none of its capability packages (routing/internal/... excepted): they
//     import routing, as grpc/balancer/roundrobin imports balancer;
//   - metrics imports none of proxy, gateway, replica, internal/glue;
//   - internal/glue/... (the pipeline's shared parts that build on the library) is imported
//     only from proxy, gateway, replica and internal/glue, never from below;
//   - replica imports nothing under proxy or gateway, and nothing under proxy imports replica
//     or gateway.
//
// It logs the house: each package's floor (1 + the highest floor it imports; the ground floor
// is 0 for packages that import nothing of the module).
func TestHouse(t *testing.T) {
	pkgs := listPackages(t, "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	imports := map[string][]string{}
	for p, ims := range pkgs {
		if !strings.HasPrefix(p, mod) {
			continue
		}
		for _, im := range ims {
			if strings.HasPrefix(im, mod+"/") || im == mod {
				imports[rel(p)] = append(imports[rel(p)], rel(im))
			}
		}
		if _, ok := imports[rel(p)]; !ok {
			imports[rel(p)] = nil
		}
	}
	var names []string
	for p := range imports {
		names = append(names, p)
	}
	sort.Strings(names)
	up := 0
	for _, p := range names {
		for _, im := range imports[p] {
			var why string
			switch {
			case ground(p) && !under(im, "internal"):
				why = "the ground floor (internal/) imports nothing of the library"
			case core(p) && !core(im) && !ground(im):
				why = "the core imports only itself and the ground floor"
			case p == "routing" && under(im, "routing/") && !under(im, "routing/internal"):
				why = "routing imports none of its capability packages"
			case under(p, "metrics") && (under(im, "proxy") || under(im, "gateway") || under(im, "replica") || under(im, "internal/glue")):
				why = "metrics sits below the pipeline"
			case under(im, "internal/glue") && !(under(p, "proxy") || under(p, "gateway") || under(p, "replica") || under(p, "internal/glue")):
				why = "internal/glue is the pipeline's floor, imported only from above it"
			case under(p, "replica") && (under(im, "proxy") || under(im, "gateway")):
				why = "replica does not import the pipeline"
			case under(p, "proxy") && (under(im, "replica") || under(im, "gateway")):
				why = "nothing under proxy imports replica or gateway"
			}
			if why != "" {
				up++
				t.Errorf("%s imports %s: %s", p, im, why)
			}
		}
	}
	floor := map[string]int{}
	var depth func(p string, seen map[string]bool) int
	depth = func(p string, seen map[string]bool) int {
		if f, ok := floor[p]; ok {
			return f
		}
		if seen[p] {
			return 0
		}
		seen[p] = true
		f := 0
		for _, im := range imports[p] {
			if d := depth(im, seen) + 1; d > f {
				f = d
			}
		}
		floor[p] = f
		return f
	}
	byFloor := map[int][]string{}
	top := 0
	for _, p := range names {
		f := depth(p, map[string]bool{})
		byFloor[f] = append(byFloor[f], p)
		top = max(top, f)
	}
	for f := 0; f <= top; f++ {
		t.Logf("floor %d: %s", f, strings.Join(byFloor[f], " "))
	}
	t.Logf("%d floors, %d imports back up a floor", top+1, up)
}

// TestDependencies keeps heavy clients out of what an embedder links: the core packages
// depend on xxhash alone (besides the module and the standard library); neither proxy nor
// gateway (the configuration, config files included) links a Redis, ZMQ, gRPC or Kubernetes
// client — those come with replica and gateway/replicaext, proxy/kvfeed and proxy/extproc, for
// programs that import them; nothing in the library links Kubernetes, the API client SDKs or
// plotting, and the library's go.mod requires none of them.
func TestDependencies(t *testing.T) {
	deps := listPackages(t, "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	for p, ds := range deps {
		r := rel(p)
		for _, d := range ds {
			switch {
			case !strings.Contains(strings.Split(d, "/")[0], "."):
				// the standard library
			case core(r) && !strings.HasPrefix(d, mod) && !strings.HasPrefix(d, "github.com/cespare/xxhash"):
				t.Errorf("%s depends on %s: the core packages depend on xxhash alone", r, d)
			case (r == "proxy" || r == "proxy/openai" || under(r, "gateway") && r != "gateway/replicaext") && heavy(d):
				t.Errorf("%s links %s", r, d)
			case strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/") || strings.HasPrefix(d, "gonum.org/") ||
				strings.HasPrefix(d, "github.com/anthropics/") || strings.HasPrefix(d, "github.com/openai/"):
				t.Errorf("%s links %s: Kubernetes, plotting and the API clients belong to modules of their own", r, d)
			}
		}
	}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, h := range []string{"k8s.io/", "sigs.k8s.io/", "gonum.org/", "github.com/anthropics/", "github.com/openai/", "github.com/stretchr/testify"} {
			if strings.HasPrefix(f[0], h) {
				t.Errorf("the library's go.mod requires %s %s: a floor for every importer; it belongs to a module of its own", f[0], f[1])
			}
		}
	}
}

// heavy reports whether the import path d is a client proxy and gateway must not link.
func heavy(d string) bool {
	for _, h := range []string{"github.com/redis/", "github.com/go-zeromq/", "google.golang.org/grpc", "k8s.io/", mod + "/replica", mod + "/prefixcache/kvevents", mod + "/proxy/kvfeed", mod + "/gateway/replicaext"} {
		if strings.HasPrefix(d, h) {
			return true
		}
	}
	return false
}
