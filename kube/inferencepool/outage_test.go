package inferencepool

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiServer is a small HTTP server speaking the API's list and watch (with and without
// initial events) for one namespace's pods and pools, that can fail like an outage.
type apiServer struct {
	mu      sync.Mutex
	pods    []*corev1.Pod
	pool    map[string]any
	failing bool
	outage  chan struct{} // closed when an outage starts: ends open watches
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	failing, outage := a.failing, a.outage
	var items []any
	kind, apiVersion := "Pod", "v1"
	if r.URL.Path == "/api/v1/namespaces/"+ns+"/pods" {
		for _, p := range a.pods {
			items = append(items, p)
		}
	} else if r.URL.Path == "/apis/"+Group+"/"+Version+"/namespaces/"+ns+"/"+Resource {
		kind, apiVersion = Kind, Group+"/"+Version
		items = append(items, a.pool)
	} else {
		a.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	a.mu.Unlock()
	if failing {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": kind + "List", "apiVersion": apiVersion,
			"metadata": map[string]any{"resourceVersion": "10"}, "items": items})
		return
	}
	enc := json.NewEncoder(w)
	if q.Get("sendInitialEvents") == "true" {
		for _, it := range items {
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": it})
		}
		_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{"kind": kind, "apiVersion": apiVersion,
			"metadata": map[string]any{"resourceVersion": "10", "annotations": map[string]any{"k8s.io/initial-events-end": "true"}}}})
	}
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-outage:
	}
}

func (a *apiServer) setFailing(f bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f && !a.failing {
		close(a.outage)
	} else if !f && a.failing {
		a.outage = make(chan struct{})
	}
	a.failing = f
}

func TestSourceOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for client-go's backoff")
	}
	before := runtime.NumGoroutine()
	pool := poolObject(map[string]string{"app": "a"}, 8000)
	pool.SetResourceVersion("10")
	p1 := newPod("p1", "10.0.0.1", true, map[string]string{"app": "a"})
	p1.ResourceVersion = "10"
	api := &apiServer{pods: []*corev1.Pod{p1}, pool: pool.Object, outage: make(chan struct{})}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, updates, stop := run(t, Options{Clients: Clients{Pods: pods, Pools: pools}})
	waitSet(t, "start", updates, "10.0.0.1:8000")

	api.setFailing(true)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Connected {
		if time.Now().After(deadline) {
			t.Fatal("the outage was not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	noUpdate(t, "during the outage", updates)
	if st := s.Stats(); st.Errors == 0 || st.LastError == nil || st.Endpoints != 1 {
		t.Errorf("during the outage: Stats = %+v", st)
	}

	p2 := newPod("p2", "10.0.0.2", true, map[string]string{"app": "a"})
	p2.ResourceVersion = "11"
	api.mu.Lock()
	api.pods = append(api.pods, p2)
	api.mu.Unlock()
	api.setFailing(false)
	select {
	case eps := <-updates:
		if got := addrs(eps); got != "10.0.0.1:8000,10.0.0.2:8000" {
			t.Fatalf("after the outage: set = [%s]", got)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("after the outage: no update")
	}
	if !s.Stats().Connected {
		t.Error("after the outage: not connected")
	}
	_ = stop()
	srv.CloseClientConnections()
	pods.CoreV1().RESTClient().(*rest.RESTClient).Client.CloseIdleConnections()
	settle(t, before+4) // the HTTP client's idle connections may linger briefly
}
