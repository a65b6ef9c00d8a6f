// Package quotaseam is the seam between package proxy/quota and the request path of package
// proxy: what a Handler asks a quota.Limiter for each request (a reservation at admission, a
// settlement at the end) and what it answers with (the rate-limit headers, a 429). An embedder
// configures a Limiter and hands it to proxy.Options; the reservation itself is the Handler's
// business, so it is not the Limiter's API. Package quota installs the functions at init; they
// take a *quota.Limiter as an any (quotaseam cannot import quota, which imports it) and panic
// on anything else, a bug in the module.
package quotaseam

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxLimits bounds the limits that apply to one tenant (named or default), so that a Grant
// holds its reservation in fixed arrays.
const MaxLimits = 16

// Ask is one request as the Limiter weighs it at admission.
type Ask struct {
	Tenant string // the Identity's tenant (after the tenant cap folded it)
	Model  string // the model the request names
	Band   int
	// PromptTokens is the prompt's estimated length; OutputTokens the request's max_tokens,
	// 0 when it gave none (the Limiter then reserves its learned expectation), negative for a
	// request without output (embeddings).
	PromptTokens, OutputTokens int64
	Now                        time.Time
}

// Usage is what a request used, as it settles: prompt tokens (Cached of them read from the
// cache) and output tokens.
type Usage struct{ Prompt, Cached, Output int64 }

// Cap is the tightest limit of one kind that applied to a request: its size, what remained of
// it after the request's reservation, and when its window refills. Limit 0: none applied.
type Cap struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Grant is a Limiter's answer to an Ask: the headers' values, a refusal, and the reservation
// to settle. The zero Grant holds nothing; Settle on it is a no-op.
type Grant struct {
	// Requests, Tokens, Input and Output are the tightest caps of each kind (weighted tokens,
	// uncached input tokens, output tokens).
	Requests, Tokens, Input, Output Cap
	// Refused says the request does not fit: Message names the limit, RetryAfter is the time
	// until its window refills. A refused Grant holds nothing.
	Refused    bool
	Message    string
	RetryAfter time.Duration

	// The reservation, read only by the Limiter: its tenant's state, the counters it holds
	// (positions and windows), and what it reserved in each.
	Ref         any
	N           int
	Pos         [MaxLimits]uint8
	Window      [MaxLimits]int64
	Held        Held // what it reserved in each
	LearnOutput bool // the request gave no max_tokens: its output teaches the expectation
}

// Installed by package proxy/quota.
var (
	// Reserve weighs a on the Limiter l and fills g: refused (holding nothing), or admitted
	// with its reservation held in each counter that applies. It does not block on I/O and
	// does not allocate once the tenant is known; O(limits of the tenant).
	Reserve func(l any, a *Ask, g *Grant)
	// Settle closes g's reservation with what the request used, in the windows it was
	// admitted in (a window that has ended is left alone). Exactly once per admitted Grant;
	// a no-op on a refused or zero Grant.
	Settle func(g *Grant, u Usage)
	// Collector returns the Limiter l's metrics (usher_quota_*), for the Handler's registry.
	Collector func(l any) prometheus.Collector
)

// Held is what a Grant reserved in each of its counters: weighted tokens, uncached input
// tokens and output tokens (and one request).
type Held struct{ Tokens, In, Out int64 }

// Headers writes the rate-limit headers of g with set (nothing when no limit applied), the
// names in lower case: OpenAI's x-ratelimit-* (resets as durations), or, for Anthropic's
// Messages API, anthropic-ratelimit-* (resets as RFC 3339 times from the request's arrival).
// Both the Handler and the endpoint picker write them with it, so their names and formats
// cannot drift apart. O(1).
func Headers(g *Grant, anthropic bool, arrival time.Time, set func(name, value string)) {
	if g.Requests.Limit == 0 && g.Tokens.Limit == 0 && g.Input.Limit == 0 && g.Output.Limit == 0 {
		return
	}
	if anthropic {
		for _, k := range [...]struct {
			name string
			c    *Cap
		}{{"requests", &g.Requests}, {"tokens", &g.Tokens}, {"input-tokens", &g.Input}, {"output-tokens", &g.Output}} {
			if k.c.Limit == 0 {
				continue
			}
			p := "anthropic-ratelimit-" + k.name
			set(p+"-limit", strconv.FormatInt(k.c.Limit, 10))
			set(p+"-remaining", strconv.FormatInt(k.c.Remaining, 10))
			reset := arrival.Add(k.c.Reset)
			if reset.Truncate(time.Second) != reset { // never earlier than the refill
				reset = reset.Truncate(time.Second).Add(time.Second)
			}
			set(p+"-reset", reset.UTC().Format(time.RFC3339))
		}
		return
	}
	for _, k := range [...]struct {
		name string
		c    *Cap
	}{{"requests", &g.Requests}, {"tokens", &g.Tokens}} {
		if k.c.Limit == 0 {
			continue
		}
		set("x-ratelimit-limit-"+k.name, strconv.FormatInt(k.c.Limit, 10))
		set("x-ratelimit-remaining-"+k.name, strconv.FormatInt(k.c.Remaining, 10))
		set("x-ratelimit-reset-"+k.name, resetDuration(k.c.Reset))
	}
}

// resetDuration writes a reset as OpenAI does: whole milliseconds below a second ("20ms"),
// else whole seconds rounded up in Go's notation ("1s", "6m0s").
func resetDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(max(1, (d+time.Millisecond-1).Milliseconds()), 10) + "ms"
	}
	return ((d + time.Second - 1) / time.Second * time.Second).String()
}
