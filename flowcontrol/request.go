package flowcontrol

import "time"

// FlowID is the fairness key the gateway assigns to a request: a tenant, a session, a
// program, or a tenant/session pair. flowcontrol compares flow ids for equality only and
// reads nothing else from the request's origin; a client cannot choose its own flow unless
// the gateway lets it.
//
// Within the queue a flow is the pair (FlowID, band): the same id in two bands is two
// flows. Policies receive both and may merge them in their own accounting.
type FlowID string

// Tokens counts model tokens (prompt, cached or generated). It is an int, the unit every
// usher package counts tokens in (routing.DoneInfo, proxy, bench); the name only says what a
// field holds, so a Usage and a routing.DoneInfo are filled from the same usage report without
// conversions.
type Tokens = int

// Request is what the caller asks the queue to admit. The caller fills it; flowcontrol reads
// no headers and trusts no field for ordering except through the configured Policy.
//
// Admit, TryAdmit and Enqueue copy the Request; the caller may reuse its value afterwards.
type Request struct {
	// Flow is the fairness key. The empty id is a valid flow (the default flow).
	Flow FlowID
	// Band is the priority band, 0 ≤ Band < Options.Bands. Band 0 is served first: a
	// request of band b is dispatched only when no request of a band < b can be.
	Band int
	// Priority orders requests inside a band for the StrictPriority policy (higher
	// first). Other policies may ignore it. It is never a substitute for Band.
	Priority int
	// Bytes is the request's size, counted against the byte capacities. ≥ 0.
	Bytes int64
	// PromptTokens and OutputTokens are the caller's cost estimate (prompt length and
	// expected output). ≥ 0. Policies may use them to order requests; the actual usage is
	// reported later through Ticket.Done.
	PromptTokens Tokens
	OutputTokens Tokens
	// Arrival is when the request reached the gateway. Zero means "now" (the queue's
	// clock at admission). It may lie in the past (time spent before the queue counts as
	// waiting) but not in the future.
	Arrival time.Time
	// Deadline is the latest time the request may still be dispatched. Zero means
	// Arrival + TTL. A non-zero Deadline that is not after the current time is invalid.
	Deadline time.Time
	// TTL overrides Options.TTL for this request when Deadline is zero. Zero means
	// Options.TTL; negative is invalid.
	TTL time.Duration
	// Value is an opaque caller value carried through to the Observer and the policy.
	Value any
}

// Usage is the actual cost of a completed request, reported with Ticket.Done.
type Usage struct {
	// PromptTokens is the prompt length as served.
	PromptTokens Tokens
	// CachedTokens is the part of the prompt served from the prefix cache
	// (≤ PromptTokens; vLLM's usage.prompt_tokens_details.cached_tokens).
	CachedTokens Tokens
	// OutputTokens is the number of generated tokens.
	OutputTokens Tokens
}
