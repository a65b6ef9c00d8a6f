package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/usher-llm/usher/proxy/extproc"
)

func TestParseConfigErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-endpoints", "nohost"},
		{"-policy", "nope"},
		{"-router", "nope"},
		{"-ttl", "0s"},
		{"-bounded-wait", "2m"},
		{"-engine", "x"},
		{"-endpoints", "10.0.0.1:80", "-endpoints-file", "f"},
		{"-endpoints-file", "/does/not/exist"},
		{"-max-body", "10"},
		{"-metrics-token-file", "tokens"},
		{"-metrics-endpoint-auth"},
		{"-metrics-endpoint-auth", "-metrics-token-file", "tokens"},
		{"-metrics-endpoint-auth=maybe", "-metrics-listen", ":9090"},
		{"-cert-path", "/certs", "-secure-serving=false"},
		{"-replica-id", "p1"},
		{"-cluster", "c"},
		{"-redis", "no-port"},
		{"-redis", "redis://[bad"},
		{"-redis", "127.0.0.1:6379", "-replica-id", "bad id"},
		{"-redis", "127.0.0.1:6379", "-cluster", "bad/cluster"},
		{"-redis", "127.0.0.1:6379", "-ha-enable-leader-election", "-pool-name", "p"},
		{"stray"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", args)
		}
	}
	c, err := parseConfig([]string{"-endpoints", "10.0.0.1:8000,10.0.0.2:8000", "-endpoints", "10.0.0.3:8000", "-policy", "vtc", "-router", "llm-d"})
	if err != nil || len(c.Endpoints) != 3 || c.Policy != "vtc" || c.Router.Extends != "llm-d" {
		t.Fatalf("parseConfig: %+v, %v", c, err)
	}
	// -metrics-endpoint-auth is off by default (no cluster needed) and reaches no cluster
	// while the flags are parsed.
	if c.MetricsEndpointAuth {
		t.Error("-metrics-endpoint-auth is on by default")
	}
	if c, err := parseConfig([]string{"-metrics-listen", ":9090", "-metrics-endpoint-auth", "-kubeconfig", "/does/not/exist"}); err != nil || !c.MetricsEndpointAuth {
		t.Errorf("-metrics-endpoint-auth with -metrics-listen: %v, %v", c.MetricsEndpointAuth, err)
	}
}

func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "endpoints")
	if err := os.WriteFile(file, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0", "-endpoints-file", file, "-scrape-interval", "50ms", "-secure-serving=false"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 3)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, io.Discard, ready) }()
	addr, maddr, haddr := <-ready, <-ready, <-ready

	// The health port alone answers the reference's service name.
	hconn, err := grpc.NewClient("passthrough:///"+haddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hconn.Close()

	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitReady(t, ctx, conn) // once the endpoints file has been read by the picker's source (at once)
	if hr, err := healthpb.NewHealthClient(hconn).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthInferenceExtension}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%s on the health port: %v, %v", extproc.HealthInferenceExtension, hr, err)
	}
	got := pick(t, ctx, conn)
	if got != "127.0.0.1:1" {
		t.Fatalf("destination %q, want 127.0.0.1:1", got)
	}

	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "usher_") {
		t.Errorf("/metrics has no usher_ series")
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
}

// The picker's metrics listener is the gateway's (metrics.Exporter): with -metrics-token-file a
// scrape needs a token from the file.
func TestRunMetricsToken(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# prometheus\nscrape-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-metrics-token-file", tokens,
		"-endpoints", "127.0.0.1:1", "-no-scrape", "-health-listen", "", "-secure-serving=false"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 2)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, io.Discard, ready) }()
	<-ready
	maddr := <-ready
	for _, tc := range []struct {
		token  string
		status int
	}{{"", 401}, {"guess", 401}, {"scrape-token", 200}} {
		if status, body := scrape(t, maddr, tc.token); status != tc.status || (tc.status == 200) != strings.Contains(body, "usher_clamped_scores_total") {
			t.Errorf("token %q: %d, want %d (and the series only then)", tc.token, status, tc.status)
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
}

// scrape gets http://addr/metrics with token as a bearer token ("": none).
func scrape(t *testing.T, addr, token string) (status int, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}
