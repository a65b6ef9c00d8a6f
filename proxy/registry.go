package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/internal/jsontime"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/lora"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/saturation"
	"github.com/usher-llm/usher/routing/session"
)

// A Registry names the parts a configuration can compose a gateway from: routing filters,
// scorers and pickers, whole routing profiles, fairness policies, and the [Extension]s that
// feed a gateway from outside (KV events, replicas). Its zero value holds usher's built-ins
// (listed below), which include no extension; a program adds its own parts with [Register],
// by explicit calls in its main (an extension's package offers a Register function that
// calls it), and hands the Registry to package gateway's Config.Registry (or uses
// [Registry.Profile] and [Build] directly). There is no global registry, so a
// program links an extension's client library (ZMQ, Redis) only if it registers it.
//
// Each part is made by a factory from its Params, the "params" object the configuration gives
// it (decoded strictly: an unknown key is an error naming the part). A factory is called once
// per use, so stateful parts (a session table, an outlier detector) are never shared by two
// routers.
//
// A Registry is not safe for concurrent mutation: fill it, then use it from any number of
// goroutines (Profile and Build only read it). It must not be copied after first use.
//
// The zero Registry holds usher's built-in parts:
//
//	filters   health, saturation, sticky
//	scorers   prefix-ratio, prefix-length, queue-depth, running-requests, active-requests,
//	          kv-utilization, load-aware, token-load, prefill-load, dynamo-cost,
//	          session-aware, session-affinity, sglang-cache-aware, adapter-affinity,
//	          predicted-latency
//	pickers   max-score, weighted-random, power-of-two, round-robin, softmax
//	profiles  usher (the default), llm-d, llm-d-precise, llm-d-sticky,
//	          sglang, dynamo, aibrix, round-robin, least-request, usher-latency
//	policies  bounded-wait (the default), fcfs, priority, round-robin, las,
//	          turn-priority, edf, vtc, slo, ...
//	deciders  prefix (the default), pool, always, never, planner (the default with KVBoth backends)
//	latency-models  linear (the default)
//
// The parameters of a part with an Options struct are that struct's fields by name
// (saturation: saturation.Options, dynamo-cost: profiles.DynamoCostOptions,
// adapter-affinity: lora.AffinityOptions, ...); of a part
// with one number, that number by its argument's name: {"cap_tokens": 131072} for token-load
// and prefill-load, {"length_tokens": 8192} for prefix-length, {"threshold": 8} for
// load-aware, {"temperature": 0.5} for softmax; of a policy, {"bounded_wait": "10s"}; of the
// prefix decider, disagg.PrefixOptions: {"min_uncached_tokens": 512, "busy_decodes": 4};
// of the pool decider, disagg.PoolAwareOptions: {"min_uncached_tokens": 512}. The
// predicted-latency scorer (latency.NewScorer) takes {"model": "linear",
// "model_params": {...}, "output_tokens": 256}: a registered latency model by name (default
// linear), that model's parameters, and the answer length assumed when a request gives none;
// linear's are latency.LinearOptions' fields by their JSON names and "decode_step" as
// a duration string: {"window": 4096, "prefill_rate": 16000, "decode_step": "20ms"}. The slo
// policy orders each request by its own TTFT target (Options.SLO; 2 s for one without).
type Registry struct {
	once           sync.Once
	addingBuiltins bool                    // while once adds the built-ins
	parts          map[kind]map[string]any // the built-ins, then the program's parts
}

// ensureBuiltins adds the built-ins to r on its first use: every method calls it, through add, Names
// or lookup.
func (r *Registry) ensureBuiltins() {
	r.once.Do(func() {
		r.addingBuiltins = true
		r.addBuiltins()
		r.addingBuiltins = false
	})
}

// kind is a sort of part a Registry names; each has its own name space.
type kind string

const (
	kindFilter  kind = "filter"
	kindScorer  kind = "scorer"
	kindPicker  kind = "picker"
	kindProfile kind = "profile"
	kindPolicy  kind = "policy"
	kindDecider kind = "decider"
	kindModel   kind = "latency-model"
	kindExt     kind = "extension"
)

// Params are one part's parameters as a configuration wrote them, and what the gateway knows
// that a part may need.
type Params struct {
	raw  json.RawMessage
	part string // "scorer \"token-load\"", for errors
	// Session holds the seams a session table shares placements by (the replica's seed and
	// feed); zero for a gateway alone. Factories of session scorers pass it on.
	Session session.AffinityOptions
}

// Decode decodes the parameters into v (a pointer to a struct, usually), strictly: a key v has
// no field for is an error naming it and the part. No parameters leave v as it is.
func (p Params) Decode(v any) error {
	if len(bytes.TrimSpace(p.raw)) == 0 || string(bytes.TrimSpace(p.raw)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(p.raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s params: %v", ErrInvalidOptions, p.part, err)
	}
	return nil
}

// addBuiltins adds usher's built-in parts (the Registry doc lists them); ensureBuiltins calls it once.
func (r *Registry) addBuiltins() {
	must := func(err error) {
		if err != nil {
			panic(err) // the built-ins' names are distinct and valid
		}
	}
	// Filters.
	must(Register(r, "health", func(Params) (routing.Filter, error) { return outlier.HealthFilter(), nil }))
	must(Register(r, "saturation", func(p Params) (routing.Filter, error) {
		var o saturation.Options // Mean, which a filter ignores, is accepted as before
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return saturation.NewFilter(saturation.FilterOptions{Queue: o.Queue, KV: o.KV})
	}))
	must(Register(r, "sticky", func(p Params) (routing.Filter, error) {
		var o session.StickyOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return session.NewSticky(o)
	}))
	// Scorers without settings, and with one number.
	for name, s := range map[string]func() routing.Scorer{
		"prefix-ratio": prefix.Ratio, "queue-depth": load.QueueDepth, "running-requests": load.Running,
		"active-requests": load.Active, "kv-utilization": load.KV,
	} {
		must(Register(r, name, func(p Params) (routing.Scorer, error) { return s(), p.Decode(&struct{}{}) }))
	}
	number := func(name, param string, make func(int) routing.Scorer) {
		must(Register(r, name, func(p Params) (routing.Scorer, error) {
			v := map[string]int{}
			if err := p.Decode(&v); err != nil {
				return nil, err
			}
			for k := range v {
				if k != param {
					return nil, fmt.Errorf("%w: %s params: unknown key %q (want %q)", ErrInvalidOptions, p.part, k, param)
				}
			}
			if v[param] < 0 {
				return nil, fmt.Errorf("%w: %s params: %s %d: want >= 0", ErrInvalidOptions, p.part, param, v[param])
			}
			return make(v[param]), nil
		}))
	}
	number("prefix-length", "length_tokens", prefix.Length)
	number("load-aware", "threshold", load.QueueThreshold)
	number("token-load", "cap_tokens", load.TokenBacklog)
	number("prefill-load", "cap_tokens", load.Prefill)
	// Scorers with Options.
	must(Register(r, "dynamo-cost", func(p Params) (routing.Scorer, error) {
		var o profiles.DynamoCostOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return profiles.NewDynamoCost(o)
	}))
	must(Register(r, "session-aware", func(p Params) (routing.Scorer, error) {
		var o session.AwareOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		o.Seed, o.Feed = p.Session.Seed, p.Session.Feed
		return session.NewAware(o)
	}))
	must(Register(r, "session-affinity", func(p Params) (routing.Scorer, error) {
		var o session.AffinityOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		o.Seed, o.Feed = p.Session.Seed, p.Session.Feed
		return session.NewAffinity(o)
	}))
	must(Register(r, "adapter-affinity", func(p Params) (routing.Scorer, error) {
		var o lora.AffinityOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return lora.NewAffinity(o)
	}))
	must(Register(r, "predicted-latency", r.predictedLatency))
	must(Register(r, "sglang-cache-aware", func(p Params) (routing.Scorer, error) {
		var o profiles.SGLangCacheAwareOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return profiles.NewSGLangCacheAware(o)
	}))
	// Pickers.
	for name, pk := range map[string]func() routing.Picker{
		"max-score": pick.MaxScore, "weighted-random": pick.WeightedRandom,
		"power-of-two": pick.PowerOfTwo, "round-robin": pick.RoundRobin,
	} {
		must(Register(r, name, func(p Params) (routing.Picker, error) { return pk(), p.Decode(&struct{}{}) }))
	}
	must(Register(r, "softmax", func(p Params) (routing.Picker, error) {
		var o struct {
			Temperature float64 `json:"temperature"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		if o.Temperature < 0 {
			return nil, fmt.Errorf("%w: %s params: temperature %v: want >= 0", ErrInvalidOptions, p.part, o.Temperature)
		}
		return pick.Softmax(o.Temperature), nil
	}))
	// Whole profiles and policies, by their packages' names.
	for _, name := range builtin.ProfileNames() {
		must(Register(r, name, func(p Params) (routing.Profile, error) {
			if err := p.Decode(&struct{}{}); err != nil {
				return routing.Profile{}, err
			}
			return builtin.Profile(name, builtin.ProfileOptions{Session: p.Session})
		}))
	}
	for _, name := range builtin.PolicyNames() {
		must(Register(r, name, func(p Params) (flowcontrol.Policy, error) {
			var o struct {
				BoundedWait jsontime.Duration `json:"bounded_wait"`
			}
			if err := p.Decode(&o); err != nil {
				return nil, err
			}
			return builtin.Policy(name, builtin.PolicyOptions{BoundedWait: time.Duration(o.BoundedWait), SLOTarget: sloTarget})
		}))
	}
	// Deciders of disaggregated serving.
	must(Register(r, "prefix", func(p Params) (disagg.Decider, error) {
		var o disagg.PrefixOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return disagg.NewPrefix(o)
	}))
	must(Register(r, "pool", func(p Params) (disagg.Decider, error) {
		var o disagg.PoolAwareOptions
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return disagg.NewPoolAware(o)
	}))
	must(Register(r, "planner", func(p Params) (disagg.Decider, error) {
		var o struct {
			disagg.PlannerOptions
			TTFT   jsontime.Duration `json:"ttft"`
			Window jsontime.Duration `json:"window"`
			Dwell  jsontime.Duration `json:"dwell"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		po := o.PlannerOptions
		po.TTFT = time.Duration(o.TTFT)
		po.Window, po.Dwell = time.Duration(o.Window), time.Duration(o.Dwell)
		return disagg.NewPlanner(po)
	}))
	for name, d := range map[string]disagg.Decider{"always": disagg.Always, "never": disagg.Never} {
		must(Register(r, name, func(p Params) (disagg.Decider, error) {
			if err := p.Decode(&struct{}{}); err != nil {
				return nil, err
			}
			return d, nil
		}))
	}
	// Latency models.
	must(Register(r, "linear", func(p Params) (latency.Model, error) {
		var o struct {
			latency.LinearOptions
			DecodeStep jsontime.Duration `json:"decode_step"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		o.LinearOptions.DecodeStep = time.Duration(o.DecodeStep)
		return latency.NewLinear(o.LinearOptions)
	}))
}

// predictedLatency is the predicted-latency scorer's factory: its model from the Registry.
func (r *Registry) predictedLatency(p Params) (routing.Scorer, error) {
	var o struct {
		Model        string          `json:"model"`
		ModelParams  json.RawMessage `json:"model_params"`
		OutputTokens int             `json:"output_tokens"`
	}
	if err := p.Decode(&o); err != nil {
		return nil, err
	}
	f, mp, err := r.lookup(kindModel, cmpOr(o.Model, "linear"))
	if err != nil {
		return nil, err
	}
	mp.raw, mp.Session = o.ModelParams, p.Session
	m, err := f.(func(Params) (latency.Model, error))(mp)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidOptions, kindModel, cmpOr(o.Model, "linear"), err)
	}
	return latency.NewScorer(latency.ScorerOptions{Model: m, OutputTokens: o.OutputTokens})
}

func (r *Registry) add(k kind, name string, f any) error {
	valid := name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
	switch {
	case !valid:
		return fmt.Errorf("%w: %s name %q: want lower-case letters, digits and '-'", ErrInvalidOptions, k, name)
	case f == nil:
		return fmt.Errorf("%w: %s %q: nil factory", ErrInvalidOptions, k, name)
	}
	if !r.addingBuiltins { // add is called by addBuiltins, inside ensureBuiltins
		r.ensureBuiltins()
	}
	if r.parts == nil {
		r.parts = make(map[kind]map[string]any)
	}
	m := r.parts[k]
	if m == nil {
		m = make(map[string]any)
		r.parts[k] = m
	}
	if _, ok := m[name]; ok {
		return fmt.Errorf("%w: %s %q is already registered", ErrInvalidOptions, k, name)
	}
	m[name] = f
	return nil
}

// Names returns the registered names of a kind ("filter", "scorer", "picker", "profile",
// "policy", "decider", "latency-model" or "extension"), sorted.
func (r *Registry) Names(k string) []string {
	r.ensureBuiltins()
	var out []string
	for name := range r.parts[kind(k)] {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// lookup finds a part's factory, or says which names there are.
func (r *Registry) lookup(k kind, name string) (any, Params, error) {
	r.ensureBuiltins()
	f, ok := r.parts[k][name]
	if !ok {
		return nil, Params{}, fmt.Errorf("%w: unknown %s %q (have %s)", ErrInvalidOptions, k, name, strings.Join(r.Names(string(k)), ", "))
	}
	return f, Params{part: fmt.Sprintf("%s %q", k, name)}, nil
}

// PartSpec names one part and its parameters. In JSON it is an object {"name": ...,
// "weight": ..., "params": {...}} (unknown keys are an error) or, without weight and params,
// just the name as a string.
type PartSpec struct {
	Name string `json:"name"`
	// Weight is a scorer's weight in the router's sum; zero means 1. Filters and pickers
	// have none.
	Weight float64 `json:"weight,omitempty"`
	// Params are the part's parameters, decoded by its factory (Params.Decode).
	Params json.RawMessage `json:"params,omitempty"`
}

// UnmarshalJSON decodes a name or a strict object.
func (s *PartSpec) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*s = PartSpec{}
		return json.Unmarshal(b, &s.Name)
	}
	type plain PartSpec
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*s = PartSpec(p)
	return nil
}

// ProfileSpec describes a routing profile as data: a registered profile to start from, and
// filters, weighted scorers and a picker to add or change. In JSON it is an object (unknown
// keys are an error) or, to take a registered profile as it is, its name as a string:
//
//	"router": "usher"
//	"router": {"extends": "usher", "scorers": [{"name": "my-scorer", "weight": 1}]}
//	"router": {"filters": ["health"], "scorers": [{"name": "token-load", "weight": 2,
//	           "params": {"cap_tokens": 131072}}, "kv-utilization"], "picker": "max-score"}
type ProfileSpec struct {
	// Extends names a registered profile whose filters, scorers, picker and learning the
	// profile starts from. Empty: an empty profile (no filters or scorers, picker max-score).
	Extends string `json:"extends,omitempty"`
	// Filters run after the base profile's, in order.
	Filters []PartSpec `json:"filters,omitempty"`
	// Scorers are added to the base profile's.
	Scorers []PartSpec `json:"scorers,omitempty"`
	// Picker, if set, replaces the base profile's picker.
	Picker *PartSpec `json:"picker,omitempty"`
	// Learn, if set, is when the router learns a pick's prefix: on-pick, on-first-token or
	// from-events (routing.Learn).
	Learn string `json:"learn,omitempty"`
	// Name labels the profile in reports; empty: Extends.
	Name string `json:"name,omitempty"`
}

// UnmarshalJSON decodes a profile's name or a strict object.
func (s *ProfileSpec) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*s = ProfileSpec{}
		return json.Unmarshal(b, &s.Extends)
	}
	type plain ProfileSpec
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*s = ProfileSpec(p)
	return nil
}

// Profile builds the profile spec describes, with session seams session (zero for a gateway
// alone). Each call builds new parts. Errors wrap ErrInvalidOptions and name the part.
func (r *Registry) Profile(spec ProfileSpec, session session.AffinityOptions) (routing.Profile, error) {
	var p routing.Profile
	if spec.Extends != "" {
		f, params, err := r.lookup(kindProfile, spec.Extends)
		if err != nil {
			return p, err
		}
		params.Session = session
		if p, err = f.(func(Params) (routing.Profile, error))(params); err != nil {
			return p, fmt.Errorf("%w: profile %q: %w", ErrInvalidOptions, spec.Extends, err)
		}
		p.Filters, p.Scorers = slices.Clone(p.Filters), slices.Clone(p.Scorers)
	}
	if spec.Name != "" || p.Name == "" {
		p.Name = cmpOr(spec.Name, spec.Extends, "custom")
	}
	for _, fs := range spec.Filters {
		f, params, err := r.lookup(kindFilter, fs.Name)
		if err != nil {
			return p, err
		}
		if fs.Weight != 0 {
			return p, fmt.Errorf("%w: filter %q has no weight", ErrInvalidOptions, fs.Name)
		}
		params.raw, params.Session = fs.Params, session
		flt, err := f.(func(Params) (routing.Filter, error))(params)
		if err != nil {
			return p, fmt.Errorf("%w: filter %q: %w", ErrInvalidOptions, fs.Name, err)
		}
		p.Filters = append(p.Filters, flt)
	}
	for _, ss := range spec.Scorers {
		f, params, err := r.lookup(kindScorer, ss.Name)
		if err != nil {
			return p, err
		}
		w := ss.Weight
		switch {
		case w == 0:
			w = 1
		case w < 0 || w != w:
			return p, fmt.Errorf("%w: scorer %q: weight %v: want > 0", ErrInvalidOptions, ss.Name, ss.Weight)
		}
		params.raw, params.Session = ss.Params, session
		sc, err := f.(func(Params) (routing.Scorer, error))(params)
		if err != nil {
			return p, fmt.Errorf("%w: scorer %q: %w", ErrInvalidOptions, ss.Name, err)
		}
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: sc, Weight: w})
	}
	if ps := spec.Picker; ps != nil {
		f, params, err := r.lookup(kindPicker, ps.Name)
		if err != nil {
			return p, err
		}
		if ps.Weight != 0 {
			return p, fmt.Errorf("%w: picker %q has no weight", ErrInvalidOptions, ps.Name)
		}
		params.raw, params.Session = ps.Params, session
		if p.Picker, err = f.(func(Params) (routing.Picker, error))(params); err != nil {
			return p, fmt.Errorf("%w: picker %q: %w", ErrInvalidOptions, ps.Name, err)
		}
	}
	if spec.Learn != "" {
		i := slices.IndexFunc([]routing.Learn{routing.LearnOnPick, routing.LearnOnFirstToken, routing.LearnFromEvents},
			func(l routing.Learn) bool { return l.String() == spec.Learn })
		if i < 0 {
			return p, fmt.Errorf("%w: learn %q: want on-pick, on-first-token or from-events", ErrInvalidOptions, spec.Learn)
		}
		p.Learn = routing.Learn(i)
	}
	return p, nil
}

// Register names a factory of parts of type T: a routing.Filter, routing.Scorer,
// routing.Picker or routing.Profile (a whole profile, which a [ProfileSpec] can extend), a
// flowcontrol.Policy, a disagg.Decider (for [Options].Decider), a latency.Model (which
// the predicted-latency scorer's "model" parameter chooses) or an [Extension]. Each type has
// its own name space; package gateway asks for the extensions named "kv-events" and "replica"
// when its configuration needs them. A factory validates its [Params] and returns an error
// (which the Registry wraps with the part's name) rather than a part it cannot build; a
// latency model's factory is called once per scorer, as a model learns the fleet of the one
// Router it serves, and an extension's connects to nothing (its Run does the network work).
//
// Names are non-empty, lower-case letters, digits and '-', and unique within their type.
// Another name, a nil factory, a name already registered or another type T is an error
// wrapping [ErrInvalidOptions].
func Register[T any](r *Registry, name string, build func(Params) (T, error)) error {
	k, err := kindOf[T]()
	if err != nil {
		return err
	}
	if build == nil {
		return fmt.Errorf("%w: %s %q: nil factory", ErrInvalidOptions, k, name)
	}
	return r.add(k, name, build)
}

// Build builds the part of type T (one of those [Register] takes) spec names, with its
// params. A routing.Profile is built as registered, without session seams (see
// [Registry.Profile]); a scorer's weight is checked but not returned; the other types take
// no weight. Each call builds a new part. Errors wrap [ErrInvalidOptions] and name the part.
func Build[T any](r *Registry, spec PartSpec) (T, error) {
	var zero T
	k, err := kindOf[T]()
	if err != nil {
		return zero, err
	}
	f, params, err := r.lookup(k, spec.Name)
	if err != nil {
		return zero, err
	}
	switch w := spec.Weight; {
	case k == kindScorer && (w < 0 || w != w):
		return zero, fmt.Errorf("%w: scorer %q: weight %v: want > 0", ErrInvalidOptions, spec.Name, w)
	case k != kindScorer && w != 0:
		return zero, fmt.Errorf("%w: %s %q has no weight", ErrInvalidOptions, k, spec.Name)
	}
	params.raw = spec.Params
	v, err := f.(func(Params) (T, error))(params)
	switch {
	case err != nil:
		return zero, fmt.Errorf("%w: %s %q: %w", ErrInvalidOptions, k, spec.Name, err)
	case k == kindExt && any(v) == nil:
		return zero, fmt.Errorf("%w: %s %q: the factory returned none", ErrInvalidOptions, k, spec.Name)
	}
	return v, nil
}

// kindOf returns the kind of part T is, or an error wrapping ErrInvalidOptions.
func kindOf[T any]() (kind, error) {
	switch any((*T)(nil)).(type) {
	case *routing.Filter:
		return kindFilter, nil
	case *routing.Scorer:
		return kindScorer, nil
	case *routing.Picker:
		return kindPicker, nil
	case *routing.Profile:
		return kindProfile, nil
	case *flowcontrol.Policy:
		return kindPolicy, nil
	case *disagg.Decider:
		return kindDecider, nil
	case *latency.Model:
		return kindModel, nil
	case *Extension:
		return kindExt, nil
	}
	return "", fmt.Errorf("%w: %v is no kind of part a Registry names", ErrInvalidOptions, reflect.TypeFor[T]())
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
