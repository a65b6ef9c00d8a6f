package inferencepool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/usher-llm/usher/proxy/extproc"
	"github.com/usher-llm/usher/routing"
)

const ns = "serving"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// poolObject is a v1 InferencePool as the dynamic client holds it.
func poolObject(sel map[string]string, ports ...int32) *unstructured.Unstructured {
	p := &Pool{
		TypeMeta:   metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec:       Spec{Selector: LabelSelector{MatchLabels: sel}},
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, Port{Number: n})
	}
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// newPod returns a pod of ns with ip and labels, Ready or not.
func newPod(name, ip string, ready bool, lbls map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// fakeCluster is a fake API server: a typed clientset for pods and a dynamic one for pools.
type fakeCluster struct {
	pods  *fake.Clientset
	pools *dynamicfake.FakeDynamicClient
}

func newFakeCluster(pool *unstructured.Unstructured, pods ...*corev1.Pod) fakeCluster {
	objs := make([]k8sruntime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	var pobjs []k8sruntime.Object
	if pool != nil {
		pobjs = append(pobjs, pool)
	}
	return fakeCluster{
		pods: fake.NewClientset(objs...),
		pools: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
			map[schema.GroupVersionResource]string{GroupVersionResource: "InferencePoolList", AlphaGroupVersionResource: "InferencePoolList"}, pobjs...),
	}
}

func (c fakeCluster) clients() Clients { return Clients{Pods: c.pods, Pools: c.pools} }

// run starts a Source over c and returns its updates and a stop function that returns
// Run's error.
func run(t *testing.T, o Options) (*Source, <-chan []extproc.Endpoint, func() error) {
	t.Helper()
	o.Name, o.Namespace, o.Logger = "pool", ns, quiet
	if o.Debounce == 0 {
		o.Debounce = 20 * time.Millisecond
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan []extproc.Endpoint, 100)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, func(eps []extproc.Endpoint) { updates <- eps }) }()
	return s, updates, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}
}

func addrs(eps []extproc.Endpoint) string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Address)
	}
	return strings.Join(out, ",")
}

// waitSet waits for an update whose addresses are want, failing on any other.
func waitSet(t *testing.T, step string, updates <-chan []extproc.Endpoint, want string) []extproc.Endpoint {
	t.Helper()
	select {
	case eps := <-updates:
		if got := addrs(eps); got != want {
			t.Fatalf("%s: set = [%s], want [%s]", step, got, want)
		}
		return eps
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no update, want [%s]", step, want)
		return nil
	}
}

// noUpdate checks that no set is reported for a while.
func noUpdate(t *testing.T, step string, updates <-chan []extproc.Endpoint) {
	t.Helper()
	select {
	case eps := <-updates:
		t.Fatalf("%s: unexpected update [%s]", step, addrs(eps))
	case <-time.After(200 * time.Millisecond):
	}
}

// settle waits for the goroutine count to come back to at most n.
func settle(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, want at most %d\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSourceSteps(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := context.Background()
	appA, appB := map[string]string{"app": "a"}, map[string]string{"app": "b"}
	c := newFakeCluster(poolObject(appA, 8000), newPod("p1", "10.0.0.1", true, appA))
	pods := c.pods.CoreV1().Pods(ns)
	pools := c.pools.Resource(GroupVersionResource).Namespace(ns)
	update := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s, updates, stop := run(t, Options{Clients: c.clients(), ModelsKey: "models", AdaptersKey: "adapters", KVEventsPort: 5557})

	waitSet(t, "start", updates, "10.0.0.1:8000")
	if st := s.Stats(); !st.Connected || !st.PoolFound || st.Endpoints != 1 || st.Updates != 1 || st.LastSync.IsZero() {
		t.Errorf("Stats = %+v", st)
	}

	p2 := newPod("p2", "10.0.0.2", false, appA)
	if _, err := pods.Create(ctx, p2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, "unready pod added", updates)

	p2 = newPod("p2", "10.0.0.2", true, appA)
	update(p2)
	waitSet(t, "pod made ready", updates, "10.0.0.1:8000,10.0.0.2:8000")

	update(newPod("p1", "10.0.0.1", false, appA))
	waitSet(t, "pod made unready", updates, "10.0.0.2:8000")
	update(newPod("p1", "10.0.0.1", true, appA))
	waitSet(t, "pod ready again", updates, "10.0.0.1:8000,10.0.0.2:8000")

	update(newPod("p1", "10.0.0.1", true, map[string]string{"app": "a", "other": "x"}))
	noUpdate(t, "an update that changes nothing", updates)

	now := metav1.Now()
	p2.DeletionTimestamp = &now
	update(p2)
	waitSet(t, "pod being deleted", updates, "10.0.0.1:8000")
	if err := pods.Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, "pod deleted after its deletion timestamp", updates)

	if _, err := pods.Create(ctx, newPod("p3", "10.0.0.3", true, appB), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, "pod outside the selector", updates)
	update(newPod("p3", "10.0.0.3", true, appA))
	waitSet(t, "pod re-labelled into the selector", updates, "10.0.0.1:8000,10.0.0.3:8000")
	update(newPod("p1", "10.0.0.1", true, appB))
	waitSet(t, "pod re-labelled out of the selector", updates, "10.0.0.3:8000")

	if _, err := pools.Update(ctx, poolObject(appB, 8000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, "pool selector changed", updates, "10.0.0.1:8000")

	if _, err := pools.Update(ctx, poolObject(appB, 8000, 8001), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, "target port added", updates, "10.0.0.1:8000,10.0.0.1:8001")
	if _, err := pools.Update(ctx, poolObject(appB, 9000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, "target port changed", updates, "10.0.0.1:9000")

	p1 := newPod("p1", "10.0.0.1", true, map[string]string{"app": "b", DefaultRoleLabel: "decode"})
	p1.Annotations = map[string]string{"models": "llama, qwen", "adapters": "sql-lora"}
	update(p1)
	eps := waitSet(t, "role and models", updates, "10.0.0.1:9000")
	want := extproc.Endpoint{Address: "10.0.0.1:9000", KVEvents: "tcp://10.0.0.1:5557", Role: routing.RoleDecode,
		Models: []string{"llama", "qwen"}, Adapters: []string{"sql-lora"}}
	if fmt.Sprint(eps[0]) != fmt.Sprint(want) {
		t.Errorf("endpoint = %+v, want %+v", eps[0], want)
	}

	if _, err := pools.Update(ctx, poolObject(nil, 9000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, "pool with an empty selector", updates)
	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	noUpdate(t, "pool deleted", updates)
	if st := s.Stats(); st.PoolFound || st.Endpoints != 1 {
		t.Errorf("after the pool's deletion: Stats = %+v, want PoolFound false and the last set kept", st)
	}

	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	settle(t, before)
}

func TestSourceAlpha(t *testing.T) {
	before := runtime.NumGoroutine()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": AlphaGroup + "/" + AlphaVersion, "kind": Kind,
		"metadata": map[string]any{"name": "pool", "namespace": ns},
		"spec":     map[string]any{"selector": map[string]any{"app": "a"}, "targetPortNumber": int64(8000), "extensionRef": map[string]any{"name": "epp"}},
	}}
	c := newFakeCluster(nil, newPod("p1", "fd00::1", true, map[string]string{"app": "a"}))
	if _, err := c.pools.Resource(AlphaGroupVersionResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, updates, stop := run(t, Options{Clients: c.clients(), Alpha: true})
	waitSet(t, "v1alpha2 pool", updates, "[fd00::1]:8000")
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	settle(t, before)
}

func TestSourceEmptyPoolAndMissingPool(t *testing.T) {
	c := newFakeCluster(nil)
	s, updates, stop := run(t, Options{Clients: c.clients()})
	noUpdate(t, "no pool", updates)
	if st := s.Stats(); st.PoolFound || !st.Connected {
		t.Errorf("Stats = %+v, want connected without a pool", st)
	}
	if _, err := c.pools.Resource(GroupVersionResource).Namespace(ns).Create(context.Background(), poolObject(map[string]string{"app": "a"}, 8000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, "pool created, no pods", updates, "")
	_ = stop()
}

func TestNewRefuses(t *testing.T) {
	cl := newFakeCluster(nil).clients()
	for _, o := range []Options{
		{Name: "p", Namespace: ns},
		{Clients: cl, Namespace: ns},
		{Clients: cl, Name: "p"},
		{Clients: cl, Name: "P!", Namespace: ns},
		{Clients: cl, Name: "p", Namespace: ns, Debounce: -1},
		{Clients: cl, Name: "p", Namespace: ns, KVEventsPort: 70000},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestRunTwice(t *testing.T) {
	s, _, stop := run(t, Options{Clients: newFakeCluster(nil).clients()})
	time.Sleep(20 * time.Millisecond)
	if err := s.Run(context.Background(), func([]extproc.Endpoint) {}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("second Run = %v, want ErrInvalidOptions", err)
	}
	_ = stop()
}

func TestServing(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod)
		want bool
	}{
		{"ready", func(*corev1.Pod) {}, true},
		{"no IP", func(p *corev1.Pod) { p.Status.PodIP = "" }, false},
		{"bad IP", func(p *corev1.Pod) { p.Status.PodIP = "x" }, false},
		{"deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, false},
		{"failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, false},
		{"no condition", func(p *corev1.Pod) { p.Status.Conditions = nil }, false},
	} {
		p := newPod("p", "10.0.0.1", true, nil)
		tc.mod(p)
		if got := serving(p); got != tc.want {
			t.Errorf("%s: serving = %v, want %v", tc.name, got, tc.want)
		}
	}
	p := newPod("p", "10.0.0.1", true, map[string]string{"m": "x"})
	p.Annotations = map[string]string{"m": " a,,b,a," + strings.Repeat("z", 257)}
	if got := names(p, "m"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names = %q, want [a b]", got)
	}
}
