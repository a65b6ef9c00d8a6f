package main

import (
	"context"
	"io"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy/extproc"
)

func readyPod(name, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "m"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

// pick sends one chat completion through the picker and returns the destination header.
func pick(t *testing.T, ctx context.Context, conn *grpc.ClientConn) string {
	t.Helper()
	return pickWith(t, ctx, conn)
}

// pickWith is pick with extra request headers.
func pickWith(t *testing.T, ctx context.Context, conn *grpc.ClientConn, extra ...*corev3.HeaderValue) string {
	t.Helper()
	r := sendChat(t, ctx, conn, extra...)
	for _, hv := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == extproc.DestinationHeader {
			return string(hv.GetHeader().GetRawValue())
		}
	}
	return ""
}

// sendChat sends a chat completion's headers (with extra) and body through the picker's
// stream and returns its answer to the body: the pick, or an immediate response.
func sendChat(t *testing.T, ctx context.Context, conn *grpc.ClientConn, extra ...*corev3.HeaderValue) *extprocv3.ProcessingResponse {
	t.Helper()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.CloseSend() }()
	h := &corev3.HeaderMap{Headers: append([]*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
	}, extra...)}
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h}}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), EndOfStream: true}}})
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRunPool drives the picker from an InferencePool on a fake API server: after each
// change of the pool's pods, picks go where the pool now says.
func TestRunPool(t *testing.T) {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.Group + "/" + inferencepool.Version, "kind": inferencepool.Kind,
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "m"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}},
	}}
	pods := fake.NewClientset(readyPod("p1", "10.0.0.1", true))
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList"}, pool)

	if _, err := parseConfig([]string{"-pool-name", "pool", "-endpoints", "10.0.0.1:80"}); err == nil {
		t.Error("-pool-name with -endpoints: no error")
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-health-listen", "", "-no-scrape", "-pool-name", "pool", "-pool-namespace", "ns", "-kubeconfig", "/does/not/matter", "-secure-serving=false"})
	if err == nil {
		t.Fatal("parseConfig with an unreadable -kubeconfig succeeded")
	}
	ctx, addrs := runPool(t, c, inferencepool.Clients{Pods: pods, Pools: pools}, 1)
	conn := dial(t, addrs[0])

	eventually := func(step, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := pick(t, ctx, conn)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: pick = %q, want %q", step, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventually("start", "10.0.0.1:8000")
	if _, err := pods.CoreV1().Pods("ns").Create(ctx, readyPod("p2", "10.0.0.2", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.CoreV1().Pods("ns").Update(ctx, readyPod("p1", "10.0.0.1", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("p1 unready, p2 ready", "10.0.0.2:8000")
	for range 5 {
		if got := pick(t, ctx, conn); got != "10.0.0.2:8000" {
			t.Fatalf("pick after the change = %q, want 10.0.0.2:8000", got)
		}
	}
	if _, err := pools.Resource(inferencepool.GroupVersionResource).Namespace("ns").Update(ctx, func() *unstructured.Unstructured {
		p := pool.DeepCopy()
		p.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(9000)}}
		return p
	}(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("target port changed", "10.0.0.2:9000")
}

// A pool with no ready pods yet: once the pool and its pods have synced the picker is ready
// (so a fail-closed gateway reaches it), and answers each request 503 with Retry-After.
func TestRunEmptyPoolReady(t *testing.T) {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.Group + "/" + inferencepool.Version, "kind": inferencepool.Kind,
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "m"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}},
	}}
	pods := fake.NewClientset(readyPod("p1", "10.0.0.1", false))
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList"}, pool)
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0", "-no-scrape", "-pool-name", "pool", "-pool-namespace", "ns", "-kubeconfig", "/does/not/matter", "-secure-serving=false"})
	if err == nil {
		t.Fatal("parseConfig with an unreadable -kubeconfig succeeded") // the flags parsed; the fake clients follow
	}
	runCtx, addrs := runPool(t, c, inferencepool.Clients{Pods: pods, Pools: pools}, 2)
	ctx, cancel := context.WithTimeout(runCtx, 30*time.Second)
	defer cancel()
	conn, hconn := dial(t, addrs[0]), dial(t, addrs[1])
	for {
		hr, err := healthpb.NewHealthClient(hconn).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthInferenceExtension})
		if err != nil {
			t.Fatal(err)
		}
		if hr.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("not ready with a synced, empty pool")
		case <-time.After(10 * time.Millisecond):
		}
	}
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
	}}
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h}}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), EndOfStream: true}}})
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ir := r.GetImmediateResponse()
	retry := ""
	for _, hv := range ir.GetHeaders().GetSetHeaders() {
		if hv.GetHeader().GetKey() == "retry-after" {
			retry = string(hv.GetHeader().GetRawValue())
		}
	}
	if ir.GetStatus().GetCode() != 503 || retry == "" {
		t.Errorf("empty pool: %v, want an immediate 503 with Retry-After", r)
	}
	_ = st.CloseSend()
}

// TestRunPoolGroup follows a v1alpha2 pool (whose extensionRef omits portNumber, as its CRD
// allows) with -pool-group inference.networking.x-k8s.io, and refuses any other group.
func TestRunPoolGroup(t *testing.T) {
	if _, err := parseConfig([]string{"-pool-name", "pool", "-pool-group", "inference.networking.example"}); err == nil {
		t.Error("-pool-group of an unknown group: no error")
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.AlphaGroup + "/" + inferencepool.AlphaVersion, "kind": inferencepool.Kind,
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"app": "m"}, "targetPortNumber": int64(8000),
			"extensionRef": map[string]any{"name": "epp"}},
	}}
	pods := fake.NewClientset(readyPod("p1", "10.0.0.1", true))
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.AlphaGroupVersionResource: "InferencePoolList"}, pool)
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-no-scrape", "-pool-name", "pool", "-pool-namespace", "ns",
		"-pool-group", inferencepool.AlphaGroup, "-kubeconfig", "/does/not/matter", "-secure-serving=false", "-health-listen", ""})
	if err == nil {
		t.Fatal("parseConfig with an unreadable -kubeconfig succeeded")
	}
	if c.PoolGroup != inferencepool.AlphaGroup {
		t.Fatalf("PoolGroup = %q", c.PoolGroup)
	}
	ctx, addrs := runPool(t, c, inferencepool.Clients{Pods: pods, Pools: pools}, 1)
	conn := dial(t, addrs[0])
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := pick(t, ctx, conn)
		if got == "10.0.0.1:8000" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pick = %q, want 10.0.0.1:8000 (the v1alpha2 pool's pod)", got)
		}
	}
}

// runPool runs the picker of c on the fake API server's clients until the test ends, then
// checks that run returns nil within 10 s; it returns the context the picker runs under and
// the first n addresses it reports (ext_proc's first).
func runPool(t *testing.T, c config, clients inferencepool.Clients, n int) (context.Context, []string) {
	t.Helper()
	c.connect = func(string) (inferencepool.Clients, error) { return clients, nil }
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 4) // ext_proc, metrics and health at most: run never blocks on it
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, io.Discard, ready) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return")
		}
	})
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = <-ready
	}
	return ctx, addrs
}
