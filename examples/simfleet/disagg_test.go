package simfleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

type prefillAnswer struct {
	chatResponse
	KVTransferParams map[string]json.RawMessage `json:"kv_transfer_params"`
}

// longPrompt is a prompt of about 1,200 tokens.
func longPrompt(topic string) string {
	var b strings.Builder
	for i := range 600 {
		fmt.Fprintf(&b, "%s %d ", topic, i)
	}
	return b.String()
}

// pdRequest returns a chat request body with kv_transfer_params.
func pdRequest(model string, maxTokens int, stream bool, params any, msgs ...string) map[string]any {
	b := chatBody(model, maxTokens, stream, msgs...)
	b["kv_transfer_params"] = params
	return b
}

// TestDisaggregated: a prefill server answers kv_transfer_params naming itself and the
// prompt's blocks; a decode server given them pulls the transfer over the side channel, does
// no prefill of its own, reports only its local hits as cached, and then holds the prompt
// for the next turn. A second pull of the same transfer fails, and that decode recomputes.
func TestDisaggregated(t *testing.T) {
	const perToken = 20 * time.Microsecond
	f := startFleet(t, 2, func(_ int, o *Options) {
		o.TransferPerToken, o.TransferLatency = perToken, time.Millisecond
		o.Engine.Profile.PrefillPerToken = 20 * time.Microsecond // prefill clearly costlier than a step
	})
	prefill, dec := f.Servers()[0], f.Servers()[1]
	urls := f.URLs()
	model := prefill.Model()
	doc := longPrompt("ledger")

	pa := decode[prefillAnswer](t, post(t, urls[0]+"/v1/chat/completions",
		pdRequest(model, 1, false, map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil}, system, doc)), 200)
	p := pa.KVTransferParams
	if string(p["do_remote_prefill"]) != "true" || string(p["do_remote_decode"]) != "false" || len(p["remote_engine_id"]) < 3 {
		t.Fatalf("prefill answer's kv_transfer_params = %v", p)
	}
	var ids []uint64
	_ = json.Unmarshal(p["remote_block_ids"], &ids)
	bs := prefill.Profile().BlockSize
	if want := (pa.Usage.PromptTokens + bs - 1) / bs; len(ids) != want {
		t.Errorf("remote_block_ids has %d ids, want %d for %d prompt tokens", len(ids), want, pa.Usage.PromptTokens)
	}
	if string(p["remote_host"]) != `"127.0.0.1"` || !strings.HasSuffix(urls[0], ":"+string(p["remote_port"])) {
		t.Errorf("side channel %s:%s, want the prefill server's own %s", p["remote_host"], p["remote_port"], urls[0])
	}
	if st := prefill.KVTransferStats(); st.Prefills != 1 || st.Pending != 1 {
		t.Errorf("prefill server stats %+v: want 1 prefill, 1 pending", st)
	}

	before := dec.Stats()
	start := time.Now()
	resp := decode[chatResponse](t, post(t, urls[1]+"/v1/chat/completions", pdRequest(model, 8, false, p, system, doc)), 200)
	took := time.Since(start)
	after := dec.Stats()
	if resp.Usage.PromptTokens != pa.Usage.PromptTokens || resp.Usage.PromptTokensDetails.CachedTokens != 0 || resp.Usage.CompletionTokens != 8 {
		t.Errorf("decode usage %+v: want the whole prompt, nothing cached locally, 8 tokens", resp.Usage)
	}
	if steps := after.Steps - before.Steps; steps > 9 {
		t.Errorf("the decode took %d engine steps, want 9 (one prompt token, then 8 answers): it prefilled", steps)
	}
	if minWait := time.Millisecond + time.Duration(pa.Usage.PromptTokens)*perToken; took < minWait {
		t.Errorf("decode answered in %v, less than the transfer's %v", took, minWait)
	}
	if st := dec.KVTransferStats(); st.Decodes != 1 || st.PullsFailed != 0 || st.TransferTime <= 0 {
		t.Errorf("decode server stats %+v", st)
	}
	if st := prefill.KVTransferStats(); st.PullsServed != 1 || st.Pending != 0 {
		t.Errorf("prefill server stats %+v: want 1 pull served, none pending", st)
	}
	if got := dec.CachedPrefix(Tokenize(mustRender(t, system, doc))); got*bs < pa.Usage.PromptTokens-bs {
		t.Errorf("the decode server caches %d blocks of the transferred prompt (%d tokens)", got, pa.Usage.PromptTokens)
	}
	turn2 := decode[chatResponse](t, post(t, urls[1]+"/v1/chat/completions", chatBody(model, 4, false, system, doc, "ok", "more")), 200)
	if turn2.Usage.PromptTokensDetails.CachedTokens < pa.Usage.PromptTokens-bs {
		t.Errorf("next turn on the decode server cached %d tokens, want the transferred prompt's %d", turn2.Usage.PromptTokensDetails.CachedTokens, pa.Usage.PromptTokens)
	}

	// The same parameters again: the transfer was pulled, so this decode recomputes.
	before = dec.Stats()
	again := decode[chatResponse](t, post(t, urls[1]+"/v1/chat/completions", pdRequest(model, 2, false, p, system, longPrompt("other"))), 200)
	_ = again
	if st := dec.KVTransferStats(); st.PullsFailed != 1 {
		t.Errorf("a second pull of one transfer: stats %+v, want 1 failed pull", st)
	}
	if dec.Stats().PromptTokens == before.PromptTokens {
		t.Error("the failed pull's decode did not compute its prompt")
	}
}

func mustRender(t *testing.T, msgs ...string) string {
	t.Helper()
	var m []Message
	for i, text := range msgs {
		role := "user"
		if i == 0 {
			role = "system"
		}
		c, _ := json.Marshal(text)
		m = append(m, Message{Role: role, Content: c})
	}
	s, err := RenderChat(m, true)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDisaggregatedStreamed: a streamed decode step serves its answer and usage.
func TestDisaggregatedStreamed(t *testing.T) {
	f := startFleet(t, 2, nil)
	urls, model := f.URLs(), f.Servers()[0].Model()
	doc := longPrompt("atlas")
	pa := decode[prefillAnswer](t, post(t, urls[0]+"/v1/completions",
		map[string]any{"model": model, "prompt": doc, "max_tokens": 1, "kv_transfer_params": map[string]any{"do_remote_decode": true}}), 200)
	resp := post(t, urls[1]+"/v1/completions", map[string]any{"model": model, "prompt": doc, "max_tokens": 5, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "kv_transfer_params": pa.KVTransferParams})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readSSE(t, resp.Body)
	if len(events) != 7 || events[6] != "[DONE]" || !strings.Contains(events[5], `"prompt_tokens":`) {
		t.Errorf("events %v: want 5 tokens, usage, [DONE]", events)
	}
	if st := f.Servers()[1].KVTransferStats(); st.Decodes != 1 || st.PullsFailed != 0 {
		t.Errorf("decode stats %+v", st)
	}
}

// TestDisaggregatedExpiry: a transfer not pulled within TransferTimeout is dropped.
func TestDisaggregatedExpiry(t *testing.T) {
	f := startFleet(t, 2, func(_ int, o *Options) { o.TransferTimeout = 50 * time.Millisecond })
	urls, model := f.URLs(), f.Servers()[0].Model()
	pa := decode[prefillAnswer](t, post(t, urls[0]+"/v1/completions",
		map[string]any{"model": model, "prompt": "a short prompt of a few words", "max_tokens": 1, "kv_transfer_params": map[string]any{"do_remote_decode": true}}), 200)
	time.Sleep(100 * time.Millisecond)
	decode[chatResponse](t, post(t, urls[1]+"/v1/completions",
		map[string]any{"model": model, "prompt": "a short prompt of a few words", "max_tokens": 2, "kv_transfer_params": pa.KVTransferParams}), 200)
	if st := f.Servers()[1].KVTransferStats(); st.PullsFailed != 1 {
		t.Errorf("pull after expiry: stats %+v, want a failed pull", st)
	}
}

// TestKVTransferParamsErrors: malformed parameters are a 400 naming the field.
func TestKVTransferParamsErrors(t *testing.T) {
	f := startFleet(t, 1, nil)
	url, model := f.URLs()[0]+"/v1/completions", f.Servers()[0].Model()
	good := func() map[string]any {
		return map[string]any{"do_remote_prefill": true, "remote_engine_id": "e", "remote_block_ids": []int{1, 2}, "remote_host": "127.0.0.1", "remote_port": 5600}
	}
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string
	}{
		{"both flags", func(m map[string]any) { m["do_remote_decode"] = true }, "do_remote_decode"},
		{"engine id a number", func(m map[string]any) { m["remote_engine_id"] = 7 }, "remote_engine_id"},
		{"no engine id", func(m map[string]any) { delete(m, "remote_engine_id") }, "remote_engine_id"},
		{"block ids a string", func(m map[string]any) { m["remote_block_ids"] = "1,2" }, "remote_block_ids"},
		{"negative block id", func(m map[string]any) { m["remote_block_ids"] = []int{-1} }, "remote_block_ids"},
		{"no block ids", func(m map[string]any) { m["remote_block_ids"] = []int{} }, "remote_block_ids"},
		{"host a list", func(m map[string]any) { m["remote_host"] = []string{"a"} }, "remote_host"},
		{"port out of range", func(m map[string]any) { m["remote_port"] = 70000 }, "remote_port"},
		{"port a string", func(m map[string]any) { m["remote_port"] = "5600" }, "remote_port"},
		{"tp_size zero", func(m map[string]any) { m["tp_size"] = 0 }, "tp_size"},
		{"not an object", nil, "kv_transfer_params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var params any = "yes"
			if tt.edit != nil {
				m := good()
				tt.edit(m)
				params = m
			}
			resp := post(t, url, map[string]any{"model": model, "prompt": "hi", "max_tokens": 2, "kv_transfer_params": params})
			e := decode[apiError](t, resp, 400)
			if !strings.Contains(e.Error.Message, tt.field) {
				t.Errorf("error %q does not name %s", e.Error.Message, tt.field)
			}
		})
	}
}

func FuzzTransferParams(f *testing.F) {
	f.Add([]byte(`{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1}`))
	f.Add([]byte(`{"do_remote_decode":true}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := parseTransferParams(raw)
		if err != nil || p == nil || !p.DoRemotePrefill {
			return
		}
		if *p.RemoteEngineID == "" || len(p.RemoteBlockIDs) == 0 || *p.RemoteHost == "" || *p.RemotePort < 1 || *p.RemotePort > 65535 {
			t.Fatalf("accepted unusable params %+v from %s", p, raw)
		}
	})
}
