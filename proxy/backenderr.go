package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// This file hands a backend's error answer on in the shape of the endpoint the client called
// (OpenAI's, Anthropic's for /v1/messages), and logs every one under the request's id.

// backendStatus is the class of a backend error in the log (lograte groups by it): the
// status the backend answered, 0 for an error it reported inside a stream.
type backendStatus int

func (s backendStatus) Error() string {
	if s == 0 {
		return "the backend reported an error in its stream"
	}
	return "the backend answered " + strconv.Itoa(int(s)) + " " + http.StatusText(int(s))
}

// redactHosts are the names of the exchange's backend that a message handed to the client
// must not carry: its host:port and its host.
func (ex *exchange) redactHosts() []string {
	t := ex.h.backendURL(ex.backend)
	if t == nil {
		return nil
	}
	return []string{t.Host, t.Hostname()}
}

// keepErrorHeader reports whether a backend's header is handed on with a translated error
// answer: what tells the client when to retry, and nothing that could name the backend
// (Server, Location, Via, ...). The request id is the gateway's (ModifyResponse).
func keepErrorHeader(name string) bool {
	switch name {
	case "Retry-After", "Retry-After-Ms", RequestIDHeader, "Request-Id":
		return true
	}
	return strings.HasPrefix(name, "X-Ratelimit-") || strings.HasPrefix(name, "Anthropic-Ratelimit-")
}

// backendError hands on a backend's error answer (status 400 or more): for a request of the
// pipeline, its first openaiwire.MaxBackendError bytes are read and the answer is replaced
// by the error in the endpoint's shape (openaiwire.BackendError: status, message and param
// kept, types mapped, addresses redacted), with the backend's Retry-After and rate-limit
// headers; a request passed through keeps the backend's answer. Either way it is logged
// (rate-limited per backend and status) with the request id. The read is bounded by the
// stream-idle timeout, as any read of the answer.
func (ex *exchange) backendError(resp *http.Response) {
	if ex.req == nil {
		ex.logBackendError(resp.StatusCode, nil)
		resp.Body = &wholeTap{ex: ex, up: resp.Body}
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, openaiwire.MaxBackendError+1))
	_ = resp.Body.Close() // read to its end, the connection is reused; cut, it is dropped
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		body = nil // compressed: nothing readable
	}
	ex.logBackendError(resp.StatusCode, body)
	e := openaiwire.BackendError(ex.ep, resp.StatusCode, body, ex.redactHosts()...)
	out := append(openaiwire.AppendJSONFor(e, ex.ep, make([]byte, 0, 128+len(e.Message))), '\n')
	hd := make(http.Header, 4)
	for k, v := range resp.Header {
		if keepErrorHeader(k) {
			hd[k] = v
		}
	}
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header, resp.ContentLength, resp.TransferEncoding = hd, int64(len(out)), nil
	resp.StatusCode, resp.Status = e.Status, strconv.Itoa(e.Status)+" "+http.StatusText(e.Status)
	resp.Body = &wholeTap{ex: ex, up: io.NopCloser(bytes.NewReader(out))}
}

// logBackendError logs a backend's error handed on to the client: the request id, the
// path, the attempts it took (retries exhausted or not) and the start of what the backend
// said. The lines are rate-limited by backend and status (internal/lograte): the first of a
// kind in 10 s in full, the rest counted.
func (ex *exchange) logBackendError(status int, body []byte) {
	detail := ""
	if len(body) > 0 {
		detail = "; the backend said: " + clip(string(bytes.TrimSpace(body)))
	}
	retries := ""
	if ex.exhausted {
		retries = ", retries exhausted"
	}
	ex.h.errLog.Warn("backend error handed on", ex.backend, fmt.Errorf("request_id=%s path=%s attempts=%d%s: %w%s",
		ex.rid, ex.path, max(ex.attempts, 1), retries, backendStatus(status), detail))
}

// streamError hands on an error a backend reported inside a stream as an OpenAI-shaped
// {"error": ...} chunk, translated into the endpoint's vocabulary: for chat and completions
// the same chunk with OpenAI's types, for Messages Anthropic's error event, for Responses
// OpenAI's error and response.failed events (and the stream ends there).
func (t *sseTap) streamError(data []byte) {
	ex := t.ex
	ex.logBackendError(0, data)
	e := openaiwire.BackendError(ex.ep, 0, data, ex.redactHosts()...)
	switch ex.ep {
	case openai.Responses:
		t.out = openaiwire.AppendResponsesError(t.out, e, t.seq)
		t.out = openaiwire.AppendResponseFailed(t.out, e, t.seq+1, t.started, t.failedStub())
		t.seq += 2
	default:
		t.out = openaiwire.AppendEventFor(e, ex.ep, t.out)
	}
}
