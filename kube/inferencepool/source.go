package inferencepool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/usher-llm/usher/internal/glue/backendspec"
	"github.com/usher-llm/usher/proxy/extproc"
	"github.com/usher-llm/usher/routing"
)

// DefaultRoleLabel is the pod label naming a pod's role in disaggregated serving (prefill,
// decode or both), as llm-d labels its pods.
const DefaultRoleLabel = "llm-d.ai/role"

// ErrInvalidOptions is returned (wrapped) by New for options it cannot use.
var ErrInvalidOptions = errors.New("inferencepool: invalid options")

// Clients are the API clients a Source watches through: typed for pods, dynamic for the
// pool (whose Go types are not registered with client-go). Both are safe for concurrent
// use; fake clients from client-go's fake packages work too.
type Clients struct {
	Pods  kubernetes.Interface
	Pools dynamic.Interface
}

// Connect builds Clients from a kubeconfig file, or from the pod's service account when
// kubeconfig is empty (in-cluster). It makes no request.
func Connect(kubeconfig string) (Clients, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return Clients{}, fmt.Errorf("inferencepool: kubernetes config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "usher-epp"
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("inferencepool: %w", err)
	}
	pools, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("inferencepool: %w", err)
	}
	return Clients{Pods: pods, Pools: pools}, nil
}

// Options configure a Source. Zero values are the documented defaults.
type Options struct {
	// Clients reach the API server (required).
	Clients Clients
	// Name and Namespace name the InferencePool (both required).
	Name, Namespace string
	// Alpha watches the pool through the older v1alpha2 API (AlphaGroupVersionResource)
	// instead of v1.
	Alpha bool
	// RoleLabel is the pod label giving an endpoint's Role (prefill, decode or both; a pod
	// without it, or with another value, serves both). Empty: DefaultRoleLabel; "-": none.
	RoleLabel string
	// ModelsKey, if set, is the pod annotation (or, without one, label) listing the base
	// models the pod serves, comma-separated (extproc.Endpoint.Models); AdaptersKey the same
	// for its LoRA adapters. Names longer than 256 bytes are dropped, and so are adapters
	// of a pod that lists no models.
	ModelsKey, AdaptersKey string
	// KVEventsPort, if not zero, is the port each pod publishes its KV events on: the
	// endpoint's KVEvents is tcp://podIP:KVEventsPort.
	KVEventsPort int
	// Debounce is how long changes are gathered before a new set is computed: the first
	// change arms a timer, and what arrives before it fires goes into the same set. Zero:
	// 100 ms.
	Debounce time.Duration
	// Logger hears the pool's problems and the API server's outages (once per outage).
	// Nil: slog.Default().
	Logger *slog.Logger
}

// Stats describe a Source's connection to the API server and what it last reported.
type Stats struct {
	// Connected is whether the last list or watch call to the API server succeeded.
	Connected bool
	// LastSync is when a list or watch call last succeeded; zero before the first.
	LastSync time.Time
	// Errors counts the list and watch calls that failed, and LastError is the last one.
	Errors    uint64
	LastError error
	// PoolFound is whether the pool exists and is usable; without it the last set is kept.
	PoolFound bool
	// Endpoints is the size of the last set reported, Updates how many sets were reported,
	// LastUpdate when the last one was.
	Endpoints  int
	Updates    uint64
	LastUpdate time.Time
}

// Source is an extproc.EndpointSource following an InferencePool: the pods its selector matches in
// its namespace, one endpoint per ready pod and target port ("podIP:port"), watched with
// client-go informers (the pool through the dynamic client, the pods through a typed
// informer filtered by namespace and the pool's selector, replaced when the selector
// changes).
//
// A pod is in the set while it has an IP, is Ready and is not being deleted: it leaves as
// soon as its readiness drops or its deletion timestamp is set, which the API server does
// before the kubelet stops its containers. Changes are gathered for Options.Debounce and a
// set is reported only when it differs from the last one (sorted by address). Until both
// informers have synced nothing is reported; a watch error, an API server outage, a pool
// that disappears or becomes unusable keep the last set, and show in Stats.
//
// A Source is safe for concurrent use: Stats may be called from any goroutine while Run
// runs. Run may run once at a time.
type Source struct {
	opts Options // immutable after New
	gvr  schema.GroupVersionResource
	log  *slog.Logger

	mu      sync.Mutex
	st      Stats // guarded by mu
	outage  bool  // guarded by mu: an outage has been logged and not yet its end
	running bool  // guarded by mu
}

// New checks o and returns a Source. It starts nothing: Run does the work.
func New(o Options) (*Source, error) {
	switch {
	case o.Clients.Pods == nil || o.Clients.Pools == nil:
		return nil, fmt.Errorf("%w: Clients.Pods and Clients.Pools are required", ErrInvalidOptions)
	case o.Name == "" || o.Namespace == "":
		return nil, fmt.Errorf("%w: the pool's Name and Namespace are required", ErrInvalidOptions)
	case len(validation.IsDNS1123Subdomain(o.Name)) > 0 || len(validation.IsDNS1123Label(o.Namespace)) > 0:
		return nil, fmt.Errorf("%w: %s/%s is not a valid namespace/name", ErrInvalidOptions, o.Namespace, o.Name)
	case o.Debounce < 0 || o.KVEventsPort < 0 || o.KVEventsPort > 65535:
		return nil, fmt.Errorf("%w: Debounce must not be negative, KVEventsPort within 0..65535", ErrInvalidOptions)
	}
	if o.RoleLabel == "" {
		o.RoleLabel = DefaultRoleLabel
	}
	if o.Debounce == 0 {
		o.Debounce = 100 * time.Millisecond
	}
	s := &Source{opts: o, gvr: GroupVersionResource, log: o.Logger}
	if o.Alpha {
		s.gvr = AlphaGroupVersionResource
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("pool", o.Namespace+"/"+o.Name)
	return s, nil
}

// Stats returns the Source's state. O(1).
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Run implements extproc.EndpointSource: it watches the pool and its pods until ctx ends, calling
// update (from this goroutine) with each new set, and returns ctx.Err() once every
// goroutine it started has ended. A second Run while one runs returns ErrInvalidOptions.
func (s *Source) Run(ctx context.Context, update func([]extproc.Endpoint)) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return fmt.Errorf("%w: Run is already running", ErrInvalidOptions)
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	kick := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(kick) },
		UpdateFunc: func(any, any) { poke(kick) },
		DeleteFunc: func(any) { poke(kick) },
	}

	pools := s.informer(s.poolListWatch(), &unstructured.Unstructured{})
	if _, err := pools.AddEventHandler(notify); err != nil {
		return fmt.Errorf("inferencepool: %w", err)
	}
	wg.Go(func() { pools.RunWithContext(ctx) })

	r := reconciler{s: s, ctx: ctx, pools: pools, notify: notify, update: update}
	defer r.stopPods()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	poke(kick) // the first look, also when the pool does not exist
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-kick:
			if !armed {
				timer.Reset(s.opts.Debounce)
				armed = true
			}
		case <-timer.C:
			armed = false
			if !r.reconcile() {
				// Not synced yet: look again after another interval.
				timer.Reset(s.opts.Debounce)
				armed = true
			}
		}
	}
}

// poke signals c without blocking; a signal already pending covers this one.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// informer returns a shared informer over lw that reports its own failures (the list and
// watch wrappers count them) instead of client-go's default logging.
func (s *Source) informer(lw cache.ListerWatcher, example runtime.Object) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{})
	// Failed calls are counted by the wrappers; a watch the server ends is re-established
	// by the reflector, and a failure to do so is counted there.
	_ = inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	return inf
}

// poolListWatch lists and watches the one pool, by name.
func (s *Source) poolListWatch() cache.ListerWatcher {
	ri := s.opts.Clients.Pools.Resource(s.gvr).Namespace(s.opts.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", s.opts.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			l, err := ri.List(ctx, o)
			s.observe(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			w, err := ri.Watch(ctx, o)
			s.observe(ctx, err)
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, s.opts.Clients.Pools)
}

// podListWatch lists and watches the pods of the namespace that sel matches.
func (s *Source) podListWatch(sel string) cache.ListerWatcher {
	pi := s.opts.Clients.Pods.CoreV1().Pods(s.opts.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			l, err := pi.List(ctx, o)
			s.observe(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			w, err := pi.Watch(ctx, o)
			s.observe(ctx, err)
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, s.opts.Clients.Pods)
}

// observe records the outcome of one API call, logging the start and the end of an outage
// once each. Calls cut short by ctx (shutdown, a replaced informer) are not failures.
func (s *Source) observe(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	began, ended := false, false
	if err == nil {
		ended = s.outage
		s.outage = false
		s.st.Connected, s.st.LastSync = true, time.Now()
	} else {
		began = !s.outage
		s.outage = true
		s.st.Connected = false
		s.st.Errors++
		s.st.LastError = err
	}
	s.mu.Unlock()
	switch {
	case began:
		s.log.Warn("inferencepool: API server unreachable; keeping the last endpoint set", "err", err)
	case ended:
		s.log.Info("inferencepool: API server reachable again")
	}
}

// reconciler is Run's state: it lives on Run's goroutine and is touched by no other.
type reconciler struct {
	s      *Source
	ctx    context.Context
	pools  cache.SharedIndexInformer
	notify cache.ResourceEventHandler
	update func([]extproc.Endpoint)

	pods     cache.SharedIndexInformer // over the current selector; nil before the pool is seen
	selector labels.Selector
	stop     context.CancelFunc
	done     chan struct{}

	sent     bool               // a set has been reported
	last     []extproc.Endpoint // the set last reported
	problem  string             // the pool problem last logged, so each is logged once in a row
	capped   bool               // the MaxEndpoints cap has been logged
	lastPool string             // the selector and ports last used, for the log
}

// reconcile computes the set from the informers' caches and reports it if it changed. It
// returns false when a cache has not synced yet (to be called again). O(pods × ports).
func (r *reconciler) reconcile() bool {
	if !r.pools.HasSynced() {
		return false
	}
	pool, problem := r.pool()
	r.s.mu.Lock()
	r.s.st.PoolFound = problem == ""
	r.s.mu.Unlock()
	if problem != "" {
		if problem != r.problem {
			r.s.log.Warn("inferencepool: keeping the last endpoint set", "problem", problem)
			r.problem = problem
		}
		return true
	}
	r.problem = ""
	sel := labels.SelectorFromSet(pool.Spec.Selector.MatchLabels)
	if r.pods == nil || sel.String() != r.selector.String() {
		r.startPods(sel)
		return false
	}
	if !r.pods.HasSynced() {
		return false
	}
	desc := fmt.Sprintf("selector %s, ports %v", sel, pool.Spec.TargetPorts)
	if desc != r.lastPool {
		r.s.log.Info("inferencepool: following", "selector", sel.String(), "ports", pool.Spec.TargetPorts)
		r.lastPool = desc
	}
	eps := r.s.endpoints(r.pods.GetStore().List(), sel, pool.Spec.TargetPorts)
	if len(eps) > extproc.MaxEndpoints {
		if !r.capped {
			r.s.log.Warn("inferencepool: too many endpoints; reporting the first by address", "endpoints", len(eps), "max", extproc.MaxEndpoints)
			r.capped = true
		}
		eps = eps[:extproc.MaxEndpoints]
	}
	if r.sent && slices.EqualFunc(eps, r.last, func(a, b extproc.Endpoint) bool { return reflect.DeepEqual(a, b) }) {
		return true
	}
	r.sent, r.last = true, eps
	// Counted before it is delivered, so that whoever receives the set sees it in Stats.
	r.s.mu.Lock()
	r.s.st.Endpoints, r.s.st.LastUpdate = len(eps), time.Now()
	r.s.st.Updates++
	r.s.mu.Unlock()
	r.update(slices.Clone(eps))
	return true
}

// pool returns the pool from the cache in its v1 form, or why it cannot be used.
func (r *reconciler) pool() (*Pool, string) {
	o := r.s.opts
	obj, ok, err := r.pools.GetStore().GetByKey(o.Namespace + "/" + o.Name)
	if err != nil || !ok {
		return nil, "the InferencePool does not exist"
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Sprintf("unexpected object %T", obj)
	}
	// Live objects are decoded leniently (fields a newer CRD adds are ignored), then checked
	// for what the watch needs.
	p := new(Pool)
	if o.Alpha {
		a := new(AlphaPool)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, a); err != nil {
			return nil, "the InferencePool cannot be read: " + err.Error()
		}
		p = a.Pool()
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, "the InferencePool cannot be read: " + err.Error()
	}
	if len(p.Spec.Selector.MatchLabels) == 0 {
		return nil, "the InferencePool's selector is empty"
	}
	if err := checkLabels(p.Spec.Selector.MatchLabels); err != nil {
		return nil, "the InferencePool's selector is invalid: " + err.Error()
	}
	if len(p.Spec.TargetPorts) == 0 {
		return nil, "the InferencePool has no target ports"
	}
	for _, tp := range p.Spec.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			return nil, fmt.Sprintf("the InferencePool's target port %d is out of range", tp.Number)
		}
	}
	return p, ""
}

// startPods replaces the pod informer by one over sel.
func (r *reconciler) startPods(sel labels.Selector) {
	r.stopPods()
	ctx, stop := context.WithCancel(r.ctx)
	inf := r.s.informer(r.s.podListWatch(sel.String()), &corev1.Pod{})
	if _, err := inf.AddEventHandler(r.notify); err != nil {
		// Only possible on a stopped informer; this one has not started.
		stop()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	r.pods, r.selector, r.stop, r.done = inf, sel, stop, done
}

// stopPods stops the pod informer and waits for its goroutines.
func (r *reconciler) stopPods() {
	if r.pods == nil {
		return
	}
	r.stop()
	<-r.done
	r.pods = nil
}

// endpoints maps pods to the sorted endpoint set. O(pods × ports).
func (s *Source) endpoints(objs []any, sel labels.Selector, ports []Port) []extproc.Endpoint {
	var out []extproc.Endpoint
	seen := map[string]bool{}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !serving(pod) || pod.Namespace != s.opts.Namespace || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		e := extproc.Endpoint{Role: routing.RoleBoth}
		if s.opts.RoleLabel != "-" {
			// An unknown role serves both, like a pod without the label.
			e.Role, _ = backendspec.Role(pod.Labels[s.opts.RoleLabel])
		}
		e.Models = names(pod, s.opts.ModelsKey)
		if len(e.Models) > 0 {
			e.Adapters = names(pod, s.opts.AdaptersKey)
		}
		if s.opts.KVEventsPort > 0 {
			e.KVEvents = "tcp://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(s.opts.KVEventsPort))
		}
		for _, p := range ports {
			e.Address = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.Number)))
			if seen[e.Address] {
				continue // two pods reporting one IP (host network): keep the first
			}
			seen[e.Address] = true
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b extproc.Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return out
}

// serving reports whether pod can take requests: it has an IP, runs, is Ready and is not
// being deleted.
func serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || net.ParseIP(pod.Status.PodIP) == nil {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// names reads a comma-separated list from pod's annotation key, or its label key; names
// that are empty or longer than 256 bytes are dropped, and so are repeats.
func names(pod *corev1.Pod, key string) []string {
	if key == "" {
		return nil
	}
	v, ok := pod.Annotations[key]
	if !ok {
		v = pod.Labels[key]
	}
	var out []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" && len(n) <= 256 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

var _ extproc.EndpointSource = (*Source)(nil)
