package extproc

import (
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/quota"
)

// quotaServer is a picker whose tenants (x-tenant) may each send requests requests and
// tokens tokens an hour.
func quotaServer(t *testing.T, requests, tokens int64) *Server {
	t.Helper()
	l, err := quota.New(quota.Options{Limits: []quota.Limit{{Window: time.Hour, Requests: requests, Tokens: tokens}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := proxy.NewKeyer(proxy.KeyerOptions{TenantHeader: "x-tenant"})
	if err != nil {
		t.Fatal(err)
	}
	return newServer(t, Options{Quota: l, Keyer: k})
}

// quotaRequest sends a buffered request to path and returns the answer to its body (or the
// immediate response).
func quotaRequest(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, path, body, tenant string) *extprocv3.ProcessingResponse {
	t.Helper()
	send(t, st, buffered(reqHeaders(path, false, nil, "x-tenant", tenant)))
	if r := recv(t, st); r.GetRequestHeaders() == nil {
		t.Fatalf("answer to the request headers: got %v, want a HeadersResponse", r)
	}
	send(t, st, reqBody(body, true))
	return recv(t, st)
}

// setHeaders returns the headers a response-headers answer or an immediate response sets.
func setHeaders(r *extprocv3.ProcessingResponse) map[string]string {
	hm := r.GetResponseHeaders().GetResponse().GetHeaderMutation()
	if ir := r.GetImmediateResponse(); ir != nil {
		hm = ir.GetHeaders()
	}
	out := map[string]string{}
	for _, h := range hm.GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

// quotaOutcomes reads usher_quota_requests_total by outcome from the picker's registry.
func quotaOutcomes(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "usher_quota_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[label(m, "outcome")] += m.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A tenant's requests reserve their prompt and max_tokens before the queue and settle to the
// answer's usage; once its requests are used, the next is refused at once with 429, the
// limit named, Retry-After and the rate-limit headers; another tenant is not affected. Every
// request has exactly one outcome.
func TestQuotaRefusesAndSettles(t *testing.T) {
	s := quotaServer(t, 2, 100000)
	c := serve(t, s)
	const body = `{"model":"m","max_tokens":100,"prompt":"once upon a time"}`
	answer := `{"id":"x","choices":[{"text":"there was"}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`

	var remaining []int64
	for i := range 2 {
		st, _ := open(t, c)
		if h, _ := destinationOf(t, quotaRequest(t, st, "/v1/completions", body, "a")); !inFleet(h) {
			t.Fatalf("request %d: no destination", i)
		}
		send(t, st, respHeaders("200", "application/json", false, nil))
		hd := setHeaders(recv(t, st))
		if got, want := hd["x-ratelimit-limit-requests"], "2"; got != want {
			t.Errorf("request %d: x-ratelimit-limit-requests %q, want %q (headers %v)", i, got, want, hd)
		}
		if got, want := hd["x-ratelimit-remaining-requests"], strconv.Itoa(1-i); got != want {
			t.Errorf("request %d: x-ratelimit-remaining-requests %q, want %q", i, got, want)
		}
		if got := hd["x-ratelimit-limit-tokens"]; got != "100000" {
			t.Errorf("request %d: x-ratelimit-limit-tokens %q, want 100000", i, got)
		}
		if got := hd["x-ratelimit-reset-requests"]; !strings.HasSuffix(got, "s") {
			t.Errorf("request %d: x-ratelimit-reset-requests %q, want a duration", i, got)
		}
		n, err := strconv.ParseInt(hd["x-ratelimit-remaining-tokens"], 10, 64)
		if err != nil {
			t.Fatalf("request %d: x-ratelimit-remaining-tokens %q", i, hd["x-ratelimit-remaining-tokens"])
		}
		remaining = append(remaining, n)
		send(t, st, respBody(answer, true))
		recv(t, st)
		closeStream(st)
	}
	// The first request reserved R = prompt + 100 and settled to 5 + 3; the second reserved R
	// again: what remains after it is 100000 − 8 − R, while after the first it was 100000 − R.
	if got, want := remaining[0]-remaining[1], int64(8); got != want {
		t.Errorf("remaining tokens %v: the first request settled to %d tokens, want %d (its usage)", remaining, got, want)
	}

	st, _ := open(t, c)
	r := quotaRequest(t, st, "/v1/completions", body, "a")
	ir := r.GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 429 {
		t.Fatalf("third request: %v, want an immediate 429", r)
	}
	hd := setHeaders(r)
	if hd["retry-after"] == "" || hd["x-ratelimit-remaining-requests"] != "0" || hd["x-ratelimit-limit-requests"] != "2" {
		t.Errorf("429 headers %v: want retry-after and the rate-limit headers", hd)
	}
	if b := immediateBody(r); !strings.Contains(b, `"rate_limit_exceeded"`) || !strings.Contains(b, "request") {
		t.Errorf("429 body %s: want rate_limit_exceeded naming the limit", b)
	}
	closeStream(st)

	st, _ = open(t, c)
	if h, _ := destinationOf(t, quotaRequest(t, st, "/v1/completions", body, "b")); !inFleet(h) {
		t.Fatal("another tenant's request: no destination")
	}
	closeStream(st) // cancelled after its pick: settles its prompt

	waitIdle(t, s)
	stats := s.Stats()
	if stats.Completed != 2 || stats.Shed != 1 || stats.Rejected != 1 || stats.Cancelled != 1 {
		t.Errorf("stats %+v: want 2 completed, 1 shed, 1 cancelled", stats)
	}
	if got := quotaOutcomes(t, s); got["admitted"] != 3 || got["refused"] != 1 {
		t.Errorf("usher_quota_requests_total by outcome %v: want 3 admitted, 1 refused", got)
	}
}

// On /v1/messages the refusal has Anthropic's shape and the answer Anthropic's headers.
func TestQuotaMessages(t *testing.T) {
	s := quotaServer(t, 1, 100000)
	c := serve(t, s)
	const body = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}`
	st, _ := open(t, c)
	if h, _ := destinationOf(t, quotaRequest(t, st, "/v1/messages", body, "a")); !inFleet(h) {
		t.Fatal("first request: no destination")
	}
	send(t, st, respHeaders("200", "application/json", false, nil))
	hd := setHeaders(recv(t, st))
	if hd["anthropic-ratelimit-requests-limit"] != "1" || hd["anthropic-ratelimit-requests-remaining"] != "0" {
		t.Errorf("answer headers %v: want anthropic-ratelimit-requests-limit 1, -remaining 0", hd)
	}
	if _, err := time.Parse(time.RFC3339, hd["anthropic-ratelimit-requests-reset"]); err != nil {
		t.Errorf("anthropic-ratelimit-requests-reset %q: want an RFC 3339 time", hd["anthropic-ratelimit-requests-reset"])
	}
	if _, ok := hd["x-ratelimit-limit-requests"]; ok {
		t.Errorf("answer headers %v: OpenAI's on /v1/messages", hd)
	}
	send(t, st, respBody(`{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":4,"output_tokens":2}}`, true))
	recv(t, st)
	closeStream(st)

	st, _ = open(t, c)
	r := quotaRequest(t, st, "/v1/messages", body, "a")
	if r.GetImmediateResponse().GetStatus().GetCode() != 429 {
		t.Fatalf("second request: %v, want an immediate 429", r)
	}
	if b := immediateBody(r); !strings.Contains(b, `"type":"error"`) || !strings.Contains(b, "rate_limit_error") {
		t.Errorf("429 body %s: want Anthropic's error shape", b)
	}
	if hd := setHeaders(r); hd["retry-after"] == "" || hd["anthropic-ratelimit-requests-remaining"] != "0" {
		t.Errorf("429 headers %v: want retry-after and anthropic-ratelimit-requests-remaining 0", hd)
	}
	closeStream(st)
	waitIdle(t, s)
}
