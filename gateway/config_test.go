package gateway

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// TestConfigNames builds a Handler configuration for every policy and router name the
// registries list (the names -policy and -router accept), and checks that an unknown name is
// refused with the list of known ones.
func TestConfigNames(t *testing.T) {
	base := DefaultConfig()
	base.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
	for _, name := range builtin.PolicyNames() {
		c := base
		c.Policy = name
		_, err := c.Options()
		noError(t, err, "-policy %s", name)
	}
	for _, name := range builtin.ProfileNames() {
		c := base
		c.Router = proxy.ProfileSpec{Extends: name}
		_, err := c.Options()
		noError(t, err, "-router %s", name)
	}
	for _, c := range []func(*Config){
		func(c *Config) { c.Policy = "las-llmd" },
		func(c *Config) { c.Router = proxy.ProfileSpec{Extends: "llmd"} },
	} {
		cfg := base
		c(&cfg)
		_, err := cfg.Options()
		if errorIs(t, err, proxy.ErrInvalidOptions, "policy %q router %q", cfg.Policy, cfg.Router) {
			contains(t, err.Error(), "(have ", "the error lists the known names")
		}
	}
}

// evenFirst is a user's scorer: a bonus for backends with an even id.
type evenFirst struct{ bonus float64 }

func (e evenFirst) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	for i := range cands {
		if cands[i].ID%2 == 0 {
			dst[i] = e.bonus
		}
	}
}

// A user's scorer, used from a JSON config file through Config.Registry: the gateway's whole
// configuration path, as a main that reuses it would take.
func TestConfigFileWithOwnScorer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gateway.json")
	cfgJSON := `{"backends":[{"url":"http://127.0.0.1:8000"}],
	  "router":{"extends":"usher","scorers":[{"name":"even-first","weight":3,"params":{"bonus":1}}]}}`
	if err := os.WriteFile(file, []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadFile(file); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Options(); err == nil || !strings.Contains(err.Error(), `unknown scorer "even-first"`) {
		t.Errorf("without the user's registry: %v, want an unknown scorer", err)
	}
	reg := new(proxy.Registry)
	err := proxy.Register(reg, "even-first", func(p proxy.Params) (routing.Scorer, error) {
		o := struct {
			Bonus float64 `json:"bonus"`
		}{Bonus: 1}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return evenFirst{o.Bonus}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Registry = reg
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Router == nil {
		t.Fatal("no router")
	}
}

// One backend syntax: -backend, a string in the JSON config, and the object form agree; lists
// and a role come through to proxy.Backend.
func TestBackendSyntax(t *testing.T) {
	const line = "http://10.0.0.7:8000,engine=sglang,role=decode,models=llama-3,qwen-2.5,kv-events=tcp://10.0.0.7:5557,ranks=2"
	want := BackendSpec{URL: "http://10.0.0.7:8000", Engine: "sglang", Role: "decode", Models: []string{"llama-3", "qwen-2.5"}, KVEvents: "tcp://10.0.0.7:5557", Ranks: 2}
	got, err := ParseBackend(line)
	noError(t, err)
	equal(t, want, got)
	file := filepath.Join(t.TempDir(), "gateway.json")
	cfgJSON := `{"backends":["` + line + `",{"url":"http://10.0.0.8:8000","role":"prefill","models":["qwen-2.5","llama-3"]}]}`
	noError(t, os.WriteFile(file, []byte(cfgJSON), 0o600))
	c := DefaultConfig()
	noError(t, c.LoadFile(file))
	if lenIs(t, c.Backends, 2) {
		equal(t, want, c.Backends[0])
		equal(t, BackendSpec{URL: "http://10.0.0.8:8000", Engine: "vllm", Role: "prefill", Models: []string{"qwen-2.5", "llama-3"}}, c.Backends[1])
	}
	_, err = c.Options()
	errorIs(t, err, ErrNoExtension, "kv-events without the kv-events extension registered")
	c.Registry = new(proxy.Registry)
	noError(t, kvfeed.Register(c.Registry))
	o, err := c.Options()
	if noError(t, err) && lenIs(t, o.Backends, 2) {
		equal(t, routing.RoleDecode, o.Backends[0].Role)
		equal(t, routing.RolePrefill, o.Backends[1].Role)
		equal(t, []string{"llama-3", "qwen-2.5"}, o.Backends[0].Models)
		lenIs(t, o.Extensions, 1, "the KV feed for kv-events")
	}
	// kv_both: a server of role both whose role the gateway's planner sets.
	kv := DefaultConfig()
	kvb, err := ParseBackend("http://10.0.0.9:8000,role=kv_both")
	noError(t, err)
	kv.Backends = []BackendSpec{kvb, {URL: "http://10.0.0.10:8000", Engine: "vllm"}}
	if o, err := kv.Options(); noError(t, err) && lenIs(t, o.Backends, 2) {
		equal(t, routing.RoleBoth, o.Backends[0].Role)
		equal(t, true, o.Backends[0].KVBoth)
		equal(t, false, o.Backends[1].KVBoth)
	}
	for _, bad := range []string{"http://a:1,role=primary", "http://a:1,colour=red", "http://a:1,engine=vllm,engine=sglang", "http://a:1,ranks=-1", "http://a:1,bare"} {
		_, err := ParseBackend(bad)
		errorIs(t, err, proxy.ErrInvalidOptions, bad)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	noError(t, os.WriteFile(bad, []byte(`{"backends":[{"url":"http://a:1","colour":"red"}]}`), 0o600))
	c = DefaultConfig()
	err = c.LoadFile(bad)
	if isError(t, err) {
		contains(t, err.Error(), "colour")
	}
}

// TestModelsAndPools: adapters in the backend syntax, -pool's syntax, and pools in the JSON
// config reach the Handler's options.
func TestModelsAndPools(t *testing.T) {
	b, err := ParseBackend("http://10.0.0.7:8000,models=llama-3,adapters=sql-lora,chat-lora")
	noError(t, err)
	equal(t, []string{"sql-lora", "chat-lora"}, b.Adapters)
	model, lim, tok, err := parsePool("llama-3,max-inflight=8,saturation=0.9,tokenizer=local:/m")
	noError(t, err)
	equal(t, "llama-3", model)
	equal(t, proxy.PoolLimits{MaxInFlight: 8, Saturation: 0.9}, lim)
	equal(t, "local:/m", tok)
	for _, bad := range []string{"", "llama-3,max-inflight=0", "llama-3,saturation=-1", "llama-3,saturation=NaN", "llama-3,colour=red", "max-inflight=3"} {
		_, _, _, err := parsePool(bad)
		errorIs(t, err, proxy.ErrInvalidOptions, bad)
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c := DefaultConfig()
	c.RegisterFlags(fs)
	noError(t, fs.Parse([]string{
		"-backend", "http://10.0.0.7:8000,models=llama-3,adapters=sql-lora", "-backend", "http://10.0.0.8:8000,models=qwen-3",
		"-pool", "llama-3,max-inflight=8", "-pool", "qwen-3,saturation=0.8",
	}))
	isError(t, fs.Parse([]string{"-pool", "llama-3", "-pool", "llama-3"}), "a pool given twice")
	o, err := c.Options()
	if noError(t, err) {
		equal(t, []string{"sql-lora"}, o.Backends[0].Adapters)
		equal(t, map[string]proxy.PoolLimits{"llama-3": {MaxInFlight: 8}, "qwen-3": {Saturation: 0.8}}, o.Pools)
		h, err := proxy.New(o)
		if noError(t, err) {
			isTrue(t, proxyseam.PoolQueue(h, "llama-3") != proxyseam.PoolQueue(h, "qwen-3"), "two pools share a queue")
			isTrue(t, proxyseam.PoolQueue(h, "llama-3") == proxyseam.PoolQueue(h, "sql-lora"), "an adapter is admitted in its base model's pool")
		}
	}
	c.Pools = map[string]proxy.PoolLimits{"mistral": {MaxInFlight: 1}}
	o, err = c.Options()
	if err == nil {
		_, err = proxy.New(o)
	}
	errorIs(t, err, proxy.ErrInvalidOptions, "a pool no backend serves")
}

// The bench's gateway configurations of its router variants (bench/profiles, which
// bench/calibrate.sh runs on processes) load and build.
func TestBenchProfiles(t *testing.T) {
	files, err := filepath.Glob("../bench/profiles/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bench profiles: %v", err)
	}
	for _, f := range files {
		c := DefaultConfig()
		if err := c.LoadFile(f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
		if o, err := c.Options(); err != nil || o.Router == nil {
			t.Fatalf("%s: %v", f, err)
		}
		p, err := new(proxy.Registry).Profile(c.Router, session.AffinityOptions{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if p.Name != name || len(p.Scorers) == 0 {
			t.Errorf("%s: profile %q with %d scorers, want %q", f, p.Name, len(p.Scorers), name)
		}
	}
}

// TestConfigDecider: -decider and -decider-params name a registered decider of disaggregated
// serving with its parameters; bad names and parameters are refused with their name.
func TestConfigDecider(t *testing.T) {
	base := DefaultConfig()
	base.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm", Role: "prefill"}, {URL: "http://127.0.0.1:8001", Engine: "vllm", Role: "decode"}}
	reg := new(proxy.Registry)
	for _, name := range reg.Names("decider") {
		c := base
		c.Decider = proxy.PartSpec{Name: name}
		o, err := c.Options()
		if noError(t, err, "-decider %s", name) {
			isTrue(t, o.Decider != nil, "-decider %s", name)
		}
	}
	c := base
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.RegisterFlags(fs)
	noError(t, fs.Parse([]string{"-decider", "prefix", "-decider-params", `{"min_uncached_tokens":64,"busy_decodes":4}`}))
	o, err := c.Options()
	if noError(t, err) {
		d := o.Decider
		isTrue(t, d.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 64, Backend: &routing.BackendState{Known: routing.SignalRunning, Running: 8}}))
		isTrue(t, !d.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 63}))
	}
	for _, bad := range []proxy.PartSpec{
		{Name: "sometimes"},
		{Name: "prefix", Params: []byte(`{"min_uncached":64}`)},
		{Name: "prefix", Params: []byte(`{"min_uncached_tokens":-1}`)},
		{Name: "always", Params: []byte(`{"x":1}`)},
		{Params: []byte(`{"min_uncached_tokens":64}`)},
	} {
		c := base
		c.Decider = bad
		_, err := c.Options()
		errorIs(t, err, proxy.ErrInvalidOptions, "decider %+v", bad)
	}
}

// A backend's name (name= in the syntax, "name" in JSON) reaches proxy.Backend.Name; a name
// that is not one, or one given twice, is refused. -metrics-listen moves /metrics off the
// API's port (proxy.Options.MetricsElsewhere); its token file needs it.
func TestBackendNamesAndMetricsListen(t *testing.T) {
	b, err := ParseBackend("http://10.0.0.7:8000,name=qwen-a,engine=vllm")
	noError(t, err)
	equal(t, BackendSpec{URL: "http://10.0.0.7:8000", Name: "qwen-a", Engine: "vllm"}, b)
	file := filepath.Join(t.TempDir(), "gateway.json")
	noError(t, os.WriteFile(file, []byte(`{"backends":[{"url":"http://10.0.0.8:8000","name":"qwen-b"}],"metrics_listen":":9090","metrics_token_file":"/etc/tokens"}`), 0o600))
	c := DefaultConfig()
	noError(t, c.LoadFile(file))
	c.Backends = append(c.Backends, b)
	o, err := c.Options()
	if noError(t, err) && lenIs(t, o.Backends, 2) {
		equal(t, "qwen-b", o.Backends[0].Name)
		equal(t, "qwen-a", o.Backends[1].Name)
		equal(t, true, o.MetricsElsewhere)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"an address as a name", func(c *Config) { c.Backends[0].Name = "10.0.0.8:8000" }},
		{"a name twice", func(c *Config) { c.Backends[1].Name = c.Backends[0].Name }},
		{"a token file without a listener", func(c *Config) { c.MetricsListen = "" }},
	} {
		bad := c
		bad.Backends = slices.Clone(c.Backends)
		tc.edit(&bad)
		_, err := bad.Options()
		errorIs(t, err, proxy.ErrInvalidOptions, tc.name)
	}
}
