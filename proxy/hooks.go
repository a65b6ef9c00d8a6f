package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// exchange is one request's trip through the pipeline: what Rewrite decided, the handles it
// holds, and what the response tap learnt. It travels in the outgoing request's context from
// Rewrite to ModifyResponse or ErrorHandler.
//
// Lock discipline: the fields above mu are written by Rewrite before the request is sent and
// only read afterwards; the fields below mu are guarded by it, since the response body may
// be read and closed from different goroutines.
type exchange struct {
	h        *Handler
	ctx      context.Context // the client's request context
	req      *openai.Request // nil for a request passed through without admission
	ep       openai.API      // of req; 0 for a request passed through
	id       Identity
	rid      string // the request id (RequestIDHeader)
	ridSet   bool   // ServeHTTP already put rid in the client's answer
	arrival  time.Time
	ticket   flowcontrol.Ticket
	admitted bool
	// prompt is the request's chain (in bufp, from the Handler's pool), kept for the picks
	// of retries; routeSession the router's session key.
	prompt       Prompt
	bufp         *[]prefixcache.BlockHash
	routeSession string
	role         routing.Role // of the request's picks: RoleDecode in a disaggregated fleet
	disagg       bool         // the Decider chose a prefill step (run by the transport)
	prefilledAt  time.Time    // when the prefill step answered; zero if none did
	path         string       // the request's path under a backend's base path
	// rejected is the answer decided before any backend was asked (retryAfter goes with a
	// 429); the outgoing request then carries a cancelled context so it is never sent.
	rejected   *openai.Error
	retryAfter time.Duration
	cancelCap  context.CancelFunc // releases the whole-request cap
	// attempts is the number of backends tried, exhausted whether the last failed in a way
	// worth retrying with no retry left: set by the transport before it returns the answer.
	attempts  int
	exhausted bool
	// targets are the request's latency targets (Options.SLO, trusted headers); the queue's
	// Request.Value points here when any is set (sloTarget).
	targets routing.Latency
	// quota is the request's reservation and the rate-limit headers' values (Options.Quota);
	// settled once, by settleQuota.
	quota quotaseam.Grant

	mu      sync.Mutex
	pick    routing.Result // the current attempt's
	picked  bool           // pick is open
	backend string
	pickAt  time.Time           // when the current attempt was picked
	tried   []routing.BackendID // backends of abandoned attempts
	// The current attempt: its context, its cancel, and the timer that cancels it when the
	// response headers (phaseHeaders) or the stream (phaseBody) keep it waiting too long.
	attemptCtx context.Context
	cancel     context.CancelCauseFunc
	timer      *time.Timer
	attemptAt  time.Time     // when the current attempt was sent
	headerWait time.Duration // its response-header timeout
	stallAfter time.Duration // its stall limit (a streamed request's wait for its first byte); 0: none
	waiter     *waiter       // its place in Handler.waiting until its first byte; nil after
	phase      int
	finished   bool
	// lastTouch is when the backend last sent bytes, as time since arrival (monotonic); it
	// is atomic rather than guarded by mu, since touch runs for every read of a stream.
	lastTouch atomic.Int64
	usage     flowcontrol.Usage
	info      routing.DoneInfo
	queue     *flowcontrol.Queue // the queue of the request's model pool
}

type exchangeKey struct{}

// exchangeOf returns the exchange Rewrite attached to ctx, or nil.
func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// errRejected cancels the outgoing request of a rejected exchange.
var errRejected = errors.New("proxy: request rejected before reaching a backend")

// Rewrite is the [httputil.ReverseProxy] hook that runs usher's pipeline on a request. The
// pipeline, admission included, takes a POST whose path ends in one of
//
//	/chat/completions  (OpenAI chat, under any prefix)
//	/completions       (OpenAI completions, under any prefix)
//	/v1/messages       (Anthropic messages)
//	/v1/responses      (OpenAI responses)
//	/v1/embeddings     (OpenAI embeddings)
//
// (so /openai/v1/chat/completions goes through it, and /v1/responses/{id} or
// /v1/messages/count_tokens do not). For such a request Rewrite reads and validates the body in that API's shape, keys the request
// to a flow, hashes its prompt, waits for admission and picks a backend, then points pr.Out at
// that backend with the body the backend should see (the client's "priority" removed; usage
// asked for when streaming). Every other request — another method, or any other path
// (/v1/models, /tokenize, ...) — is routed to a backend the router picks, without admission
// and with its body untouched.
//
// If the request is rejected (bad input, unknown model, queue full, no backend, client gone)
// Rewrite leaves pr.Out with a cancelled context, so the transport fails it at once and
// ErrorHandler writes the rejection. Use Rewrite together with ModifyResponse and
// ErrorHandler: they close what Rewrite opened. Call it first in a Rewrite of your own, then
// adjust pr.Out (headers, X-Forwarded-For with pr.SetXForwarded).
func (h *Handler) Rewrite(pr *httputil.ProxyRequest) {
	ex := &exchange{h: h, ctx: pr.In.Context(), arrival: time.Now()}
	ex.rid, ex.ridSet = h.requestID(ex.ctx)
	ctx := context.WithValue(pr.Out.Context(), exchangeKey{}, ex)
	var err *openai.Error
	if ep, ok := openai.APIOf(pr.In.URL.Path); ok && pr.In.Method == http.MethodPost {
		ex.ep = ep
		err, ex.path = ex.begin(pr.In, ep), ep.Path()
	} else {
		err, ex.path = ex.pass(), pr.In.URL.Path
	}
	if err == nil && h.backendURL(ex.backend) == nil {
		// The router published a backend whose name is not a URL: nothing can reach it.
		ex.finish(fmt.Errorf("proxy: backend name %q is not a base URL", ex.backend))
		err = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "bad_backend",
			Message: "the chosen backend has no usable address"}
	}
	if err != nil {
		ex.settleQuota() // a reservation, if one was made, returns whole
		ex.rejected = err
		ctx, cancel := context.WithCancelCause(ctx)
		cancel(errRejected)
		pr.Out = pr.Out.WithContext(ctx)
		pr.Out.URL = &url.URL{Scheme: "usher-rejected", Host: "invalid", Path: "/"}
		pr.Out.Body = nil
		return
	}
	ctx, ex.cancelCap = context.WithTimeoutCause(ctx, h.timeouts.Request, errRequestCap)
	pr.Out = pr.Out.WithContext(ctx)
	out := pr.Out
	out.Header.Set(RequestIDHeader, ex.rid)
	// The client's expectation is met here: a backend's 100 Continue would reach the client as
	// a second one, and ReverseProxy clears the answer's headers (the id) after relaying it.
	out.Header.Del("Expect")
	ex.pointAt(out)
	if ex.req != nil {
		up := openaiwire.Upstream(ex.req)
		out.Body = io.NopCloser(bytes.NewReader(up))
		out.ContentLength = int64(len(up))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(up)), nil }
		out.Header.Set("Content-Type", "application/json")
		// The response tap reads what it relays: ask for it uncompressed.
		out.Header.Del("Accept-Encoding")
		// The body was decoded when it was read (readBody).
		out.Header.Del("Content-Encoding")
	}
}

// pointAt points out at the exchange's current backend: its address, the request's path
// under the backend's base path, and its data-parallel rank. It writes out's URL and headers
// in place, so give it a request of the attempt's own.
func (ex *exchange) pointAt(out *http.Request) {
	t := ex.h.backendURL(ex.backend)
	if t == nil {
		return
	}
	u := *out.URL
	u.Scheme, u.Host, u.User = t.Scheme, t.Host, nil
	u.Path, u.RawPath = t.Path+ex.path, ""
	out.URL, out.Host = &u, ""
	pinRank(out.Header, t)
}

// begin runs the pipeline up to the pick for a chat or completions request. It returns the
// answer to reject the request with (holding nothing), or nil.
func (ex *exchange) begin(in *http.Request, ep openai.API) *openai.Error {
	h := ex.h
	if n := headerBytes(in.Header); n > h.maxHeader {
		return &openai.Error{Status: http.StatusRequestHeaderFieldsTooLarge, Type: openai.TypeInvalidRequest,
			Code: "headers_too_large", Message: fmt.Sprintf("request header fields total %d bytes, more than the %d allowed", n, h.maxHeader)}
	}
	body, rerr := ex.readBody(in)
	if rerr != nil {
		if rerr == errBusyReading {
			ex.retryAfter = time.Second
		}
		return rerr
	}
	req, err := openai.Parse(body, ep, h.limits)
	if err != nil {
		return asOpenAIError(err)
	}
	ex.req = req
	mi, ok := h.resolveModel(req.Model)
	if !ok {
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "model_not_found",
			Param: "model", Message: fmt.Sprintf("the model %q does not exist here", clip(req.Model))}
	}
	if mi.adapter {
		req.BaseModel, req.Adapter = mi.base, req.Model
	}
	ex.queue = h.queueFor(mi.base)
	if ex.id, err = h.keyer.Key(in, req); err != nil {
		return asOpenAIError(err)
	}
	if req.PreviousResponseID != "" {
		if e := ex.followPrevious(req); e != nil {
			return e
		}
	}
	if ex.id.Band < 0 || ex.id.Band >= h.bands {
		// A keyer's mistake, not the client's: do not guess a band.
		return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Code: "bad_band",
			Message: "the gateway's keyer gave this request a band outside its configuration"}
	}

	// Hash once; the chain goes to the router and, through it, to the index.
	ctx := in.Context()
	bufp := h.chains.Get().(*[]prefixcache.BlockHash)
	prompt, err := h.tokenize(ctx, (*bufp)[:0], req)
	if err != nil {
		prompt, _ = BytesTokenizer{}.Tokenize(ctx, (*bufp)[:0], req)
	}
	ex.prompt, ex.bufp = prompt, bufp // back to the pool when the exchange finishes

	var e *openai.Error
	if ex.targets, e = h.slo.Targets(in.Header, ex.id.Band); e != nil {
		return e
	}
	if h.quota != nil {
		a := quotaseam.Ask{Tenant: ex.id.Tenant, Model: req.Model, Band: ex.id.Band,
			PromptTokens: int64(prompt.Tokens), OutputTokens: int64(req.MaxTokens), Now: ex.arrival}
		if ep == openai.Embeddings {
			a.OutputTokens = -1
		}
		quotaseam.Reserve(h.quota, &a, &ex.quota)
		if ex.quota.Refused {
			ex.retryAfter = ex.quota.RetryAfter
			return &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded", Message: ex.quota.Message}
		}
	}
	if ex.id.Session != "" { // sessionless traffic must not look like one long session
		ex.routeSession = ex.id.Tenant + "/" + ex.id.Session
	}
	if h.decider != nil {
		ex.role = routing.RoleDecode
	}
	rr := ex.routingRequest()
	fr := flowcontrol.Request{
		Flow:         ex.id.Flow(),
		Band:         ex.id.Band,
		Bytes:        int64(len(body)),
		PromptTokens: flowcontrol.Tokens(prompt.Tokens),
		OutputTokens: flowcontrol.Tokens(outputBudget(req)),
		Arrival:      ex.arrival,
	}
	// With targets: sloTarget's value, the deadline, or a refusal as early shedding refuses.
	if h.slo.Queue(&fr, &ex.targets, h.router, &rr, h.ttl, ex.arrival, h.usher, ex.id.Band) {
		return ex.admissionError(flowcontrol.ErrWouldExpire)
	}
	t, err := ex.queue.Admit(ctx, fr)
	h.usher.ObserveAdmission(flowcontrol.OutcomeOf(err), ex.id.Band, time.Since(ex.arrival))
	if err != nil {
		if ex.targets != (routing.Latency{}) {
			switch flowcontrol.OutcomeOf(err) {
			case flowcontrol.RejectedWait:
				h.usher.ObserveSLO(ex.id.Band, gatewaymetrics.SLOShed)
			case flowcontrol.Expired:
				h.usher.ObserveSLO(ex.id.Band, gatewaymetrics.SLOExpired)
			}
		}
		return ex.admissionError(err)
	}
	ex.ticket, ex.admitted = t, true

	p, err := h.router.Pick(&rr)
	ex.pickAt = time.Now()
	if err != nil {
		ex.finish(err)
		ex.logFailure("no backend", err)
		if ex.tried != nil {
			return errPreviousUnavailable(req)
		}
		return errNoBackend
	}
	ex.pick, ex.picked, ex.backend = p, true, p.Backend.Name
	h.usher.ObservePick(ex.backend)
	if h.decider != nil && ep <= openai.Completions { // the KV-transfer protocol is chat's and completions'
		// Copies, so that only this path pays for what escapes into the interface call.
		dr, dp := rr, p
		if ex.disagg = h.decider.Disaggregate(&dr, &dp); !ex.disagg {
			h.usher.ObserveStage(gatewaymetrics.Aggregated)
		}
	}
	return nil
}

// routingRequest is what the router is asked for the request: its prompt, session, role,
// model, answer length and targets, excluding the backends already tried (all but the home
// of a previous_response_id, apis.go; or those of failed attempts).
func (ex *exchange) routingRequest() routing.Request {
	rr := routing.Request{
		Chain: ex.prompt.Chain, BlockSize: ex.prompt.BlockSize, PromptTokens: ex.prompt.Tokens,
		Session: ex.routeSession, Role: ex.role, Targets: ex.targets, Exclude: ex.tried,
	}
	if ex.req != nil {
		rr.Stream, rr.Model, rr.Adapter, rr.OutputTokens = ex.req.Stream, ex.req.Model, ex.req.Adapter, ex.req.MaxTokens
	}
	return rr
}

// pass picks a backend for a request Rewrite does not admit (a ReverseProxy of the caller's
// may carry /v1/models, /tokenize, ...), without admission.
func (ex *exchange) pass() *openai.Error {
	p, err := ex.h.router.Pick(&routing.Request{})
	if err != nil {
		ex.logFailure("no backend", err)
		return errNoBackend
	}
	ex.pick, ex.picked, ex.backend = p, true, p.Backend.Name
	return nil
}

// errNoBackend answers a request for which the router found no backend (all unhealthy,
// ejected, or none known yet).
var errNoBackend = &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "no_backend",
	Message: "no backend can take the request now"}

// outputBudget is the request's expected output, for the admission cost estimate.
func outputBudget(req *openai.Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return 256
}

// admissionError is the answer to a request the queue did not admit.
func (ex *exchange) admissionError(err error) *openai.Error {
	status := proxyseam.StatusOf(err)
	switch status {
	case http.StatusTooManyRequests:
		ex.retryAfter = ex.queue.RetryAfter()
		if errors.Is(err, flowcontrol.ErrWouldExpire) {
			return &openai.Error{Status: status, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
				Message: "the estimated wait for admission exceeds the request's time limit; retry after the time in the Retry-After header"}
		}
		return &openai.Error{Status: status, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
			Message: "too many requests are waiting; retry after the time in the Retry-After header"}
	case http.StatusServiceUnavailable:
		if errors.Is(err, flowcontrol.ErrClosed) {
			return &openai.Error{Status: status, Type: openai.TypeUnavailable, Code: "shutting_down",
				Message: "the gateway is shutting down; retry on another replica"}
		}
		return &openai.Error{Status: status, Type: openai.TypeUnavailable, Code: "queue_timeout",
			Message: "no capacity became free before the request's time limit"}
	case proxyseam.StatusClientClosedRequest:
		return &openai.Error{Status: status, Type: openai.TypeInvalidRequest, Code: "client_closed_request",
			Message: "the client closed the request while it waited"}
	}
	ex.logFailure("admission failed", err)
	return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Code: "admission_failed",
		Message: "admission failed"}
}

// asOpenAIError returns err as an *openai.Error (400 invalid_request_error when it is not one).
func asOpenAIError(err error) *openai.Error {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe
	}
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "invalid_request", Message: err.Error()}
}

// readBody reads a request body of at most Options.MaxBodyBytes, holding its bytes in the
// budget of bodies being read at once (Options.MaxBodyBytesReading) while it reads. A body
// sent with a Content-Encoding is decoded here (contentDecoder), and the limit bounds both
// the bytes received and the bytes decoded: a small body that inflates past it is refused
// with 413 as soon as it does, having held at most the limit.
func (ex *exchange) readBody(in *http.Request) ([]byte, *openai.Error) {
	h := ex.h
	limit := h.maxBody
	tooBig := &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("the request body exceeds %d bytes", limit)}
	if in.ContentLength > limit {
		return nil, tooBig
	}
	coding, rerr := contentCoding(in.Header)
	if rerr != nil {
		return nil, rerr
	}
	size := int64(16 << 10)
	if in.ContentLength > 0 && coding == "" {
		size = in.ContentLength + 1 // +1: see EOF without growing
	}
	if !h.reading.acquire(size) {
		return nil, errBusyReading
	}
	held := size
	defer func() { h.reading.release(held) }()
	buf := bytes.NewBuffer(make([]byte, 0, size))
	var err error
	var raw *countingReader // the body as received
	if in.Body != nil {
		// Read in steps, taking room in the budget before each step that grows the buffer.
		raw = &countingReader{r: io.LimitReader(in.Body, limit+1)}
		var r io.Reader = raw
		var encoded *bufio.Reader // what the decoder reads: buffered here, so that what it leaves is seen
		if coding != "" {
			encoded = bufio.NewReader(raw)
			var dec io.ReadCloser
			if dec, err = newDecoder(coding, encoded); err != nil {
				return nil, ex.decodeError(in, raw, coding, err, tooBig)
			}
			defer dec.Close()
			r = io.LimitReader(dec, limit+1)
		}
		for err == nil {
			if buf.Available() == 0 {
				grow := int64(buf.Cap())
				if !h.reading.acquire(grow) {
					return nil, errBusyReading
				}
				held += grow
				buf.Grow(int(grow))
			}
			var n int
			n, err = r.Read(buf.AvailableBuffer()[:buf.Available()])
			buf.Write(buf.AvailableBuffer()[:n])
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if err == nil && coding != "" && int64(buf.Len()) <= limit {
			// The encoded data has ended: so must the body. A zlib reader stops at its
			// checksum; reading on to the end also lets the server lift its read deadline.
			var after int64
			if after, err = io.Copy(io.Discard, io.LimitReader(encoded, 1)); err == nil && after > 0 {
				return nil, badEncoding(coding)
			}
		}
	}
	switch {
	case err != nil && coding != "":
		return nil, ex.decodeError(in, raw, coding, err, tooBig)
	case err != nil:
		return nil, ex.readError(in, err)
	case int64(buf.Len()) > limit:
		if coding != "" {
			tooBig.Message += " once decoded"
		}
		return nil, tooBig
	}
	return buf.Bytes(), nil
}

// readError answers a request whose body could not be read: err is the read's error.
func (ex *exchange) readError(in *http.Request, err error) *openai.Error {
	switch {
	case isTimeout(err): // the server's read timeout; it also cancels the context
		return &openai.Error{Status: http.StatusRequestTimeout, Type: openai.TypeInvalidRequest, Code: "request_timeout",
			Message: "the request body did not arrive in time"}
	case in.Context().Err() != nil:
		return &openai.Error{Status: proxyseam.StatusClientClosedRequest, Type: openai.TypeInvalidRequest,
			Code: "client_closed_request", Message: "the client closed the request while sending it"}
	}
	ex.logFailure("unreadable body", err)
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "unreadable_body",
		Message: "the request body could not be read (a broken chunked encoding or connection)"}
}

// decodeError answers a request whose encoded body failed to decode with err: 413 when the
// body as received passed the limit (the decoder saw it cut short), the read's own error
// when reading failed, else 400 for data that is not what its Content-Encoding says.
func (ex *exchange) decodeError(in *http.Request, raw *countingReader, coding string, err error, tooBig *openai.Error) *openai.Error {
	switch {
	case raw.n > ex.h.maxBody:
		return tooBig
	case raw.err != nil:
		return ex.readError(in, raw.err)
	}
	return badEncoding(coding)
}

// countingReader counts the bytes read through it and keeps the first error other than EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// errBusyReading answers a request whose body does not fit the budget of bodies being read.
var errBusyReading = &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "overloaded",
	Message: "too many request bytes are arriving at once; retry after the time in the Retry-After header"}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// headerBytes is the size of a header: names and values summed.
func headerBytes(hd http.Header) int {
	n := 0
	for k, vs := range hd {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return n
}

// target is where a backend name points: a base URL and, for a data-parallel rank
// (rankName), the rank to pin the request to.
type target struct {
	*url.URL
	rank string // "" for none
}

// backendURL returns the target of a backend name, cached; nil if the name is not a base URL.
func (h *Handler) backendURL(name string) *target {
	if t, ok := h.urls.Load(name); ok {
		return t.(*target)
	}
	u, err := url.Parse(name)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	t := &target{URL: u}
	if r, ok := strings.CutPrefix(u.Fragment, "dp="); ok {
		if _, err := strconv.Atoi(r); err == nil {
			t.rank = r
		}
	}
	u.Path, u.Fragment, u.RawFragment = trimSlash(u.Path), "", ""
	h.urls.Store(name, t)
	return t
}

// rankHeader is the header vLLM and SGLang read to pin a request to a data-parallel rank.
const rankHeader = "X-Data-Parallel-Rank"

// pinRank sets (or, for a backend without ranks, removes) the rank header of an outgoing
// request: only the router chooses a rank, never the client.
func pinRank(hd http.Header, t *target) {
	if t.rank != "" {
		hd.Set(rankHeader, t.rank)
	} else {
		hd.Del(rankHeader)
	}
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// ModifyResponse is the httputil.ReverseProxy hook that watches the backend's answer to a
// request Rewrite routed: it wraps the body in a tap that notes the first token and the
// usage (streamed server-sent events or a whole JSON answer), drops the usage chunk the
// client did not ask for, turns a stream that breaks into the API's error events, and closes
// the queue's Ticket and the router's Result exactly once — when the body ends, fails, or is
// closed early because the client went away. A backend's error answer (status 400 or more)
// is handed on in the shape of the request's API — its status, message and param kept, its
// type one of that API's, no backend address in it, its Retry-After kept — and logged with
// the request id; one to a request passed through without admission keeps its body.
// Responses to requests Rewrite did not see are left alone. It never fails.
func (h *Handler) ModifyResponse(resp *http.Response) error {
	ex := exchangeOf(resp.Request.Context())
	if ex == nil {
		return nil
	}
	if ex.ridSet { // the backend's echo of the id would repeat it
		delRequestID(resp.Header, anthropicPath(ex.path))
	} else {
		setRequestID(resp.Header, ex.rid, anthropicPath(ex.path))
	}
	ex.bodyStarted()
	quotaHeaders(resp.Header, ex.ep, &ex.quota, ex.arrival)
	switch {
	case resp.StatusCode >= http.StatusBadRequest:
		ex.setErr(fmt.Errorf("proxy: backend %s answered %s", ex.backend, resp.Status), statusFailure(resp))
		ex.backendError(resp) // backenderr.go
	case resp.StatusCode != http.StatusOK:
		ex.setErr(fmt.Errorf("proxy: backend %s answered %s", ex.backend, resp.Status), statusFailure(resp))
		resp.Body = &wholeTap{ex: ex, up: resp.Body}
	case ex.req != nil && ex.req.Stream && openaiwire.IsEventStream(resp.Header.Get("Content-Type")):
		// The tap may drop an event, so the length is no longer the backend's.
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Header.Set("Cache-Control", "no-cache")
		resp.Header.Set("X-Accel-Buffering", "no")
		resp.Body = newSSETap(ex, resp.Body)
	default:
		resp.Body = &wholeTap{ex: ex, up: resp.Body, keep: ex.req != nil}
	}
	return nil
}

// statusFailure is what a backend's error answer says about it: busy (429, or 503 with
// Retry-After), failing (other 5xx), or nothing (4xx: this request, not the backend).
func statusFailure(resp *http.Response) routing.Failure {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || (resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""):
		return routing.FailureOverload
	case resp.StatusCode >= 500:
		return routing.FailureServer
	}
	return routing.FailureNone
}

// ErrorHandler is the [httputil.ReverseProxy] hook that answers a request that got no
// response: one Rewrite rejected (its status and error: 400, 404, 408, 413, 429 with
// Retry-After, 431, 499, 503), or one whose backend failed before answering (502, or 504 on a
// timeout), whose handles it closes. The error is JSON in the shape of the request's API:
// Anthropic's for a POST whose path ends in /v1/messages, OpenAI's for everything else.
func (h *Handler) ErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r.Context())
	var oe *openai.Error
	switch {
	case ex == nil:
		// A request Rewrite did not see: its detail is the caller's ReverseProxy's to log.
		oe = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_error", Message: "the backend failed"}
	case ex.rejected != nil:
		if !ex.ridSet {
			setRequestID(w.Header(), ex.rid, anthropicPath(ex.path))
		}
		oe = ex.rejected
		if ex.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ex.retryAfter.Seconds()))))
		}
	default:
		if !ex.ridSet {
			setRequestID(w.Header(), ex.rid, anthropicPath(ex.path))
		}
		ex.finish(err)
		// The client hears what happened, never where or in Go's words (addresses, ports,
		// syscalls); the log has the detail under the request id.
		switch {
		case ex.ctx.Err() != nil:
			oe = &openai.Error{Status: proxyseam.StatusClientClosedRequest, Type: openai.TypeInvalidRequest, Code: "client_closed_request",
				Message: "the client closed the request"}
		case errors.Is(err, errNoBackendLeft):
			oe = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_error",
				Message: "every backend tried failed before answering"}
		case isTimeout(err) || ex.failureOf(err) == routing.FailureTimeout:
			oe = &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeTimeout, Code: "upstream_timeout",
				Message: "the backend did not answer in time"}
		default:
			oe = &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "upstream_error",
				Message: "the backend failed before answering"}
		}
		if oe.Status != proxyseam.StatusClientClosedRequest {
			ex.logFailure(oe.Message, err)
		}
	}
	var ep openai.API
	if ex != nil {
		ep = ex.ep
		quotaHeaders(w.Header(), ep, &ex.quota, ex.arrival)
	}
	openaiwire.WriteErrorFor(w, ep, oe) // each API's errors in its own shape
}

// logFailure logs what went wrong with the request, with the detail its client is not told.
func (ex *exchange) logFailure(msg string, err error) {
	ex.h.log.Warn("request failed: "+msg, "request_id", ex.rid, "backend", ex.backend, "path", ex.path, "err", err)
}

// ctxErr is the client's context error: non-nil once the client has gone away.
func (ex *exchange) ctxErr() error { return ex.ctx.Err() }

// setErr records the request's error and what it says about the backend, if it has none yet.
func (ex *exchange) setErr(err error, f routing.Failure) {
	ex.mu.Lock()
	if ex.info.Err == nil {
		ex.info.Err, ex.info.Failure = err, f
	}
	ex.mu.Unlock()
}

// firstToken notes the first token of a stream: the router releases the prefill charge.
func (ex *exchange) firstToken(at time.Time) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.finished || !ex.info.FirstTokenAt.IsZero() {
		return
	}
	ex.info.FirstTokenAt = at
	if ex.picked {
		ex.pick.FirstToken(at)
	}
	if !ex.prefilledAt.IsZero() {
		ex.h.usher.ObserveDecodeFirstToken(at.Sub(ex.prefilledAt))
	}
}

// setUsage records the usage the backend reported.
func (ex *exchange) setUsage(u openaiwire.TokenUsage) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.usage.PromptTokens = flowcontrol.Tokens(max(u.PromptTokens, 0))
	ex.usage.OutputTokens = flowcontrol.Tokens(max(u.CompletionTokens, 0))
	ex.usage.CachedTokens = flowcontrol.Tokens(u.Cached())
	ex.info.PromptTokens, ex.info.OutputTokens = u.PromptTokens, u.CompletionTokens
}

// finish closes the books exactly once: the router's first, so that the next request the
// queue dispatches sees the backend's load released, then the queue's. err (if no error was
// recorded before) is the request's outcome; nil is success.
func (ex *exchange) finish(err error) {
	var f routing.Failure
	if err != nil {
		f = ex.failureOf(err)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.finished {
		return
	}
	ex.finished = true
	if ex.info.Err == nil {
		ex.info.Err, ex.info.Failure = err, f
	}
	ex.info.End = time.Now()
	if ex.admitted {
		ex.observeLatency()
	}
	if ex.timer != nil {
		ex.timer.Stop()
	}
	if ex.picked {
		ex.picked = false
		ex.pick.Done(ex.info)
	}
	if ex.admitted {
		ex.ticket.Done(ex.usage)
	}
	ex.settleQuota()
	if ex.cancel != nil {
		ex.cancel(nil)
	}
	if ex.cancelCap != nil {
		ex.cancelCap()
	}
	if ex.bufp != nil && cap(ex.prompt.Chain) <= 1<<16 {
		*ex.bufp = ex.prompt.Chain[:0]
		ex.h.chains.Put(ex.bufp)
	}
	ex.bufp, ex.prompt.Chain = nil, nil
}
