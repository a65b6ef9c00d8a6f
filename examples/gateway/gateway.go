package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
)

// gateway is the OpenAI-compatible proxy: key → hash → admit → pick → proxy → done. It is an
// http.Handler; Run drives its background work (metrics scraping, KV events).
//
// Lock discipline: every field is set by newGateway and never reassigned; the components
// themselves are safe for concurrent use.
type gateway struct {
	cfg      Config
	backends []Backend
	queue    *flowcontrol.Queue
	router   *routing.Router
	index    *prefixcache.Index
	scraper  *metrics.Scraper
	usher    *metrics.Usher
	registry *prometheus.Registry
	tok      Tokenizer
	fallback Tokenizer // used when the configured tokenizer fails
	client   *http.Client
	mux      *http.ServeMux
	kv       *kvWiring // nil without KV events

	saturation atomic.Uint64 // math.Float64bits of llm-d's saturation estimate
	states     []routing.BackendState
	chains     sync.Pool // *[]prefixcache.BlockHash
}

// newGateway assembles the gateway over the given backends. It starts nothing; call Run.
func newGateway(cfg Config, backends []Backend) (*gateway, error) {
	g := &gateway{cfg: cfg, backends: backends}
	g.chains.New = func() any { s := make([]prefixcache.BlockHash, 0, 1024); return &s }

	var err error
	if g.index, err = prefixcache.New(prefixcache.Options{}); err != nil {
		return nil, err
	}
	profile, err := newRouterProfile(cfg.Router)
	if err != nil {
		return nil, err
	}
	if g.router, err = routing.New(routing.Options{Profile: profile, Index: g.index, BlockSize: cfg.BlockSize}); err != nil {
		return nil, err
	}

	targets := make([]metrics.Target, len(backends))
	names := make([]string, len(backends))
	urls := make([]string, len(backends))
	for i, b := range backends {
		targets[i] = metrics.Target{Name: b.URL, URL: b.URL, Profile: engineProfiles[b.Engine]}
		names[i] = b.URL
		urls[i] = b.URL
	}
	g.scraper, err = metrics.NewScraper(metrics.Options{
		Targets:  targets,
		Interval: cfg.ScrapeInterval,
		OnUpdate: g.publishStates,
	})
	if err != nil {
		return nil, err
	}

	bands := make([]int, maxBands)
	for i := range bands {
		bands[i] = i
	}
	if g.usher, err = metrics.NewUsher(metrics.UsherOptions{Bands: bands, Backends: names}); err != nil {
		return nil, err
	}
	g.registry = prometheus.NewRegistry()
	g.registry.MustRegister(g.usher, g.scraper, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	policy, err := newPolicy(&cfg)
	if err != nil {
		return nil, err
	}
	limit := cfg.MaxInFlight
	if limit == 0 {
		limit = 64 * len(backends)
	}
	var gate flowcontrol.Gate = &flowcontrol.ConcurrencyLimit{Limit: limit}
	if cfg.Saturation > 0 {
		gate = flowcontrol.AllGates{gate, &flowcontrol.Saturation{Pools: []flowcontrol.Pool{{
			Level:      func() float64 { return math.Float64frombits(g.saturation.Load()) / cfg.Saturation },
			Thresholds: nil,
		}}}}
	}
	g.queue, err = flowcontrol.New(flowcontrol.Options{
		Bands:        maxBands,
		Policy:       policy,
		Gate:         gate,
		TTL:          cfg.TTL,
		Capacity:     flowcontrol.Limits{Requests: cfg.MaxQueue, Bytes: cfg.MaxQueueBytes},
		FlowCapacity: flowcontrol.Limits{Requests: cfg.MaxFlowQueue},
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			g.usher.ObserveAdmission(r.Outcome.String(), r.Request.Band, r.Wait)
		}},
	})
	if err != nil {
		return nil, err
	}

	g.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a queued upstream request may take long to start
		DisableCompression:    true,
	}}
	g.fallback = bytesTokenizer{blockBytes: cfg.ByteBlock}
	switch cfg.Tokenizer {
	case "bytes":
		g.tok = g.fallback
	case "local":
		g.tok = localTokenizer{blockSize: cfg.BlockSize}
	case "endpoint":
		g.tok = &endpointTokenizer{blockSize: cfg.BlockSize, client: g.client, urls: urls}
	}
	if g.kv, err = newKVWiring(g.index, backends); err != nil {
		return nil, err
	}

	g.mux = http.NewServeMux()
	g.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { g.serveCompletion(w, r, true) })
	g.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { g.serveCompletion(w, r, false) })
	g.mux.HandleFunc("GET /v1/models", g.serveModels)
	g.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	g.mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return g, nil
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Start scrapes every backend once, so the router knows the fleet before the first request.
func (g *gateway) Start(ctx context.Context) {
	_ = g.scraper.ScrapeOnce(ctx) // failures are recorded per backend as health and staleness
	g.publishStates()
}

// Run scrapes the backends (and follows their KV events) until ctx ends.
func (g *gateway) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- g.scraper.Run(ctx) }()
	n := 1
	if g.kv != nil {
		n++
		go func() { errc <- g.kv.Run(ctx) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	return first
}

// Close rejects everything still waiting for admission (503, closing) and releases sockets.
func (g *gateway) Close() {
	g.queue.Close()
	if g.kv != nil {
		g.kv.Close()
	}
	g.client.CloseIdleConnections()
}

// publishStates hands the scraped backend states to the router (the one writer), refreshes the
// saturation estimate and usher's gauges, and wakes the queue if the fleet has room again. It
// runs on the scraper's goroutine.
func (g *gateway) publishStates() {
	g.states = g.scraper.BackendStates(g.states[:0])
	_ = g.router.Update(g.states) // names are unique by construction

	// llm-d's saturation detector: mean over backends of max(queued/5, kv/0.8); a backend
	// without fresh signals counts as saturated. Fresh means younger than the scraper's own
	// staleness limit (2 s), not llm-d's 200 ms, which a 100 ms scrape with jitter would miss.
	sum := 0.0
	for i := range g.states {
		s := &g.states[i]
		level := 1.0
		if s.Known&routing.SignalQueued != 0 && time.Since(s.UpdatedAt) < saturationFresh {
			level = float64(s.Queued) / 5
			if s.Known&routing.SignalKVUtilization != 0 {
				level = max(level, s.KVUtilization/0.8)
			}
		}
		sum += level
	}
	level := 1.0
	if len(g.states) > 0 {
		level = sum / float64(len(g.states))
	}
	old := math.Float64frombits(g.saturation.Swap(math.Float64bits(level)))
	if level < old {
		g.queue.Notify()
	}

	for b := range maxBands {
		bs := g.queue.BandStats(b)
		g.usher.SetQueue(b, bs.Queued, bs.QueuedBytes)
	}
	st := g.index.Stats()
	g.usher.SetIndexStats(metrics.IndexStats{
		Blocks: st.Blocks, Bytes: st.Bytes, Evictions: uint64(st.Evictions),
		QueriedBlocks: uint64(st.Hits + st.Misses), MatchedBlocks: uint64(st.Hits),
	})
}

// saturationFresh is the age below which scraped signals count in the saturation estimate.
const saturationFresh = 2 * time.Second

// flowOf derives the flow id from what the gateway trusts: the tenant is the trusted tenant
// header when one is configured, else a digest of the API key (the key itself is never kept);
// the session is the session header or the OpenAI user field. Both are cut to a bounded length.
// Nothing here sets a priority: the band comes from configuration, by tenant.
func (g *gateway) flowOf(r *http.Request, req *chatRequest) (flow flowcontrol.FlowID, tenant, session string) {
	if g.cfg.TenantHeader != "" {
		tenant = r.Header.Get(g.cfg.TenantHeader)
	}
	if tenant == "" {
		if key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && key != "" {
			var sum [8]byte
			h := xxhash.Sum64String(key)
			for i := range sum {
				sum[i] = byte(h >> (8 * i))
			}
			tenant = "key-" + hex.EncodeToString(sum[:])
		} else {
			tenant = "anonymous"
		}
	}
	session = r.Header.Get(g.cfg.SessionHeader)
	if session == "" {
		session = req.User
	}
	tenant, session = clip(tenant, 128), clip(session, 128)
	return flowcontrol.FlowID(tenant + "/" + session), tenant, session
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (g *gateway) bandOf(tenant string) int {
	if b, ok := g.cfg.TenantBands[tenant]; ok {
		return b
	}
	return g.cfg.DefaultBand
}

// serveCompletion handles /v1/chat/completions (chat) and /v1/completions.
func (g *gateway) serveCompletion(w http.ResponseWriter, r *http.Request, chat bool) {
	arrival := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error",
				fmt.Sprintf("request body exceeds %d bytes", g.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "could not read the request body: "+err.Error())
		return
	}
	req, err := parseRequest(body, chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	upBody, err := prepareBody(body, req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}

	// Hash once; the chain goes to the router and, through it, to the index.
	bufp := g.chains.Get().(*[]prefixcache.BlockHash)
	defer g.chains.Put(bufp)
	chain, promptTokens, blockSize, err := g.tok.Chain(r.Context(), (*bufp)[:0], req)
	if err != nil {
		chain, promptTokens, blockSize, _ = g.fallback.Chain(r.Context(), (*bufp)[:0], req)
	}
	*bufp = chain

	flow, tenant, session := g.flowOf(r, req)
	ticket, err := g.queue.Admit(r.Context(), flowcontrol.Request{
		Flow:         flow,
		Band:         g.bandOf(tenant),
		Bytes:        int64(len(body)),
		PromptTokens: flowcontrol.Tokens(promptTokens),
		OutputTokens: flowcontrol.Tokens(req.maxOutput()),
		Arrival:      arrival,
	})
	if err != nil {
		status := flowcontrol.HTTPStatus(err)
		switch status {
		case flowcontrol.StatusClientClosedRequest:
			return // nobody is listening
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(g.queue.RetryAfter().Seconds()))))
			writeError(w, status, "rate_limit_error", err.Error())
		default:
			writeError(w, status, "service_unavailable", err.Error())
		}
		return
	}

	var usage flowcontrol.Usage
	var info routing.DoneInfo
	routeSession := "" // sessionless traffic must not look like one long session
	if session != "" {
		routeSession = tenant + "/" + session
	}
	pick, err := g.router.Pick(&routing.Request{
		Chain: chain, BlockSize: blockSize, PromptTokens: promptTokens, Session: routeSession,
	})
	if err != nil {
		ticket.Done(usage)
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
		return
	}
	// Close the books exactly once, router first so the next dispatched request sees the
	// backend's load released.
	defer func() {
		pick.Done(info)
		ticket.Done(usage)
	}()
	g.usher.ObservePick(pick.Backend.Name)

	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
	}
	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, pick.Backend.Name+path, bytes.NewReader(upBody))
	if err != nil {
		info.Err = err
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	up.Header.Set("Content-Type", "application/json")
	if a := r.Header.Get("Authorization"); a != "" {
		up.Header.Set("Authorization", a)
	}
	resp, err := g.client.Do(up)
	if err != nil {
		info.Err = err
		if r.Context().Err() == nil {
			writeError(w, http.StatusBadGateway, "upstream_error", "backend "+pick.Backend.Name+" failed: "+err.Error())
		}
		return
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK || !req.Stream {
		u, first, err := g.relayWhole(w, resp)
		info.FirstTokenAt, info.Err = first, err
		setUsage(&usage, &info, u)
		return
	}
	u, err := g.relayStream(w, resp, req, func(at time.Time) {
		info.FirstTokenAt = at
		pick.FirstToken(at)
	})
	info.Err = err
	setUsage(&usage, &info, u)
}

// upstreamUsage is the usage object of an OpenAI response.
type upstreamUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func setUsage(u *flowcontrol.Usage, info *routing.DoneInfo, up upstreamUsage) {
	u.PromptTokens = flowcontrol.Tokens(up.PromptTokens)
	u.OutputTokens = flowcontrol.Tokens(up.CompletionTokens)
	if up.PromptTokensDetails != nil {
		u.CachedTokens = flowcontrol.Tokens(min(up.PromptTokensDetails.CachedTokens, up.PromptTokens))
	}
	info.PromptTokens, info.OutputTokens = up.PromptTokens, up.CompletionTokens
}

const maxResponseBytes = 64 << 20

// relayWhole copies a non-streamed (or error) answer and reads its usage.
func (g *gateway) relayWhole(w http.ResponseWriter, resp *http.Response) (upstreamUsage, time.Time, error) {
	var usage upstreamUsage
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	at := time.Now()
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", "reading the backend's answer: "+err.Error())
		return usage, time.Time{}, err
	}
	for _, h := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
	if resp.StatusCode != http.StatusOK {
		return usage, time.Time{}, fmt.Errorf("backend answered %s", resp.Status)
	}
	var body struct {
		Usage *upstreamUsage `json:"usage"`
	}
	if json.Unmarshal(data, &body) == nil && body.Usage != nil {
		usage = *body.Usage
	}
	return usage, at, nil
}

// relayStream copies a server-sent-event stream event by event, flushing each, noting the first
// token and the usage chunk (which it drops when only the gateway asked for it). If the
// backend's stream breaks, the client gets an error event and the stream ends.
func (g *gateway) relayStream(w http.ResponseWriter, resp *http.Response, req *chatRequest, firstToken func(time.Time)) (upstreamUsage, error) {
	var usage upstreamUsage
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}

	br := bufio.NewReaderSize(resp.Body, 32<<10)
	var event []byte
	sawFirst, sawDone, chunks := false, false, 0
	for {
		line, err := readLine(br)
		if err != nil {
			if sawDone && errors.Is(err, io.EOF) {
				break
			}
			if resp.Request.Context().Err() != nil {
				return usage, resp.Request.Context().Err() // the client went away
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			msg, _ := json.Marshal(map[string]any{"error": map[string]any{
				"message": "the backend's stream broke: " + err.Error(), "type": "upstream_error", "code": http.StatusBadGateway,
			}})
			_, _ = fmt.Fprintf(w, "data: %s\n\n", msg)
			if flusher != nil {
				flusher.Flush()
			}
			if usage.CompletionTokens == 0 {
				usage.CompletionTokens = chunks
			}
			return usage, fmt.Errorf("backend stream: %w", err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			event = append(event, line...)
			continue
		}
		if len(event) == 0 {
			continue
		}
		data := sseData(event)
		forward := true
		switch {
		case bytes.Equal(data, []byte("[DONE]")):
			sawDone = true
		case sawFirst && !bytes.Contains(data, []byte(`"usage"`)):
			// After the first token only the usage chunk needs parsing; count the rest.
			chunks++
		case len(data) > 0:
			var chunk struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
				Usage *upstreamUsage `json:"usage"`
			}
			if json.Unmarshal(data, &chunk) == nil {
				// The first token is the first chunk with text (a chat stream opens with
				// a role-only chunk).
				for _, c := range chunk.Choices {
					if c.Text == "" && c.Delta.Content == "" {
						continue
					}
					chunks++
					if !sawFirst {
						sawFirst = true
						firstToken(time.Now())
					}
					break
				}
				if chunk.Usage != nil {
					usage = *chunk.Usage
					forward = req.wantsUsage || len(chunk.Choices) > 0
				}
			}
		}
		if sawDone {
			// Read the rest of the body (the chunked terminator, which follows [DONE] at
			// once), bounded, before the client hears [DONE] and hangs up: then the backend
			// connection goes back to the pool instead of being closed.
			_, _ = io.Copy(io.Discard, io.LimitReader(br, 64<<10))
		}
		if forward {
			event = append(event, '\n')
			if _, err := w.Write(event); err != nil {
				return usage, err
			}
			// Flush per event, except that events which already arrived together go out in
			// one write: nothing waits behind a flush for data that is not there yet.
			if flusher != nil && br.Buffered() == 0 {
				flusher.Flush()
			}
		}
		event = event[:0]
		if sawDone {
			break
		}
	}
	if flusher != nil {
		flusher.Flush()
	}
	if usage.CompletionTokens == 0 {
		usage.CompletionTokens = chunks
	}
	return usage, nil
}

// readLine reads one line including its newline, however long.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil || !errors.Is(err, bufio.ErrBufferFull) {
		if err != nil && len(line) > 0 && errors.Is(err, io.EOF) {
			return append([]byte(nil), line...), io.ErrUnexpectedEOF
		}
		return line, err
	}
	long := append([]byte(nil), line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(long) > maxResponseBytes {
			return nil, errors.New("event line too long")
		}
		line, err = br.ReadSlice('\n')
		long = append(long, line...)
	}
	return long, err
}

// sseData returns the data of an event (its data: lines joined).
func sseData(event []byte) []byte {
	var data []byte
	for _, line := range bytes.Split(event, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			d = bytes.TrimPrefix(d, []byte(" "))
			d = bytes.TrimRight(d, "\r")
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
	return data
}

// serveModels answers from the first backend that does.
func (g *gateway) serveModels(w http.ResponseWriter, r *http.Request) {
	for _, b := range g.backends {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, b.URL+"/v1/models", nil)
		if err != nil {
			continue
		}
		if a := r.Header.Get("Authorization"); a != "" {
			req.Header.Set("Authorization", a)
		}
		resp, err := g.client.Do(req)
		if err != nil {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
		return
	}
	writeError(w, http.StatusServiceUnavailable, "service_unavailable", "no backend listed its models")
}

// writeError answers with an OpenAI-style error object.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "code": status,
	}})
}
