package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/saturation"
	"github.com/usher-llm/usher/routing/session"
)

// Policy names an admission policy and builds a fresh instance of it for each run (policies
// keep per-flow state and serve one queue).
type Policy struct {
	Name string
	New  func() flowcontrol.Policy
	// forWorkload, if set, builds the policy in the simulator instead of New, from the
	// workload it will serve (the Gittins policies take their idle limit from its think
	// times); New stays the build without one.
	forWorkload func(w *Workload) flowcontrol.Policy
}

// Router names a routing configuration and builds a fresh routing.Profile for each run
// (session tables, round-robin counters and sticky filters keep state).
type Router struct {
	Name string
	New  func() routing.Profile
	// Events says the router reads an index fed by the engines' KV events (exact mode), as the
	// system it stands for does (Dynamo, llm-d's precise prefix scorer); otherwise its index is
	// approximate, fed only by the router itself (routing.Profile.Learn). Config.Index can
	// override it for every router of a run.
	Events bool
	// NewReplica, if set, builds the same profile as New with its session scorers' tables
	// configured by opts, for gateway replicas that share session placements
	// (Config.Replicas): the simulator passes the Seed every replica shares and a Feed. Nil:
	// every replica builds New, and session tables, if the profile has any, are not shared.
	NewReplica func(opts session.AffinityOptions) routing.Profile
}

// FCFSPolicy is fairness.FCFS: the oldest request first, across all flows.
func FCFSPolicy() Policy {
	return Policy{Name: "fcfs", New: func() flowcontrol.Policy { return fairness.FCFS() }}
}

// UsherRouter is profiles.Usher, usher's default router as the routing package ships it:
//
//	HealthFilter → 1.5·SessionAware(Overload 2) + 2·TokenLoad(131,072) + 1·DynamoCost
//	               + 0.5·KVUtilization → max-score
//
// learning at pick (predict-on-route). It is the router the goal check holds against the peers.
func UsherRouter() Router {
	return Router{
		Name: "usher",
		New:  func() routing.Profile { return profiles.Usher(profiles.UsherOptions{}) },
		NewReplica: func(o session.AffinityOptions) routing.Profile {
			return profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: o}})
		},
	}
}

// Routers returns the routers of the comparison matrix, peers first and usher's last. Each is
// a routing package profile, used as is:
//
//	round-robin     profiles.RoundRobin
//	least-request   profiles.LeastRequest
//	llm-d           profiles.LLMDDefault (2·queue + 2·kv-utilisation + 3·prefix)
//	llm-d-precise   profiles.LLMDPrecise: the same blend over an index fed by KV events
//	llm-d-sticky    profiles.LLMDSticky, prefill-bound (sticky until saturated, token load)
//	sglang          profiles.SGLang (cache-aware with its balance thresholds)
//	dynamo          profiles.Dynamo (overlap cost, argmin), over KV events and predict-on-route
//	aibrix          profiles.AIBrix (prefix match behind a load gate)
//	session-aware   session.NewAware alone, max-score: placement by session history
//	usher           profiles.Usher, as shipped (UsherRouter)
//	usher-latency   latency.NewScorer alone, max-score (LatencyRouter)
//	usher+latency   profiles.Usher plus PredictedLatency (UsherLatencyRouter)
func Routers() []Router {
	var rs []Router
	for _, name := range []string{"round-robin", "least-request", "llm-d", "llm-d-precise", "llm-d-sticky", "sglang", "dynamo", "aibrix"} {
		rs = append(rs, Router{
			Name:   name,
			New:    func() routing.Profile { return mustProfile(builtin.Profile(name, builtin.ProfileOptions{})) },
			Events: name == "llm-d-precise" || name == "dynamo",
		})
	}
	return append(rs, sessionAwareRouter(), UsherRouter(), LatencyRouter(), UsherLatencyRouter(UsherLatencyWeight))
}

// UsherLatencyWeight is the weight of PredictedLatency in usher+latency, against profiles.Usher's
// total of 5, chosen by measurement (README.md, "Predicted latency" and "SLO attainment"):
// 1 and 2 tie on latency without targets, and 2 meets more targets.
const UsherLatencyWeight = 2

// LatencyRouter is "usher-latency": latency.NewScorer alone behind the health filter,
// max-score, learning at pick; every run builds a fresh latency model (a LinearLatency with its
// defaults), which the router learns from every streamed completion.
func LatencyRouter() Router {
	build := func() routing.Profile {
		return routing.Profile{
			Name:    "usher-latency",
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: newPredictedLatency(), Weight: 1}},
			Picker:  pick.MaxScore(),
		}
	}
	return Router{Name: "usher-latency", New: build}
}

// UsherLatencyRouter is "usher+latency": profiles.Usher, as shipped, with a PredictedLatency
// term of the given weight (a fresh latency model per run). A weight other than
// UsherLatencyWeight is named after it ("usher+latency3").
func UsherLatencyRouter(weight float64) Router {
	name := "usher+latency"
	if weight != UsherLatencyWeight {
		name += strconv.FormatFloat(weight, 'f', -1, 64)
	}
	build := func(o session.AffinityOptions) routing.Profile {
		p := profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: o}})
		p.Name = name
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: newPredictedLatency(), Weight: weight})
		return p
	}
	return Router{Name: name, New: func() routing.Profile { return build(session.AffinityOptions{}) }, NewReplica: build}
}

// usherTreesRouter is "usher+trees": usher+latency with the PredictedLatency term over a fresh
// boosted-tree model (newTreeLatency) per run, so that the two models' prediction errors can be
// compared on the same workloads.
func usherTreesRouter() Router {
	const name = "usher+trees"
	build := func(o session.AffinityOptions) routing.Profile {
		p := profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: o}})
		p.Name = name
		sc, err := latency.NewScorer(latency.ScorerOptions{Model: newTreeLatency(treeOptions{})})
		if err != nil {
			panic(err) // the options are the defaults
		}
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: sc, Weight: UsherLatencyWeight})
		return p
	}
	return Router{Name: name, New: func() routing.Profile { return build(session.AffinityOptions{}) }, NewReplica: build}
}

// newPredictedLatency is latency.NewScorer with its defaults, over a fresh model.
func newPredictedLatency() routing.Scorer {
	sc, err := latency.NewScorer(latency.ScorerOptions{})
	if err != nil {
		panic("bench: " + err.Error()) // the zero options are valid
	}
	return sc
}

// mustProfile unwraps ProfileByName for the names fixed in this file; an error is a bug here.
func mustProfile(p routing.Profile, err error) routing.Profile {
	if err != nil {
		panic("bench: " + err.Error())
	}
	return p
}

// sessionAwareRouter is session.NewAware alone, max-score.
func sessionAwareRouter() Router {
	build := func(o session.AffinityOptions) routing.Profile {
		return routing.Profile{
			Name:    "session-aware",
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: mustPart(session.NewAware(session.AwareOptions{AffinityOptions: o})), Weight: 1}},
			Picker:  pick.MaxScore(),
		}
	}
	return Router{Name: "session-aware", New: func() routing.Profile { return build(session.AffinityOptions{}) }, NewReplica: build}
}

// Policies returns the admission policies of the comparison matrix: FCFS, then those of the
// fairness package — las, las-reference, turn-priority, vtc, and bounded-wait around
// turn-priority (BoundedWaitBound, BoundedWaitHeadroom). Flows are sessions; a request without
// a session is a flow of its own.
func Policies() []Policy {
	return append([]Policy{FCFSPolicy()}, fairnessPolicies()...)
}

// SelectPolicies returns the policies named in the comma-separated list ("all" or "" for
// every one of Policies, "frontier" for FrontierPolicies), in the list's order; the frontier's
// policies and SLOPolicy ("slo") can be named too.
func SelectPolicies(list string) ([]Policy, error) {
	if list == "frontier" {
		return FrontierPolicies(), nil
	}
	all := append(Policies(), FrontierPolicies()...)
	all = append(all, SLOPolicy())
	all = append(all, gittinsVariants()...)
	if list == "" || list == "all" {
		all = Policies()
	}
	return selectNamed(list, all, func(p Policy) string { return p.Name })
}

// usherVariant is a composition of usher's router from package routing's parts: SessionAware
// (options sa, weight session), TokenLoad (cap, weight tokens), KVUtilization (weight kv),
// and, when set, PrefillLoad (cap, weight prefill), DynamoCost (weight dynamo), the
// saturation filter, and learning at the first token.
type usherVariant struct {
	name                   string
	sa                     session.AwareOptions
	session, tokens, kv    float64
	tokenCap               int
	prefill, dynamo        float64
	dyn                    profiles.DynamoCostOptions
	saturation, firstToken bool
}

func (v usherVariant) router() Router {
	build := func(o session.AffinityOptions) routing.Profile {
		sa := v.sa
		sa.AffinityOptions = o
		p := routing.Profile{
			Name:    v.name,
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{
				{Scorer: mustPart(session.NewAware(sa)), Weight: v.session},
				{Scorer: load.TokenBacklog(v.tokenCap), Weight: v.tokens},
				{Scorer: load.KV(), Weight: v.kv},
			},
			Picker: pick.MaxScore(),
		}
		if v.prefill > 0 {
			p.Scorers = append(p.Scorers, routing.Weighted{Scorer: load.Prefill(v.tokenCap), Weight: v.prefill})
		}
		if v.dynamo > 0 {
			p.Scorers = append(p.Scorers, routing.Weighted{Scorer: mustPart(profiles.NewDynamoCost(v.dyn)), Weight: v.dynamo})
		}
		if v.saturation {
			f, err := saturation.NewFilter(saturation.FilterOptions{})
			if err != nil {
				panic(err) // zero options are valid
			}
			p.Filters = append(p.Filters, f)
		}
		if v.firstToken {
			p.Learn = routing.LearnOnFirstToken
		}
		return p
	}
	return Router{Name: v.name, New: func() routing.Profile { return build(v.sa.AffinityOptions) }, NewReplica: build}
}

// usherShipped is profiles.Usher spelled as a variant, the base the variants change one thing
// of; TestUsherShippedVariant keeps the two equal.
func usherShipped() usherVariant {
	return usherVariant{name: "usher", sa: session.AwareOptions{Overload: 2}, session: 1.5, tokens: 2, dynamo: 1,
		dyn: profiles.DynamoCostOptions{AbstainWhenQuiet: true}, kv: 0.5, tokenCap: profiles.UsherLoadCap}
}

// UsherVariants returns the compositions of usher's router tried while choosing profiles.Usher
// (README.md, "Choosing the default"), selectable by name but not part of "all":
//
//	usher-was-default  the previous profiles.Usher: 4·SA(o2) + 1·PrefillLoad + 0.5·TokenLoad(65,536)
//	                   + 1·KV, learning at the first token
//	usher-was-best     the bench's previous best: 1·SA(o1.5) + 2·TokenLoad(131,072) + 0.5·KV
//	usher-first-token  profiles.Usher learning at the first token instead of at pick
//	usher-no-dynamo    profiles.Usher without its DynamoCost term
//	usher-dynamo2      profiles.Usher with 2·DynamoCost in place of TokenLoad
//	usher-p1           profiles.Usher scoring prefix matches for first turns too (PrefixFirstTurns)
//	usher-w3           profiles.Usher with SessionAware at weight 3
//	usher-cap64k       profiles.Usher with a 65,536-token cap
//	usher-sat          profiles.Usher behind the SaturationFilter
//	usher-balance-first  profiles.Usher placing every turn without a home for balance
//	                   (BalanceFirstTurns), as it did before forks were homed
//	usher-balance-when-quiet  profiles.Usher leaving other candidates half their balance while
//	                   no engine queues, placing a partly cached first turn for balance
//	                   (BalanceWhenQuiet), and DynamoCost scoring a quiet fleet too, as it did
//	                   before the quiet rule
//	usher-dynamo-always  profiles.Usher with DynamoCost scoring a quiet, settled fleet too (no
//	                   AbstainWhenQuiet), as it did before it abstained
//	usher+latency1     usher+latency with PredictedLatency at weight 1 (UsherLatencyRouter)
//	usher+latency3     usher+latency with PredictedLatency at weight 3
//	usher+trees        usher+latency over bench's boosted-tree model (latencytrees.go)
//	                   instead of latency.Linear: the stronger model, for its error
//
// The first two place turns without a home for balance, and keep balance while the fleet is
// quiet, as they did when they were chosen.
func UsherVariants() []Router {
	o15 := session.AwareOptions{Overload: 1.5, BalanceFirstTurns: true, BalanceWhenQuiet: true}
	o2 := session.AwareOptions{Overload: 2, BalanceFirstTurns: true, BalanceWhenQuiet: true}
	p2 := session.AwareOptions{Overload: 2, PrefixFirstTurns: true}
	shipped := usherShipped()
	with := func(name string, f func(*usherVariant)) Router {
		v := shipped
		v.name = name
		f(&v)
		return v.router()
	}
	return []Router{
		usherVariant{name: "usher-was-default", sa: o2, session: 4, tokens: 0.5, kv: 1, tokenCap: 1 << 16, prefill: 1, firstToken: true}.router(),
		usherVariant{name: "usher-was-best", sa: o15, session: 1, tokens: 2, kv: 0.5, tokenCap: 1 << 17}.router(),
		with("usher-first-token", func(v *usherVariant) { v.firstToken = true }),
		with("usher-no-dynamo", func(v *usherVariant) { v.dynamo = 0 }),
		with("usher-dynamo2", func(v *usherVariant) { v.dynamo, v.tokens = 2, 0 }),
		with("usher-p1", func(v *usherVariant) { v.sa = p2 }),
		with("usher-w3", func(v *usherVariant) { v.session = 3 }),
		with("usher-cap64k", func(v *usherVariant) { v.tokenCap = 1 << 16 }),
		with("usher-sat", func(v *usherVariant) { v.saturation = true }),
		with("usher-balance-first", func(v *usherVariant) { v.sa.BalanceFirstTurns = true }),
		with("usher-balance-when-quiet", func(v *usherVariant) { v.sa.BalanceWhenQuiet, v.dyn = true, profiles.DynamoCostOptions{} }),
		with("usher-dynamo-always", func(v *usherVariant) { v.dyn = profiles.DynamoCostOptions{} }),
		UsherLatencyRouter(1),
		UsherLatencyRouter(3),
		usherTreesRouter(),
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

// mustPart unwraps a routing part's constructor for options fixed in this file; an error is a
// bug here.
func mustPart[T any](v T, err error) T {
	if err != nil {
		panic("bench: " + err.Error())
	}
	return v
}
