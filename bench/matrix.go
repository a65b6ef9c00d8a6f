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

// UsherRouter is usher's best routing configuration found on the Mooncake conversation trace
// (see README.md, "Choosing usher's best"), built from package routing's parts:
//
//	HealthFilter → 1·SessionAware(Overload 1.5) + 2·TokenLoad(131,072) + 0.5·KVUtilization → max-score
//
// Session-aware placement keeps a later turn on the server that holds its history and places
// first turns for balance; the token-load term, with a cap of 131,072 tokens (about 8 s of
// prefill) instead of llm-d's 4,194,304, makes the prefill work already sent to a server count
// at the scale where it decides TTFT, so a session leaves a home whose prefill backlog exceeds
// the others' by about 33k tokens (2 s) more than its balance advantage.
func UsherRouter() Router {
	return usherVariant("usher", 1.5, 1, 2, 0.5, 131072)
}

// UsherDefaultRouter is routing.Usher as the routing package ships it (4·SessionAware with
// Overload 2 + 1·TokenLoad(4,194,304) + 1·KVUtilization).
func UsherDefaultRouter() Router {
	return Router{Name: "usher-default", New: func() routing.Profile { return routing.Usher(routing.UsherOptions{}) }}
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
//	usher-default   routing.Usher, as shipped
//	usher           usher's best (UsherRouter)
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
		UsherDefaultRouter(),
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

// usherVariant is usher's routing profile with the session-aware scorer's overload factor set
// and the scorers weighted as given, all from package routing.
func usherVariant(name string, overload, session, tokens, kv float64, tokenCap int) Router {
	return Router{Name: name, New: func() routing.Profile {
		return routing.Profile{
			Name:    name,
			Filters: []routing.Filter{routing.NewHealthFilter()},
			Scorers: []routing.Weighted{
				{Scorer: routing.NewSessionAware(routing.SessionAwareOptions{Overload: overload}), Weight: session},
				{Scorer: routing.TokenLoad(tokenCap), Weight: tokens},
				{Scorer: routing.KVUtilization(), Weight: kv},
			},
			Picker: routing.MaxScore(),
		}
	}}
}

// UsherVariants returns the variations of usher's router tried while choosing UsherRouter
// (README.md, "Choosing usher's best"). The comparison can select them by name; they are not
// part of "all". Names give the SessionAware overload factor (o), and the weights of
// SessionAware, TokenLoad and KVUtilization with the token-load cap.
func UsherVariants() []Router {
	return []Router{
		usherVariant("usher-o1.25", 1.25, 4, 1, 1, 0),
		usherVariant("usher-o1.5", 1.5, 4, 1, 1, 0),
		usherVariant("usher-w2-o1.5", 1.5, 2, 1, 1, 0),
		usherVariant("usher-w1-o1.5", 1.5, 1, 1, 1, 0),
		usherVariant("usher-v1", 1.5, 2, 2, 1, 262144),
		usherVariant("usher-v2", 1.5, 1, 2, 0.5, 262144),
		usherVariant("usher-v3", 1.5, 2, 2, 1, 131072),
		usherVariant("usher-v5", 1.25, 1, 3, 0.5, 262144),
	}
}

// SelectRouters returns the routers named in the comma-separated list ("all" or "" for every
// one of Routers), in the list's order; usher's variants can be named too.
func SelectRouters(list string) ([]Router, error) {
	if list == "" || list == "all" {
		return Routers(), nil
	}
	all := append(Routers(), UsherVariants()...)
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
