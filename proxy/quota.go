package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/proxy/openai"
)

// settleQuota closes the request's quota reservation with what it used: the usage the backend
// reported (or the tap counted); the prompt as estimated when a backend was tried but never
// reported one (a cancelled or broken request); nothing when no backend was tried. A no-op
// without a reservation, or the second time. Called from finish (holding ex.mu) or, for a
// request rejected before admission, from Rewrite.
func (ex *exchange) settleQuota() {
	if ex.quota.Ref == nil {
		return
	}
	u := quotaseam.Usage{Prompt: int64(ex.usage.PromptTokens), Cached: int64(ex.usage.CachedTokens), Output: int64(ex.usage.OutputTokens)}
	if u.Prompt == 0 && (ex.attempts > 0 || u.Output > 0) {
		u.Prompt = int64(ex.prompt.Tokens)
	}
	quotaseam.Settle(&ex.quota, u)
}

// quotaHeaders writes the rate-limit headers of the request's API from its Grant (nothing
// when no limit applied): OpenAI's x-ratelimit-* (resets as durations), or Anthropic's
// anthropic-ratelimit-* on Messages (resets as RFC 3339 times from the request's arrival).
func quotaHeaders(hd http.Header, ep openai.API, g *quotaseam.Grant, arrival time.Time) {
	if g.Requests.Limit == 0 && g.Tokens.Limit == 0 && g.Input.Limit == 0 && g.Output.Limit == 0 {
		return
	}
	if ep == openai.Messages {
		for _, k := range []struct {
			name string
			c    *quotaseam.Cap
		}{{"requests", &g.Requests}, {"tokens", &g.Tokens}, {"input-tokens", &g.Input}, {"output-tokens", &g.Output}} {
			if k.c.Limit == 0 {
				continue
			}
			p := "anthropic-ratelimit-" + k.name
			hd.Set(p+"-limit", strconv.FormatInt(k.c.Limit, 10))
			hd.Set(p+"-remaining", strconv.FormatInt(k.c.Remaining, 10))
			reset := arrival.Add(k.c.Reset)
			if reset.Truncate(time.Second) != reset { // never earlier than the refill
				reset = reset.Truncate(time.Second).Add(time.Second)
			}
			hd.Set(p+"-reset", reset.UTC().Format(time.RFC3339))
		}
		return
	}
	for _, k := range []struct {
		name string
		c    *quotaseam.Cap
	}{{"requests", &g.Requests}, {"tokens", &g.Tokens}} {
		if k.c.Limit == 0 {
			continue
		}
		hd.Set("x-ratelimit-limit-"+k.name, strconv.FormatInt(k.c.Limit, 10))
		hd.Set("x-ratelimit-remaining-"+k.name, strconv.FormatInt(k.c.Remaining, 10))
		hd.Set("x-ratelimit-reset-"+k.name, resetDuration(k.c.Reset))
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
