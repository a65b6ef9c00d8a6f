package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/usher-llm/usher/proxy/extproc"
)

// The election's timing when the config leaves it zero: controller-runtime's defaults, which
// the reference picker's manager uses. A standby takes over at most leaseDuration after the
// leader stopped renewing (at once when the leader releases the lease on SIGTERM); a leader
// that cannot renew within renewDeadline steps down.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRetryPeriod   = 2 * time.Second
)

// leaseName is the Lease the pickers of a pool campaign for unless -ha-lease-name names
// another: the reference picker's name for it, so that usher's and the reference's pickers of
// one pool (during a migration, say) share one lease and one of them is ready.
func leaseName(namespace, pool string) string {
	return fmt.Sprintf("epp-%s-%s.gateway-api-inference-extension.sigs.k8s.io", namespace, pool)
}

// leaderIdentity is this picker's name in the lease: POD_NAME (the downward API's
// metadata.name), else the host name and a random suffix, as controller-runtime's.
func leaderIdentity() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "usher-epp"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}

// leaseClient builds the client of the election from a kubeconfig file, or in-cluster when
// it is empty, with a request timeout (a hung request must not outlast the renewal
// deadline: client-go's advice, which controller-runtime follows with max(1s,
// RenewDeadline/2)).
func leaseClient(kubeconfig string, timeout time.Duration) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("leader election: kubernetes config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	cfg.UserAgent = "usher-epp-leader-election"
	return kubernetes.NewForConfig(cfg)
}

// election is a picker's campaign for the lease: a follower is on standby (not ready), the
// leader is ready. Losing the lease puts the picker on standby and it campaigns again; it
// keeps serving and following its endpoints throughout (extproc.Server.SetStandby).
type election struct {
	cfg      leaderelection.LeaderElectionConfig // Callbacks set by newElection
	epp      *extproc.Server
	lock     *resourcelock.LeaseLock // its EventRecorder set by run
	events   typedcorev1.EventInterface
	leader   prometheus.Gauge // usher_epp_leader
	identity string
	lease    string // namespace/name, for the logs

	mu      sync.Mutex // orders the callbacks (OnStartedLeading runs on a goroutine of its own)
	leading bool
}

// newElection prepares the campaign of c for epp: the picker is on standby from here on. It
// makes no request and starts nothing.
func newElection(c config, epp *extproc.Server) (*election, error) {
	ld, rd, rp := c.leaseDuration, c.renewDeadline, c.retryPeriod
	if ld == 0 {
		ld, rd, rp = defaultLeaseDuration, defaultRenewDeadline, defaultRetryPeriod
	}
	name, ns := c.LeaseName, c.LeaseNamespace
	if name == "" {
		name = leaseName(c.PoolNamespace, c.PoolName)
	}
	if ns == "" {
		ns = c.PoolNamespace
	}
	connect := c.leases
	if connect == nil {
		connect = leaseClient
	}
	client, err := connect(c.Kubeconfig, max(time.Second, rd/2))
	if err != nil {
		return nil, err
	}
	id := c.identity
	if id == "" {
		id = leaderIdentity()
	}
	e := &election{epp: epp, identity: id, lease: ns + "/" + name, events: client.CoreV1().Events(ns),
		lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "usher_epp_leader",
			Help: "1 while this picker holds the leader lease (and may be ready), 0 on standby (-ha-enable-leader-election)."}),
	}
	e.cfg = leaderelection.LeaderElectionConfig{
		Lock:          e.lock,
		LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
		// On SIGTERM the lease is handed over at once rather than left to expire: what it
		// guards is only readiness, so the streams this picker still drains may overlap with
		// the next leader's.
		ReleaseOnCancel: true,
		Name:            e.lease,
		Callbacks:       leaderelection.LeaderCallbacks{OnStartedLeading: e.started, OnStoppedLeading: e.stopped},
	}
	if _, err := leaderelection.NewLeaderElector(e.cfg); err != nil { // validates the timing
		return nil, fmt.Errorf("leader election: %w", err)
	}
	epp.SetStandby(true)
	epp.Registry().MustRegister(e.leader)
	return e, nil
}

// run campaigns until ctx ends: each term of leadership ends in standby and a new campaign.
// When ctx ends the lease is released if held (ReleaseOnCancel) before run returns. Call it
// once.
func (e *election) run(ctx context.Context) {
	// LeaderElection events on the Lease (became leader, stopped leading), as
	// controller-runtime records them.
	events := record.NewBroadcaster()
	defer events.Shutdown()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.events})
	e.lock.LockConfig.EventRecorder = events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "usher-epp", Host: e.identity})
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(e.cfg)
		if err != nil { // validated by newElection
			log.Print("epp: leader election: ", err)
			return
		}
		le.Run(ctx) // returns when the lease is lost or ctx ends
	}
}

// started is OnStartedLeading: ready, unless the term already ended (the callback runs on a
// goroutine of its own, possibly after stopped).
func (e *election) started(term context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if term.Err() != nil {
		return
	}
	e.leading = true
	e.epp.SetStandby(false)
	e.leader.Set(1)
	log.Printf("epp: leader election: leading (lease %s, identity %s): ready", e.lease, e.identity)
}

// stopped is OnStoppedLeading, called at the end of every campaign, led or not: standby.
func (e *election) stopped() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.epp.SetStandby(true)
	e.leader.Set(0)
	if e.leading {
		e.leading = false
		log.Printf("epp: leader election: lost or released the lease %s: standby", e.lease)
	}
}
