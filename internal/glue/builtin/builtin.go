// Package builtin names usher's built-in fairness policies and routing profiles: the one
// table of names behind proxy.Registry, the gateway's and the picker's flags and the bench
// simulator. The packages themselves offer constructors only.
package builtin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/refpolicy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

// PolicyOptions are the settings Policy passes to the policies that need one; every other
// setting is the policy's default.
type PolicyOptions struct {
	// BoundedWait is W for "bounded-wait" and "gittins-bounded-wait" (required there) and for
	// "gittins" (optional: zero bounds no wait); BoundedWaitHeadroom its headroom
	// and FirstTurnShare its reserved share of dispatches (both zero by default).
	BoundedWait         time.Duration
	BoundedWaitHeadroom time.Duration
	FirstTurnShare      float64
	// SLOTTFT is the time-to-first-token target of "slo". Zero: 2 s.
	SLOTTFT time.Duration
	// SLOTarget, if set, gives "slo" each request's own target (fairness.SLODeadlineOptions.Target;
	// the gateway's reads the target proxy.Handler gave the request); a request without one gets SLOTTFT.
	SLOTarget func(*flowcontrol.Request) time.Duration
}

// named is one entry of the registry.
type named struct {
	name string
	make func(PolicyOptions) (flowcontrol.Policy, error)
}

// names is the registry, in the order Names lists it.
var policies = []named{
	{"fcfs", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.FCFS(), nil }},
	{"priority", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.StrictPriority(), nil }},
	{"round-robin", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.RoundRobin(), nil }},
	{"turn-priority", func(PolicyOptions) (flowcontrol.Policy, error) {
		return fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	}},
	{"las", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.NewLAS(fairness.LASOptions{}) }},
	{"las-reference", func(PolicyOptions) (flowcontrol.Policy, error) {
		return refpolicy.LAS().(flowcontrol.Policy), nil
	}},
	{"vtc", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.NewVTC(fairness.VTCOptions{}) }},
	{"edf", func(PolicyOptions) (flowcontrol.Policy, error) { return fairness.EDF(), nil }},
	{"slo", func(o PolicyOptions) (flowcontrol.Policy, error) {
		ttft := o.SLOTTFT
		if ttft == 0 {
			ttft = 2 * time.Second
		}
		return fairness.NewSLODeadline(fairness.SLODeadlineOptions{TTFT: ttft, Target: o.SLOTarget})
	}},
	{"bounded-wait", func(o PolicyOptions) (flowcontrol.Policy, error) {
		return fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: o.BoundedWait, Headroom: o.BoundedWaitHeadroom, FirstTurnShare: o.FirstTurnShare})
	}},
	{"hierarchy", func(PolicyOptions) (flowcontrol.Policy, error) {
		return fairness.NewHierarchy(fairness.HierarchyOptions{})
	}},
	{"gittins", func(o PolicyOptions) (flowcontrol.Policy, error) {
		return fairness.NewGittins(fairness.GittinsOptions{Wait: o.BoundedWait, Headroom: o.BoundedWaitHeadroom})
	}},
	// gittins-bounded-wait is gittins whose W is required, as bounded-wait's: the name a
	// configuration that passes W only to the policies that need one (the gateway's) can give.
	{"gittins-bounded-wait", func(o PolicyOptions) (flowcontrol.Policy, error) {
		if o.BoundedWait <= 0 {
			return nil, fmt.Errorf("%w: gittins-bounded-wait needs Wait > 0", fairness.ErrInvalidOptions)
		}
		return fairness.NewGittins(fairness.GittinsOptions{Wait: o.BoundedWait, Headroom: o.BoundedWaitHeadroom})
	}},
}

// PolicyNames returns the names Policy knows, one per policy: fcfs, priority (flowcontrol's FCFS
// and StrictPriority), round-robin, turn-priority (llm-d's), las, las-reference (llm-d's lasPolicy),
// vtc, edf, slo, bounded-wait, hierarchy, gittins (its wait bounded by BoundedWait when set) and
// gittins-bounded-wait (BoundedWait required). The gateway's -policy flag and the bench
// simulator's -policies take these names. The slice is a fresh copy.
func PolicyNames() []string {
	out := make([]string, len(policies))
	for i, n := range policies {
		out[i] = n.name
	}
	return out
}

// Policy returns a new policy of the named kind with its defaults and the settings of o that
// apply to it. An unknown name, or settings the policy rejects, give an error wrapping
// fairness.ErrInvalidOptions. Safe for concurrent use; each call builds a new policy.
func Policy(name string, o PolicyOptions) (flowcontrol.Policy, error) {
	i := slices.IndexFunc(policies, func(n named) bool { return n.name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: policy %q: want one of %s", fairness.ErrInvalidOptions, name, strings.Join(PolicyNames(), ", "))
	}
	p, err := policies[i].make(o)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", name, err)
	}
	return p, nil
}

// ProfileOptions are the settings Profile passes to the profiles that take them; every
// other setting is the profile's default.
type ProfileOptions struct {
	// Session configures the session table of the profiles that keep one (usher's
	// SessionAware): its capacity and idle time, and the seams replicas share placements by.
	Session session.AffinityOptions
}

// namedProfile is one entry of the registry.
// GatewayAdapterWeight is the weight of lora.NewAffinity's term in the gateway's usher
// profile: 2, measured on the simulator's LoRA workload (bench/README.md, "LoRA adapters").
const GatewayAdapterWeight = 2

type namedProfile struct {
	name string
	make func(ProfileOptions) routing.Profile
}

// profileTable is the registry, in the order ProfileNames lists it. Each profile's Name is its
// registry name.
var profileTable = []namedProfile{
	{"usher", func(o ProfileOptions) routing.Profile {
		// The adapter term scores every backend alike for base-model requests: it changes
		// nothing until a fleet serves LoRA adapters (bench/README.md, "LoRA adapters").
		return profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: o.Session}, AdapterWeight: GatewayAdapterWeight})
	}},
	{"llm-d", func(ProfileOptions) routing.Profile { return profiles.LLMDDefault() }},
	{"llm-d-precise", func(ProfileOptions) routing.Profile { return profiles.LLMDPrecise() }},
	{"llm-d-sticky", func(ProfileOptions) routing.Profile { return profiles.LLMDSticky(profiles.LLMDStickyOptions{}) }},
	{"sglang", func(ProfileOptions) routing.Profile { return profiles.SGLang(profiles.SGLangCacheAwareOptions{}) }},
	{"dynamo", func(ProfileOptions) routing.Profile { return profiles.Dynamo(profiles.DynamoCostOptions{}) }},
	{"aibrix", func(ProfileOptions) routing.Profile { return profiles.AIBrix() }},
	{"round-robin", func(ProfileOptions) routing.Profile { return profiles.RoundRobin() }},
	{"least-request", func(ProfileOptions) routing.Profile { return profiles.LeastRequest() }},
	{"usher-latency", func(ProfileOptions) routing.Profile {
		// Routing by predicted latency alone: the prefix a backend holds counts through the
		// prefill it saves, the load through the queueing it adds (latency.NewScorer over a
		// fresh latency.NewLinear, each call its own model).
		s, err := latency.NewScorer(latency.ScorerOptions{})
		if err != nil {
			panic(err) // the defaults are valid
		}
		return routing.Profile{Name: "usher-latency", Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: s, Weight: 1}}, Picker: pick.MaxScore()}
	}},
}

// ProfileNames returns the names Profile knows, one per profile: usher (the default),
// the peers' (llm-d, llm-d-precise, llm-d-sticky, sglang, dynamo, aibrix), the baselines
// (round-robin, least-request) and usher-latency (health, then predicted latency alone:
// SLO routing for requests with targets). The gateway's -router flag and the bench simulator's
// -routers take these names. The slice is a fresh copy.
func ProfileNames() []string {
	out := make([]string, len(profileTable))
	for i, p := range profileTable {
		out[i] = p.name
	}
	return out
}

// Profile returns a new profile of the named kind with its defaults and the settings of
// o that apply to it, or an error wrapping ErrInvalidOptions for an unknown name. The
// profiles that learn from KV events (llm-d-precise, and dynamo in exact deployments) need an
// index fed by them; see Profile.Learn. Safe for concurrent use; each call builds new filters
// and scorers.
func Profile(name string, o ProfileOptions) (routing.Profile, error) {
	i := slices.IndexFunc(profileTable, func(p namedProfile) bool { return p.name == name })
	if i < 0 {
		return routing.Profile{}, fmt.Errorf("%w: router %q: want one of %s", routing.ErrInvalidOptions, name, strings.Join(ProfileNames(), ", "))
	}
	return profileTable[i].make(o), nil
}
