package apicheck

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps heavy clients out of what an embedder links: the core packages
// depend on xxhash alone (besides the module and the standard library), and neither proxy nor
// gateway (the configuration, config files included) links a Redis, ZMQ, gRPC or Kubernetes
// client — those come with replica and gateway/replicaext, proxy/kvfeed and proxy/extproc,
// for programs that import them; no package under proxy links replica or a Redis client, and
// replica does not import proxy.
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
	for _, pkg := range []string{"/proxy/openai", "/proxy/kvfeed", "/proxy/extproc"} {
		for _, d := range deps(mod + pkg) {
			if strings.HasPrefix(d, "github.com/redis/") || d == mod+"/replica" {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
	for _, d := range deps(mod + "/replica") {
		if d == mod+"/proxy" {
			t.Error("replica imports proxy")
		}
	}
	for _, pkg := range []string{"/proxy", "/gateway"} {
		for _, d := range deps(mod + pkg) {
			for _, heavy := range []string{"github.com/redis/", "github.com/go-zeromq/", "google.golang.org/grpc", "k8s.io/", mod + "/replica", mod + "/prefixcache/kvevents", mod + "/proxy/kvfeed", mod + "/gateway/replicaext"} {
				if strings.HasPrefix(d, heavy) {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
	}
	// Kubernetes comes only with kube/inferencepool, which only the picker's main
	// imports: an embedder that never runs on Kubernetes never links client-go.
	for _, pkg := range []string{"/prefixcache", "/flowcontrol", "/fairness", "/routing", "/proxy", "/proxy/extproc", "/proxy/openai", "/proxy/kvfeed", "/gateway", "/gateway/replicaext", "/replica", "/metrics"} {
		for _, d := range deps(mod + pkg) {
			if strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/") {
				t.Errorf("%s links %s: only kube/inferencepool may", pkg, d)
				break
			}
		}
	}
	// The API clients are for tests and examples: the gateway speaks their APIs itself.
	for _, pkg := range []string{"/proxy", "/proxy/openai", "/proxy/extproc", "/gateway"} {
		for _, d := range deps(mod + pkg) {
			if strings.HasPrefix(d, "github.com/anthropics/") || strings.HasPrefix(d, "github.com/openai/") {
				t.Errorf("%s links the API client %s", pkg, d)
			}
		}
	}
}
