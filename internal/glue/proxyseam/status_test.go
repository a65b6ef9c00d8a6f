package proxyseam_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
)

func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 200},
		{flowcontrol.ErrFlowFull, 429},
		{flowcontrol.ErrWouldWait, 429},
		{flowcontrol.ErrWouldExpire, 429},
		{flowcontrol.ErrClosed, 503},
		{flowcontrol.ErrExpired, 503},
		{context.DeadlineExceeded, 503},
		{flowcontrol.ErrInvalidRequest, 400},
		{context.Canceled, proxyseam.StatusClientClosedRequest},
		{errors.New("other"), 500},
	} {
		if got := proxyseam.StatusOf(c.err); got != c.want {
			t.Errorf("StatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// Each admission outcome maps to one HTTP status.
func ExampleOutcomeStatus() {
	for o := flowcontrol.Dispatched; o <= flowcontrol.RejectedWait; o++ {
		fmt.Println(o, proxyseam.OutcomeStatus(o))
	}
	// Output:
	// dispatched 200
	// rejected_capacity 429
	// rejected_closed 503
	// rejected_invalid 400
	// expired 503
	// cancelled 499
	// rejected_wait 429
}

// How an HTTP handler of your own uses a flowcontrol queue (proxy.Handler does all of this, with StatusOf):
// admit with the request's context, answer a refusal with the status its outcome maps to (and
// Retry-After on 429), and report usage when the answer is done.
func ExampleStatusOf() {
	q, _ := flowcontrol.New(flowcontrol.Options{
		MaxInFlight:  1,
		FlowCapacity: flowcontrol.Limits{Requests: 1},
	})
	handler := func(w http.ResponseWriter, r *http.Request) {
		t, err := q.Admit(r.Context(), flowcontrol.Request{
			Flow:  flowcontrol.FlowID(r.Header.Get("X-Tenant")), // assigned by the gateway's auth, not the client
			Bytes: r.ContentLength,
		})
		if err != nil {
			code := proxyseam.StatusOf(err)
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", strconv.Itoa(int(q.RetryAfter().Seconds())))
			}
			http.Error(w, err.Error(), code)
			return
		}
		// ... proxy to a backend, stream the answer, read its usage ...
		t.Done(flowcontrol.Usage{PromptTokens: 12, OutputTokens: 30})
		fmt.Fprintln(w, "ok")
	}

	occupied, _ := q.TryAdmit(flowcontrol.Request{Flow: "t1"})      // one request is running
	q.Enqueue(flowcontrol.Request{Flow: "t1"})                      // t1 already has one waiting
	req := httptest.NewRequest("POST", "/v1/chat/completions", nil) // so this one is refused
	req.Header.Set("X-Tenant", "t1")
	rec := httptest.NewRecorder()
	handler(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"), strings.TrimSpace(rec.Body.String()))
	occupied.Done(flowcontrol.Usage{})
	// Output:
	// 429 60 flowcontrol: queue full: flow limit on requests
}
