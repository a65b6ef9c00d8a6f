package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

func objectiveObject(name string, prio int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.AlphaGroup + "/" + inferencepool.AlphaVersion, "kind": inferencepool.ObjectiveKind,
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec":     map[string]any{"priority": prio, "poolRef": map[string]any{"name": "pool"}},
	}}
}

// TestObjectiveHeader builds the picker's options over a fake API server holding two
// InferenceObjectives (priorities 10 and -1) and asks the keyer the picker uses for the band
// of requests: with -trust-objective-header the two objectives get different bands, above
// and below the default band that requests naming none or an unknown one get; without the
// flag the header changes nothing.
func TestObjectiveHeader(t *testing.T) {
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList",
			inferencepool.ObjectiveGroupVersionResource: "InferenceObjectiveList"},
		objectiveObject("premium", 10), objectiveObject("batch", -1))
	connect := func(string) (inferencepool.Clients, error) {
		return inferencepool.Clients{Pods: fake.NewClientset(), Pools: pools}, nil
	}
	if _, err := parseConfig([]string{"-trust-objective-header"}); err == nil {
		t.Error("-trust-objective-header without -pool-name: no error")
	}
	args := []string{"-no-scrape", "-pool-name", "pool", "-pool-namespace", "ns", "-kubeconfig", "/does/not/matter"}
	band := func(k proxy.FlowKeyer, objective string) int {
		t.Helper()
		h := http.Header{}
		if objective != "" {
			h.Set(inferencepool.ObjectiveHeader, objective)
		}
		id, err := k.Key(&http.Request{Method: "POST", Header: h}, &openai.Request{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		return id.Band
	}

	c, _ := parseConfig(append(args, "-trust-objective-header"))
	c.connect = connect
	o, err := c.options(false)
	if err != nil {
		t.Fatal(err)
	}
	ok, isObj := o.Keyer.(*objectiveKeyer)
	if !isObj {
		t.Fatalf("keyer %T: want the objective keyer", o.Keyer)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ok.objs.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for band(o.Keyer, "premium") != 0 || band(o.Keyer, "batch") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("premium band %d, batch band %d: want 0 and 2", band(o.Keyer, "premium"), band(o.Keyer, "batch"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b := band(o.Keyer, ""); b != objectiveDefaultBand {
		t.Errorf("no header: band %d, want the default %d", b, objectiveDefaultBand)
	}
	if b := band(o.Keyer, "nonesuch"); b != objectiveDefaultBand {
		t.Errorf("unknown objective: band %d, want the default %d", b, objectiveDefaultBand)
	}

	// Untrusted: the header is ignored, every request keeps the keyer's band.
	c, _ = parseConfig(args)
	c.connect = connect
	if o, err = c.options(false); err != nil {
		t.Fatal(err)
	}
	if _, isObj := o.Keyer.(*objectiveKeyer); isObj {
		t.Fatal("objective keyer without -trust-objective-header")
	}
	for _, name := range []string{"", "premium", "batch"} {
		if b := band(o.Keyer, name); b != 0 {
			t.Errorf("untrusted, header %q: band %d, want 0", name, b)
		}
	}
}

// TestRunObjective runs the picker with -trust-objective-header over a fake API server and
// checks, in its admission metrics, that requests naming the objectives of priority 10 and -1
// are admitted in bands 0 and 2, and one naming none in band 1.
func TestRunObjective(t *testing.T) {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inferencepool.Group + "/" + inferencepool.Version, "kind": inferencepool.Kind,
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "m"}},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}},
	}}
	pods := fake.NewClientset(readyPod("p1", "10.0.0.1", true))
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList",
			inferencepool.ObjectiveGroupVersionResource: "InferenceObjectiveList"},
		pool, objectiveObject("premium", 10), objectiveObject("batch", -1))
	c, _ := parseConfig([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-health-listen", "", "-no-scrape",
		"-pool-name", "pool", "-pool-namespace", "ns", "-kubeconfig", "/does/not/matter", "-secure-serving=false", "-trust-objective-header"})
	ctx, addrs := runPool(t, c, inferencepool.Clients{Pods: pods, Pools: pools}, 2)
	conn, maddr := dial(t, addrs[0]), addrs[1]
	objective := func(name string) *corev3.HeaderValue {
		return &corev3.HeaderValue{Key: inferencepool.ObjectiveHeader, RawValue: []byte(name)}
	}
	admitted := func(band string) float64 {
		t.Helper()
		resp, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var n float64
		for line := range strings.SplitSeq(string(body), "\n") {
			if strings.HasPrefix(line, `usher_admissions_total{band="`+band+`",outcome="dispatched"}`) {
				f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				n += f
			}
		}
		return n
	}
	// Until the pool and the objectives have synced, picks fail or land in the default band.
	deadline := time.Now().Add(10 * time.Second)
	for pickWith(t, ctx, conn, objective("premium")) != "10.0.0.1:8000" || admitted("0") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("premium never admitted in band 0 (band 0: %v)", admitted("0"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := pickWith(t, ctx, conn, objective("batch")); got != "10.0.0.1:8000" {
		t.Fatalf("batch pick = %q", got)
	}
	before := admitted("1")
	if got := pick(t, ctx, conn); got != "10.0.0.1:8000" {
		t.Fatalf("plain pick = %q", got)
	}
	if n := admitted("2"); n != 1 {
		t.Errorf("band 2 admitted %v, want 1 (the batch request)", n)
	}
	if n := admitted("1"); n != before+1 {
		t.Errorf("band 1 admitted %v, want %v (the request naming no objective)", n, before+1)
	}
}
