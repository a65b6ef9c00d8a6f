package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/internal/homes"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// Errors a request's handles are closed with when its stream did not end normally.
var (
	// ErrStreamEnded: the stream ended (Envoy closed it, the client went away, a reset)
	// before the response was complete.
	ErrStreamEnded = errors.New("extproc: stream ended before the response was complete")
	// ErrStreamIdle: the stream was silent longer than Options.StreamIdle.
	ErrStreamIdle = errors.New("extproc: stream idle timeout")
	// errServedElsewhere closes the pick of an endpoint Envoy did not use (it used a fallback).
	errServedElsewhere = errors.New("extproc: served by a fallback endpoint")
)

// received is one Recv result, handed from the reader goroutine.
type received struct {
	m   *extprocv3.ProcessingRequest
	err error
}

// process is the ext_proc service's Process (see processor): it serves one ext_proc stream,
// which is one HTTP request through Envoy. A reader goroutine receives the messages, so that
// the stream's idle timeout and context bound every wait; the messages are handled in order on
// the calling goroutine, which alone touches the request's state. Whatever happens — the
// response ends, Envoy closes or resets the stream, the context ends, the idle timeout — the
// request's router Result and queue Ticket are closed exactly once before process returns.
func (s *Server) process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	s.stats.streams.Add(1)
	s.stats.active.Add(1)
	defer s.stats.active.Add(-1)
	ex := &exchange{s: s, ctx: ctx}
	defer ex.finish(ErrStreamEnded, routing.FailureNone) // a no-op when the response completed

	in := make(chan received)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case in <- received{m, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	idle := time.NewTimer(s.idle)
	defer idle.Stop()
	var out []*extprocv3.ProcessingResponse
	for {
		var r received
		select {
		case r = <-in:
		case <-idle.C:
			s.stats.idleTimeouts.Add(1)
			ex.finish(ErrStreamIdle, routing.FailureTimeout)
			return status.Errorf(codes.DeadlineExceeded, "extproc: no message for %v", s.idle)
		case <-ctx.Done():
			ex.finish(ErrStreamEnded, routing.FailureNone)
			return status.FromContextError(ctx.Err()).Err()
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return nil // finish(ErrStreamEnded) unless the response completed
			}
			return r.err
		}
		out = ex.handle(r.m, out[:0])
		for _, resp := range out {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		// Counted from the answer, not the message: handling a body may wait for admission
		// (up to the TTL), which is not the stream being idle.
		idle.Reset(s.idle)
	}
}

// exchange is one request's state across its stream's messages. Only the goroutine running
// Process touches it.
type exchange struct {
	s   *Server
	ctx context.Context

	started  bool // request headers seen
	decided  bool // the request was answered (destination or immediate response)
	duplex   bool // request body in FULL_DUPLEX_STREAMED mode: the headers answer waits for the body
	duplexRe bool // response body in FULL_DUPLEX_STREAMED mode: chunks are echoed back
	noBody   bool // request body mode NONE: decide at the headers
	noResp   bool // response body mode NONE: the response ends with its headers
	method   string
	path     string
	host     string
	header   http.Header
	subset   []string
	hasSub   bool
	body     []byte
	tooBig   bool
	arrival  time.Time

	req      *openai.Request
	id       proxy.Identity
	ticket   flowcontrol.Ticket
	admitted bool
	pick     routing.Result
	picked   bool
	pickAt   time.Time
	endpoint string // the picked endpoint's address
	pinned   string // the endpoint that stored the previous response; "" when none
	prompt   proxy.Prompt
	bufp     *[]prefixcache.BlockHash
	session  string
	// targets are the request's latency targets (Options.SLO, trusted headers); the queue's
	// Request.Value points here when any is set (the target proxy.Handler gives it).
	targets routing.Latency
	// The prefill pick of a disaggregated request: charged until the decode pod's answer
	// begins (its sidecar has then finished the prefill step), closed exactly once.
	prefill   routing.Result
	prefilled bool // prefill is open
	prefiller string

	// grant is the request's quota reservation and the rate-limit headers' values
	// (Options.Quota); settled once, by settleQuota.
	grant quotaseam.Grant

	status   int // the response's status; 0 before its headers
	watch    watcher
	info     routing.DoneInfo
	usage    flowcontrol.Usage
	finished bool
}

// handle answers one message, appending the responses to out.
func (ex *exchange) handle(m *extprocv3.ProcessingRequest, out []*extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	if pc := m.GetProtocolConfig(); pc != nil {
		ex.duplex = pc.GetRequestBodyMode() == procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED || pc.GetSendBodyWithoutWaitingForHeaderResponse()
		ex.duplexRe = pc.GetResponseBodyMode() == procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED
		ex.noBody = pc.GetRequestBodyMode() == procmodev3.ProcessingMode_NONE
		ex.noResp = pc.GetResponseBodyMode() == procmodev3.ProcessingMode_NONE
	}
	switch r := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return ex.requestHeaders(m, r.RequestHeaders, out)
	case *extprocv3.ProcessingRequest_RequestBody:
		return ex.requestBody(r.RequestBody, out)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !ex.decided {
			// The body ended without end_of_stream: decide now. Only the metadata can still
			// carry the destination.
			resp := ex.decide()
			if resp.GetImmediateResponse() != nil {
				return append(out, resp)
			}
			if ex.duplex {
				// Full duplex held the headers answer and the body: both go now, then the
				// trailers'.
				return append(out, ex.asHeaders(resp), streamedBody(ex.body), continueRequestTrailers())
			}
			tr := continueRequestTrailers()
			tr.DynamicMetadata = resp.DynamicMetadata
			return append(out, tr)
		}
		return append(out, continueRequestTrailers())
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if !ex.decided {
			return append(out, continueResponseHeaders()) // out of order: nothing of ours to close
		}
		return ex.responseHeaders(m, r.ResponseHeaders, out)
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := r.ResponseBody
		if ex.decided {
			ex.responseBody(b.GetBody(), b.GetEndOfStream())
		}
		return append(out, responseBody(b.GetBody(), b.GetEndOfStream(), ex.duplexRe))
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if ex.decided {
			ex.complete()
		}
		return append(out, continueResponseTrailers())
	}
	// A message this picker does not know (a newer protocol): no answer is better than a
	// wrong one; the stream's idle bound and Envoy's message timeout still apply.
	return out
}

// requestHeaders records the request's headers and subset hint. The decision waits for the
// body unless there is none.
func (ex *exchange) requestHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders, out []*extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	if ex.started {
		return append(out, continueRequestHeaders())
	}
	ex.started, ex.arrival = true, time.Now()
	ex.header = make(http.Header, len(h.GetHeaders().GetHeaders()))
	for _, hv := range h.GetHeaders().GetHeaders() {
		k := hv.GetKey()
		switch k {
		case ":path":
			ex.path = headerValue(hv)
		case ":method":
			ex.method = headerValue(hv)
		case ":authority":
			ex.host = headerValue(hv)
		default:
			if k != "" && k[0] != ':' {
				ex.header.Add(k, headerValue(hv))
			}
		}
	}
	ex.subset, ex.hasSub = subsetOf(metadataField(m.GetMetadataContext(), ex.s.subNS, SubsetKey))
	if h.GetEndOfStream() || ex.noBody {
		return append(out, ex.asHeaders(ex.decide()))
	}
	if ex.duplex {
		return out // answered with the decision, after the body
	}
	return append(out, continueRequestHeaders())
}

// requestBody accumulates the body and decides at its end.
func (ex *exchange) requestBody(b *extprocv3.HttpBody, out []*extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	if ex.decided {
		return append(out, continueRequestBody())
	}
	if !ex.tooBig {
		if int64(len(ex.body)+len(b.GetBody())) > ex.s.maxBody {
			ex.tooBig, ex.body = true, nil
		} else {
			ex.body = append(ex.body, b.GetBody()...)
		}
	}
	if !b.GetEndOfStream() {
		if ex.duplex {
			return out
		}
		return append(out, continueRequestBody())
	}
	resp := ex.decide()
	if resp.GetImmediateResponse() != nil {
		return append(out, resp)
	}
	if ex.duplex {
		// Full duplex: the headers answer carries the destination, then the whole body goes
		// back to Envoy, which forwards it.
		return append(out, ex.asHeaders(resp), streamedBody(ex.body))
	}
	return append(out, resp)
}

// streamedBody is the full-duplex answer that hands the whole request body back to Envoy.
func streamedBody(body []byte) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: true},
		}}},
	}}}
}

// asHeaders turns a body decision into the answer to the request headers.
func (ex *exchange) asHeaders(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	if br, ok := resp.GetResponse().(*extprocv3.ProcessingResponse_RequestBody); ok {
		resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: br.RequestBody.GetResponse()}}
	}
	return resp
}

// decide runs the pipeline — parse, key, hash, admit, pick — and returns the answer to the
// request body: the destination, or an immediate response.
func (ex *exchange) decide() *extprocv3.ProcessingResponse {
	ex.decided = true
	s := ex.s
	var e *openai.Error
	var retryAfter time.Duration
	ep, completion := openai.APIOf(pathOnly(ex.path))
	switch {
	case ex.finished:
		// The stream's books are closed (it ended before its request was decided): take no
		// ticket and no pick that nothing would close.
		e = noEndpoint("the stream ended before the request was decided")
	case ex.tooBig && (completion || ex.duplex):
		// A completion must be read whole; in full duplex the picker would have to hand back a
		// body it did not keep. A buffered request of another kind goes on: Envoy holds it.
		e = &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("the request body exceeds %d bytes", s.maxBody)}
	case completion && ex.method == http.MethodPost && !ex.noBody:
		e, retryAfter = ex.admit(ep)
	default: // no body to read (request body mode NONE), or not a completion
		e = ex.route(nil)
		if e == nil {
			s.stats.passed.Add(1)
		}
	}
	if e != nil {
		s.stats.rejected.Add(1)
		switch {
		case e.Status == http.StatusTooManyRequests:
			s.stats.shed.Add(1)
		case e.Status == http.StatusServiceUnavailable:
			s.stats.unavailable.Add(1)
		case e.Status >= 400 && e.Status < 500:
			s.stats.bad.Add(1)
		}
		if e.Code == noEndpointCode && retryAfter == 0 {
			retryAfter = noEndpointRetry
		}
		ex.settleQuota() // a reservation, if one was made, returns whole
		resp := immediate(ep, e, retryAfter)
		if s.quota != nil {
			hm := resp.GetImmediateResponse().GetHeaders()
			hm.SetHeaders = ex.quotaHeaders(ep, hm.SetHeaders)
		}
		return resp
	}
	value := ex.destination()
	hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(DestinationHeader, value)}}
	if ex.prefiller != "" {
		hm.SetHeaders = append(hm.SetHeaders, setHeader(PrefillerHeader, ex.prefiller))
	} else {
		hm.RemoveHeaders = []string{PrefillerHeader} // only the picker names a prefill endpoint
	}
	cr := &extprocv3.CommonResponse{HeaderMutation: hm, ClearRouteCache: s.clearRoute}
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}},
		DynamicMetadata: destinationMetadata(s.ns, value),
	}
}

// admit parses, keys, hashes, admits and picks a completion request.
func (ex *exchange) admit(ep openai.API) (*openai.Error, time.Duration) {
	s := ex.s
	req, err := openai.Parse(ex.body, ep, s.limits)
	if err != nil {
		return asOpenAIError(err), 0
	}
	ex.req = req
	if s.models != nil && !s.models[req.Model] {
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "model_not_found",
			Param: "model", Message: fmt.Sprintf("the model %q does not exist here", clip(req.Model))}, 0
	}
	hr := &http.Request{Method: ex.method, URL: &url.URL{Path: pathOnly(ex.path)}, Host: ex.host, Header: ex.header}
	if ex.id, err = s.keyer.Key(hr.WithContext(ex.ctx), req); err != nil {
		return asOpenAIError(err), 0
	}
	if ex.id.Band < 0 || ex.id.Band >= s.bands {
		return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Code: "bad_band",
			Message: "the picker's keyer gave this request a band outside its configuration"}, 0
	}
	var oe *openai.Error
	if ex.targets, oe = s.slo.Targets(ex.header, ex.id.Band); oe != nil {
		return oe, 0
	}
	if req.PreviousResponseID != "" {
		if e := ex.followPrevious(req); e != nil {
			return e, 0
		}
	}
	// An empty pool (synced, no ready pods yet) cannot serve either: refuse at once, before
	// the request takes a place in the queue.
	if len(s.eps.Load().list) == 0 {
		return noEndpoint("the pool has no endpoints yet; retry after the time in the Retry-After header"), noEndpointRetry
	}
	// An empty subset can never be served: refuse before waiting for admission.
	if ex.hasSub && !ex.subsetEligible() {
		return noEndpoint("none of the endpoints in the proxy's subset hint is known to the picker"), 0
	}
	set := s.eps.Load()
	if base, ok := set.adapters[req.Model]; ok {
		req.BaseModel, req.Adapter = base, req.Model // keyed as the engine keys the adapter's blocks
	}
	bufp := s.chains.Get().(*[]prefixcache.BlockHash)
	prompt, terr := s.tok.Tokenize(ex.ctx, (*bufp)[:0], req)
	if terr != nil {
		prompt, _ = proxy.BytesTokenizer{}.Tokenize(ex.ctx, (*bufp)[:0], req)
	}
	ex.prompt, ex.bufp = prompt, bufp
	if s.quota != nil {
		a := quotaseam.Ask{Tenant: ex.id.Tenant, Model: req.Model, Band: ex.id.Band,
			PromptTokens: int64(prompt.Tokens), OutputTokens: int64(req.MaxTokens), Now: ex.arrival}
		if ep == openai.Embeddings {
			a.OutputTokens = -1
		}
		quotaseam.Reserve(s.quota, &a, &ex.grant)
		if ex.grant.Refused {
			return &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
				Message: ex.grant.Message}, ex.grant.RetryAfter
		}
	}
	if ex.id.Session != "" {
		ex.session = ex.id.Tenant + "/" + ex.id.Session
	}
	rr := routing.Request{Chain: prompt.Chain, BlockSize: prompt.BlockSize, PromptTokens: prompt.Tokens, Session: ex.session,
		Stream: ex.req != nil && ex.req.Stream, Model: req.Model, Adapter: req.Adapter,
		OutputTokens: int(outputBudget(req)), Targets: ex.targets}
	fr := flowcontrol.Request{
		Flow:         ex.id.Flow(),
		Band:         ex.id.Band,
		Bytes:        int64(len(ex.body)),
		PromptTokens: flowcontrol.Tokens(prompt.Tokens),
		OutputTokens: flowcontrol.Tokens(outputBudget(req)),
		Arrival:      ex.arrival,
	}
	// With targets: the slo policy's target (slo.Target), the deadline, or a refusal as early shedding refuses.
	if s.slo.Queue(&fr, &ex.targets, s.router, &rr, s.ttl, ex.arrival, s.usher, ex.id.Band) {
		return ex.admissionError(flowcontrol.ErrWouldExpire)
	}
	t, err := s.queue.Admit(ex.ctx, fr)
	if err != nil {
		if ex.targets != (routing.Latency{}) {
			switch flowcontrol.OutcomeOf(err) {
			case flowcontrol.RejectedWait:
				s.usher.ObserveSLO(ex.id.Band, gatewaymetrics.SLOShed)
			case flowcontrol.Expired:
				s.usher.ObserveSLO(ex.id.Band, gatewaymetrics.SLOExpired)
			}
		}
		return ex.admissionError(err)
	}
	ex.ticket, ex.admitted = t, true
	disagg := set.disagg
	if disagg {
		rr.Role = routing.RoleDecode
	}
	if e := ex.route(&rr); e != nil {
		ex.finish(errors.New("extproc: no endpoint"), routing.FailureNone)
		return e, 0
	}
	s.stats.picks.Add(1)
	if disagg && ep <= openai.Completions { // the KV-transfer protocol is chat's and completions'
		ex.pickPrefill(&rr)
	}
	return nil, 0
}

// pickPrefill asks the Decider whether the request's prefill runs on a prefill endpoint and,
// if so, picks one (by prefix and prefill load). With none available the decode endpoint
// serves the request whole (a fallback).
func (ex *exchange) pickPrefill(rr *routing.Request) {
	s := ex.s
	if !s.decider.Disaggregate(rr, &ex.pick) {
		s.usher.ObserveStage(gatewaymetrics.Aggregated)
		return
	}
	// No Session: a session's home is its decode endpoint, which the prefill pick must not move.
	p, err := s.router.Pick(&routing.Request{Chain: rr.Chain, BlockSize: rr.BlockSize, PromptTokens: rr.PromptTokens,
		Role: routing.RolePrefill, Model: rr.Model, Adapter: rr.Adapter})
	if err != nil {
		s.usher.ObserveStage(gatewaymetrics.Fallback)
		return
	}
	ex.prefill, ex.prefilled, ex.prefiller = p, true, p.Backend.Name
	ex.pick.FirstToken(time.Now()) // the decode endpoint will not prefill: release its charge
	s.usher.ObservePick(ex.prefiller)
	s.usher.ObserveStage(gatewaymetrics.Disaggregated)
}

// closePrefill closes the prefill pick, if open: at the decode answer's headers (the sidecar
// ran the prefill step before the decode server answered), or when the exchange ends first.
func (ex *exchange) closePrefill(err error) {
	if !ex.prefilled {
		return
	}
	ex.prefilled = false
	info := routing.DoneInfo{Err: err}
	if err == nil {
		info.FirstTokenAt = time.Now()
	}
	ex.prefill.Done(info)
}

// route picks an endpoint for rr (nil: a request without prompt, routed without admission),
// within the subset hint when there is one.
func (ex *exchange) route(rr *routing.Request) *openai.Error {
	if rr == nil {
		rr = &routing.Request{}
	}
	set := ex.s.eps.Load()
	if ex.hasSub {
		if !ex.subsetEligible() {
			return noEndpoint("none of the endpoints in the proxy's subset hint is known to the picker")
		}
		rr.Exclude = ex.outsideSubset(set)
	}
	if ex.pinned != "" {
		for i, e := range set.list {
			if e.Address != ex.pinned && !slices.Contains(rr.Exclude, set.ids[i]) {
				rr.Exclude = append(rr.Exclude, set.ids[i])
			}
		}
	}
	p, err := ex.s.router.Pick(rr)
	if err != nil && ex.pinned != "" {
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "previous_response_unavailable",
			Param: "previous_response_id", Message: "the endpoint that stored the response named by previous_response_id cannot take requests now; retry later"}
	}
	if err != nil {
		return noEndpoint("no endpoint can take the request now: " + err.Error())
	}
	ex.pick, ex.picked, ex.endpoint, ex.pickAt = p, true, p.Backend.Name, time.Now()
	ex.s.usher.ObservePick(ex.endpoint)
	return nil
}

// subsetEligible reports whether the subset names an endpoint the picker knows.
func (ex *exchange) subsetEligible() bool {
	set := ex.s.eps.Load()
	for _, a := range ex.subset {
		if _, ok := set.byAddr[a]; ok {
			return true
		}
	}
	return false
}

// outsideSubset lists the known endpoints not in the subset: the pick's exclusions.
// O(endpoints + subset).
func (ex *exchange) outsideSubset(set *endpointSet) []routing.BackendID {
	in := make([]bool, len(set.list))
	for _, a := range ex.subset {
		if i, ok := set.byAddr[a]; ok {
			in[i] = true
		}
	}
	var out []routing.BackendID
	for i, ok := range in {
		if !ok {
			out = append(out, set.ids[i])
		}
	}
	return out
}

// destination is the header and metadata value: the pick, then up to Fallbacks other
// eligible endpoints in the set's order after it (unscored: they are where Envoy goes if the
// pick fails).
func (ex *exchange) destination() string {
	n := ex.s.fallbacks
	if n == 0 || ex.pinned != "" {
		return ex.endpoint
	}
	set := ex.s.eps.Load()
	start, ok := set.byAddr[ex.endpoint]
	if !ok || len(set.list) < 2 {
		return ex.endpoint
	}
	var allowed map[string]bool
	if ex.hasSub {
		allowed = make(map[string]bool, len(ex.subset))
		for _, a := range ex.subset {
			allowed[a] = true
		}
	}
	var b strings.Builder
	b.WriteString(ex.endpoint)
	for k := 1; k < len(set.list) && n > 0; k++ {
		e := set.list[(start+k)%len(set.list)]
		a := e.Address
		if (allowed != nil && !allowed[a]) || (set.disagg && ex.req != nil && e.Role == routing.RolePrefill) ||
			(ex.req != nil && !e.serves(ex.req.Model)) {
			continue // outside the subset, a prefill endpoint where a decode one serves, or another model's
		}
		b.WriteByte(',')
		b.WriteString(a)
		n--
	}
	return b.String()
}

// responseHeaders notes the status and the endpoint that served.
func (ex *exchange) responseHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders, out []*extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	served := ""
	if v := metadataField(m.GetMetadataContext(), ex.s.ns, ServedKey); v != nil {
		served = firstEndpoint(v.GetStringValue())
	}
	ex.status = 200
	var contentType string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			if c, err := strconv.Atoi(headerValue(hv)); err == nil {
				ex.status = c
			}
		case "content-type":
			contentType = headerValue(hv)
		case ServedKey:
			if served == "" {
				served = firstEndpoint(headerValue(hv))
			}
		}
	}
	if served != "" && ex.picked && served != ex.endpoint {
		ex.moveTo(served)
	}
	if ex.picked {
		ex.pick.Progress(time.Now()) // the endpoint answered: it is not stuck
	}
	ex.closePrefill(nil)
	if ex.status != http.StatusOK {
		f := routing.FailureNone
		switch {
		case ex.status == http.StatusTooManyRequests || ex.status == http.StatusServiceUnavailable:
			f = routing.FailureOverload
		case ex.status >= 500:
			f = routing.FailureServer
		}
		if ex.info.Err == nil {
			ex.info.Err, ex.info.Failure = fmt.Errorf("extproc: endpoint %s answered %d", ex.endpoint, ex.status), f
		}
	}
	ex.watch.reset(ex.req != nil && ex.req.Stream && openaiwire.IsEventStream(contentType), ex.status == http.StatusOK && ex.req != nil)
	if ex.req != nil {
		ex.watch.ep = ex.req.API
	}
	if h.GetEndOfStream() || ex.noResp {
		ex.complete() // no body will follow (or none will be shown to the picker)
	}
	resp := continueResponseHeaders()
	if ex.s.quota != nil && ex.req != nil {
		if set := ex.quotaHeaders(ex.req.API, nil); len(set) > 0 {
			resp.GetResponseHeaders().Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
		}
	}
	return append(out, resp)
}

// moveTo moves the router's charge to the endpoint that really served (Envoy took a
// fallback): the pick's Result is closed as not served — which retracts what its prompt
// taught the index there — and served is charged instead, so nothing is charged twice.
func (ex *exchange) moveTo(served string) {
	s := ex.s
	s.stats.servedElsewhere.Add(1)
	ex.pick.Done(routing.DoneInfo{Err: errServedElsewhere})
	ex.picked = false
	set := s.eps.Load()
	i, ok := set.byAddr[served]
	if !ok {
		ex.endpoint = served
		return // not ours: nothing to charge
	}
	exclude := make([]routing.BackendID, 0, len(set.list)-1)
	for k, id := range set.ids {
		if k != i {
			exclude = append(exclude, id)
		}
	}
	rr := routing.Request{Chain: ex.prompt.Chain, BlockSize: ex.prompt.BlockSize, PromptTokens: ex.prompt.Tokens, Session: ex.session, Exclude: exclude,
		Stream: ex.req != nil && ex.req.Stream}
	if p, err := s.router.Pick(&rr); err == nil {
		ex.pick, ex.picked, ex.pickAt = p, true, time.Now()
	}
	ex.endpoint = served
}

// followPrevious pins a Responses request that continues a stored response to the endpoint
// that stored it, and gives it that conversation's session; a response this picker did not
// see stored is routed like any other (the endpoint answers whether it knows it). One whose
// endpoint has left the set is answered 404 here.
func (ex *exchange) followPrevious(req *openai.Request) *openai.Error {
	hm, ok := ex.s.homes.Get(homes.Key(ex.id.Tenant, req.PreviousResponseID))
	if !ok {
		return nil
	}
	if _, in := ex.s.eps.Load().byAddr[hm.Backend]; !in {
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "previous_response_not_found",
			Param: "previous_response_id", Message: fmt.Sprintf(
				"the response %q named by previous_response_id was stored by an endpoint that is no longer in the pool; start the conversation again",
				clip(req.PreviousResponseID))}
	}
	if ex.id.Session == "" {
		ex.id.Session = hm.Session
	}
	ex.pinned = hm.Backend
	return nil
}

// remember notes the endpoint that stored the response id the answer named, when the
// request asked for it to be stored.
func (ex *exchange) remember(id string) {
	if ex.req == nil || !ex.req.Store || id == "" || ex.endpoint == "" {
		return
	}
	s := ex.id.Session
	if s == "" {
		s = id // the chain's first response names its conversation
	}
	ex.s.homes.Put(homes.Key(ex.id.Tenant, id), homes.Home{Backend: ex.endpoint, Session: s})
}

// responseBody watches one chunk of the answer.
func (ex *exchange) responseBody(chunk []byte, eos bool) {
	if ex.finished {
		return
	}
	if len(chunk) > 0 && ex.picked {
		ex.pick.Progress(time.Now()) // bytes from the endpoint: it makes progress
	}
	if len(chunk) > 0 && ex.info.FirstTokenAt.IsZero() && !ex.watch.sse && ex.status == http.StatusOK {
		ex.info.FirstTokenAt = time.Now() // a whole answer: its first byte is its first token
	}
	ex.watch.feed(chunk, eos, ex)
	if eos || ex.watch.done {
		ex.complete()
	}
}

// firstToken notes the first token of a stream: the router releases the prefill charge.
func (ex *exchange) firstToken(at time.Time) {
	if ex.finished || !ex.info.FirstTokenAt.IsZero() {
		return
	}
	ex.info.FirstTokenAt = at
	if ex.picked {
		ex.pick.FirstToken(at)
	}
}

// setUsage records the usage the endpoint reported.
func (ex *exchange) setUsage(u openaiwire.TokenUsage) {
	ex.usage.PromptTokens = flowcontrol.Tokens(max(u.PromptTokens, 0))
	ex.usage.OutputTokens = flowcontrol.Tokens(max(u.CompletionTokens, 0))
	ex.usage.CachedTokens = flowcontrol.Tokens(u.Cached())
	ex.info.PromptTokens, ex.info.OutputTokens = u.PromptTokens, u.CompletionTokens
}

// complete ends the exchange normally: the response is over.
func (ex *exchange) complete() {
	if ex.usage.OutputTokens == 0 && ex.watch.chunks > 0 {
		ex.usage.OutputTokens = flowcontrol.Tokens(ex.watch.chunks)
		ex.info.OutputTokens = ex.watch.chunks
	}
	ex.finish(nil, routing.FailureNone)
}

// finish closes the books exactly once: the router's Result first, so that the next request
// the queue dispatches sees the endpoint's load released, then the queue's Ticket. err, if
// no error was recorded before, is the outcome (nil: success), f its class.
func (ex *exchange) finish(err error, f routing.Failure) {
	if ex.finished {
		return
	}
	ex.finished = true
	if ex.info.Err == nil && err != nil {
		ex.info.Err, ex.info.Failure = err, f
	}
	if ex.picked || ex.admitted {
		switch {
		case ex.info.Err == nil:
			ex.s.stats.completed.Add(1)
		default:
			ex.s.stats.failed.Add(1)
			if errors.Is(ex.info.Err, ErrStreamEnded) {
				ex.s.stats.cancelled.Add(1)
			}
		}
	}
	ex.closePrefill(ex.info.Err)
	ex.info.End = time.Now()
	if ex.admitted {
		slo.Observe(ex.s.usher, &slo.Finished{
			Band: ex.id.Band, Targets: ex.targets, Stream: ex.req != nil && ex.req.Stream,
			Pick: ex.pick, Picked: ex.picked, PickAt: ex.pickAt, Arrival: ex.arrival, Info: &ex.info,
			ClientLeft: errors.Is(ex.info.Err, ErrStreamEnded),
		})
	}
	if ex.picked {
		ex.picked = false
		ex.pick.Done(ex.info)
	}
	if ex.admitted {
		ex.admitted = false
		ex.ticket.Done(ex.usage)
	}
	ex.settleQuota()
	if ex.bufp != nil && cap(ex.prompt.Chain) <= 1<<16 {
		*ex.bufp = ex.prompt.Chain[:0]
		ex.s.chains.Put(ex.bufp)
	}
	ex.bufp, ex.prompt.Chain = nil, nil
}

// settleQuota closes the request's quota reservation with what it used: the usage the
// endpoint reported (or the chunks counted); the prompt as estimated when an endpoint was
// picked but never reported one (a cancelled or failed request); nothing when none was
// picked, so a refused request's reservation returns whole. A no-op without a reservation,
// or the second time.
func (ex *exchange) settleQuota() {
	if ex.grant.Ref == nil {
		return
	}
	u := quotaseam.Usage{Prompt: int64(ex.usage.PromptTokens), Cached: int64(ex.usage.CachedTokens), Output: int64(ex.usage.OutputTokens)}
	if u.Prompt == 0 && (ex.endpoint != "" || u.Output > 0) {
		u.Prompt = int64(ex.prompt.Tokens)
	}
	quotaseam.Settle(&ex.grant, u)
}

// quotaHeaders appends the rate-limit headers of the request's grant (quotaseam.Headers, as
// the gateway writes them) to set: Anthropic's on Messages, OpenAI's elsewhere.
func (ex *exchange) quotaHeaders(ep openai.API, set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	quotaseam.Headers(&ex.grant, ep == openai.Messages, ex.arrival, func(name, value string) {
		set = append(set, setHeader(name, value))
	})
	return set
}

// admissionError is the answer to a request the queue did not admit, and its Retry-After.
func (ex *exchange) admissionError(err error) (*openai.Error, time.Duration) {
	st := proxyseam.StatusOf(err)
	switch st {
	case http.StatusTooManyRequests:
		msg := "too many requests are waiting; retry after the time in the Retry-After header"
		if errors.Is(err, flowcontrol.ErrWouldExpire) {
			msg = "the estimated wait for admission exceeds the request's time limit; retry after the time in the Retry-After header"
		}
		return &openai.Error{Status: st, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded", Message: msg}, ex.s.queue.RetryAfter()
	case http.StatusServiceUnavailable:
		if errors.Is(err, flowcontrol.ErrClosed) {
			return &openai.Error{Status: st, Type: openai.TypeUnavailable, Code: "shutting_down",
				Message: "the endpoint picker is shutting down; retry"}, time.Second
		}
		return &openai.Error{Status: st, Type: openai.TypeUnavailable, Code: "queue_timeout",
			Message: "no capacity became free before the request's time limit"}, 0
	case proxyseam.StatusClientClosedRequest:
		return &openai.Error{Status: st, Type: openai.TypeInvalidRequest, Code: "client_closed_request",
			Message: "the client closed the request while it waited"}, 0
	}
	ex.s.log.Warn("admission failed", "err", err)
	return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Code: "admission_failed",
		Message: "admission failed"}, 0
}

// noEndpointCode is the error code of a request no endpoint can take, and noEndpointRetry
// the Retry-After it is answered with (endpoints come back, or pods become ready, within
// seconds).
const (
	noEndpointCode  = "no_backend"
	noEndpointRetry = time.Second
)

func noEndpoint(msg string) *openai.Error {
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: noEndpointCode, Message: msg}
}

// asOpenAIError returns err as an *openai.Error (400 invalid_request_error when it is not one).
func asOpenAIError(err error) *openai.Error {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe
	}
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "invalid_request", Message: err.Error()}
}

// outputBudget is the request's expected output, for the admission cost estimate.
func outputBudget(req *openai.Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return 256
}

// pathOnly is a :path without its query.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

// clip cuts a client-given name for an error message.
func clip(s string) string {
	if len(s) > 128 {
		return s[:128]
	}
	return s
}
