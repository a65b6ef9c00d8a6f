package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/bench"
	"github.com/usher-llm/usher/internal/glue/simfleet"
)

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func render(t *testing.T, msgs []Message) []uint32 {
	t.Helper()
	sm := make([]simfleet.Message, len(msgs))
	for i, m := range msgs {
		sm[i] = simfleet.TextMessage(m.Role, m.Content)
	}
	text, err := simfleet.RenderChat(sm, true)
	if err != nil {
		t.Fatal(err)
	}
	return simfleet.Tokenize(text)
}

func TestSyntheticDeterministic(t *testing.T) {
	opts := SyntheticOptions{Seed: 7, Duration: 20 * time.Second, Rate: 3}
	a, err := Synthetic(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Synthetic(opts)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("equal options gave different workloads")
	}
	if len(a) < 30 || len(a) > 90 {
		t.Errorf("got %d sessions in 20 s at 3/s, want about 60", len(a))
	}
	opts.Seed = 8
	if c, _ := Synthetic(opts); reflect.DeepEqual(a, c) {
		t.Error("different seeds gave the same workload")
	}

	// A salt changes the text, not the shape.
	opts.Seed, opts.Salt = 7, "Run 2. "
	d, _ := Synthetic(opts)
	if len(d) != len(a) {
		t.Fatalf("salted: %d sessions, want %d", len(d), len(a))
	}
	for i := range a {
		if a[i].Start != d[i].Start || a[i].Tenant != d[i].Tenant || len(a[i].Turns) != len(d[i].Turns) {
			t.Fatalf("salted session %d differs in shape", i)
		}
		for j := range a[i].Turns {
			x, y := a[i].Turns[j], d[i].Turns[j]
			if x.MaxTokens != y.MaxTokens || x.Think != y.Think || x.User != y.User {
				t.Fatalf("salted session %d turn %d differs", i, j)
			}
		}
		if a[i].System == d[i].System || a[i].ID == d[i].ID {
			t.Fatalf("salted session %d has the same system prompt or id", i)
		}
	}

	single, agentic := 0, 0
	for i, s := range a {
		if i > 0 && s.Start < a[i-1].Start {
			t.Fatalf("session %d starts before session %d", i, i-1)
		}
		if s.Chain {
			agentic++
		} else {
			single++
		}
	}
	if single == 0 || agentic == 0 {
		t.Errorf("got %d single-turn and %d agentic sessions, want both", single, agentic)
	}
}

// Each turn of an agentic session extends the previous turn's prompt (with the answer in
// between), and agentic sessions share their opening instructions.
func TestSyntheticGrowingSharedPrefix(t *testing.T) {
	opts := SyntheticOptions{Seed: 3, Duration: 10 * time.Second, Rate: 2, SystemTokens: 800}
	sessions, err := Synthetic(opts)
	if err != nil {
		t.Fatal(err)
	}
	var firsts [][]uint32
	var tenants []string
	checked := 0
	for si := range sessions {
		s := &sessions[si]
		if !s.Chain {
			continue
		}
		var answers []string
		var prev []uint32
		for k := range s.Turns {
			toks := render(t, s.messages(k, answers))
			if got := len(toks) + s.Turns[k].MaxTokens; got > 7500+64 {
				t.Errorf("session %d turn %d: %d tokens with the answer, above the context cap", si, k, got)
			}
			if k > 0 {
				if n := commonPrefix(prev, toks); n != len(prev) {
					t.Fatalf("session %d turn %d: shares %d tokens with turn %d's %d, want all", si, k, n, k-1, len(prev))
				}
				if len(toks) <= len(prev) {
					t.Fatalf("session %d turn %d: context did not grow", si, k)
				}
			} else {
				firsts = append(firsts, toks)
				tenants = append(tenants, s.Tenant)
			}
			if s.Turns[k].Index != k {
				t.Fatalf("session %d turn %d has index %d", si, k, s.Turns[k].Index)
			}
			prev = toks
			answers = append(answers, fmt.Sprintf("answer %d of session %d", k, si))
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d agentic sessions", checked)
	}
	sameTenant := false
	for i := 1; i < len(firsts); i++ {
		n := commonPrefix(firsts[0], firsts[i])
		if n < 800 {
			t.Errorf("first turns of sessions 0 and %d share %d tokens, want the ~800-token instructions", i, n)
		}
		if tenants[i] == tenants[0] {
			sameTenant = true
			if n < 950 {
				t.Errorf("sessions of one tenant share %d tokens, want instructions and notes (~1000)", n)
			}
		}
	}
	if !sameTenant {
		t.Error("no two sessions of the same tenant to compare")
	}
}

func TestSyntheticInvalid(t *testing.T) {
	for _, o := range []SyntheticOptions{
		{MinTurns: 5, MaxTurns: 2},
		{MinAnswer: 10, MaxAnswer: 5},
		{Rate: -1},
		{SingleTurn: 2},
		{SystemTokens: 9000},
	} {
		if _, err := Synthetic(o); err == nil {
			t.Errorf("Synthetic(%+v) = nil error", o)
		}
	}
}

// traceOf builds a workload from Mooncake-format records (timestamp ms, input, output, ids)
// through bench.LoadMooncake, with only the ids every request carries (id 0) as the common opening.
func traceOf(t *testing.T, recs ...string) *bench.Workload {
	t.Helper()
	w, err := bench.LoadMooncake(strings.NewReader(strings.Join(recs, "\n")), bench.MooncakeOptions{OpeningShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Equal hash_id prefixes give equal token prefixes under simfleet.Tokenize, of exactly
// 512 tokens per shared block, raw and through the chat template; lengths are exact.
func TestTraceTextPrefixSharing(t *testing.T) {
	reqs := []struct {
		ids    []uint64
		tokens int
	}{
		{[]uint64{0, 1, 2, 3}, 1800},
		{[]uint64{0, 1, 2, 9}, 1600},
		{[]uint64{0, 1, 4}, 1300},
		{[]uint64{0, 5}, 700},
		{[]uint64{6}, 100},
		{[]uint64{0, 1, 2, 3}, 2000},
	}
	toks := make([][]uint32, len(reqs))
	chat := make([][]uint32, len(reqs))
	for i, r := range reqs {
		text := traceText(r.ids, r.tokens, TraceBlock)
		toks[i] = simfleet.Tokenize(text)
		if len(toks[i]) != r.tokens {
			t.Errorf("request %d: %d tokens, want %d", i, len(toks[i]), r.tokens)
		}
		chat[i] = render(t, []Message{{Role: "user", Content: text}})
	}
	for i := range reqs {
		for j := range i {
			k := commonPrefix64(reqs[i].ids, reqs[j].ids)
			want := min(k*TraceBlock, len(toks[i]), len(toks[j]))
			if got := commonPrefix(toks[i], toks[j]); got != want {
				t.Errorf("requests %d and %d share %d ids: %d common tokens, want %d", j, i, k, got, want)
			}
			header := commonPrefix(chat[i], chat[j]) - commonPrefix(toks[i], toks[j])
			if header < 3 || header > traceTemplateTokens {
				t.Errorf("requests %d and %d through the chat template: %d more common tokens, want the template's few", j, i, header)
			}
		}
	}
}

func commonPrefix64(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// With the real trace: every pair among the first requests shares as many tokens as ids.
func TestMooncakePrefixSharing(t *testing.T) {
	recs, err := bench.Mooncake(bench.MooncakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Requests) != 12031 {
		t.Errorf("got %d records, want 12,031", len(recs.Requests))
	}
	sessions, err := TraceSessions(recs, TraceOptions{Limit: 60, MaxContext: 8192})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([][]uint32, len(sessions))
	for i := range sessions {
		tr := &sessions[i].Turns[0]
		toks[i] = simfleet.Tokenize(tr.text())
		if len(toks[i]) != tr.Tokens || tr.Tokens+tr.MaxTokens > 8192-traceTemplateTokens {
			t.Fatalf("request %d: %d tokens (want %d) + %d out does not fit 8192", i, len(toks[i]), tr.Tokens, tr.MaxTokens)
		}
	}
	// Blocks of different ids may begin with the same word by chance (1 in len(words)): a
	// token or two of sharing more than the trace says, never less.
	shared, extra := 0, 0
	for i := range sessions {
		for j := range i {
			a, b := sessions[i].Turns[0], sessions[j].Turns[0]
			k := commonPrefix64(a.HashIDs, b.HashIDs)
			want := min(k*TraceBlock, a.Tokens, b.Tokens)
			got := commonPrefix(toks[i], toks[j])
			if got < want || got > want+2 {
				t.Fatalf("requests %d and %d: %d common tokens, want %d", j, i, got, want)
			}
			shared += want
			extra += got - want
		}
	}
	if extra*1000 > shared {
		t.Errorf("%d tokens shared by chance against %d by the trace", extra, shared)
	}
	if shared == 0 {
		t.Error("no shared prefixes among the first requests")
	}
}

func TestTraceSessions(t *testing.T) {
	recs := traceOf(t,
		`{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}`,
		`{"timestamp": 1000, "input_length": 300, "output_length": 5, "hash_ids": [0]}`,
		`{"timestamp": 2000, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 2]}`,
		`{"timestamp": 3000, "input_length": 1100, "output_length": 10, "hash_ids": [0, 7, 8]}`,
		`{"timestamp": 4000, "input_length": 2000, "output_length": 10, "hash_ids": [0, 1, 2, 3]}`,
	)
	got, err := TraceSessions(recs, TraceOptions{Speed: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id         string
		start      time.Duration
		turn, outN int
	}{
		{"trace-0", 0, 0, 10},
		{"trace-single-1", 500 * time.Millisecond, 0, 5},
		{"trace-0", time.Second, 1, 1},
		{"trace-1", 1500 * time.Millisecond, 0, 10},
		{"trace-0", 2 * time.Second, 2, 10},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sessions, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.id || g.Start != w.start || g.Turns[0].Index != w.turn || g.Turns[0].MaxTokens != w.outN || g.Chain {
			t.Errorf("request %d: got %s at %v turn %d max %d, want %s at %v turn %d max %d",
				i, g.ID, g.Start, g.Turns[0].Index, g.Turns[0].MaxTokens, w.id, w.start, w.turn, w.outN)
		}
	}
	lim, _ := TraceSessions(recs, TraceOptions{Limit: 2})
	win, _ := TraceSessions(recs, TraceOptions{Window: 2500 * time.Millisecond})
	fit, _ := TraceSessions(recs, TraceOptions{MaxContext: 1000})
	if len(lim) != 2 || len(win) != 3 {
		t.Errorf("limit 2 kept %d, window 2.5 s kept %d", len(lim), len(win))
	}
	if tr := fit[4].Turns[0]; tr.Tokens != 1000-10-traceTemplateTokens || tr.MaxTokens != 10 {
		t.Errorf("fitted into 1000: %d + %d tokens", tr.Tokens, tr.MaxTokens)
	}
	if _, err := TraceSessions(recs, TraceOptions{Speed: -1}); err == nil {
		t.Error("negative speed accepted")
	}
}

func TestPercentile(t *testing.T) {
	data := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		in   []float64
		q    float64
		want float64
	}{
		{data, 0, 1},
		{data, 0.5, 5.5},
		{data, 0.9, 9.1},
		{data, 0.99, 9.91},
		{data, 1, 10},
		{[]float64{42}, 0.99, 42},
		{[]float64{10, 20}, 0.25, 12.5},
		{[]float64{0, 100, 100, 100}, 0.5, 100},
		{data, 1.5, 10},
		{data, -1, 1},
	}
	for _, tt := range tests {
		if got := percentile(tt.in, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.in, tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("percentile of nothing is not NaN")
	}
	d := distOf([]float64{3, 1, 2})
	if d != (Dist{Count: 3, P50: 2, P90: 2.8, P99: 2.98, Mean: 2, Max: 3}) {
		t.Errorf("distOf = %+v", d)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		h    string
		want time.Duration
	}{
		{"", time.Second},
		{"2", 2 * time.Second},
		{"0", 0},
		{"junk", time.Second},
		{"3600", MaxRetryAfter},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.h, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.h, got, tt.want)
		}
	}
}

// startSim serves one simulated server on loopback.
func startSim(t *testing.T) string {
	t.Helper()
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return fleet.URLs()[0]
}

// A short synthetic run against a simulated server: every request completes, later turns
// find their history cached, and the report adds up.
func TestRunSyntheticEndToEnd(t *testing.T) {
	url := startSim(t)
	sessions, err := Synthetic(SyntheticOptions{Seed: 1, Duration: 1500 * time.Millisecond, Rate: 6, SystemTokens: 400,
		MinTurns: 2, MaxTurns: 3, Think: 50 * time.Millisecond, MinAnswer: 4, MaxAnswer: 12, MaxContext: 4000})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, s := range sessions {
		want += len(s.Turns)
	}
	tg := newTarget("sim", url+"/v1/", 16)
	defer tg.close()
	model, maxLen, err := tg.discoverModel(context.Background())
	if err != nil || model != "usher/demo" || maxLen != 8192 {
		t.Fatalf("discoverModel = %q, %d, %v", model, maxLen, err)
	}
	tg.Model = model
	var prog bytes.Buffer
	results, elapsed := run(context.Background(), tg, sessions, RunOptions{Concurrency: 16, Progress: &prog, ProgressEvery: 200 * time.Millisecond})
	rep := summarize("sim", url, "test", results, elapsed)
	if rep.Requests != want || rep.OK != want || rep.Errors != 0 {
		t.Fatalf("requests %d ok %d errors %d (%v), want %d ok", rep.Requests, rep.OK, rep.Errors, rep.ErrorSamples, want)
	}
	if ts := taskStats(sessions, results, defaultIdle(sessions), runEnd(results)); ts.Sessions != len(sessions) || ts.Completed != len(sessions) || ts.Time.Count != len(sessions) || ts.Time.Mean < ts.Response.Mean {
		t.Errorf("tasks %+v: want all %d sessions completed, each task time at least its sum of response times", ts, len(sessions))
	}
	if rep.LaterTurns.OK == 0 || rep.LaterTurns.HitRate < 0.5 {
		t.Errorf("later turns: %d ok, hit rate %.2f, want most of their prompt cached", rep.LaterTurns.OK, rep.LaterTurns.HitRate)
	}
	if rep.HitRate <= 0 || rep.HitRate > 1 || rep.FirstTurn.Requests != len(sessions) {
		t.Errorf("hit rate %.2f, first turns %d of %d sessions", rep.HitRate, rep.FirstTurn.Requests, len(sessions))
	}
	out := 0
	for _, s := range sessions {
		for _, tr := range s.Turns {
			out += tr.MaxTokens
		}
	}
	if rep.OutputTokens != int64(out) {
		t.Errorf("output tokens %d, want %d (ignore_eos makes answers exactly max_tokens)", rep.OutputTokens, out)
	}
	if rep.TTFT.Count != want || rep.E2E.Count != want || rep.ITL.Count != out-want || rep.TTFT.P50 <= 0 || rep.E2E.P99 < rep.TTFT.P99 {
		t.Errorf("distributions: TTFT %+v ITL %+v E2E %+v", rep.TTFT, rep.ITL, rep.E2E)
	}
	if rep.RequestsPerSec <= 0 || rep.OutputTokPerSec <= 0 {
		t.Errorf("throughput %v req/s %v tok/s", rep.RequestsPerSec, rep.OutputTokPerSec)
	}
	if !strings.Contains(prog.String(), fmt.Sprintf("done %d", want)) {
		t.Errorf("progress never showed all done: %q", prog.String())
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, s := range []string{"TTFT first turn", "inter-token", "end-to-end", "hit rate"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, text.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Error(err)
	}
}

// Trace replay against a simulated server, through a proxy that rejects the first request
// with 429: the rejection is counted and retried, requests sharing hash ids hit the cache.
func TestRunTraceWithRejection(t *testing.T) {
	url := startSim(t)
	var calls atomic.Int64
	var sessionHeader atomic.Value
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error": {"message": "queue full"}}`, http.StatusTooManyRequests)
			return
		}
		sessionHeader.Store(r.Header.Get("X-Session-Id"))
		up, _ := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.Path, r.Body)
		up.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(up)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	}))
	defer proxy.Close()

	recs := traceOf(t,
		`{"timestamp": 0, "input_length": 1200, "output_length": 8, "hash_ids": [0, 1, 2]}`,
		`{"timestamp": 300, "input_length": 1400, "output_length": 8, "hash_ids": [0, 1, 2]}`,
		`{"timestamp": 600, "input_length": 700, "output_length": 8, "hash_ids": [0, 5]}`,
		`{"timestamp": 900, "input_length": 10000, "output_length": 8, "hash_ids": [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]}`,
	)
	sessions, err := TraceSessions(recs, TraceOptions{Speed: 3, MaxContext: 8192})
	if err != nil {
		t.Fatal(err)
	}
	tg := newTarget("proxy", proxy.URL, 4)
	defer tg.close()
	tg.Model = "usher/demo"
	results, elapsed := run(context.Background(), tg, sessions, RunOptions{Concurrency: 1})
	rep := summarize("proxy", proxy.URL, "trace", results, elapsed)
	if rep.Requests != 4 || rep.OK != 4 || rep.Rejected429 != 1 || rep.FirstTurn.Rejected429 != 1 {
		t.Fatalf("requests %d ok %d 429s %d (first turns %d), errors %v", rep.Requests, rep.OK, rep.Rejected429, rep.FirstTurn.Rejected429, rep.ErrorSamples)
	}
	// Turn 1 shares its first 1,200 tokens with turn 0, turn 2 its first 1,400 with turn 1;
	// the engine caches whole 16-token blocks.
	if rep.LaterTurns.Requests != 2 || rep.LaterTurns.CachedTokens < 2400 || rep.FirstTurn.CachedTokens > 560 { // the [0, 5] request shares block 0
		t.Errorf("later turns: %d, %d tokens cached; first turns %d cached", rep.LaterTurns.Requests, rep.LaterTurns.CachedTokens, rep.FirstTurn.CachedTokens)
	}
	if got := sessionHeader.Load(); got != "trace-0" {
		t.Errorf("last session header %v, want trace-0", got)
	}
	// The fitted long prompt: 8192 minus the answer and template room.
	if p := results[len(results)-1].prompt; p < 8000 || p > 8192 {
		t.Errorf("fitted prompt of %d tokens", p)
	}
}

// A server that refuses everything: the run ends, counts every rejection, and does not hang.
func TestRunAllRejected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	sessions, _ := Synthetic(SyntheticOptions{Seed: 2, Duration: 300 * time.Millisecond, Rate: 20, SystemTokens: 100})
	tg := newTarget("down", srv.URL, 8)
	defer tg.close()
	tg.Model, tg.Retries = "m", 1
	results, elapsed := run(context.Background(), tg, sessions, RunOptions{Concurrency: 8})
	rep := summarize("down", srv.URL, "", results, elapsed)
	if rep.Requests != len(sessions) || rep.Errors != len(sessions) || rep.Rejected503 != 2*len(sessions) {
		t.Errorf("%d sessions: requests %d errors %d 503s %d", len(sessions), rep.Requests, rep.Errors, rep.Rejected503)
	}
	if rep.TTFT.Count != 0 || rep.RequestsPerSec != 0 {
		t.Errorf("rejected requests in the latencies: %+v", rep.TTFT)
	}
}

// Limit stops sending; a cancelled context ends a run early.
func TestRunLimitAndCancel(t *testing.T) {
	url := startSim(t)
	sessions, _ := Synthetic(SyntheticOptions{Seed: 4, Duration: 2 * time.Second, Rate: 20, SystemTokens: 100, MinAnswer: 2, MaxAnswer: 4, Think: -1})
	tg := newTarget("sim", url, 8)
	defer tg.close()
	tg.Model = "usher/demo"
	results, _ := run(context.Background(), tg, sessions, RunOptions{Concurrency: 8, Limit: 5})
	if len(results) != 5 {
		t.Errorf("limit 5: %d requests", len(results))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	results, _ = run(ctx, tg, sessions, RunOptions{Concurrency: 8})
	if time.Since(start) > 5*time.Second || len(results) == 0 {
		t.Errorf("cancelled run took %v with %d requests", time.Since(start), len(results))
	}
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"-trace", "x.jsonl", "-speed", "2", "-limit", "10", "-single-turn", "0"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.tracePath != "x.jsonl" || c.speed != 2 || c.run.Limit != 10 || c.synth.SingleTurn >= 0 {
		t.Errorf("parsed %+v", c)
	}
	for _, args := range [][]string{{"-api", "grpc"}, {"-speed", "0"}, {"-concurrency", "0"}, {"stray"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestOverheadFlags(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"-overhead", "-rate", "5"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.synth.Rate != 5 || c.synth.Think != 100*time.Millisecond || c.synth.MaxAnswer != 64 || c.synth.MaxContext != 4000 {
		t.Errorf("overhead defaults: rate %v think %v max answer %d context %d", c.synth.Rate, c.synth.Think, c.synth.MaxAnswer, c.synth.MaxContext)
	}
}

func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	for x := 0; x < 1e8; x++ { // burn a little CPU so the count is not zero
		_ = x * x
	}
	d, src, err := procCPU(os.Getpid())
	if err != nil || d <= 0 || (src != "schedstat" && src != "stat") {
		t.Fatalf("procCPU = %v, %q, %v; want a positive time from schedstat or stat", d, src, err)
	}
	// Both sources count the same threads: the nanosecond sum is within a few ticks of the
	// coarse one (the process keeps running between the two reads).
	if s, err := schedstatCPU(os.Getpid()); err == nil {
		st, err := statCPU(os.Getpid())
		if err != nil || s < st-50*time.Millisecond || s > st+200*time.Millisecond {
			t.Errorf("schedstat %v, stat %v (%v): want them within a few ticks", s, st, err)
		}
	}
}

func TestOverheadText(t *testing.T) {
	o := Overhead{Direct: Report{Target: "direct"}, Gateway: Report{Target: "gateway"}, AddedTTFTP99: 0.4, AddedE2EP99: 0.7,
		GatewayRequests: 10, GatewayCPUPerRequest: 0.2, Rounds: []OverheadRound{{First: "direct"}}}
	var b bytes.Buffer
	o.WriteText(&b)
	for _, s := range []string{"throughput ratio", "added TTFT", "round 0 (direct started first)", "gateway CPU", "meets",
		"summary: gateway 0.200 ms CPU/request, added TTFT p50 +0.000 ms p99 +0.400 ms"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("overhead text lacks %q:\n%s", s, b.String())
		}
	}
}

// A bench workload with closed-loop sessions (agentic: turns sent a think time after the
// previous answer) replays as one Session per conversation whose turns follow each other, at
// the workload's block size: requests sharing k block ids share k·BlockTokens tokens of text.
func TestBenchWorkloadSessions(t *testing.T) {
	w := bench.Agentic(bench.AgenticOptions{Seed: 3})
	sessions, err := TraceSessions(w, TraceOptions{Limit: 400})
	if err != nil {
		t.Fatal(err)
	}
	turns, multi, thinking := 0, 0, 0
	for _, s := range sessions {
		turns += len(s.Turns)
		if len(s.Turns) > 1 {
			multi++
		}
		for i, tn := range s.Turns {
			if tn.BlockTokens != w.BlockTokens || tn.Index != i+s.Turns[0].Index {
				t.Fatalf("%s turn %d: block %d (want %d), index %d", s.ID, i, tn.BlockTokens, w.BlockTokens, tn.Index)
			}
			if i > 0 && tn.Think > 0 {
				thinking++
			}
		}
	}
	if thinking == 0 {
		t.Error("no chained turn waits a think time after its predecessor")
	}
	if turns != 400 || multi == 0 {
		t.Fatalf("%d turns in %d sessions (%d with several turns), want 400 turns, some chained", turns, len(sessions), multi)
	}
	// The text follows the ids: a later turn repeats its predecessor's leading blocks.
	for _, s := range sessions {
		if len(s.Turns) < 2 {
			continue
		}
		a, b := s.Turns[0], s.Turns[1]
		k := 0
		for k < len(a.HashIDs) && k < len(b.HashIDs) && a.HashIDs[k] == b.HashIDs[k] {
			k++
		}
		ta, tb := strings.Fields(a.text()), strings.Fields(b.text())
		shared := min(k*w.BlockTokens, len(ta), len(tb))
		if shared == 0 || strings.Join(ta[:shared], " ") != strings.Join(tb[:shared], " ") {
			t.Fatalf("%s: %d shared blocks, but the texts' first %d words differ", s.ID, k, shared)
		}
		break
	}
	// A closed-loop request whose predecessor is not replayed is not replayed either.
	few, err := TraceSessions(w, TraceOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range few {
		n += len(s.Turns)
	}
	if n != 3 {
		t.Errorf("Limit 3 replayed %d requests", n)
	}
}

// TestSummarizeGoals: the report's goal shares count a request when both its TTFT and its time
// per output token after the first meet the goal's targets, over every request (a failed one
// counting as a miss).
func TestSummarizeGoals(t *testing.T) {
	ms := time.Millisecond
	results := []result{
		{ttft: 500 * ms, e2e: 500*ms + 99*20*ms, output: 100},   // both goals
		{ttft: 1500 * ms, e2e: 1500*ms + 99*20*ms, output: 100}, // relaxed only (TTFT)
		{ttft: 500 * ms, e2e: 500*ms + 99*40*ms, output: 100},   // relaxed only (TPOT)
		{ttft: 500 * ms, e2e: 500*ms + 99*60*ms, output: 100},   // neither
		{ttft: 200 * ms, e2e: 5 * time.Second, output: 1},       // both: one token, no TPOT
		{err: "boom", ttft: 10 * ms, e2e: 20 * ms, output: 2},   // failed: a miss
	}
	rep := summarize("t", "u", "w", results, time.Second)
	if len(rep.Goals) != 2 {
		t.Fatalf("goals %+v: want tight and relaxed", rep.Goals)
	}
	for k, want := range []struct {
		name     string
		attained int
	}{{"tight", 2}, {"relaxed", 4}} {
		g := rep.Goals[k]
		if g.Name != want.name || g.Attained != want.attained || g.Share != float64(want.attained)/6 {
			t.Errorf("goal %d: got %+v, want %s attained by %d of 6", k, g, want.name, want.attained)
		}
	}
	// TPOT: the four answers of 100 tokens (20, 20, 40, 60 ms a token); the one-token answer
	// has none, the failed request counts in no latency.
	if rep.TPOT.Count != 4 || math.Abs(rep.TPOT.Max-60) > 1e-9 || math.Abs(rep.TPOT.Mean-35) > 1e-9 {
		t.Errorf("TPOT %+v: want 4 answers, mean 35 ms, max 60 ms", rep.TPOT)
	}
}

// -workload phases: chat, then the long prompts, then chat, each -phase-length, at -speed of
// each part's rate, whatever -duration says; -workload long-prompt is -limit requests of them.
func TestPhaseWorkload(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"-workload", "phases", "-phase-length", "30s", "-speed", "1.5", "-duration", "10s"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	sessions, desc, err := c.workload(0)
	if err != nil {
		t.Fatal(err)
	}
	var n, tokens [3]int
	for _, s := range sessions {
		p := int(s.Start / (30 * time.Second))
		if p > 2 {
			t.Fatalf("session %s starts at %v, after the third phase", s.ID, s.Start)
		}
		n[p]++
		tokens[p] += s.Turns[0].Tokens
	}
	w, err := bench.PhaseMix(1, 1.5, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n[0]+n[1]+n[2], openLoop(w); got != want {
		t.Errorf("%d sessions replayed, want bench.PhaseMix's %d", got, want)
	}
	for _, p := range []int{0, 2} {
		if n[p] == 0 || n[1] == 0 || tokens[p]/n[p] >= tokens[1]/n[1] {
			t.Errorf("first prompts by phase: %v sessions, %v tokens; want chat's shorter than the long prompts'", n, tokens)
		}
	}
	if !strings.Contains(desc, "30s each") {
		t.Errorf("description %q", desc)
	}
	if c, err = parseFlags([]string{"-workload", "long-prompt", "-limit", "50", "-duration", "0"}, &stderr); err != nil {
		t.Fatal(err)
	}
	if sessions, _, err = c.workload(0); err != nil || len(sessions) != 50 {
		t.Errorf("-workload long-prompt -limit 50: %d sessions, %v", len(sessions), err)
	}
}

// openLoop counts w's open-loop requests (Prev < 0), each of which starts a replayed session.
func openLoop(w *bench.Workload) int {
	n := 0
	for _, r := range w.Requests {
		if r.Prev < 0 {
			n++
		}
	}
	return n
}

// -sessions increasing-hazard: every session runs 6 to 10 turns, none cut by its context, each
// count about as often (uniform), and flags given explicitly still win.
func TestIncreasingHazardSessions(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"-sessions", "increasing-hazard", "-rate", "4", "-duration", "100s"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	sessions, desc, err := c.workload(0)
	if err != nil {
		t.Fatal(err)
	}
	count := map[int]int{}
	for _, s := range sessions {
		count[len(s.Turns)]++
	}
	for n := range count {
		if n < 6 || n > 10 {
			t.Errorf("a session of %d turns, want 6 to 10 (%v)", n, count)
		}
	}
	for n := 6; n <= 10; n++ {
		if share := float64(count[n]) / float64(len(sessions)); share < 0.12 || share > 0.28 {
			t.Errorf("%d turns: %.2f of %d sessions, want about 1/5 (%v)", n, share, len(sessions), count)
		}
	}
	if !strings.Contains(desc, "increasing-hazard") || !strings.Contains(desc, "6–10 turns") {
		t.Errorf("workload description %q", desc)
	}
	if c, err = parseFlags([]string{"-sessions", "increasing-hazard", "-max-turns", "8"}, &stderr); err != nil || c.synth.MinTurns != 6 || c.synth.MaxTurns != 8 {
		t.Errorf("-max-turns 8 after the preset: turns [%d, %d], %v", c.synth.MinTurns, c.synth.MaxTurns, err)
	}
	if _, err := parseFlags([]string{"-sessions", "geometric"}, &stderr); err == nil {
		t.Error("-sessions geometric accepted")
	}
	if _, err := parseFlags([]string{"-session-idle", "-1s"}, &stderr); err == nil {
		t.Error("-session-idle -1s accepted")
	}
}
