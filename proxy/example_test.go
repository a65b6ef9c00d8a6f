package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// A complete gateway: the Handler over a fleet, with its background work running.
func ExampleHandler() {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Close()
	var backends []proxy.Backend
	for _, u := range fleet.URLs() {
		backends = append(backends, proxy.Backend{URL: u})
	}

	h, err := proxy.New(proxy.Options{Backends: backends})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(ctx)  // know the fleet before the first request
	go h.Run(ctx) // scrape it, follow its KV events

	srv := httptest.NewServer(h) // or http.ListenAndServe(":8080", h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"usher/demo","max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"Hello!"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	fmt.Println(resp.Status, answer.Usage.CompletionTokens, "tokens")
	// Output: 200 OK 4 tokens
}

// A plain httputil.ReverseProxy gains usher's admission, routing and accounting with three
// hooks.
func ExampleHandler_Rewrite() {
	fleet, _ := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2})
	defer fleet.Close()
	var backends []proxy.Backend
	for _, u := range fleet.URLs() {
		backends = append(backends, proxy.Backend{URL: u})
	}
	h, err := proxy.New(proxy.Options{Backends: backends})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	h.Start(context.Background())

	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h.Rewrite(pr) // admit, pick, point pr.Out at the backend
			pr.SetXForwarded()
		},
		ModifyResponse: h.ModifyResponse, // first token, usage, exactly-once close
		ErrorHandler:   h.ErrorHandler,   // OpenAI error JSON
	}
	srv := httptest.NewServer(rp)
	defer srv.Close()

	for _, body := range []string{
		`{"model":"usher/demo","max_tokens":4,"messages":[{"role":"user","content":"Hello!"}]}`,
		`{"model":"usher/demo","max_tokens":-4,"messages":[{"role":"user","content":"Hello!"}]}`,
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// 400 Bad Request
}

// Tenants are keyed digests of API keys: list a key's tenant in TenantBands without storing
// the key, and a spoofed header changes nothing.
func ExampleNewKeyer() {
	secret := []byte("the same secret on every replica")
	k, err := proxy.NewKeyer(proxy.KeyerOptions{
		Secret:      secret,
		TenantBands: map[string]int{proxy.TenantOfKey(secret, "sk-gold"): 0},
		DefaultBand: 2,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, key := range []string{"sk-gold", "sk-other"} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Priority", "0") // not trusted: ignored
		r.Header.Set("X-Session-Id", "chat-7")
		id, _ := k.Key(r, nil)
		fmt.Println(id.Band, id.Session, id.Tenant == proxy.TenantOfKey(secret, key))
	}
	// Output:
	// 0 chat-7 true
	// 2 chat-7 true
}

// The prompt of a request as the prefix index sees it: chained block hashes of its bytes.
func ExampleBytesTokenizer() {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are a careful reviewer. ", 10) + `"},{"role":"user","content":"Review this."}]}`)
	req, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	if err != nil {
		log.Fatal(err)
	}
	p, _ := proxy.BytesTokenizer{BlockBytes: 64}.Tokenize(context.Background(), nil, req)
	fmt.Println(len(p.Chain), "blocks of", p.BlockSize, "tokens, about", p.Tokens, "tokens in all")
	// Output: 4 blocks of 16 tokens, about 76 tokens in all
}

// A server for the Handler, with timeouts that bound slow clients without cutting streams
// (no ReadTimeout or WriteTimeout), and the Handler's own bounds on every wait of a request.
func Example_server() {
	h, err := proxy.New(proxy.Options{
		Backends: []proxy.Backend{{URL: "http://127.0.0.1:8000"}},
		Timeouts: proxy.Timeouts{StreamIdle: 30 * time.Second, Body: 10 * time.Second},
		Retry:    proxy.Retry{Attempts: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	srv := &http.Server{ // then srv.ListenAndServe()
		Addr:              ":8080",
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	fmt.Println(srv.ReadHeaderTimeout, srv.IdleTimeout, srv.ReadTimeout, srv.WriteTimeout)
	// Output: 10s 2m0s 0s 0s
}

// A program's own scorer, registered beside the built-ins and used from a profile described as
// data: the default profile extended by one weighted scorer.
func ExampleRegistry() {
	reg := new(proxy.Registry)
	err := proxy.Register(reg, "fewest-requests", func(p proxy.Params) (routing.Scorer, error) {
		if err := p.Decode(&struct{}{}); err != nil { // no parameters
			return nil, err
		}
		return routing.ScorerFunc(func(_ *routing.Request, cands []routing.Candidate, dst []float64) {
			for i, c := range cands {
				dst[i] = 1 / float64(1+c.InFlight.Requests)
			}
		}), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	var spec proxy.ProfileSpec
	if err := json.Unmarshal([]byte(`{"extends":"usher","scorers":[{"name":"fewest-requests","weight":0.5}]}`), &spec); err != nil {
		log.Fatal(err)
	}
	profile, err := reg.Profile(spec, session.AffinityOptions{})
	if err != nil {
		log.Fatal(err)
	}
	last := profile.Scorers[len(profile.Scorers)-1]
	fmt.Println(profile.Name, len(profile.Scorers), last.Weight)

	_, err = reg.Profile(proxy.ProfileSpec{Extends: "usher", Scorers: []proxy.PartSpec{{Name: "fewest-request"}}}, session.AffinityOptions{})
	fmt.Println(err != nil)
	// Output:
	// usher 6 0.5
	// true
}

// Listener turns the answers net/http gives malformed requests before any handler runs into
// JSON errors with a request id, like the Handler's own: here a request without the Host
// header HTTP/1.1 requires, and one to Anthropic's endpoint with an Expect header other than
// 100-continue.
func ExampleHandler_Listener() {
	h, err := proxy.New(proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(h.Listener(ln)) }()
	defer srv.Close()

	for _, raw := range []string{
		"GET /v1/models HTTP/1.1\r\n\r\n",
		"POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: later\r\nContent-Length: 2\r\n\r\n{}",
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Fprint(conn, raw)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		id := resp.Header.Get(proxy.RequestIDHeader)
		fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"), id != "", resp.Header.Get("Request-Id") == id)
		fmt.Print(string(body))
	}
	// Output:
	// 400 application/json true false
	// {"error":{"message":"the HTTP request is malformed (missing required Host header)","type":"invalid_request_error","param":null,"code":"bad_request"}}
	// 417 application/json true true
	// {"type":"error","error":{"type":"invalid_request_error","message":"the request's Expect header is not supported (only 100-continue is)"}}
}
