package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy/extproc"
)

// envoy stands in for Envoy's ext_proc filter in front of several pickers (there is no Envoy
// on the test machines): each request goes to a picker chosen at random, as a gRPC cluster
// of picker endpoints balances streams; the request's headers and body go through the
// picker's ext_proc stream, the body to the endpoint it picked, and the answer's headers and
// every chunk back through the stream as Envoy relays them. A stream that fails before the
// pick (a picker that is gone: connection refused) is retried on another picker, as Envoy's
// grpc_service retry_policy (retry_on connect-failure, unavailable) and outlier detection do;
// one that fails after it — the picker died while the answer streamed — is cut, as Envoy
// under failure_mode_allow: false resets the client's response.
type envoy struct {
	conns []*grpc.ClientConn
	down  []atomic.Bool // a picker whose stream could not be opened: no longer chosen
	http  *http.Client
	// carrying counts each picker's streams past the pick (the answer streaming).
	carrying []atomic.Int64
	retried  atomic.Int64
}

func newEnvoy(t testing.TB, addrs ...string) *envoy {
	e := &envoy{down: make([]atomic.Bool, len(addrs)), carrying: make([]atomic.Int64, len(addrs)), http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for _, a := range addrs {
		e.conns = append(e.conns, dial(t, a))
	}
	return e
}

// result is what one request came to.
type result struct {
	ttft           time.Duration
	prompt, cached int64
	content        string
	picker         int
	cut            bool // the picker's stream broke while the answer streamed
	err            error
}

var errCut = errors.New("the picker's stream broke while the answer streamed")

// chat sends one chat completion through a picker and the endpoint it picks.
func (e *envoy) chat(ctx context.Context, body []byte, session string) result {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		up := make([]int, 0, len(e.conns))
		for i := range e.conns {
			if !e.down[i].Load() {
				up = append(up, i)
			}
		}
		if len(up) == 0 || attempt > len(e.conns) {
			return result{err: errors.New("no picker reachable")}
		}
		i := up[rand.IntN(len(up))]
		r, picked := e.through(ctx, i, body, session, start)
		if r.err != nil && !picked && ctx.Err() == nil {
			// Nothing reached an endpoint: the request can go to another picker.
			e.down[i].Store(true)
			e.retried.Add(1)
			continue
		}
		r.picker = i
		return r
	}
}

// through runs the request through picker i; picked reports whether it got as far as a pick.
func (e *envoy) through(ctx context.Context, i int, body []byte, session string, start time.Time) (r result, picked bool) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(e.conns[i]).Process(sctx)
	if err != nil {
		return result{err: err}, false
	}
	h := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
		{Key: ":authority", RawValue: []byte("gateway.test")}, {Key: "content-type", RawValue: []byte("application/json")},
		{Key: "x-session-id", RawValue: []byte(session)},
	}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h}}}); err != nil {
		return result{err: err}, false
	}
	if _, err := st.Recv(); err != nil {
		return result{err: err}, false
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
		return result{err: err}, false
	}
	pr, err := st.Recv()
	if err != nil {
		return result{err: err}, false
	}
	if ir := pr.GetImmediateResponse(); ir != nil {
		return result{err: fmt.Errorf("picker answered %d: %s", ir.GetStatus().GetCode(), ir.GetBody())}, true
	}
	var dest string
	for _, hv := range pr.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == extproc.DestinationHeader {
			dest = string(hv.GetHeader().GetRawValue())
		}
	}
	if dest == "" {
		return result{err: fmt.Errorf("no destination in %v", pr)}, true
	}
	e.carrying[i].Add(1)
	defer e.carrying[i].Add(-1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+dest+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return result{err: err}, true
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return result{err: err}, true
	}
	defer resp.Body.Close()
	rh := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte(fmt.Sprint(resp.StatusCode))}, {Key: "content-type", RawValue: []byte(resp.Header.Get("Content-Type"))},
	}}
	relay := func(m *extprocv3.ProcessingRequest) error {
		if err := st.Send(m); err != nil {
			return errCut
		}
		if _, err := st.Recv(); err != nil {
			return errCut
		}
		return nil
	}
	if err := relay(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh}}}); err != nil {
		return result{err: err, cut: true}, true
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return result{err: fmt.Errorf("%s answered %d: %s", dest, resp.StatusCode, b)}, true
	}
	var all bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if r.ttft == 0 {
				r.ttft = time.Since(start)
			}
			all.Write(buf[:n])
			if err := relay(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: slices.Clone(buf[:n])}}}); err != nil {
				return result{err: err, cut: true}, true
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return result{err: rerr}, true
		}
	}
	if err := relay(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}}); err != nil {
		return result{err: err, cut: true}, true
	}
	r.prompt, r.cached, r.content = usageOf(all.Bytes())
	return r, true
}

// usageOf reads a chat stream's usage chunk and its content.
func usageOf(stream []byte) (prompt, cached int64, content string) {
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens  int64 `json:"prompt_tokens"`
				PromptDetails struct {
					Cached int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
		if chunk.Usage != nil {
			prompt, cached = chunk.Usage.PromptTokens, chunk.Usage.PromptDetails.Cached
		}
	}
	return prompt, cached, text.String()
}

// tally sums a run's results.
type tally struct {
	mu                         sync.Mutex
	requests, failed           int
	cut                        int
	cached, prompt             int64 // of later turns
	ttfts                      []time.Duration
	errs                       []error
	afterKill, failedAfterKill int
}

func (t *tally) add(r result, turn int, afterKill bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	if afterKill {
		t.afterKill++
	}
	if r.err != nil {
		t.failed++
		if r.cut {
			t.cut++
		} else if afterKill {
			t.failedAfterKill++
		}
		if len(t.errs) < 5 {
			t.errs = append(t.errs, r.err)
		}
		return
	}
	t.ttfts = append(t.ttfts, r.ttft)
	if turn > 0 {
		t.cached += r.cached
		t.prompt += r.prompt
	}
}

func (t *tally) hit() float64 {
	if t.prompt == 0 {
		return 0
	}
	return float64(t.cached) / float64(t.prompt)
}

func (t *tally) quantile(q float64) time.Duration {
	if len(t.ttfts) == 0 {
		return 0
	}
	s := slices.Clone(t.ttfts)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// think is the pause between a turn's answer and the next turn (a user reading, an agent's
// tool call); the pickers' sync (every 50 ms) must beat it.
const think = 200 * time.Millisecond

// conversations runs sessions of turns through e, eight sessions at a time, until each has
// run its turns, each answer maxTokens long (or, with until set, sessions are started until that time has passed).
// killed, if set, reports whether a picker has been killed yet.
func conversations(ctx context.Context, e *envoy, tag string, sessions, turns, maxTokens int, until time.Time, killed func() bool) *tally {
	var t tally
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for s := 0; s < sessions || time.Now().Before(until); s++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			session := fmt.Sprintf("%s-%d", tag, s)
			type msg struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}
			history := []msg{{"system", fmt.Sprintf("Session %s. ", session) + strings.Repeat("You are a careful coding agent; read the repository before you change it. ", 40)}}
			for turn := range turns {
				history = append(history, msg{"user", fmt.Sprintf("turn %d of %s: change file %d", turn, session, turn)})
				body, _ := json.Marshal(map[string]any{"model": "usher/demo", "messages": history, "max_tokens": maxTokens, "stream": true,
					"stream_options": map[string]bool{"include_usage": true}})
				after := killed != nil && killed()
				r := e.chat(ctx, body, session)
				t.add(r, turn, after)
				if r.err != nil {
					return
				}
				history = append(history, msg{"assistant", r.content})
				time.Sleep(think)
			}
		})
	}
	wg.Wait()
	return &t
}

// TestPickerReplicas measures, on processes, several active pickers in front of four
// simulated servers, each request sent to a picker chosen at random: one picker; two that
// share nothing; two that share their state through a real Redis (the cached share of later
// turns' prompts must stay near one picker's); the same two with one killed mid-run (every
// request arriving after the kill succeeds; the streams it carried are counted); and with
// Redis killed for 15 s (nothing lost).
func TestPickerReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes for about a minute")
	}
	var servers []string
	for range 4 {
		servers = append(servers, strings.TrimPrefix(simproc.Start(t, simproc.Options{}).URL, "http://"))
	}
	srv := redistest.Start(t)
	ctx := context.Background()
	endpoints := "-endpoints=" + strings.Join(servers, ",")
	picker := func(name string, redis bool) *eppProcess {
		args := []string{endpoints}
		if redis {
			args = append(args, "-redis", srv.Addr, "-cluster", "test-pickers", "-replica-id", name)
		}
		return startEPPProcess(t, args...)
	}
	const sessions, turns = 24, 4
	type row struct {
		name string
		t    *tally
	}
	var rows []row

	one := picker("one", false)
	rows = append(rows, row{"one picker", conversations(ctx, newEnvoy(t, one.addr), "one", sessions, turns, 8, time.Time{}, nil)})
	a, b := picker("alone-a", false), picker("alone-b", false)
	rows = append(rows, row{"two pickers, no sync", conversations(ctx, newEnvoy(t, a.addr, b.addr), "alone", sessions, turns, 8, time.Time{}, nil)})
	p, q := picker("p", true), picker("q", true)
	time.Sleep(300 * time.Millisecond) // each reads the other's load key
	synced := newEnvoy(t, p.addr, q.addr)
	rows = append(rows, row{"two pickers over Redis", conversations(ctx, synced, "synced", sessions, turns, 8, time.Time{}, nil)})

	// Redis killed for 15 s while conversations run.
	var outage *tally
	done := make(chan struct{})
	go func() {
		defer close(done)
		outage = conversations(ctx, synced, "outage", sessions, turns, 8, time.Now().Add(17*time.Second), nil)
	}()
	time.Sleep(time.Second)
	srv.Kill()
	time.Sleep(15 * time.Second)
	srv.Restart()
	<-done
	rows = append(rows, row{"over Redis, Redis killed 15 s", outage})

	// A picker killed (SIGKILL) mid-run: streams it carried are cut; every request that
	// arrives afterwards goes to the other.
	var killedAt atomic.Bool
	var carried int64
	go func() {
		time.Sleep(2 * time.Second)
		for synced.carrying[1].Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		carried = synced.carrying[1].Load()
		_ = q.cmd.Process.Kill()
		killedAt.Store(true)
	}()
	// Longer answers, so that the picker carries streams when it dies.
	kill := conversations(ctx, synced, "kill", sessions, turns, 256, time.Now().Add(5*time.Second), killedAt.Load)
	rows = append(rows, row{"over Redis, one picker killed", kill})

	t.Logf("%-32s %8s %7s %10s %10s %6s %5s %s", "pickers", "requests", "hit", "TTFT p50", "TTFT p99", "failed", "cut", "after the kill")
	for _, r := range rows {
		t.Logf("%-32s %8d %7.3f %10v %10v %6d %5d %d (failed %d)", r.name, r.t.requests, r.t.hit(),
			r.t.quantile(0.5).Round(time.Millisecond), r.t.quantile(0.99).Round(time.Millisecond), r.t.failed, r.t.cut, r.t.afterKill, r.t.failedAfterKill)
	}
	t.Logf("the killed picker carried %d streams a moment before the kill (cut: the streams it broke); requests retried on the other picker after the kill (no stream opened): %d", carried, synced.retried.Load())
	hitOne, hitAlone, hitSynced := rows[0].t.hit(), rows[1].t.hit(), rows[2].t.hit()
	for _, r := range rows[:4] {
		if r.t.failed > 0 {
			t.Errorf("%s: %d of %d requests failed: %v", r.name, r.t.failed, r.t.requests, r.t.errs)
		}
	}
	// Without the race detector the synced pickers keep ≥ 95% of one picker's cached share;
	// under it, with every process several times slower and the cores shared, less.
	if hitSynced < 0.8*hitOne {
		t.Errorf("two synced pickers cached %.3f of later turns' prompts, want ≥ 80%% of one picker's %.3f", hitSynced, hitOne)
	}
	if hitAlone > hitSynced-0.1 {
		t.Errorf("two pickers alone cached %.3f, synced %.3f: want the sync to matter", hitAlone, hitSynced)
	}
	if kill.failedAfterKill > 0 {
		t.Errorf("%d of %d requests arriving after the kill failed: %v", kill.failedAfterKill, kill.afterKill, kill.errs)
	}
	if kill.afterKill == 0 {
		t.Error("no request arrived after the kill")
	}
	if kill.failed != kill.cut {
		t.Errorf("with a picker killed %d requests failed, %d of them cut streams: %v", kill.failed, kill.cut, kill.errs)
	}
}
