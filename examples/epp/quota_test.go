package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy/extproc"
)

// -quota reads the gateway configuration's quota object: with a default limit of two
// requests an hour, a tenant's third request is refused at once with 429 and the rate-limit
// headers, while another tenant is still served.
func TestRunQuota(t *testing.T) {
	dir := t.TempDir()
	eps, qf := filepath.Join(dir, "endpoints"), filepath.Join(dir, "quota.json")
	if err := os.WriteFile(eps, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(qf, []byte(`{"quota": {"limits": [{"window": "1h", "requests": 2, "tokens": 100000}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0", "-endpoints-file", eps,
		"-secure-serving=false", "-quota", qf, "-tenant-header", "x-tenant"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 3)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, io.Discard, ready) }()
	addr := <-ready
	<-ready // the health port
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitReady(t, ctx, conn)
	tenant := func(name string) *corev3.HeaderValue {
		return &corev3.HeaderValue{Key: "x-tenant", RawValue: []byte(name)}
	}
	for i := range 2 {
		if got := pickWith(t, ctx, conn, tenant("a")); got != "127.0.0.1:1" {
			t.Fatalf("tenant a's request %d: destination %q, want 127.0.0.1:1", i, got)
		}
	}
	r := refusal(t, ctx, conn, tenant("a"))
	if r.GetStatus().GetCode() != 429 || !strings.Contains(string(r.GetBody()), "rate_limit_exceeded") {
		t.Fatalf("tenant a's third request: %v, want an immediate 429", r)
	}
	hd := map[string]string{}
	for _, h := range r.GetHeaders().GetSetHeaders() {
		hd[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	if hd["retry-after"] == "" || hd["x-ratelimit-limit-requests"] != "2" || hd["x-ratelimit-remaining-requests"] != "0" {
		t.Errorf("429 headers %v: want retry-after and x-ratelimit-limit-requests 2, -remaining-requests 0", hd)
	}
	if got := pickWith(t, ctx, conn, tenant("b")); got != "127.0.0.1:1" {
		t.Errorf("tenant b: destination %q, want 127.0.0.1:1", got)
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

// waitReady waits until the picker behind conn is ready (its endpoints read), at most 10 s.
func waitReady(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthReadiness})
		if err != nil {
			t.Fatalf("readiness: %v", err)
		}
		if hr.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness: %v after 10s, want SERVING", hr.GetStatus())
		}
	}
}

// refusal sends a chat request as pickWith does and returns the immediate response.
func refusal(t *testing.T, ctx context.Context, conn *grpc.ClientConn, extra ...*corev3.HeaderValue) *extprocv3.ImmediateResponse {
	t.Helper()
	return sendChat(t, ctx, conn, extra...).GetImmediateResponse()
}

// -quota refuses a file that is not the gateway's quota object, and limits it cannot hold.
func TestQuotaFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, json, want string }{
		{"bare", `{"limits": [{"window": "1m", "requests": 1}]}`, `want {"quota"`},
		{"other keys", `{"quota": {"limits": [{"window": "1m", "requests": 1}]}, "backends": []}`, `want {"quota"`},
		{"unknown key", `{"quota": {"limit": []}}`, "unknown field"},
		{"no limits", `{"quota": {}}`, "no limits"},
		{"band", `{"quota": {"limits": [{"window": "1m", "requests": 1, "bands": [7]}]}}`, "band 7"},
		{"window", `{"quota": {"limits": [{"window": "0s", "requests": 1}]}}`, "indow"},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
		if err := os.WriteFile(f, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := parseConfig([]string{"-endpoints", "127.0.0.1:1", "-quota", f})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: parseConfig: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// With -redis, two pickers hold a tenant's quota together through the replica extension's
// store: once the first picker's use has reached Redis and the second has synced, the second
// refuses its own second request, which alone it would admit (limit 4).
func TestRunQuotaReplicas(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	eps, qf := filepath.Join(dir, "endpoints"), filepath.Join(dir, "quota.json")
	if err := os.WriteFile(eps, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(qf, []byte(`{"quota": {"limits": [{"window": "1h", "requests": 4}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type picker struct {
		conn  *grpc.ClientConn
		maddr string
		done  chan error
	}
	start := func(name string) picker {
		c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0",
			"-endpoints-file", eps, "-secure-serving=false", "-quota", qf, "-tenant-header", "x-tenant",
			"-redis", srv.Addr, "-cluster", "quota-pickers", "-replica-id", name})
		if err != nil {
			t.Fatal(err)
		}
		ready := make(chan string, 3)
		p := picker{done: make(chan error, 1)}
		go func() { p.done <- run(ctx, c, io.Discard, ready) }()
		addr := <-ready
		p.maddr = <-ready
		<-ready
		if p.conn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.conn.Close() })
		return p
	}
	a, b := start("a"), start("b")
	syncs := func(p picker) int {
		_, body := scrape(t, p.maddr, "")
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, `usher_quota_syncs_total{result="ok"} `); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return int(n)
			}
		}
		return 0
	}
	// waitSyncs waits until p has synced twice more than it had (its next full sync began
	// after now).
	waitSyncs := func(p picker) {
		t.Helper()
		from := syncs(p)
		for deadline := time.Now().Add(10 * time.Second); syncs(p) < from+2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				_, body := scrape(t, p.maddr, "")
				var q []string
				for line := range strings.SplitSeq(body, "\n") {
					if strings.HasPrefix(line, "usher_quota") || strings.HasPrefix(line, "usher_replica") {
						q = append(q, line)
					}
				}
				t.Fatalf("picker at %s: no quota sync in 10 s; %s", p.maddr, strings.Join(q, "\n"))
			}
		}
	}
	tenant := &corev3.HeaderValue{Key: "x-tenant", RawValue: []byte("t")}
	waitReady(t, ctx, a.conn)
	waitReady(t, ctx, b.conn)
	for i := range 3 {
		if got := pickWith(t, ctx, a.conn, tenant); got == "" {
			t.Fatalf("picker a, request %d: no destination", i+1)
		}
	}
	waitSyncs(a) // a's three requests are in Redis
	// b weighs a tenant it has not seen by its own use until its next sync (the store is off
	// the request path): its first request is admitted, and the sync after it reads a's back.
	if got := pickWith(t, ctx, b.conn, tenant); got == "" {
		t.Fatal("picker b, the tenant's 4th request: no destination")
	}
	waitSyncs(b)
	r := refusal(t, ctx, b.conn, tenant)
	if r.GetStatus().GetCode() != 429 {
		t.Fatalf("picker b, the tenant's 5th request (its 2nd): %v, want an immediate 429 (the cluster's limit is 4)", r)
	}
	cancel()
	for _, p := range []picker{a, b} {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("run did not return")
		}
	}
}
