package quota_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/quota"
)

// A gateway whose tenants may each send 2 requests and 100000 tokens an hour: the third
// request is refused at once with 429, and every answer carries the rate-limit headers.
func Example() {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Close()
	limiter, err := quota.New(quota.Options{Limits: []quota.Limit{
		{Window: time.Hour, Requests: 2, Tokens: 100000}, // the default: every tenant its own
	}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{Backends: []proxy.Backend{{URL: fleet.URLs()[0]}}, Quota: limiter})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(ctx)
	go h.Run(ctx) // runs the Limiter's Run too

	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(
			`{"model":"usher/demo","max_tokens":4,"messages":[{"role":"user","content":"Hello!"}]}`))
		req.Header.Set("Authorization", "Bearer sk-tenant-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "requests left:", resp.Header.Get("x-ratelimit-remaining-requests"))
	}
	// Output:
	// 200 requests left: 1
	// 200 requests left: 0
	// 429 requests left: 0
}
