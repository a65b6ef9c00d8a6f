package inferencepool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	sigsjson "sigs.k8s.io/json"
)

// The InferenceObjective API (GIE, experimental group, v1alpha2): a named serving objective
// of a pool, today only an integer priority. Requests name it in ObjectiveHeader.
const (
	ObjectiveKind     = "InferenceObjective"
	ObjectiveResource = "inferenceobjectives"
	// ObjectiveHeader is the request header naming a request's InferenceObjective. A
	// picker reads it only when the proxy in front of it is trusted to set it (and to
	// remove the clients' own), or any client could buy priority.
	ObjectiveHeader = "x-gateway-inference-objective"
)

// ObjectiveGroupVersionResource is the InferenceObjective resource.
var ObjectiveGroupVersionResource = schema.GroupVersionResource{Group: AlphaGroup, Version: AlphaVersion, Resource: ObjectiveResource}

// ObjectivesOptions configure Objectives. Zero values are the documented defaults.
type ObjectivesOptions struct {
	// Clients reach the API server (required; only Pools, the dynamic client, is used).
	Clients Clients
	// PoolName and Namespace name the followed pool (both required); PoolGroup is its API
	// group. Empty: Group. Only objectives whose spec.poolRef names this pool count.
	PoolName, Namespace, PoolGroup string
	// Bands is the number of priority bands (band 0 served first) and DefaultBand the band
	// of priority 0, of requests naming no objective and of those naming an unknown one.
	// Zero Bands: 4; 0 ≤ DefaultBand < Bands.
	Bands, DefaultBand int
	// Logger hears objectives the CRD would refuse (skipped). Nil: slog.Default().
	Logger *slog.Logger
}

// Objectives follows the InferenceObjective objects of a pool and maps their priorities onto
// a picker's bands: the distinct priorities above 0, highest first, take the bands
// DefaultBand−1, DefaultBand−2, … (the highest ones share band 0 when there are more of them
// than bands); priority 0 (also unset) is DefaultBand; the distinct negative priorities,
// nearest 0 first, take DefaultBand+1, DefaultBand+2, … (the lowest ones share the last band,
// served last and so the first to wait out its time limit under pressure). The order of
// priorities is kept; equal priorities share a band. Its methods are safe for concurrent use;
// Band is O(1), each change O(objectives · log objectives).
type Objectives struct {
	opts  ObjectivesOptions
	log   *slog.Logger
	bands atomic.Pointer[map[string]int]
}

// NewObjectives returns Objectives for o; Run follows the API server.
func NewObjectives(o ObjectivesOptions) (*Objectives, error) {
	if o.PoolGroup == "" {
		o.PoolGroup = Group
	}
	if o.Bands == 0 {
		o.Bands = 4
	}
	switch {
	case o.Clients.Pools == nil:
		return nil, fmt.Errorf("%w: Objectives need Clients.Pools", ErrInvalidOptions)
	case o.PoolName == "" || o.Namespace == "":
		return nil, fmt.Errorf("%w: Objectives need PoolName and Namespace", ErrInvalidOptions)
	case o.Bands < 1 || o.DefaultBand < 0 || o.DefaultBand >= o.Bands:
		return nil, fmt.Errorf("%w: Objectives: want 0 <= DefaultBand (%d) < Bands (%d)", ErrInvalidOptions, o.DefaultBand, o.Bands)
	}
	ob := &Objectives{opts: o, log: o.Logger}
	if ob.log == nil {
		ob.log = slog.Default()
	}
	ob.bands.Store(&map[string]int{})
	return ob, nil
}

// Band returns the band of the objective named name, and whether the pool has one of that
// name; without one it returns DefaultBand and false.
func (ob *Objectives) Band(name string) (int, bool) {
	b, ok := (*ob.bands.Load())[name]
	if !ok {
		return ob.opts.DefaultBand, false
	}
	return b, true
}

// Run watches the namespace's InferenceObjectives until ctx ends and returns ctx.Err() once
// its goroutines have ended. Until the first list, no objective is known.
func (ob *Objectives) Run(ctx context.Context) error {
	ri := ob.opts.Clients.Pools.Resource(ObjectiveGroupVersionResource).Namespace(ob.opts.Namespace)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}, ob.opts.Clients.Pools)
	inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{})
	var mu sync.Mutex // one recomputation at a time, in event order
	refresh := func(any) {
		mu.Lock()
		defer mu.Unlock()
		ob.refresh(inf.GetStore().List())
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: refresh, UpdateFunc: func(_, o any) { refresh(o) }, DeleteFunc: refresh,
	}); err != nil {
		return fmt.Errorf("inferencepool: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	<-ctx.Done()
	wg.Wait()
	return ctx.Err()
}

// refresh recomputes the band table from the informer's objects.
func (ob *Objectives) refresh(objs []any) {
	prios := make(map[string]int, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		js, err := json.Marshal(u.Object)
		if err == nil {
			var obj objective
			if obj, err = decodeObjective(js); err == nil {
				if obj.poolGroup == ob.opts.PoolGroup && obj.poolKind == Kind && obj.poolName == ob.opts.PoolName {
					prios[obj.name] = obj.priority
				}
				continue
			}
		}
		ob.log.Warn("inferencepool: InferenceObjective skipped", "name", u.GetName(), "error", err)
	}
	t := bandTable(prios, ob.opts.Bands, ob.opts.DefaultBand)
	ob.bands.Store(&t)
}

// bandTable maps each objective's priority onto bands (see Objectives).
func bandTable(prios map[string]int, bands, def int) map[string]int {
	var pos, neg []int
	for _, p := range prios {
		switch {
		case p > 0:
			pos = append(pos, p)
		case p < 0:
			neg = append(neg, p)
		}
	}
	slices.Sort(pos)
	pos = slices.Compact(pos)
	slices.Reverse(pos) // highest first
	slices.Sort(neg)
	neg = slices.Compact(neg)
	slices.Reverse(neg) // nearest 0 first
	band := map[int]int{0: def}
	for i, p := range pos {
		// Counted from 0 upwards in reverse: the lowest positive priority is def-1.
		band[p] = max(def-(len(pos)-i), 0)
	}
	for i, p := range neg {
		band[p] = min(def+1+i, bands-1)
	}
	out := make(map[string]int, len(prios))
	for n, p := range prios {
		out[n] = band[p]
	}
	return out
}

// objective is the part of an InferenceObjective the picker uses.
type objective struct {
	name                          string
	priority                      int
	poolGroup, poolKind, poolName string
}

// objectiveDoc is the v1alpha2 InferenceObjective as its CRD's schema has it.
type objectiveDoc struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              *struct {
		Priority *int64 `json:"priority,omitempty"`
		PoolRef  *struct {
			Group *string `json:"group,omitempty"`
			Kind  *string `json:"kind,omitempty"`
			Name  string  `json:"name"`
		} `json:"poolRef"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

// errInvalidObjective is wrapped by decodeObjective's errors.
var errInvalidObjective = errors.New("inferencepool: invalid InferenceObjective")

// decodeObjective decodes an InferenceObjective (JSON) strictly: apiVersion and kind, a
// metadata.name, a spec with a poolRef naming a pool (group and kind of the CRD's forms,
// defaulted to Group and Kind), a priority that is an int32 when set (unset: 0); unknown and
// case-mismatched fields are refused. O(len(js)).
func decodeObjective(js []byte) (objective, error) {
	var d objectiveDoc
	strict, err := sigsjson.UnmarshalStrict(js, &d, sigsjson.DisallowUnknownFields)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return objective{}, fmt.Errorf("%w: %v", errInvalidObjective, err)
	}
	bad := func(format string, args ...any) (objective, error) {
		return objective{}, fmt.Errorf("%w: %q: %s", errInvalidObjective, d.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case d.APIVersion != AlphaGroup+"/"+AlphaVersion || d.Kind != ObjectiveKind:
		return bad("apiVersion %q, kind %q: want %s/%s, %s", d.APIVersion, d.Kind, AlphaGroup, AlphaVersion, ObjectiveKind)
	case d.Name == "":
		return bad("metadata.name is required")
	case d.Spec == nil:
		return bad("spec is required")
	case d.Spec.PoolRef == nil:
		return bad("spec.poolRef is required")
	case d.Spec.Priority != nil && (*d.Spec.Priority < math.MinInt32 || *d.Spec.Priority > math.MaxInt32):
		return bad("spec.priority %d: want an int32", *d.Spec.Priority)
	}
	r := d.Spec.PoolRef
	if err := checkRef("spec.poolRef", r.Name, r.Group, r.Kind, false); err != nil {
		return bad("%v", err)
	}
	o := objective{name: d.Name, poolGroup: Group, poolKind: Kind, poolName: r.Name}
	if r.Group != nil {
		o.poolGroup = *r.Group
	}
	if r.Kind != nil {
		o.poolKind = *r.Kind
	}
	if d.Spec.Priority != nil {
		o.priority = int(*d.Spec.Priority)
	}
	return o, nil
}
