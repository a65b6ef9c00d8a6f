package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/usher-llm/usher/examples/internal/fakereviews"
)

// With -metrics-endpoint-auth (and -metrics-token-file) the picker's /metrics serves the
// file's tokens without asking the API server, then the tokens the API server authenticates
// and authorises; a refusal is 401, the API server failing 503.
func TestRunMetricsEndpointAuth(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-metrics-token-file", tokens,
		"-metrics-endpoint-auth", "-kubeconfig", "/test/kubeconfig", "-endpoints", "127.0.0.1:1", "-no-scrape", "-health-listen", "", "-secure-serving=false"})
	if err != nil {
		t.Fatal(err)
	}
	rv := new(fakereviews.Reviews)
	var mu sync.Mutex
	var kubeconfigs []string
	c.connectReview = func(kubeconfig string) (kubernetes.Interface, error) {
		mu.Lock()
		kubeconfigs = append(kubeconfigs, kubeconfig)
		mu.Unlock()
		return rv.Clientset(), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 2)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- run(ctx, c, &out, ready) }()
	var maddr string
	for i := range 2 {
		select {
		case maddr = <-ready:
		case err := <-done:
			t.Fatalf("run: %v (address %d)", err, i)
		}
	}
	for i, step := range []struct {
		token  string
		fail   bool
		status int
		calls  int64 // TokenReviews so far
	}{
		{"", false, 401, 0},
		{"file-token", false, 200, 0},
		{"prometheus-token", false, 200, 1},
		{"prometheus-token", false, 200, 1}, // cached
		{"nobody-token", false, 401, 2},
		{"guess", false, 401, 3},
		{"other-token", true, 503, 4},
		{"file-token", true, 200, 4},
	} {
		rv.Fail.Store(step.fail)
		if status, body := scrape(t, maddr, step.token); status != step.status || (step.status == 200) != strings.Contains(body, "usher_clamped_scores_total") {
			t.Errorf("step %d, token %q: %d, want %d (and the series only then)", i, step.token, status, step.status)
		}
		if got := rv.Calls.Load(); got != step.calls {
			t.Errorf("step %d, token %q: %d TokenReviews, want %d", i, step.token, got, step.calls)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kubeconfigs) != 1 || kubeconfigs[0] != "/test/kubeconfig" {
		t.Errorf("connected with kubeconfigs %q, want once with -kubeconfig's", kubeconfigs)
	}
	if want := "(bearer tokens from " + tokens + ", then Kubernetes TokenReview and SubjectAccessReview (get /metrics))"; !strings.Contains(out.String(), want) {
		t.Errorf("startup lines %q lack %q", out.String(), want)
	}
}

// Without a cluster to reach, -metrics-endpoint-auth fails the start, saying why.
func TestRunMetricsEndpointAuthNoCluster(t *testing.T) {
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-metrics-endpoint-auth",
		"-kubeconfig", filepath.Join(t.TempDir(), "missing"), "-endpoints", "127.0.0.1:1", "-no-scrape", "-health-listen", "", "-secure-serving=false"})
	if err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), c, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "-metrics-endpoint-auth") {
		t.Fatalf("run: %v, want an error naming -metrics-endpoint-auth", err)
	}
}
