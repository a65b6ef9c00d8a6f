package openaiwire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

func TestPrefillBody(t *testing.T) {
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":false},"max_completion_tokens":300,"min_tokens":20,"priority":-5,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	r, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := PrefillBody(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(pb, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"max_tokens": "1", "max_completion_tokens": "1", "min_tokens": "1", "stream": "false", "ignore_eos": "true",
		"kv_transfer_params": prefillParams, "messages": `[{"role":"user","content":"hi"}]`, "model": `"m"`,
	}
	for k, v := range want {
		if string(m[k]) != v {
			t.Errorf("%s = %s, want %s", k, m[k], v)
		}
	}
	for _, k := range []string{"stream_options", "priority"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s kept in the prefill body", k)
		}
	}
	if _, err := openai.Parse(pb, openai.Chat, openai.ParseLimits{}); err == nil {
		t.Error("a prefill body parses as a client's request: kv_transfer_params must be refused from clients")
	}
}

func TestAppendDecode(t *testing.T) {
	body := `{"model":"m","priority":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}  `
	r, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	params := `{"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[1,2],"remote_host":"10.0.0.1","remote_port":5600}`
	got := string(AppendDecode(r, nil, []byte(params)))
	want := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true},"kv_transfer_params":` + params + `}  `
	if got != want {
		t.Errorf("decode body\n got %s\nwant %s", got, want)
	}
}

func TestTransferParams(t *testing.T) {
	tests := []struct {
		answer, want string
		ok           bool
	}{
		{`{"id":"x","kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1]},"usage":{}}`, `{"remote_engine_id":"e","remote_block_ids":[1]}`, true},
		{`{"id":"x"}`, "", false},
		{`{"kv_transfer_params":null}`, "", false},
		{`{"kv_transfer_params":[1]}`, "", false},
		{`{"kv_transfer_params":"x"}`, "", false},
		{`not json`, "", false},
		{`{"kv_transfer_params":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`, "", false},
	}
	for _, tt := range tests {
		got, err := TransferParams([]byte(tt.answer))
		if (err == nil) != tt.ok || string(got) != tt.want {
			t.Errorf("TransferParams(%.60s) = %s, %v; want %s, ok %v", tt.answer, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzTransferParams(f *testing.F) {
	f.Add([]byte(`{"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1,2]}}`))
	f.Add([]byte(`{"kv_transfer_params":null}`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		p, err := TransferParams(answer)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(p, &m) != nil {
			t.Fatalf("accepted params that are not an object: %s", p)
		}
	})
}
