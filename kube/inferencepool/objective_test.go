package inferencepool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

func TestDecodeObjective(t *testing.T) {
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\nmetadata: {name: chat, namespace: ns}\n"
	for _, c := range []struct {
		name, doc string
		want      objective // zero: refused
		err       string
	}{
		{"full", head + "spec: {priority: 10, poolRef: {group: inference.networking.k8s.io, kind: InferencePool, name: pool}}",
			objective{"chat", 10, Group, Kind, "pool"}, ""},
		{"defaults", head + "spec: {poolRef: {name: pool}}", objective{"chat", 0, Group, Kind, "pool"}, ""},
		{"negative", head + "spec: {priority: -1, poolRef: {name: pool}}", objective{"chat", -1, Group, Kind, "pool"}, ""},
		{"alpha pool group", head + "spec: {priority: 3, poolRef: {group: inference.networking.x-k8s.io, name: p}}",
			objective{"chat", 3, AlphaGroup, Kind, "p"}, ""},
		{"status kept out", head + "spec: {poolRef: {name: pool}}\nstatus: {conditions: []}", objective{"chat", 0, Group, Kind, "pool"}, ""},
		{"wrong version", strings.Replace(head, "v1alpha2", "v1", 1) + "spec: {poolRef: {name: pool}}", objective{}, "apiVersion"},
		{"wrong kind", strings.Replace(head, "kind: InferenceObjective", "kind: InferencePool", 1) + "spec: {poolRef: {name: pool}}", objective{}, "kind"},
		{"no name", strings.Replace(head, "name: chat, ", "", 1) + "spec: {poolRef: {name: pool}}", objective{}, "metadata.name"},
		{"no spec", head, objective{}, "spec is required"},
		{"no poolRef", head + "spec: {priority: 1}", objective{}, "spec.poolRef is required"},
		{"empty pool name", head + "spec: {poolRef: {name: \"\"}}", objective{}, "spec.poolRef.name"},
		{"long pool name", head + "spec: {poolRef: {name: " + strings.Repeat("a", 254) + "}}", objective{}, "spec.poolRef.name"},
		{"bad group", head + "spec: {poolRef: {group: Not_A_Group, name: pool}}", objective{}, "spec.poolRef.group"},
		{"empty kind", head + "spec: {poolRef: {kind: \"\", name: pool}}", objective{}, "spec.poolRef.kind"},
		{"priority above int32", head + "spec: {priority: 2147483648, poolRef: {name: pool}}", objective{}, "int32"},
		{"priority fraction", head + "spec: {priority: 1.5, poolRef: {name: pool}}", objective{}, "priority"},
		{"priority string", head + "spec: {priority: \"10\", poolRef: {name: pool}}", objective{}, "priority"},
		{"unknown field", head + "spec: {criticality: Critical, poolRef: {name: pool}}", objective{}, "criticality"},
		{"case mismatch", head + "spec: {Priority: 1, poolRef: {name: pool}}", objective{}, "Priority"},
		{"unknown poolRef field", head + "spec: {poolRef: {name: pool, port: 1}}", objective{}, "port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			js, err := yaml.YAMLToJSON([]byte(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeObjective(js)
			if c.err != "" {
				if err == nil || !errors.Is(err, errInvalidObjective) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v: want errInvalidObjective naming %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestBandTable(t *testing.T) {
	for _, c := range []struct {
		name       string
		prios      map[string]int
		bands, def int
		want       map[string]int
	}{
		{"four bands", map[string]int{"hi": 10, "std": 0, "low": -1, "lower": -5, "same": 10},
			4, 1, map[string]int{"hi": 0, "same": 0, "std": 1, "low": 2, "lower": 3}},
		{"clamped", map[string]int{"a": 30, "b": 20, "c": 10, "z": -1, "y": -2, "x": -3},
			4, 1, map[string]int{"a": 0, "b": 0, "c": 0, "z": 2, "y": 3, "x": 3}},
		{"two positives with room", map[string]int{"a": 2, "b": 1}, 4, 2, map[string]int{"a": 0, "b": 1}},
		{"one band", map[string]int{"a": 2, "b": -1}, 1, 0, map[string]int{"a": 0, "b": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := bandTable(c.prios, c.bands, c.def)
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for n, b := range c.want {
				if got[n] != b {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

// objectiveObj is an InferenceObjective object as the API server returns it.
func objectiveObj(t *testing.T, name, pool string, prio *int) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{"poolRef": map[string]any{"name": pool}}
	if prio != nil {
		spec["priority"] = int64(*prio)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": AlphaGroup + "/" + AlphaVersion, "kind": ObjectiveKind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

func TestObjectivesRun(t *testing.T) {
	ten, neg := 10, -1
	bad := objectiveObj(t, "bad", "pool", nil)
	bad.Object["spec"].(map[string]any)["priority"] = "high"
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{ObjectiveGroupVersionResource: "InferenceObjectiveList"},
		objectiveObj(t, "premium", "pool", &ten), objectiveObj(t, "batch", "pool", &neg),
		objectiveObj(t, "plain", "pool", nil), objectiveObj(t, "other", "other-pool", &ten), bad)
	ob, err := NewObjectives(ObjectivesOptions{Clients: Clients{Pools: dyn}, PoolName: "pool", Namespace: ns, DefaultBand: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()
	waitBand := func(name string, want int, wantOK bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, ok := ob.Band(name)
			if b == want && ok == wantOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Band(%q) = %d, %v; want %d, %v", name, b, ok, want, wantOK)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitBand("premium", 0, true)
	waitBand("batch", 2, true)
	waitBand("plain", 1, true)
	waitBand("other", 1, false) // another pool's
	waitBand("bad", 1, false)   // refused by decode
	waitBand("unknown", 1, false)

	// A change is followed: batch deleted, a new sheddable one.
	res := dyn.Resource(ObjectiveGroupVersionResource).Namespace(ns)
	if err := res.Delete(t.Context(), "batch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	minus := -7
	if _, err := res.Create(t.Context(), objectiveObj(t, "scavenger", "pool", &minus), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBand("batch", 1, false)
	waitBand("scavenger", 2, true)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestNewObjectivesRefuses(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme())
	for _, o := range []ObjectivesOptions{
		{PoolName: "p", Namespace: ns},
		{Clients: Clients{Pools: dyn}, Namespace: ns},
		{Clients: Clients{Pools: dyn}, PoolName: "p", Namespace: ns, DefaultBand: 4},
		{Clients: Clients{Pools: dyn}, PoolName: "p", Namespace: ns, DefaultBand: -1},
	} {
		if _, err := NewObjectives(o); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
}

// FuzzDecodeObjective: any input decodes or is refused with errInvalidObjective, without
// panicking; what decodes has a name, a pool name and an int32 priority.
func FuzzDecodeObjective(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"inference.networking.x-k8s.io/v1alpha2","kind":"InferenceObjective","metadata":{"name":"a"},"spec":{"priority":-3,"poolRef":{"name":"p"}}}`))
	f.Add([]byte(`{"apiVersion":"inference.networking.x-k8s.io/v1alpha2","kind":"InferenceObjective","metadata":{"name":"a"},"spec":{"poolRef":{"group":"","kind":"InferencePool","name":"p"}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, js []byte) {
		o, err := decodeObjective(js)
		if err != nil {
			if !errors.Is(err, errInvalidObjective) {
				t.Fatalf("error %v does not wrap errInvalidObjective", err)
			}
			return
		}
		if o.name == "" || o.poolName == "" || o.priority < -1<<31 || o.priority > 1<<31-1 {
			t.Fatalf("decoded %+v", o)
		}
	})
}
