package apicheck

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps heavy clients out of what an embedder links: the core packages
// depend on xxhash alone (besides the module and the standard library), and proxy links no
// Redis, ZMQ, gRPC or Kubernetes client — those come with replica, proxy/kvfeed,
// proxy/extproc and proxy/gateway, for programs that import them.
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/usher-llm/usher"
	for _, core := range []string{"prefixcache", "flowcontrol", "fairness", "routing"} {
		for _, d := range deps(mod + "/" + core) {
			if !strings.HasPrefix(d, mod) && !strings.HasPrefix(d, "github.com/cespare/xxhash") {
				t.Errorf("%s depends on %s: the core packages depend on xxhash alone", core, d)
			}
		}
	}
	for _, d := range deps(mod + "/proxy") {
		for _, heavy := range []string{"github.com/redis/", "github.com/go-zeromq/", "google.golang.org/grpc", "k8s.io/", mod + "/replica", mod + "/prefixcache/kvevents"} {
			if strings.HasPrefix(d, heavy) {
				t.Errorf("proxy links %s", d)
			}
		}
	}
}
