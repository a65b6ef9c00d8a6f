package bench

import (
	"fmt"
	"strings"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/routing"
)

// Policy names an admission policy and builds a fresh instance of it for each run (policies
// keep per-flow state and serve one queue).
type Policy struct {
	Name string
	New  func() flowcontrol.Policy
}

// Router names a routing configuration and builds a fresh routing.Profile for each run
// (session tables, round-robin counters and sticky filters keep state).
type Router struct {
	Name string
	New  func() routing.Profile
}

// FCFSPolicy is flowcontrol.FCFS: the oldest request first, across all flows.
func FCFSPolicy() Policy {
	return Policy{Name: "fcfs", New: func() flowcontrol.Policy { return flowcontrol.FCFS{} }}
}

// UsherRouter is routing.Usher: session-aware placement blended with token load and KV
// utilisation.
func UsherRouter() Router {
	return Router{Name: "usher", New: func() routing.Profile { return routing.Usher(routing.UsherOptions{}) }}
}

// Routers returns the routers of the comparison matrix, peers first and usher's last. Each is
// a routing package profile, used as is:
//
//	round-robin     routing.RoundRobinProfile
//	least-request   routing.LeastRequest
//	llm-d           routing.LLMDDefault (2·queue + 2·kv-utilisation + 3·prefix)
//	llm-d-sticky    routing.LLMDSticky, prefill-bound (sticky until saturated, token load)
//	sglang          routing.SGLang (cache-aware with its balance thresholds)
//	dynamo          routing.Dynamo (overlap cost, argmin)
//	aibrix          routing.AIBrix (prefix match behind a load gate)
//	session-aware   routing.NewSessionAware alone, max-score: placement by session history
//	usher           routing.Usher
func Routers() []Router {
	return []Router{
		{"round-robin", routing.RoundRobinProfile},
		{"least-request", routing.LeastRequest},
		{"llm-d", routing.LLMDDefault},
		{"llm-d-sticky", func() routing.Profile { return routing.LLMDSticky(routing.LLMDStickyOptions{}) }},
		{"sglang", func() routing.Profile { return routing.SGLang(routing.SGLangOptions{}) }},
		{"dynamo", func() routing.Profile { return routing.Dynamo(routing.DynamoOptions{}) }},
		{"aibrix", routing.AIBrix},
		{"session-aware", func() routing.Profile {
			return routing.Profile{
				Name:    "session-aware",
				Filters: []routing.Filter{routing.NewHealthFilter()},
				Scorers: []routing.Weighted{{Scorer: routing.NewSessionAware(routing.SessionAwareOptions{}), Weight: 1}},
				Picker:  routing.MaxScore(),
			}
		}},
		UsherRouter(),
	}
}

// Policies returns the admission policies of the comparison matrix: FCFS, then those of the
// fairness package (see policies.go).
func Policies() []Policy {
	return append([]Policy{FCFSPolicy()}, fairnessPolicies()...)
}

// SelectPolicies returns the policies named in the comma-separated list ("all" or "" for
// every one), in the list's order.
func SelectPolicies(list string) ([]Policy, error) {
	all := Policies()
	return selectNamed(list, all, func(p Policy) string { return p.Name })
}

// SelectRouters returns the routers named in the comma-separated list ("all" or "" for every
// one), in the list's order.
func SelectRouters(list string) ([]Router, error) {
	all := Routers()
	return selectNamed(list, all, func(r Router) string { return r.Name })
}

func selectNamed[T any](list string, all []T, name func(T) string) ([]T, error) {
	if list == "" || list == "all" {
		return all, nil
	}
	var out []T
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, x := range all {
			if name(x) == n {
				out = append(out, x)
				found = true
				break
			}
		}
		if !found {
			names := make([]string, len(all))
			for i, x := range all {
				names[i] = name(x)
			}
			return nil, fmt.Errorf("%w: unknown name %q (have %s)", ErrInvalidConfig, n, strings.Join(names, ", "))
		}
	}
	return out, nil
}
