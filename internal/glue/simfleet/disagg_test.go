package simfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
)

// pdProfile is fast() with a step budget of 64 tokens: a prompt of 1,200 tokens takes 19
// steps to prefill locally, where a decode step whose KV was transferred starts at once.
func pdProfile() engine.Profile {
	p := fast()
	p.MaxNumBatchedTokens = 64
	return p
}

func startPD(t *testing.T, mod func(i int, o *Options)) *Fleet {
	t.Helper()
	return startFleet(t, 2, func(i int, o *Options) {
		o.Engine.Profile = pdProfile()
		if mod != nil {
			mod(i, o)
		}
	})
}

type prefillAnswer struct {
	chatResponse
	KVTransferParams map[string]json.RawMessage `json:"kv_transfer_params"`
}

// longPrompt is a document of 1,200 tokens.
func longPrompt(topic string) string {
	var b strings.Builder
	for i := range 600 {
		fmt.Fprintf(&b, "%s %d ", topic, i)
	}
	return b.String()
}

// prefillStep is the gateway's first step: max_tokens 1, whole, do_remote_decode.
var prefillStep = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
	"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}

// withParams returns body with kv_transfer_params set.
func withParams(body map[string]any, params any) map[string]any {
	body["kv_transfer_params"] = params
	return body
}

func completion(model, prompt string, maxTokens int) map[string]any {
	return map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens}
}

// prefill sends a prefill step to url and returns its answer.
func prefill(t *testing.T, url string, body map[string]any) prefillAnswer {
	t.Helper()
	path := "/v1/completions"
	if body["messages"] != nil {
		path = "/v1/chat/completions"
	}
	pa := decode[prefillAnswer](t, post(t, url+path, withParams(body, prefillStep)), 200)
	if pa.KVTransferParams == nil {
		t.Fatal("the prefill answer has no kv_transfer_params")
	}
	return pa
}

// TestDisaggregated walks both steps: the prefill server answers kv_transfer_params naming
// itself and the prompt's blocks; the decode server given them pulls the transfer over the
// side channel, waits the transfer's time, does no prefill of its own, reports only its
// local hits as cached, and then holds the prompt for the conversation's next turn.
func TestDisaggregated(t *testing.T) {
	const perToken = 20 * time.Microsecond
	f := startPD(t, func(_ int, o *Options) { o.TransferPerToken, o.TransferLatency = perToken, time.Millisecond })
	pre, dec := f.Servers()[0], f.Servers()[1]
	urls, model := f.URLs(), pre.Model()
	doc := longPrompt("ledger")

	pa := prefill(t, urls[0], chatBody(model, 1, false, system, doc))
	p := pa.KVTransferParams
	var ids []int
	if err := json.Unmarshal(p["remote_block_ids"], &ids); err != nil {
		t.Fatalf("remote_block_ids %s: %v", p["remote_block_ids"], err)
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(urls[0], "http://"))
	bs := pre.Profile().BlockSize
	prompt := pa.Usage.PromptTokens
	for _, c := range []struct{ key, got, want string }{
		{"do_remote_prefill", string(p["do_remote_prefill"]), "true"},
		{"do_remote_decode", string(p["do_remote_decode"]), "false"},
		{"remote_engine_id", string(p["remote_engine_id"]), fmt.Sprintf("%q", pre.engineID)},
		{"remote_host", string(p["remote_host"]), fmt.Sprintf("%q", host)},
		{"remote_port", string(p["remote_port"]), port},
		{"tp_size", string(p["tp_size"]), "1"},
		{"number of remote_block_ids", fmt.Sprint(len(ids)), fmt.Sprint((prompt + bs - 1) / bs)},
	} {
		if c.got != c.want {
			t.Errorf("prefill answer's %s = %s, want %s", c.key, c.got, c.want)
		}
	}
	if pa.Usage.CompletionTokens != 1 || prompt < 1200 {
		t.Errorf("prefill usage %+v: want the whole prompt and 1 token", *pa.Usage)
	}
	if got, want := pre.KVTransferStats(), (KVTransferStats{Prefills: 1, Pending: 1}); got != want {
		t.Errorf("prefill server's stats %+v, want %+v", got, want)
	}

	before := dec.Stats()
	start := time.Now()
	resp := decode[chatResponse](t, post(t, urls[1]+"/v1/chat/completions",
		withParams(chatBody(model, 8, false, system, doc), p)), 200)
	took := time.Since(start)
	u := resp.Usage
	if u.PromptTokens != prompt || u.PromptTokensDetails.CachedTokens != 0 || u.CompletionTokens != 8 {
		t.Errorf("decode usage %+v: want %d prompt tokens, none cached here, 8 generated", *u, prompt)
	}
	// One step computes the last prompt token and samples the first, seven more decode: a
	// local prefill would take 19 steps of 64 tokens first.
	if got := dec.Stats().Steps - before.Steps; got != 8 {
		t.Errorf("the decode took %d engine steps, want 8", got)
	}
	if minWait := time.Millisecond + time.Duration(prompt)*perToken; took < minWait {
		t.Errorf("decode answered in %v, sooner than the transfer's %v", took, minWait)
	}
	st := dec.KVTransferStats()
	if st.Decodes != 1 || st.PullsFailed != 0 || st.TransferTime < time.Millisecond+time.Duration(prompt)*perToken {
		t.Errorf("decode server's stats %+v: want 1 decode, no failed pull, the transfer's time", st)
	}
	if got, want := pre.KVTransferStats(), (KVTransferStats{Prefills: 1, PullsServed: 1}); got != want {
		t.Errorf("prefill server's stats after the pull %+v, want %+v", got, want)
	}

	// The decode server's cache now holds the prompt: the next turn, sent to it whole, finds
	// every full block of it.
	turn2 := decode[chatResponse](t, post(t, urls[1]+"/v1/chat/completions",
		chatBody(model, 4, false, system, doc, resp.Choices[0].Message.Content, "more")), 200)
	if got, want := turn2.Usage.PromptTokensDetails.CachedTokens, prompt/bs*bs; got < want {
		t.Errorf("next turn on the decode server: %d tokens cached, want at least the first turn's %d", got, want)
	}

	// The counters over HTTP, as a gateway's tests read them from another process.
	for _, c := range []struct {
		url, name string
		want      float64
	}{
		{urls[0], "simfleet:kv_transfer_prefills_total", 1},
		{urls[0], "simfleet:kv_transfer_pulls_served_total", 1},
		{urls[0], "simfleet:kv_transfer_pending", 0},
		{urls[1], "simfleet:kv_transfer_decodes_total", 1},
		{urls[1], "simfleet:kv_transfer_pulls_failed_total", 0},
		{urls[1], "simfleet:kv_transfer_dropped_total", 0},
	} {
		fam := scrape(t, c.url)[c.name]
		if fam == nil || len(fam.Metric) != 1 {
			t.Errorf("%s: no %s", c.url, c.name)
			continue
		}
		m := fam.Metric[0]
		if got := m.GetCounter().GetValue() + m.GetGauge().GetValue(); got != c.want {
			t.Errorf("%s: %s = %v, want %v", c.url, c.name, got, c.want)
		}
	}
	if got := scrape(t, urls[1])["simfleet:kv_transfer_seconds_total"].GetMetric()[0].GetCounter().GetValue(); got != st.TransferTime.Seconds() {
		t.Errorf("simfleet:kv_transfer_seconds_total = %v, want %v", got, st.TransferTime.Seconds())
	}
}

// TestDisaggregatedStreamed: a streamed decode step serves its tokens and usage.
func TestDisaggregatedStreamed(t *testing.T) {
	f := startPD(t, nil)
	urls, model := f.URLs(), f.Servers()[0].Model()
	doc := longPrompt("atlas")
	pa := prefill(t, urls[0], completion(model, doc, 1))
	body := withParams(completion(model, doc, 5), pa.KVTransferParams)
	body["stream"], body["stream_options"] = true, map[string]bool{"include_usage": true}
	before := f.Servers()[1].Stats()
	resp := post(t, urls[1]+"/v1/completions", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readSSE(t, resp.Body)
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Fatalf("events %q: want 5 tokens, usage, [DONE]", events)
	}
	var last chatResponse
	if err := json.Unmarshal([]byte(events[5]), &last); err != nil || last.Usage == nil {
		t.Fatalf("usage chunk %s: %v", events[5], err)
	}
	if u := last.Usage; u.PromptTokens != pa.Usage.PromptTokens || u.PromptTokensDetails.CachedTokens != 0 || u.CompletionTokens != 5 {
		t.Errorf("usage %+v", *u)
	}
	if got := f.Servers()[1].Stats().Steps - before.Steps; got != 5 {
		t.Errorf("the decode took %d engine steps, want 5", got)
	}
	if st := f.Servers()[1].KVTransferStats(); st.Decodes != 1 || st.PullsFailed != 0 {
		t.Errorf("decode server's stats %+v", st)
	}
}

// TestDisaggregatedPullFails: whatever makes a pull fail, the decode server recomputes the
// prompt (it prefills it in 19 steps of 64 tokens), answers, and counts a failed pull. A pull
// that names the right blocks with another engine id or another prompt leaves the transfer
// to the decode it belongs to.
func TestDisaggregatedPullFails(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gonePort := gone.Addr().(*net.TCPAddr).Port
	gone.Close()
	tests := []struct {
		name     string
		edit     func(p map[string]any)
		prompt   string // of the decode step, if not the prefill's
		wait     time.Duration
		released bool // the prefill server's transfer is gone after the failed pull
	}{
		{name: "unknown blocks", edit: func(p map[string]any) { p["remote_block_ids"] = []int{9000, 9001} }},
		{name: "some of the blocks", edit: func(p map[string]any) { p["remote_block_ids"] = p["remote_block_ids"].([]any)[1:] }},
		{name: "another engine", edit: func(p map[string]any) { p["remote_engine_id"] = "vllm-elsewhere" }},
		{name: "another prompt", prompt: longPrompt("ledger") + "and more"},
		{name: "prefill server gone", edit: func(p map[string]any) { p["remote_port"] = gonePort }},
		{name: "expired", wait: 80 * time.Millisecond, released: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startPD(t, func(_ int, o *Options) { o.TransferTimeout = 50 * time.Millisecond })
			pre, dec := f.Servers()[0], f.Servers()[1]
			urls, model := f.URLs(), pre.Model()
			doc := longPrompt("ledger")
			pa := prefill(t, urls[0], completion(model, doc, 1))
			var p map[string]any
			raw, _ := json.Marshal(pa.KVTransferParams)
			_ = json.Unmarshal(raw, &p)
			if tt.edit != nil {
				tt.edit(p)
			}
			prompt := doc
			if tt.prompt != "" {
				prompt = tt.prompt
			}
			time.Sleep(tt.wait)

			before := dec.Stats()
			resp := decode[chatResponse](t, post(t, urls[1]+"/v1/completions", withParams(completion(model, prompt, 2), p)), 200)
			if resp.Usage.CompletionTokens != 2 {
				t.Errorf("usage %+v", *resp.Usage)
			}
			if got := dec.Stats().Steps - before.Steps; got < 19 {
				t.Errorf("the decode took %d engine steps: it did not prefill", got)
			}
			if st := dec.KVTransferStats(); st.Decodes != 1 || st.PullsFailed != 1 || st.TransferTime != 0 {
				t.Errorf("decode server's stats %+v: want 1 decode, 1 failed pull", st)
			}
			want := KVTransferStats{Prefills: 1, Pending: 1}
			if tt.released {
				want = KVTransferStats{Prefills: 1, Dropped: 1}
			}
			if got := pre.KVTransferStats(); got != want {
				t.Errorf("prefill server's stats %+v, want %+v", got, want)
			}
		})
	}
}

// TestDisaggregatedClientLeaves: a client that leaves during the transfer ends it; nothing
// reaches the engine.
func TestDisaggregatedClientLeaves(t *testing.T) {
	f := startPD(t, func(_ int, o *Options) { o.TransferLatency = time.Minute })
	urls, model := f.URLs(), f.Servers()[0].Model()
	pa := prefill(t, urls[0], completion(model, "a short prompt", 1))
	b, _ := json.Marshal(withParams(completion(model, "a short prompt", 2), pa.KVTransferParams))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urls[1]+"/v1/completions", strings.NewReader(string(b)))
	start := time.Now()
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the client's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the client waited %v", took)
	}
	dec := f.Servers()[1]
	waitFor(t, "the decode's handler to count its decode", func() bool { return dec.KVTransferStats().Decodes == 1 })
	if got := dec.Stats().Submitted; got != 0 {
		t.Errorf("%d requests reached the decode server's engine", got)
	}
}

// TestSideChannelOption: Options.SideChannel is what the prefill answer advertises.
func TestSideChannelOption(t *testing.T) {
	f := startFleet(t, 1, func(_ int, o *Options) { o.SideChannel = "10.1.2.3:5600" })
	pa := prefill(t, f.URLs()[0], completion(f.Servers()[0].Model(), "hello", 1))
	if h, p := string(pa.KVTransferParams["remote_host"]), string(pa.KVTransferParams["remote_port"]); h != `"10.1.2.3"` || p != "5600" {
		t.Errorf("side channel %s:%s, want 10.1.2.3:5600", h, p)
	}
}

func TestTransferOptionsInvalid(t *testing.T) {
	for _, o := range []Options{
		{SideChannel: "10.1.2.3"},
		{SideChannel: "10.1.2.3:0"},
		{SideChannel: ":5600"},
		{SideChannel: "host:http"},
		{TransferTimeout: -time.Second},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

// TestKVTransferParamsErrors: malformed parameters are a 400 naming the field.
func TestKVTransferParamsErrors(t *testing.T) {
	f := startFleet(t, 1, nil)
	url, model := f.URLs()[0]+"/v1/completions", f.Servers()[0].Model()
	good := func() map[string]any {
		return map[string]any{"do_remote_prefill": true, "remote_engine_id": "e", "remote_block_ids": []int{1, 2},
			"remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1, "remote_request_id": "an unknown key"}
	}
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string
	}{
		{"both flags", func(m map[string]any) { m["do_remote_decode"] = true }, "kv_transfer_params.do_remote_decode"},
		{"do_remote_decode a string", func(m map[string]any) { m["do_remote_decode"] = "true" }, "kv_transfer_params.do_remote_decode"},
		{"do_remote_prefill a number", func(m map[string]any) { m["do_remote_prefill"] = 1 }, "kv_transfer_params.do_remote_prefill"},
		{"engine id a number", func(m map[string]any) { m["remote_engine_id"] = 7 }, "kv_transfer_params.remote_engine_id"},
		{"no engine id", func(m map[string]any) { delete(m, "remote_engine_id") }, "kv_transfer_params.remote_engine_id"},
		{"empty engine id", func(m map[string]any) { m["remote_engine_id"] = "" }, "kv_transfer_params.remote_engine_id"},
		{"block ids a string", func(m map[string]any) { m["remote_block_ids"] = "1,2" }, "kv_transfer_params.remote_block_ids"},
		{"negative block id", func(m map[string]any) { m["remote_block_ids"] = []int{-1} }, "kv_transfer_params.remote_block_ids"},
		{"fractional block id", func(m map[string]any) { m["remote_block_ids"] = []float64{1.5} }, "kv_transfer_params.remote_block_ids"},
		{"no block ids", func(m map[string]any) { m["remote_block_ids"] = []int{} }, "kv_transfer_params.remote_block_ids"},
		{"block ids null", func(m map[string]any) { m["remote_block_ids"] = nil }, "kv_transfer_params.remote_block_ids"},
		{"host a list", func(m map[string]any) { m["remote_host"] = []string{"a"} }, "kv_transfer_params.remote_host"},
		{"no host", func(m map[string]any) { delete(m, "remote_host") }, "kv_transfer_params.remote_host"},
		{"port out of range", func(m map[string]any) { m["remote_port"] = 70000 }, "kv_transfer_params.remote_port"},
		{"port zero", func(m map[string]any) { m["remote_port"] = 0 }, "kv_transfer_params.remote_port"},
		{"port a string", func(m map[string]any) { m["remote_port"] = "5600" }, "kv_transfer_params.remote_port"},
		{"tp_size zero", func(m map[string]any) { m["tp_size"] = 0 }, "kv_transfer_params.tp_size"},
		{"tp_size a string", func(m map[string]any) { m["tp_size"] = "1" }, "kv_transfer_params.tp_size"},
		{"not an object", func(m map[string]any) { clear(m) }, "kv_transfer_params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := good()
			tt.edit(m)
			var params any = m
			if len(m) == 0 {
				params = []string{"yes"}
			}
			e := decode[apiError](t, post(t, url, withParams(completion(model, "hi", 2), params)), 400)
			if !strings.HasPrefix(e.Error.Message, tt.field+":") || e.Error.Type != "BadRequestError" || e.Error.Code != 400 {
				t.Errorf("error %+v: want a BadRequestError naming %s", e.Error, tt.field)
			}
		})
	}
}

// TestTransfers compares transfers with a naive reference through random adds, takes and
// clock advances, with bursts that reach the bound on pending transfers.
func TestTransfers(t *testing.T) {
	const ttl = 10 * time.Second
	type ref struct {
		ids    []uint64
		tokens int
		added  time.Time
		gone   bool
	}
	var (
		all     []*ref // every transfer added
		alive   []*ref // the pending ones, oldest first
		dropped uint64
		stale   bool // alive may hold transfers expired or pulled
	)
	tr := transfers{ttl: ttl}
	now := time.Unix(1e9, 0)
	// expire is the reference: expired transfers go; pulled ones are forgotten.
	expire := func() {
		if !stale {
			return
		}
		stale = false
		l := alive[:0]
		for _, r := range alive {
			if !r.gone && now.Sub(r.added) > ttl {
				r.gone = true
				dropped++
			}
			if !r.gone {
				l = append(l, r)
			}
		}
		alive = l
	}
	add := func(tokens int) {
		expire()
		if len(alive) >= maxPendingTransfers {
			alive[0].gone = true
			alive = alive[1:]
			dropped++
		}
		ids := tr.add(tokens, (tokens+15)/16, now)
		r := &ref{ids: ids, tokens: tokens, added: now}
		all, alive = append(all, r), append(alive, r)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case step%1000 == 500:
			for range maxPendingTransfers + 10 {
				add(16)
			}
		case op < 5:
			add(1 + rng.IntN(100))
		case op < 8 && len(all) > 0:
			expire()
			r := all[len(all)-1-min(rng.IntN(len(all)), rng.IntN(64))]
			tokens := r.tokens
			if rng.IntN(4) == 0 {
				tokens++
			}
			found, match := tr.take(r.ids, tokens, now)
			if found != !r.gone || match != (!r.gone && tokens == r.tokens) {
				t.Fatalf("step %d: take of a transfer (gone %v) of %d tokens as one of %d = %v, %v", step, r.gone, r.tokens, tokens, found, match)
			}
			r.gone = r.gone || match
			stale = stale || match
		default:
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			stale = true
		}
		expire()
		pending, gotDropped := tr.stats(now)
		if pending != len(alive) || gotDropped != dropped {
			t.Fatalf("step %d: %d pending, %d dropped; want %d, %d", step, pending, gotDropped, len(alive), dropped)
		}
	}
	if len(tr.queue) > 2*maxPendingTransfers+64 {
		t.Errorf("the queue holds %d entries for %d pending transfers", len(tr.queue), len(tr.pending))
	}
}

func FuzzTransferParams(f *testing.F) {
	f.Add([]byte(`{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1}`))
	f.Add([]byte(`{"do_remote_decode":true,"remote_engine_id":null,"remote_block_ids":null}`))
	f.Add([]byte(`{"do_remote_prefill":true,"remote_port":"1"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := parseTransferParams(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kv_transfer_params") {
				t.Fatalf("error %q does not name kv_transfer_params", err)
			}
			return
		}
		if p == nil {
			return
		}
		if p.DoRemoteDecode && p.DoRemotePrefill {
			t.Fatalf("accepted both flags from %s", raw)
		}
		if p.DoRemotePrefill && (*p.RemoteEngineID == "" || len(p.RemoteBlockIDs) == 0 || *p.RemoteHost == "" ||
			*p.RemotePort < 1 || *p.RemotePort > 65535) {
			t.Fatalf("accepted unusable params %+v from %s", p, raw)
		}
		// What it accepts, re-encoded, it accepts again as the same.
		again, _ := json.Marshal(p)
		q, err := parseTransferParams(again)
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("%s re-encoded as %s decodes to %+v, %v", raw, again, q, err)
		}
	})
}
