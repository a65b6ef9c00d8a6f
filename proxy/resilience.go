package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/routing"
)

// Timeouts bound every wait of a proxied request. Zero fields are the defaults. It is plain
// data, read once by New.
type Timeouts struct {
	// Dial bounds connecting to a backend, TLS its handshake (the default transport only;
	// a Transport of your own brings its own). Zero: 5 s and 10 s.
	Dial, TLS time.Duration
	// ResponseHeader bounds the wait for a backend's response headers. Model servers send
	// a stream's headers as soon as they accept it, so for a streamed request this is the
	// time to accept; a whole answer's headers come with the answer, so a non-streamed
	// request is given ResponseHeader plus PerOutputToken for each token it may generate.
	// A backend that misses it is abandoned and the request retried elsewhere (see Retry).
	// Zero: 30 s.
	ResponseHeader time.Duration
	// PerOutputToken is what each token of a non-streamed request's output budget
	// (max_tokens, or 256) adds to ResponseHeader. Zero: 100 ms.
	PerOutputToken time.Duration
	// StreamIdle bounds the silence of an answer being relayed, including the time to the
	// first token after the headers: a backend that sends nothing for this long is cut off,
	// the client gets an OpenAI error event, and the request's handles are freed. Zero: 60 s.
	StreamIdle time.Duration
	// Request caps a request from the moment it is sent to a backend to the end of its
	// answer. Zero: 10 min.
	Request time.Duration
	// Body bounds reading a request body, when the Handler serves the request itself (it
	// sets the connection's read deadline through http.ResponseController; the server's own
	// ReadTimeout would also cut the answers' streams). 408 beyond it. Zero: 30 s.
	Body time.Duration
	// Stall is how long a streamed request may wait for its first byte (the response
	// headers, which model servers send as soon as they accept a stream) before its backend
	// counts as stalled, or, where the router's latency model predicts the request's time to
	// first token (routing.Result.Predicted), 3 × that prediction if larger: for engines that
	// send a stream's headers only with its first token. Each request is judged by its own
	// wait, so one request's progress never hides another's stall. A stalled backend gets no new
	// picks (the attempt fails as a refused connection would, and passive health ejects it at
	// once) and every request waiting there for its first byte — streamed or not, prefill legs
	// included — is moved: cancelled there and retried elsewhere (Retry's attempts; moves are
	// not charged to the retry budget, see Retry), before any byte reached the client. Whole
	// answers and prefill legs, whose first byte is their end, are judged by the active health
	// checks' streamed probes (Options.HealthChecks), which move them the same way. It is
	// independent of ResponseHeader. Zero: 2 s. Negative: off.
	Stall time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.Dial, 5*time.Second)
	def(&t.TLS, 10*time.Second)
	def(&t.ResponseHeader, 30*time.Second)
	def(&t.PerOutputToken, 100*time.Millisecond)
	def(&t.StreamIdle, 60*time.Second)
	def(&t.Request, 10*time.Minute)
	def(&t.Body, 30*time.Second)
	def(&t.Stall, 2*time.Second)
	return t
}

func (t Timeouts) valid() bool {
	for _, d := range []time.Duration{t.Dial, t.TLS, t.ResponseHeader, t.PerOutputToken, t.StreamIdle, t.Request, t.Body} {
		if d < 0 {
			return false
		}
	}
	return true
}

// Retry configures retries before the first byte: a request whose backend refused or
// reset the connection, missed the response-header timeout, or answered 502, 503, 504 or
// 429 is sent to another backend — never after any byte of an answer reached the client.
// Each failed attempt closes its routing.Result with the failure, which passive health
// (outlier.Detector) hears at once. Retries are bounded by a budget, as in Envoy: over the
// last BudgetWindow, retries may be at most BudgetRatio of the requests (and BudgetMin
// always), so a sick fleet is not hit by a retry storm. A request moved off a stalled backend
// (see Timeouts.Stall) is not charged to the budget, only to Attempts: the stalled backend is
// ejected and its attempt cancelled, so the move adds no load to a sick server, only the one
// attempt the request costs wherever it lands — and a budget that refused it would fail a
// request a healthy backend could serve. When the attempts or the budget are spent, or no
// other backend is left, the last backend's error answer is handed on (in the API's shape, its
// Retry-After kept; see Handler.ModifyResponse). Zero fields are the defaults. It is plain
// data, read once by New; the budget itself is safe for concurrent use.
type Retry struct {
	// Attempts is the most tries per request, the first included. Zero: 3; 1: no retry.
	Attempts int
	// BudgetRatio is the largest share of requests that may be retries. Zero: 0.2.
	BudgetRatio float64
	// BudgetMin is the number of retries allowed per window whatever the ratio. Zero: 3.
	BudgetMin int
	// BudgetWindow is the window of the budget. Zero: 10 s.
	BudgetWindow time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.Attempts == 0 {
		r.Attempts = 3
	}
	if r.BudgetRatio == 0 {
		r.BudgetRatio = 0.2
	}
	if r.BudgetMin == 0 {
		r.BudgetMin = 3
	}
	if r.BudgetWindow == 0 {
		r.BudgetWindow = 10 * time.Second
	}
	return r
}

// budget counts requests and retries over a sliding window of budgetSlots slots.
type budget struct {
	ratio float64
	min   int
	slot  time.Duration

	mu       sync.Mutex
	at       int64 // index of the current slot (time / slot)
	requests [budgetSlots]int
	retries  [budgetSlots]int
	denied   uint64
}

const budgetSlots = 10

func newBudget(r Retry) *budget {
	return &budget{ratio: r.BudgetRatio, min: r.BudgetMin, slot: max(time.Millisecond, r.BudgetWindow/budgetSlots)}
}

// advanceLocked moves the window to now, clearing the slots it passed.
func (b *budget) advanceLocked(now time.Time) int {
	at := now.UnixNano() / int64(b.slot)
	if d := at - b.at; d > 0 {
		for i := int64(1); i <= min(d, budgetSlots); i++ {
			k := (b.at + i) % budgetSlots
			b.requests[k], b.retries[k] = 0, 0
		}
		b.at = at
	}
	return int(at % budgetSlots)
}

// request counts one request. O(1).
func (b *budget) request(now time.Time) {
	b.mu.Lock()
	b.requests[b.advanceLocked(now)]++
	b.mu.Unlock()
}

// allow reports whether one more retry fits the budget, and counts it if so. O(slots).
func (b *budget) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.advanceLocked(now)
	reqs, rets := 0, 0
	for i := range budgetSlots {
		reqs += b.requests[i]
		rets += b.retries[i]
	}
	if rets >= max(b.min, int(b.ratio*float64(reqs))) {
		b.denied++
		return false
	}
	b.retries[k]++
	return true
}

// retryStats returns the retry counters (proxyseam.RetryStats).
func (h *Handler) retryStats() proxyseam.RetryStats {
	h.budget.mu.Lock()
	defer h.budget.mu.Unlock()
	return proxyseam.RetryStats{Requests: h.sent.Load(), Retries: h.retried.Load(), Denied: h.budget.denied, Exhausted: h.exhausted.Load()}
}

// Causes with which the proxy cancels an attempt.
var (
	errHeaderTimeout = errors.New("proxy: the backend sent no response headers in time")
	errIdleTimeout   = errors.New("proxy: the backend sent nothing for the stream idle timeout")
	errRetried       = errors.New("proxy: attempt abandoned for a retry")
	errRequestCap    = errors.New("proxy: the request ran past its time cap")
	errStalled       = errors.New("proxy: the backend sent no first byte within the stall limit")
)

// retryTransport is the RoundTripper of the Handler (and of Transport()): it sends each
// attempt of a request Rewrite routed, with its response-header timeout, and retries the
// ones that failed before any answer on other backends.
type retryTransport struct {
	h    *Handler
	base http.RoundTripper
}

// Transport returns the RoundTripper the Handler sends requests with: Options.Transport
// wrapped with the response-header timeout and retries (see Retry). Set it as the Transport
// of your own httputil.ReverseProxy that uses the Handler's hooks, to get both; without it,
// the hooks still admit, route and account, but do not retry.
func (h *Handler) Transport() http.RoundTripper { return h.retrier }

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeOf(req.Context())
	if ex == nil || ex.rejected != nil || !ex.picked {
		return t.base.RoundTrip(req)
	}
	h := t.h
	h.sent.Add(1)
	h.budget.request(time.Now())
	if ex.disagg {
		if err := ex.prefill(req); err != nil {
			return nil, err // the client left
		}
	}
	for attempt := 1; ; attempt++ {
		areq := ex.startAttempt(req)
		resp, err := t.base.RoundTrip(areq)
		if ex.headersIn() && err == nil {
			// Moved off a stalled backend as its answer came: the move stands (the client has
			// nothing yet), so that every request there is treated alike.
			_ = resp.Body.Close()
			resp, err = nil, errStalled
		}
		failure, retryable := ex.classify(resp, err)
		stalled := errors.Is(ex.cause(), errStalled) || errors.Is(err, errStalled)
		last := !retryable || attempt >= h.retry.Attempts || ex.ctx.Err() != nil
		denied := !last && !stalled && !h.budget.allow(time.Now())
		last = last || denied
		var reason gatewaymetrics.RetryReason
		if retryable {
			reason = ex.retryReason(resp, err)
		}
		if stalled && ex.ctx.Err() == nil {
			h.usher.ObserveStallMove(ex.backend)
		}
		if last {
			ex.attempts, ex.exhausted = attempt, retryable // for the log of an error handed on
			if retryable {
				h.exhausted.Add(1)
				h.usher.ObserveRetry(reason, lastOutcome(denied, attempt >= h.retry.Attempts))
			}
			if err != nil {
				ex.setErr(err, failure) // what the attempt said about the backend, for Done
			}
			return resp, err
		}
		var kept []byte // the error answer's body, handed on if no other backend is left
		if resp != nil {
			kept, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			err = errors.New("proxy: backend " + ex.backend + " answered " + resp.Status)
		}
		ex.abandonAttempt(err, failure)
		if !ex.repick() {
			// Nowhere else to go: answer as if this attempt had been the last — the backend's
			// own answer (its status and Retry-After kept), or its error for the log.
			ex.attempts, ex.exhausted = attempt, true
			h.usher.ObserveRetry(reason, gatewaymetrics.RetryNoBackend)
			if resp != nil {
				resp.Body = io.NopCloser(bytes.NewReader(kept))
				return resp, nil
			}
			return nil, fmt.Errorf("%w; the last attempt: %w", errNoBackendLeft, err)
		}
		h.retried.Add(1)
		h.usher.ObserveRetry(reason, gatewaymetrics.Retried)
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			req.Body = body
		}
	}
}

var errNoBackendLeft = errors.New("proxy: no other backend to retry on")

// startAttempt points req at the exchange's current backend, with a context of its own that
// the response-header timer (and later the stream-idle timer) cancels.
func (ex *exchange) startAttempt(req *http.Request) *http.Request {
	h := ex.h
	ctx, cancel := context.WithCancelCause(req.Context())
	wait := h.timeouts.ResponseHeader
	if ex.req != nil && !ex.req.Stream {
		wait += time.Duration(outputBudget(ex.req)) * h.timeouts.PerOutputToken
	}
	first := wait
	stall := time.Duration(0)
	ex.mu.Lock()
	if ex.watchStall() {
		stall = h.timeouts.Stall
		if p := ex.pick.Predicted.TTFT; p > 0 && ex.picked {
			stall = max(stall, stallTTFTFactor*p)
		}
		first = min(wait, stall)
	}
	ex.cancel = cancel
	ex.attemptCtx = ctx
	ex.attemptAt, ex.headerWait, ex.stallAfter = time.Now(), wait, stall
	if h.timeouts.Stall > 0 && ex.picked {
		ex.waiter = h.waiting.add(ex.backend, cancel)
	}
	if ex.timer == nil {
		ex.timer = time.AfterFunc(first, ex.expire)
	} else {
		ex.timer.Reset(first)
	}
	ex.phase = phaseHeaders
	ex.mu.Unlock()
	out := req.WithContext(ctx)
	if t := h.backendURL(ex.backend); t != nil && out.Header.Get(rankHeader) != t.rank {
		out.Header = out.Header.Clone() // the attempt's own: a retry changed the rank
	}
	ex.pointAt(out)
	return out
}

// Attempt phases, for the timer's verdict.
const (
	phaseHeaders = iota + 1 // waiting for response headers
	phaseBody               // relaying the answer
)

// expire is the attempt timer's action: cancel the attempt with the cause of its phase. While
// the body is relayed, the timer is not reset on every read (touch only notes the time); when
// it fires early because bytes came since, it is set again for the rest of the idle timeout.
func (ex *exchange) expire() {
	ex.mu.Lock()
	cancel, phase := ex.cancel, ex.phase
	if phase == phaseHeaders && ex.stallAfter > 0 {
		// This streamed request waited its stall limit for its first byte: the backend is
		// stalled. Move every request waiting there (this one included), unless the wait for
		// the headers ends first.
		waited := time.Since(ex.attemptAt)
		if rest := ex.headerWait - waited; rest > 0 {
			if waited < ex.stallAfter {
				ex.timer.Reset(min(rest, ex.stallAfter-waited))
				ex.mu.Unlock()
				return
			}
			backend := ex.backend
			ex.mu.Unlock()
			ex.h.moveStalled(backend)
			return
		}
	}
	if phase == phaseBody && !ex.finished {
		idle := time.Since(ex.arrival) - time.Duration(ex.lastTouch.Load())
		if rest := ex.h.timeouts.StreamIdle - idle; rest > 0 {
			ex.timer.Reset(rest)
			ex.mu.Unlock()
			return
		}
	}
	ex.mu.Unlock()
	if cancel == nil {
		return
	}
	if phase == phaseHeaders {
		cancel(errHeaderTimeout)
	} else {
		cancel(errIdleTimeout)
	}
}

// stallTTFTFactor is how many times its predicted time to first token a streamed request may
// wait for its first byte, where that is longer than Timeouts.Stall.
const stallTTFTFactor = 3

// watchStall reports whether the attempt judges its backend by its own wait for the first
// byte: a streamed request, whose headers a live server sends at once.
func (ex *exchange) watchStall() bool {
	return ex.h.timeouts.Stall > 0 && ex.req != nil && ex.req.Stream
}

// bodyStarted switches the attempt timer to the stream-idle timeout.
func (ex *exchange) bodyStarted() {
	ex.mu.Lock()
	if ex.picked {
		ex.pick.Progress(time.Now())
	}
	ex.phase = phaseBody
	ex.lastTouch.Store(int64(time.Since(ex.arrival)))
	if ex.timer != nil {
		ex.timer.Reset(ex.h.timeouts.StreamIdle)
	}
	ex.mu.Unlock()
}

// touch notes bytes from the backend: the idle timeout counts from now, and the router hears
// that the backend makes progress (Result.Progress). It only stores times (the monotonic clock,
// no lock, no timer change: it runs for every read of a stream); expire looks at them when the
// timer fires. The pick is read without the lock: the body is read only after the attempt that
// set it returned its response. O(1), no allocation.
func (ex *exchange) touch() {
	now := time.Now()
	ex.lastTouch.Store(int64(now.Sub(ex.arrival)))
	ex.pick.Progress(now)
}

// cause is why the current attempt's context ended (nil while it has not).
func (ex *exchange) cause() error {
	ex.mu.Lock()
	ctx := ex.attemptCtx
	ex.mu.Unlock()
	if ctx == nil {
		return nil
	}
	return context.Cause(ctx)
}

// classify tells what an attempt's outcome says about its backend, and whether another
// backend should be tried. Only failures before any answer reached the client get here.
func (ex *exchange) classify(resp *http.Response, err error) (routing.Failure, bool) {
	if ex.ctx.Err() != nil {
		return routing.FailureNone, false // the client went away
	}
	if err != nil {
		switch cause := ex.cause(); {
		case errors.Is(cause, errStalled):
			// Silent on every request for the stall timeout, headers of a streamed answer
			// included: as unreachable as a refused connection, and once its requests are
			// abandoned it has none in flight to look silent with, so only ejecting it keeps
			// the next picks off it.
			return routing.FailureConnect, true
		case errors.Is(cause, errHeaderTimeout):
			return routing.FailureTimeout, true
		case errors.Is(cause, errRequestCap), errors.Is(err, context.DeadlineExceeded):
			return routing.FailureTimeout, false
		}
		// Refused, reset or closed before an answer: nothing reached the client.
		return routing.FailureConnect, true
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return routing.FailureOverload, true
	case http.StatusServiceUnavailable:
		if resp.Header.Get("Retry-After") != "" {
			return routing.FailureOverload, true
		}
		return routing.FailureServer, true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return routing.FailureServer, true
	}
	if resp.StatusCode >= 500 {
		return routing.FailureServer, false
	}
	return routing.FailureNone, false
}

// abandonAttempt closes the current attempt's Result with its failure.
func (ex *exchange) abandonAttempt(err error, f routing.Failure) {
	ex.headersIn()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.cancel != nil {
		ex.cancel(errRetried)
	}
	if ex.picked {
		ex.pick.Done(routing.DoneInfo{Err: err, Failure: f})
		ex.picked = false
		ex.tried = append(ex.tried, ex.pick.ID)
	}
}

// repick chooses another backend for the request, excluding those tried. It reports false
// when none is left.
func (ex *exchange) repick() bool {
	rr := ex.routingRequest()
	p, err := ex.h.router.Pick(&rr)
	if err != nil {
		return false
	}
	ex.mu.Lock()
	ex.pick, ex.picked, ex.backend, ex.pickAt = p, true, p.Backend.Name, time.Now()
	ex.mu.Unlock()
	ex.h.usher.ObservePick(ex.backend)
	return true
}

// failureOf classifies an error that ends a request after its answer began, or a final
// attempt's failure, for routing.DoneInfo.
func (ex *exchange) failureOf(err error) routing.Failure {
	switch cause := ex.cause(); {
	case err == nil, ex.ctx.Err() != nil:
		return routing.FailureNone
	case errors.Is(cause, errHeaderTimeout), errors.Is(cause, errIdleTimeout), errors.Is(cause, errRequestCap):
		return routing.FailureTimeout
	case errors.Is(err, errClosedEarly):
		return routing.FailureNone
	case isTimeout(err) && !isDial(err):
		// A transport's own timeout (a user's Transport's deadline): slow, not gone.
		return routing.FailureTimeout
	}
	// The connection broke during the answer (reset, closed early): as a refused connection
	// does, it fails every request the backend gets, and cannot be retried once bytes reached
	// the client, so it counts toward ejection as fast as one.
	return routing.FailureConnect
}

// isDial reports whether err is a failure to connect (a dial refused or timed out).
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// bodyLimiter bounds the bytes of request bodies being read at once.
type bodyLimiter struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

// acquire takes n bytes if they fit. O(1).
func (l *bodyLimiter) acquire(n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used+n > l.limit {
		return false
	}
	l.used += n
	return true
}

func (l *bodyLimiter) release(n int64) {
	l.mu.Lock()
	l.used -= n
	l.mu.Unlock()
}

// headersIn notes that the current attempt's wait for its first byte is over (an answer, or an
// error): it leaves the backend's waiting list. It reports whether a stall verdict on the
// backend had already taken it off the list to move it. Calling it again does nothing.
func (ex *exchange) headersIn() (moved bool) {
	ex.mu.Lock()
	w := ex.waiter
	ex.waiter = nil
	ex.stallAfter = 0
	ex.mu.Unlock()
	return w != nil && !ex.h.waiting.remove(w)
}

// waiter is a request (an attempt, or a prefill leg) waiting for its first byte on a backend.
type waiter struct {
	backend string
	cancel  context.CancelCauseFunc
}

// waitList holds the requests waiting for their first byte, so that a stall verdict on a
// backend moves them all.
type waitList struct {
	mu sync.Mutex
	m  map[*waiter]struct{}
}

// add registers a request waiting on backend, which cancel moves. O(1).
func (l *waitList) add(backend string, cancel context.CancelCauseFunc) *waiter {
	w := &waiter{backend: backend, cancel: cancel}
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[*waiter]struct{})
	}
	l.m[w] = struct{}{}
	l.mu.Unlock()
	return w
}

// remove takes w off the list; it reports false when a stall verdict took it first. O(1).
func (l *waitList) remove(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[w]; !ok {
		return false
	}
	delete(l.m, w)
	return true
}

// take removes and returns the requests waiting on backend. O(waiting).
func (l *waitList) take(backend string) []*waiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*waiter
	for w := range l.m {
		if w.backend == backend {
			out = append(out, w)
			delete(l.m, w)
		}
	}
	return out
}

// moveStalled moves every request waiting for its first byte on backend: each is cancelled
// with errStalled and retried elsewhere (its attempt fails as a refused connection would, so
// passive health ejects the backend). It returns how many it moved.
func (h *Handler) moveStalled(backend string) int {
	ws := h.waiting.take(backend)
	for _, w := range ws {
		w.cancel(errStalled)
	}
	return len(ws)
}
