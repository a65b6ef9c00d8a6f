package gateway

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer"
)

// testTokenizerDir is a small byte-level tokenizer of the proxy/tokenizer tests, with a chat
// template written beside it.
func testTokenizerDir(t *testing.T) string {
	t.Helper()
	tj, err := os.ReadFile("../proxy/tokenizer/testdata/bytelevel/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "tokenizer.json"), string(tj))
	write(t, filepath.Join(dir, "tokenizer_config.json"), `{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"}`)
	return dir
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func request(t *testing.T, api openai.API, body string) *openai.Request {
	t.Helper()
	r, err := openai.Parse([]byte(body), api, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLocalTokenizer: "local:DIR" builds the model's Encoder, with the configured block size.
func TestLocalTokenizer(t *testing.T) {
	dir := testTokenizerDir(t)
	c := DefaultConfig()
	c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
	c.Tokenizer = "local:" + dir
	c.BlockSize = 4
	o, err := c.Options()
	if !noError(t, err) {
		return
	}
	e, ok := o.Tokenizer.(*tokenizer.Encoder)
	if !isTrue(t, ok, "Tokenizer is %T, want *tokenizer.Encoder", o.Tokenizer) {
		return
	}
	p, err := e.Tokenize(context.Background(), nil, request(t, openai.Completions, `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`))
	noError(t, err)
	equal(t, 4, p.BlockSize)
	equal(t, 2, len(p.Chain))
	_, err = proxy.New(o)
	noError(t, err, "proxy.New with a local tokenizer")
}

// TestTokenizerErrors: a tokenizer that cannot be built is a start-up error that says which
// setting, directory and file.
func TestTokenizerErrors(t *testing.T) {
	good := testTokenizerDir(t)
	badJSON := t.TempDir()
	write(t, filepath.Join(badJSON, "tokenizer.json"), `{"model": {`)
	badConfig := t.TempDir()
	tj, _ := os.ReadFile(filepath.Join(good, "tokenizer.json"))
	write(t, filepath.Join(badConfig, "tokenizer.json"), string(tj))
	write(t, filepath.Join(badConfig, "tokenizer_config.json"), `{"chat_template": "{% for %}"}`)
	missing := filepath.Join(t.TempDir(), "nowhere")
	for _, tc := range []struct {
		name       string
		set        func(*Config)
		mentioning []string
	}{
		{"unknown", func(c *Config) { c.Tokenizer = "words" }, []string{`"words"`, "local:DIR"}},
		{"no dir", func(c *Config) { c.Tokenizer = "local:" }, []string{`"local:"`}},
		{"missing dir", func(c *Config) { c.Tokenizer = "local:" + missing }, []string{missing, "tokenizer.json"}},
		{"bad tokenizer.json", func(c *Config) { c.Tokenizer = "local:" + badJSON }, []string{badJSON, "tokenizer.json"}},
		{"bad template", func(c *Config) { c.Tokenizer = "local:" + badConfig }, []string{badConfig, "chat_template"}},
		{"bad pool tokenizer", func(c *Config) { c.Tokenizers = map[string]string{"qwen3": "local:" + missing} }, []string{`pool "qwen3"`, missing}},
		{"unknown pool tokenizer", func(c *Config) { c.Tokenizers = map[string]string{"qwen3": "exact"} }, []string{`pool "qwen3"`, `"exact"`}},
	} {
		c := DefaultConfig()
		c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
		tc.set(&c)
		_, err := c.Options()
		if errorIs(t, err, proxy.ErrInvalidOptions, tc.name) {
			for _, s := range tc.mentioning {
				contains(t, err.Error(), s, "%s: the error names %s", tc.name, s)
			}
		}
	}
}

// TestPoolTokenizersDecode: a pool's "tokenizer" in the JSON config and -pool's tokenizer=
// reach Config.Tokenizers; a pool with only a tokenizer sets no limits; mistakes are errors.
func TestPoolTokenizersDecode(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gateway.json")
	write(t, file, `{"tokenizer": "local:/models/default", "pools": {"qwen3": {"tokenizer": "local:/models/qwen3"}, "llama": {"MaxInFlight": 8, "tokenizer": "endpoint"}, "mistral": {"Saturation": 0.5}}}`)
	c := DefaultConfig()
	if noError(t, c.LoadFile(file)) {
		equal(t, "local:/models/default", c.Tokenizer)
		equal(t, map[string]string{"qwen3": "local:/models/qwen3", "llama": "endpoint"}, c.Tokenizers)
		equal(t, map[string]proxy.PoolLimits{"llama": {MaxInFlight: 8}, "mistral": {Saturation: 0.5}}, c.Pools)
	}
	for _, bad := range []string{
		`{"pools": {"qwen3": {"tokeniser": "bytes"}}}`,
		`{"pools": {"qwen3": {"tokenizer": 3}}}`,
		`{"tokenizer": ["bytes"]}`,
		`{"tokenizers": {"qwen3": "bytes"}}`, // the pools' key is the only way in JSON
	} {
		write(t, file, bad)
		c := DefaultConfig()
		isError(t, c.LoadFile(file), bad)
	}

	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c = DefaultConfig()
	c.RegisterFlags(fs)
	noError(t, fs.Parse([]string{"-tokenizer", "local:/d", "-pool", "qwen3,tokenizer=local:/q", "-pool", "llama,max-inflight=2,tokenizer=bytes"}))
	equal(t, "local:/d", c.Tokenizer)
	equal(t, map[string]string{"qwen3": "local:/q", "llama": "bytes"}, c.Tokenizers)
	equal(t, map[string]proxy.PoolLimits{"llama": {MaxInFlight: 2}}, c.Pools)
	isError(t, fs.Parse([]string{"-pool", "qwen3,tokenizer=bytes"}), "a pool's tokenizer given twice")
	isError(t, fs.Parse([]string{"-pool", "llama"}), "a pool given twice")
}

// TestTokenizerByModel: with pools' tokenizers, each request is tokenized by its base model's
// (an adapter's by its base model's), the others by Tokenizer's; an "endpoint" pool asks the
// backends that serve the model, and hashes Messages and Responses by bytes.
func TestTokenizerByModel(t *testing.T) {
	dir := testTokenizerDir(t)
	c := DefaultConfig()
	c.Backends = []BackendSpec{
		{URL: "http://10.0.0.1:8000", Engine: "vllm", Models: []string{"qwen3"}, Adapters: []string{"sql-lora"}},
		{URL: "http://10.0.0.2:8000", Engine: "vllm", Models: []string{"llama"}},
		{URL: "http://10.0.0.3:8000", Engine: "vllm", Models: []string{"mistral"}},
	}
	c.Tokenizers = map[string]string{"qwen3": "local:" + dir, "llama": "endpoint"}
	c.BlockSize, c.ByteBlock = 2, 8
	o, err := c.Options()
	if !noError(t, err) {
		return
	}
	mt, ok := o.Tokenizer.(*modelTokenizers)
	if !isTrue(t, ok, "Tokenizer is %T, want the dispatch by model", o.Tokenizer) {
		return
	}
	ep, ok := mt.models["llama"].(*proxy.EndpointTokenizer)
	if isTrue(t, ok, "llama's tokenizer is %T", mt.models["llama"]) {
		equal(t, []string{"http://10.0.0.2:8000"}, ep.URLs, "the endpoint tokenizer asks the model's backends")
	}
	local, err := tokenizer.New(tokenizer.Options{Dir: dir, BlockSize: 2})
	if !noError(t, err) {
		return
	}
	ctx := context.Background()
	tokenize := func(tok proxy.Tokenizer, req *openai.Request) proxy.Prompt {
		t.Helper()
		p, err := tok.Tokenize(ctx, nil, req)
		noError(t, err)
		return p
	}
	const prompt = `"the hello world, the hello world, the hello world"`
	for _, tc := range []struct {
		name  string
		req   *openai.Request
		adapt bool
		want  proxy.Tokenizer
	}{
		{"qwen3", request(t, openai.Completions, `{"model":"qwen3","prompt":`+prompt+`}`), false, local},
		{"qwen3's adapter", request(t, openai.Completions, `{"model":"sql-lora","prompt":`+prompt+`}`), true, local},
		{"mistral: the default", request(t, openai.Completions, `{"model":"mistral","prompt":`+prompt+`}`), false, proxy.BytesTokenizer{BlockBytes: c.ByteBlock}},
		{"llama's Messages: bytes", request(t, openai.Messages, `{"model":"llama","max_tokens":4,"messages":[{"role":"user","content":`+prompt+`}]}`), false, proxy.BytesTokenizer{BlockBytes: c.ByteBlock}},
	} {
		if tc.adapt {
			tc.req.BaseModel, tc.req.Adapter = "qwen3", tc.req.Model
		}
		got, want := tokenize(mt, tc.req), tokenize(tc.want, tc.req)
		if len(want.Chain) == 0 || !slices.Equal(got.Chain, want.Chain) || got.BlockSize != want.BlockSize {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
}
