package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/usher-llm/usher/examples/internal/fakereviews"
)

// The gateway's metrics listener with -metrics-endpoint-auth: the same judge as the picker's
// (kube/metricsauth), through the Exporter they share.
func TestRunMetricsEndpointAuth(t *testing.T) {
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-sim-servers", "1", "-sim-kv-events=false", "-metrics-listen", "127.0.0.1:0",
		"-metrics-endpoint-auth", "-kubeconfig", "/test/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	rv := new(fakereviews.Reviews)
	var kubeconfig atomic.Pointer[string]
	c.connectReview = func(path string) (kubernetes.Interface, error) {
		kubeconfig.Store(&path)
		return rv.Clientset(), nil
	}
	var out bytes.Buffer
	addrs, stop := start(t, c, &out, 2)
	mbase := addrs[1]
	for i, step := range []struct {
		token  string
		fail   bool
		status int
		calls  int64
	}{
		{"", false, 401, 0},
		{"prometheus-token", false, 200, 1},
		{"prometheus-token", true, 200, 1}, // cached: the API server is not asked
		{"nobody-token", false, 401, 2},
		{"guess", false, 401, 3},
		{"other-token", true, 503, 4},
	} {
		rv.Fail.Store(step.fail)
		status, body := get(t, mbase+"/metrics", step.token)
		if status != step.status || (status == 200) != strings.Contains(body, "usher_admissions_total") {
			t.Errorf("step %d, token %q: %d, want %d (and the series only then)", i, step.token, status, step.status)
		}
		if got := rv.Calls.Load(); got != step.calls {
			t.Errorf("step %d, token %q: %d TokenReviews, want %d", i, step.token, got, step.calls)
		}
	}
	stop()
	if p := kubeconfig.Load(); p == nil || *p != "/test/kubeconfig" {
		t.Errorf("connected with kubeconfig %v, want -kubeconfig's", p)
	}
	if want := "/metrics (Kubernetes TokenReview and SubjectAccessReview (get /metrics))"; !strings.Contains(out.String(), want) {
		t.Errorf("output %q lacks %q", out.String(), want)
	}
}

func TestParseConfigMetricsEndpointAuth(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{}, true},
		{[]string{"-metrics-endpoint-auth"}, false}, // needs -metrics-listen
		{[]string{"-metrics-endpoint-auth=maybe", "-metrics-listen", ":9090"}, false},
		{[]string{"-metrics-endpoint-auth", "-metrics-listen", ":9090"}, true},
		{[]string{"-metrics-endpoint-auth", "-metrics-listen", ":9090", "-kubeconfig", missing}, true}, // read by run, not here
	} {
		c, err := parseConfig(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("parseConfig(%q): %v, want ok %v", tc.args, err, tc.ok)
		}
		if err == nil && c.MetricsEndpointAuth != (len(tc.args) > 0) {
			t.Errorf("parseConfig(%q): MetricsEndpointAuth %v", tc.args, c.MetricsEndpointAuth)
		}
	}
	// run fails at start, naming the flag, when the cluster cannot be reached.
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-sim-servers", "1", "-sim-kv-events=false", "-metrics-listen", "127.0.0.1:0",
		"-metrics-endpoint-auth", "-kubeconfig", missing})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), c, new(bytes.Buffer), nil); err == nil || !strings.Contains(err.Error(), "-metrics-endpoint-auth") {
		t.Errorf("run without a cluster: %v, want an error naming -metrics-endpoint-auth", err)
	}
}
