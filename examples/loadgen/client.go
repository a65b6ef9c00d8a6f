package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
)

// Target is an OpenAI-compatible endpoint. It is safe for concurrent use once built.
type Target struct {
	// Name labels the target in reports.
	Name string
	// URL is the base URL (http://host:port); a trailing /v1 is accepted. Several, separated
	// by commas, are used in turn, one request each — as a Kubernetes Service without session
	// affinity spreads requests over gateway replicas.
	URL string
	// Model is the model asked for.
	Model string
	// Completions sends /v1/completions with the messages joined into one prompt instead of
	// /v1/chat/completions.
	Completions bool
	// APIKey, if set, replaces every session's tenant key (an endpoint that checks keys).
	APIKey string
	// TenantHeader, if set, also sends the session's tenant in this header.
	TenantHeader string
	// SessionHeader names the header carrying the session id; empty means X-Session-Id.
	SessionHeader string
	// IgnoreEOS asks vLLM-compatible servers for answers of exactly max_tokens.
	IgnoreEOS bool
	// Retries is how many times a request rejected with 429 or 503 is sent again, after the
	// server's Retry-After (1 s without one, at most MaxRetryAfter).
	Retries int

	client *http.Client
	urls   []string
	next   atomic.Uint64
}

// MaxRetryAfter caps how long a rejected request waits before it is sent again.
const MaxRetryAfter = 30 * time.Second

// newTarget returns a target with an HTTP client sized for conc requests at once.
func newTarget(name, url string, conc int) *Target {
	var urls []string
	for _, u := range strings.Split(url, ",") {
		if u = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(u), "/"), "/v1"); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		urls = []string{""}
	}
	return &Target{
		Name: name, URL: strings.Join(urls, ","), urls: urls, IgnoreEOS: true, Retries: 3,
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        conc + 16,
			MaxIdleConnsPerHost: conc + 16,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}},
	}
}

// base returns the base URL for the next request: the URLs in turn.
func (t *Target) base() string {
	switch len(t.urls) {
	case 0: // a Target built without newTarget
		return t.URL
	case 1:
		return t.urls[0]
	}
	return t.urls[(t.next.Add(1)-1)%uint64(len(t.urls))]
}

// close releases the target's idle connections.
func (t *Target) close() { t.client.CloseIdleConnections() }

// discoverModel asks GET /v1/models for the first model and its max_model_len (vLLM reports
// it; 0 when absent).
func (t *Target) discoverModel(ctx context.Context) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.Split(t.URL, ",")[0]+"/v1/models", nil)
	if err != nil {
		return "", 0, err
	}
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", 0, fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 {
		return "", 0, errors.New("GET /v1/models: no model served")
	}
	return list.Data[0].ID, list.Data[0].MaxModelLen, nil
}

// result is what one request of the workload measured.
type result struct {
	turn     int           // turn index in its conversation
	status   int           // HTTP status of the last attempt (0: no response)
	err      string        // empty on success
	ttft     time.Duration // send to first content token, of the last attempt
	e2e      time.Duration // send to the end of the stream, of the last attempt
	itl      []time.Duration
	prompt   int // usage.prompt_tokens
	cached   int // usage.prompt_tokens_details.cached_tokens
	output   int // usage.completion_tokens (content chunks when usage is absent)
	rej429   int // 429 answers received, retried or not
	rej503   int
	answer   string
	finished time.Time
	sent     time.Time // the first attempt's send
	sess     int32     // the session's index in the run's sessions; -1 when not from a run
	pos      int       // the turn's position in its session's Turns
	cut      bool      // cut short by the end of the run (an interrupt): not a result of the endpoint's
}

func (r *result) ok() bool { return r.err == "" }

type chatBody struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages,omitempty"`
	Prompt        string         `json:"prompt,omitempty"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options"`
}

// errorBody is an OpenAI error answer.
type errorBody struct {
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// do sends one streamed request, retrying after 429 and 503 as Retries allows, and measures
// it. It never returns an error: failures are recorded in the result.
func (t *Target) do(ctx context.Context, s *Session, msgs []Message, model string, maxTokens int, res *result) {
	body := chatBody{Model: cmp.Or(model, t.Model), MaxTokens: maxTokens, IgnoreEOS: t.IgnoreEOS, Stream: true,
		StreamOptions: map[string]any{"include_usage": true}}
	path := "/v1/chat/completions"
	if t.Completions {
		path = "/v1/completions"
		var b strings.Builder
		for i, m := range msgs {
			if i > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(m.Content)
		}
		body.Prompt = b.String()
	} else {
		body.Messages = msgs
	}
	data, err := json.Marshal(body)
	if err != nil {
		res.err = err.Error()
		return
	}
	key := s.Tenant
	if t.APIKey != "" {
		key = t.APIKey
	}
	header := t.SessionHeader
	if header == "" {
		header = "X-Session-Id"
	}
	for attempt := 0; ; attempt++ {
		retry := t.attempt(ctx, path, data, key, header, s, res)
		if retry < 0 || attempt >= t.Retries {
			return
		}
		timer := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// attempt sends the request once. It returns how long to wait before a retry, or -1 when the
// request succeeded or failed for good.
func (t *Target) attempt(ctx context.Context, path string, data []byte, key, sessionHeader string, s *Session, res *result) time.Duration {
	*res = result{turn: res.turn, rej429: res.rej429, rej503: res.rej503, sent: res.sent, sess: res.sess, pos: res.pos}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base()+path, bytes.NewReader(data))
	if err != nil {
		res.err = err.Error()
		return -1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(sessionHeader, s.ID)
	if t.TenantHeader != "" {
		req.Header.Set(t.TenantHeader, s.Tenant)
	}
	start := time.Now()
	resp, err := t.client.Do(req)
	if err != nil {
		res.err = "request: " + err.Error()
		return -1
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e errorBody
		text := strings.TrimSpace(string(msg))
		if json.Unmarshal(msg, &e) == nil && e.Error != nil {
			text = e.Error.Message
		}
		res.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, clip(text, 200))
		res.finished = time.Now()
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			if resp.StatusCode == http.StatusTooManyRequests {
				res.rej429++
			} else {
				res.rej503++
			}
			return retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return -1
	}

	var answer strings.Builder
	var last time.Time
	chunks := 0
	rd := bufio.NewReaderSize(resp.Body, 32<<10)
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			rest, err2 := rd.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		line = bytes.TrimRight(line, "\r\n")
		if payload, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			payload = bytes.TrimSpace(payload)
			if bytes.Equal(payload, openaiwire.DoneData) {
				res.e2e = time.Since(start)
				// Read the end of the chunked body so the connection goes back to the pool
				// (closing an unfinished body closes the connection).
				_, _ = io.Copy(io.Discard, io.LimitReader(rd, 64<<10))
				break
			}
			c, jerr := openaiwire.ParseStreamChunk(payload)
			if jerr != nil {
				res.err = "stream: bad chunk: " + clip(string(payload), 120)
				break
			}
			if c.Error != "" {
				res.err = "stream: " + clip(c.Error, 200)
				break
			}
			if c.Text != "" {
				now := time.Now()
				if chunks == 0 {
					res.ttft = now.Sub(start)
				} else {
					res.itl = append(res.itl, now.Sub(last))
				}
				last = now
				chunks++
				answer.WriteString(c.Text)
			}
			if u := c.Usage; u != nil {
				res.prompt, res.output, res.cached = u.PromptTokens, u.CompletionTokens, u.Cached()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				res.err = "cancelled: " + ctx.Err().Error()
			} else {
				res.err = "stream ended without [DONE]: " + err.Error()
			}
			break
		}
	}
	res.finished = time.Now()
	if res.err == "" && chunks == 0 {
		res.err = "stream: no content"
	}
	if res.output == 0 {
		res.output = chunks
	}
	res.answer = answer.String()
	return -1
}

// retryAfter reads a Retry-After header (seconds or an HTTP date): 1 s when absent or
// unreadable, capped at MaxRetryAfter.
func retryAfter(h string, now time.Time) time.Duration {
	d := time.Second
	if secs, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && secs >= 0 {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = max(t.Sub(now), 0)
	}
	return min(d, MaxRetryAfter)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
