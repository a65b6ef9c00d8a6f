package proxy

import (
	"net/http"
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

// quotaHeaders writes the rate-limit headers of the request's API from its Grant
// (quotaseam.Headers: Anthropic's on Messages, OpenAI's elsewhere).
func quotaHeaders(hd http.Header, ep openai.API, g *quotaseam.Grant, arrival time.Time) {
	quotaseam.Headers(g, ep == openai.Messages, arrival, hd.Set)
}
