package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

// evenFirst is a user's own scorer: it prefers backends whose id is even.
type evenFirst struct{ bonus float64 }

func (s evenFirst) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	for i, c := range cands {
		if c.ID%2 == 0 {
			dst[i] = s.bonus
		}
	}
}

func newRegistry(t *testing.T) *proxy.Registry {
	t.Helper()
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
	return reg
}

func TestRegistryProfiles(t *testing.T) {
	reg := newRegistry(t)
	base, err := reg.Profile(proxy.ProfileSpec{Extends: "usher"}, session.AffinityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		json    string
		filters int
		scorers int
		weights []float64 // of the scorers past the base's
		err     string    // a substring of the error, "" for none
	}{
		{`"usher"`, len(base.Filters), len(base.Scorers), nil, ""},
		{`{"extends":"usher","scorers":[{"name":"even-first","weight":0.5,"params":{"bonus":2}}]}`,
			len(base.Filters), len(base.Scorers) + 1, []float64{0.5}, ""},
		{`{"filters":["health"],"scorers":[{"name":"token-load","weight":2,"params":{"cap_tokens":131072}},"kv-utilization"],"picker":{"name":"softmax","params":{"temperature":0.5}}}`,
			1, 2, []float64{2, 1}, ""},
		{`{"extends":"usher","scorers":[{"name":"even-first","params":{"bonsu":2}}]}`, 0, 0, nil, `unknown field "bonsu"`},
		{`{"extends":"usher","scorers":["no-such-scorer"]}`, 0, 0, nil, `unknown scorer "no-such-scorer" (have `},
		{`{"extends":"no-such-profile"}`, 0, 0, nil, `unknown profile "no-such-profile"`},
		{`{"scorers":[{"name":"token-load","params":{"cap":1}}]}`, 0, 0, nil, `unknown key "cap" (want "cap_tokens")`},
		{`{"scorers":[{"name":"kv-utilization","weight":-1}]}`, 0, 0, nil, `weight -1`},
		{`{"filters":[{"name":"health","weight":1}]}`, 0, 0, nil, `filter "health" has no weight`},
		{`{"learn":"sometimes"}`, 0, 0, nil, `learn "sometimes"`},
	}
	for _, tt := range tests {
		var spec proxy.ProfileSpec
		if err := json.Unmarshal([]byte(tt.json), &spec); err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		p, err := reg.Profile(spec, session.AffinityOptions{})
		if tt.err != "" {
			if !errors.Is(err, proxy.ErrInvalidOptions) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want ErrInvalidOptions with %q", tt.json, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.json, err)
			continue
		}
		if len(p.Filters) != tt.filters || len(p.Scorers) != tt.scorers {
			t.Errorf("%s: %d filters, %d scorers; want %d, %d", tt.json, len(p.Filters), len(p.Scorers), tt.filters, tt.scorers)
			continue
		}
		for i, w := range tt.weights {
			if got := p.Scorers[len(p.Scorers)-len(tt.weights)+i].Weight; got != w {
				t.Errorf("%s: scorer %d weight %v, want %v", tt.json, i, got, w)
			}
		}
		if _, err := routing.New(routing.Options{Profile: p}); err != nil {
			t.Errorf("%s: routing.New: %v", tt.json, err)
		}
	}
	// A spec's unknown key is an error when the configuration is decoded.
	var spec proxy.ProfileSpec
	if err := json.Unmarshal([]byte(`{"extend":"usher"}`), &spec); err == nil || !strings.Contains(err.Error(), `unknown field "extend"`) {
		t.Errorf("unknown key in a profile: %v", err)
	}
}

func TestRegistryNames(t *testing.T) {
	reg := newRegistry(t)
	if err := proxy.Register(reg, "even-first", func(proxy.Params) (routing.Scorer, error) { return nil, nil }); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("a second even-first: %v, want ErrInvalidOptions", err)
	}
	for _, bad := range []string{"", "Even", "even first", "even_first"} {
		if err := proxy.Register(reg, bad, func(proxy.Params) (routing.Scorer, error) { return nil, nil }); !errors.Is(err, proxy.ErrInvalidOptions) {
			t.Errorf("name %q: %v, want ErrInvalidOptions", bad, err)
		}
	}
	if got := strings.Join(reg.Names("picker"), ","); got != "max-score,power-of-two,round-robin,softmax,weighted-random" {
		t.Errorf("pickers: %s", got)
	}
	if _, err := proxy.Build[flowcontrol.Policy](reg, proxy.PartSpec{Name: "bounded-wait", Params: json.RawMessage(`{"bounded_wait":"5s"}`)}); err != nil {
		t.Errorf("bounded-wait: %v", err)
	}
	if _, err := proxy.Build[flowcontrol.Policy](reg, proxy.PartSpec{Name: "vtc", Params: json.RawMessage(`{"weight":2}`)}); err == nil {
		t.Error("vtc with an unknown parameter: no error")
	}
	if err := proxy.Register(reg, "number", func(proxy.Params) (int, error) { return 1, nil }); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("Register of an int: %v, want ErrInvalidOptions", err)
	}
	if _, err := proxy.Build[int](reg, proxy.PartSpec{Name: "number"}); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("Build of an int: %v, want ErrInvalidOptions", err)
	}
	if sc, err := proxy.Build[routing.Scorer](reg, proxy.PartSpec{Name: "even-first", Weight: 2}); err != nil || sc == nil {
		t.Errorf("Build of a scorer: %v, %v", sc, err)
	}
	if _, err := proxy.Build[routing.Picker](reg, proxy.PartSpec{Name: "max-score", Weight: 2}); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("a picker with a weight: %v, want ErrInvalidOptions", err)
	}
}

// countingScorer counts the candidates it scores.
type countingScorer struct{ n *atomic.Int64 }

func (c countingScorer) Score(_ *routing.Request, cands []routing.Candidate, _ []float64) {
	c.n.Add(int64(len(cands)))
}

// Extending the default router is one assignment: Options.Profile with a scorer of one's own;
// the Handler still adds passive health and builds it over its index.
func TestOptionsProfile(t *testing.T) {
	fleet := startFleet(t, 2)
	var n atomic.Int64
	opts := testOptions(backendsOf(fleet))
	base := profiles.Usher(profiles.UsherOptions{})
	opts.Profile = base.With(routing.Weighted{Scorer: countingScorer{&n}, Weight: 1})
	if len(base.Scorers)+1 != len(opts.Profile.Scorers) {
		t.Fatalf("With changed its receiver or dropped a scorer: %d, %d", len(base.Scorers), len(opts.Profile.Scorers))
	}
	h, url := startHandler(t, opts)
	if resp, e := post(t, url+"/v1/chat/completions", `{"model":"usher/demo","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
	if n.Load() == 0 {
		t.Error("the scorer added to the default profile was never asked")
	}
	if outlier.Of(h.Router()) == nil {
		t.Error("the router built from Options.Profile has no passive health")
	}
}

// Backends may list their models (here the same ones: one pool; TestModelPools has two).
func TestBackendModels(t *testing.T) {
	fleet := startFleet(t, 2)
	urls := fleet.URLs()
	opts := testOptions([]proxy.Backend{{URL: urls[0], Models: []string{"usher/demo", "other"}}, {URL: urls[1], Models: []string{"other", "usher/demo"}}})
	_, base := startHandler(t, opts)
	if resp, e := post(t, base+"/v1/chat/completions", `{"model":"unlisted","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 404 || e.Code != "model_not_found" {
		t.Errorf("a model no backend lists: %d %+v", resp.StatusCode, e)
	}
	if resp, e := post(t, base+"/v1/chat/completions", `{"model":"usher/demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
		t.Errorf("a listed model: %d %+v", resp.StatusCode, e)
	}
	for what, bs := range map[string][]proxy.Backend{
		"one backend listing models, another none": {{URL: urls[0], Models: []string{"a"}}, {URL: urls[1]}},
		"adapters without a base model":            {{URL: urls[0], Adapters: []string{"lora"}}},
		"an empty model name":                      {{URL: urls[0], Models: []string{""}}},
	} {
		if _, err := proxy.New(testOptions(bs)); !errors.Is(err, proxy.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", what, err)
		}
	}
	o := testOptions([]proxy.Backend{{URL: urls[0], Models: []string{"a"}}})
	o.Pools = map[string]proxy.PoolLimits{"b": {}}
	if _, err := proxy.New(o); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("a pool no backend serves: %v, want ErrInvalidOptions", err)
	}
}

// secretExt is a user's extension: Prepare gives the default keyer a secret and records
// whether it was offered one.
type secretExt struct {
	secret      string
	keyerOffers []bool
}

func (e *secretExt) Prepare(d *proxy.Defaults) error {
	e.keyerOffers = append(e.keyerOffers, d.Keyer != nil)
	if d.Keyer != nil {
		d.Keyer.Secret = []byte(e.secret)
	}
	return nil
}
func (*secretExt) Attach(proxy.Core) error { return nil }
func (*secretExt) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (*secretExt) Close() error { return nil }

// prepareFunc is an extension that only looks at the defaults.
type prepareFunc func(d *proxy.Defaults)

func (f prepareFunc) Prepare(d *proxy.Defaults) error { f(d); return nil }
func (prepareFunc) Attach(proxy.Core) error           { return nil }
func (prepareFunc) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (prepareFunc) Close() error { return nil }

// TestRegistryExtensions: an extension factory is found by name with its params decoded
// strictly; unknown names, weights, factory errors and nil extensions are refused with
// ErrInvalidOptions; Prepare adjusts the default keyer's options, in order, and is offered
// none when Options has a Keyer.
func TestRegistryExtensions(t *testing.T) {
	reg := new(proxy.Registry)
	if got := reg.Names("extension"); len(got) != 0 {
		t.Errorf("built-in extensions %v, want none", got)
	}
	err := proxy.Register(reg, "secret", func(p proxy.Params) (proxy.Extension, error) {
		var o struct {
			Secret string `json:"secret"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		if o.Secret == "none" {
			return nil, nil
		}
		if len(o.Secret) < 16 {
			return nil, errors.New("short secret")
		}
		return &secretExt{secret: o.Secret}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Register(reg, "secret", func(proxy.Params) (proxy.Extension, error) { return nil, nil }); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("Register twice: err %v, want ErrInvalidOptions", err)
	}
	for _, bad := range []proxy.PartSpec{
		{Name: "nope"},
		{Name: "secret", Weight: 2, Params: json.RawMessage(`{"secret": "0123456789abcdef"}`)},
		{Name: "secret", Params: json.RawMessage(`{"secret": "short"}`)},
		{Name: "secret", Params: json.RawMessage(`{"colour": "red"}`)},
		{Name: "secret", Params: json.RawMessage(`{"secret": "none"}`)},
	} {
		if _, err := proxy.Build[proxy.Extension](reg, bad); !errors.Is(err, proxy.ErrInvalidOptions) || !strings.Contains(err.Error(), bad.Name) {
			t.Errorf("Extension(%s %s): err %v, want ErrInvalidOptions naming it", bad.Name, bad.Params, err)
		}
	}
	// Prepare runs in order over one set of defaults: the second extension sees the keyer's
	// secret the first one set.
	ext, err := proxy.Build[proxy.Extension](reg, proxy.PartSpec{Name: "secret", Params: json.RawMessage(`{"secret": "the cluster's shared secret"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var seen []byte
	h, err := proxy.New(proxy.Options{Backends: []proxy.Backend{{URL: "http://127.0.0.1:1"}},
		Extensions: []proxy.Extension{ext, prepareFunc(func(d *proxy.Defaults) { seen = d.Keyer.Secret })}})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if got := ext.(*secretExt).keyerOffers; len(got) != 1 || !got[0] {
		t.Errorf("default keyer offered to Prepare: %v, want [true]", got)
	}
	if string(seen) != "the cluster's shared secret" {
		t.Errorf("the next extension saw the keyer's secret %q, want the first one's", seen)
	}
	own := &secretExt{secret: "the cluster's shared secret"}
	keyer, _ := proxy.NewKeyer(proxy.KeyerOptions{})
	h, err = proxy.New(proxy.Options{Backends: []proxy.Backend{{URL: "http://127.0.0.1:1"}}, Keyer: keyer, Extensions: []proxy.Extension{own}})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if len(own.keyerOffers) != 1 || own.keyerOffers[0] {
		t.Errorf("Options.Keyer set: keyer offered to Prepare %v, want [false]", own.keyerOffers)
	}
}
