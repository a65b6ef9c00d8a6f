package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/promtest"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
)

// The picker probes its endpoints itself: an endpoint ejected after a refused connection is
// brought back by the picker's own probe once it serves again, without a client's request,
// and the probes are on its metrics.
func TestHealthChecksRestoreEndpoints(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable) // an engine that is not ready
			return
		}
		switch r.URL.Path {
		case "/health":
		case "/v1/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"!\"}]}\n\ndata: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(engine.Close)
	addr := strings.TrimPrefix(engine.URL, "http://")
	s, err := New(Options{Endpoints: []Endpoint{{Address: addr, Models: []string{"m"}}, {Address: "127.0.0.1:1"}}, NoScrape: true})
	if err != nil {
		t.Fatal(err)
	}
	out := outlier.Of(s.Router())
	id, _ := s.Router().Lookup(addr)
	out.Completed(id, time.Now(), routing.DoneInfo{Err: errors.New("refused"), Failure: routing.FailureConnect})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond) // a failed probe or so: still out
	if !out.BackendStats(id).Ejected {
		t.Fatal("restored while the engine answered 503")
	}
	down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for out.BackendStats(id).Ejected {
		if time.Now().After(deadline) {
			t.Fatal("the endpoint was not restored by the picker's probes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h := out.BackendStats(id); h.Restored != 1 || h.Probes != 0 {
		t.Errorf("endpoint %+v: want one restoration by a probe, no client request as a probe", h)
	}
	s.publish() // the gauges, as a scrape would
	got := promtest.Text(t, s.Registry(), "usher_health_probes_total", "usher_backend_restorations_total")
	for _, want := range []string{
		fmt.Sprintf(`usher_health_probes_total{backend=%q,result="failed"}`, addr),
		fmt.Sprintf(`usher_health_probes_total{backend=%q,result="ok"}`, addr),
		fmt.Sprintf(`usher_backend_restorations_total{backend=%q} 1`, addr),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in:\n%s", want, got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
