package proxy

import (
	"errors"
	"net/http"

	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
)

// retryReason names why an attempt that classify found worth retrying failed, for
// usher_retries_total. Call it before the attempt is abandoned (its cause is then still the
// timer's). O(1).
func (ex *exchange) retryReason(resp *http.Response, err error) gatewaymetrics.RetryReason {
	if err != nil {
		switch cause := ex.cause(); {
		case errors.Is(cause, errStalled), errors.Is(err, errStalled):
			return gatewaymetrics.RetryStalled
		case errors.Is(cause, errHeaderTimeout):
			return gatewaymetrics.RetryHeaderTimeout
		}
		return gatewaymetrics.RetryConnect
	}
	if resp.StatusCode == http.StatusTooManyRequests || (resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "") {
		return gatewaymetrics.RetryOverloaded
	}
	return gatewaymetrics.RetryServerError
}

// lastOutcome is the outcome of a retryable attempt that was the request's last: the budget
// refused another, the attempts ran out, or else the client left.
func lastOutcome(denied, outOfAttempts bool) gatewaymetrics.RetryOutcome {
	switch {
	case denied:
		return gatewaymetrics.RetryBudgetExhausted
	case outOfAttempts:
		return gatewaymetrics.RetryAttemptsExhausted
	}
	return gatewaymetrics.RetryClientGone
}
