package healthcheck_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
)

// A backend whose connection was refused is ejected by passive health; the Checker's own
// probes (not a client's request) find it serving again and bring it back.
func Example() {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"!\"}]}\n\ndata: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()

	detector, _ := outlier.New(outlier.Options{})
	r, _ := routing.New(routing.Options{Profile: outlier.With(routing.Profile{
		Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}},
	}, detector, 1)})
	_ = r.Update([]routing.BackendState{{Name: "gpu-0", Health: routing.Healthy, UpdatedAt: time.Now()}})
	id, _ := r.Lookup("gpu-0")

	checker, _ := healthcheck.New(healthcheck.Options{
		Router: r,
		Hosts:  []healthcheck.Host{{Name: "gpu-0", URL: engine.URL, Model: "demo"}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- checker.Run(ctx) }()

	detector.Completed(id, time.Now(), routing.DoneInfo{Err: errors.New("connection refused"), Failure: routing.FailureConnect})
	fmt.Println("ejected:", detector.BackendStats(id).Ejected)
	for deadline := time.Now().Add(10 * time.Second); detector.BackendStats(id).Ejected && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	h := detector.BackendStats(id)
	fmt.Println("ejected:", h.Ejected, "restored by probes:", h.Restored, "user requests as probes:", h.Probes)
	cancel()
	fmt.Println(<-done)
	// Output:
	// ejected: true
	// ejected: false restored by probes: 1 user requests as probes: 0
	// context canceled
}
