package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"

	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy/extproc"
)

// picker is one picker of TestLeaderElection, run in process.
type picker struct {
	id           string
	conn, health *grpc.ClientConn
	metrics      string // address of /metrics
	cancel       context.CancelFunc
	done         chan error
	ctx          context.Context
	stopped      bool
}

// startPicker runs the picker of c, named id in the lease, on the shared fake API server.
func startPicker(t *testing.T, c config, id string, pods kubernetes.Interface, clients inferencepool.Clients) *picker {
	t.Helper()
	c.connect = func(string) (inferencepool.Clients, error) { return clients, nil }
	c.leases = func(string, time.Duration) (kubernetes.Interface, error) { return pods, nil }
	c.identity = id
	// Short terms: a standby takes an expired lease within 1.5 s, a leader that cannot renew
	// steps down after 1 s.
	c.leaseDuration, c.renewDeadline, c.retryPeriod = 1500*time.Millisecond, time.Second, 100*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	p := &picker{id: id, cancel: cancel, done: make(chan error, 1), ctx: ctx}
	ready := make(chan string, 4)
	go func() { p.done <- run(ctx, c, io.Discard, ready) }()
	p.conn, p.metrics, p.health = dial(t, <-ready), <-ready, dial(t, <-ready)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the picker (SIGTERM) and checks that run returns nil within 10 s.
func (p *picker) stop(t *testing.T) {
	t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s: run: %v", p.id, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: run did not return", p.id)
	}
}

// ready reports the picker's readiness on its health port as the reference's probe asks.
func (p *picker) ready(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(p.health).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthInferenceExtension})
	if err != nil {
		t.Fatalf("%s: health: %v", p.id, err)
	}
	live, err := healthpb.NewHealthClient(p.health).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthLiveness})
	if err != nil || live.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%s: liveness %v, %v: want SERVING", p.id, live.GetStatus(), err)
	}
	return r.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// leaderGauge returns the picker's usher_epp_leader sample as /metrics shows it.
func (p *picker) leaderGauge(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "usher_epp_leader ") {
			return line
		}
	}
	return "no usher_epp_leader"
}

// optimisticLeases makes the fake API server number the Leases' versions and refuse an
// update of a stale one (409 Conflict), as a real one does: a leader renews with the version
// it last wrote, and must fail to when another holder has written since.
func optimisticLeases(cs *fake.Clientset) {
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	var mu sync.Mutex
	version := 0
	cs.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		o, ok := a.(interface{ GetObject() runtime.Object })
		if !ok {
			return false, nil, nil
		}
		switch a.GetVerb() { // not a type switch: CreateAction and UpdateAction have one method set
		case "create":
			l := o.GetObject().(*coordinationv1.Lease).DeepCopy()
			version++
			l.ResourceVersion = strconv.Itoa(version)
			return true, l, cs.Tracker().Create(gvr, l, a.GetNamespace())
		case "update":
			l := o.GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := cs.Tracker().Get(gvr, a.GetNamespace(), l.Name)
			if err != nil {
				return true, nil, err
			}
			if v := cur.(*coordinationv1.Lease).ResourceVersion; v != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, fmt.Errorf("version %s, not %s", v, l.ResourceVersion))
			}
			version++
			l.ResourceVersion = strconv.Itoa(version)
			return true, l, cs.Tracker().Update(gvr, l, a.GetNamespace())
		}
		return false, nil, nil
	})
}

// until waits (at most 10 s) for cond.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: not %s", what)
		}
	}
}

// Two pickers of one pool with -ha-enable-leader-election on one API server: exactly one is
// ready, both pick; the leader's SIGTERM hands the lease over at once and the other turns
// ready; a leader whose lease is taken from it steps down to standby and campaigns again.
func TestLeaderElection(t *testing.T) {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.Group + "/" + inferencepool.Version, "kind": inferencepool.Kind,
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "m"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}},
	}}
	pods := fake.NewClientset(readyPod("p1", "10.0.0.1", true))
	optimisticLeases(pods)
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList"}, pool)
	clients := inferencepool.Clients{Pods: pods, Pools: pools}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-no-scrape", "-no-health-checks", "-secure-serving=false", "-pool-name", "pool", "-pool-namespace", "ns",
		"-kubeconfig", "/does/not/matter", "-ha-enable-leader-election"})
	if err == nil {
		t.Fatal("parseConfig with an unreadable -kubeconfig succeeded") // the flags parsed; the fake clients follow
	}
	a := startPicker(t, c, "a", pods, clients)
	b := startPicker(t, c, "b", pods, clients)
	both := []*picker{a, b}
	picks := func(step string, ps ...*picker) {
		t.Helper()
		for _, p := range ps {
			until(t, step+": "+p.id+" picks the pool's pod", func() bool { return pick(t, p.ctx, p.conn) == "10.0.0.1:8000" })
		}
	}
	leases := pods.CoordinationV1().Leases("ns")
	const lease = "epp-ns-pool.gateway-api-inference-extension.sigs.k8s.io"
	holder := func() string {
		l, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	// Exactly one ready: the lease's holder. Both synced (they pick), the other on standby.
	picks("start", both...)
	var leader, standby *picker
	until(t, "one picker ready", func() bool {
		for i, p := range both {
			if p.ready(t) {
				leader, standby = p, both[1-i]
				return true
			}
		}
		return false
	})
	if h := holder(); h != leader.id {
		t.Errorf("lease holder %q, ready picker %q", h, leader.id)
	}
	for range 10 { // the standby stays so while the lease is held
		if standby.ready(t) {
			t.Fatalf("%s ready while %s holds the lease", standby.id, leader.id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g := leader.leaderGauge(t); g != "usher_epp_leader 1" {
		t.Errorf("leader %s: %s, want usher_epp_leader 1", leader.id, g)
	}
	if g := standby.leaderGauge(t); g != "usher_epp_leader 0" {
		t.Errorf("standby %s: %s, want usher_epp_leader 0", standby.id, g)
	}
	picks("one leader", both...)

	// SIGTERM to the leader: it releases the lease as it stops (ReleaseOnCancel), so the
	// lease no longer names it; the standby takes it and turns ready.
	leader.stop(t)
	if h := holder(); h == leader.id {
		t.Errorf("after %s stopped the lease still names it: not released", leader.id)
	}
	until(t, standby.id+" ready after the leader stopped", func() bool { return standby.ready(t) })
	picks("takeover", standby)
	if h := holder(); h != standby.id {
		t.Errorf("lease holder %q, want %q", h, standby.id)
	}

	// Another holder takes the lease: the picker cannot renew it, steps down (standby, still
	// picking) and campaigns again; once the other lets it expire, it leads again.
	// Its term (2 s) outlasts the picker's renewal deadline (1 s): the picker steps down
	// before the lease expires. (A renewal between the Get and the Update is a conflict: again.)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		other, term := "other", int32(2)
		now := metav1.NewMicroTime(time.Now())
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &other, LeaseDurationSeconds: &term, AcquireTime: &now, RenewTime: &now}
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	until(t, standby.id+" on standby after losing the lease", func() bool { return !standby.ready(t) })
	picks("lost the lease", standby)
	until(t, standby.id+" ready again after campaigning", func() bool { return standby.ready(t) })
	if h := holder(); h != standby.id {
		t.Errorf("lease holder %q, want %q", h, standby.id)
	}
	picks("leading again", standby)
}

func TestLeaderElectionFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-ha-enable-leader-election", "-endpoints", "10.0.0.1:80"}, "give -pool-name"},
		{[]string{"-ha-enable-leader-election", "-endpoints", "10.0.0.1:80", "-kubeconfig", "/k"}, "-ha-lease-name"},
		{[]string{"-ha-lease-name", "x", "-endpoints", "10.0.0.1:80"}, "need -ha-enable-leader-election"},
		{[]string{"-ha-lease-namespace", "x", "-endpoints", "10.0.0.1:80"}, "need -ha-enable-leader-election"},
		{[]string{"-ha-enable-leader-election", "-pool-name", "pool", "-pool-namespace", "ns", "-ha-lease-name", "Not_A_Name"}, "Lease name"},
		{[]string{"-ha-enable-leader-election", "-pool-name", strings.Repeat("p", 240), "-pool-namespace", "ns"}, "-ha-lease-name"},
		{[]string{"-ha-enable-leader-election", "-pool-name", "pool", "-pool-namespace", "ns", "-ha-lease-namespace", "Bad_NS"}, "Lease namespace"},
	} {
		_, err := parseConfig(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// Without -pool-name the Lease is named; it lives in -pool-namespace's namespace unless told.
	if _, err := parseConfig([]string{"-ha-enable-leader-election", "-endpoints", "10.0.0.1:80", "-kubeconfig", "/k", "-ha-lease-name", "epp", "-ha-lease-namespace", "ns"}); err != nil {
		t.Errorf("-ha-lease-name with -kubeconfig: %v", err)
	}
	if got := leaseName("ns", "pool"); got != "epp-ns-pool.gateway-api-inference-extension.sigs.k8s.io" {
		t.Errorf("leaseName = %q, want the reference picker's", got)
	}
}
