package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/builtin"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/saturation"
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
	// Events says the router reads an index fed by the engines' KV events (exact mode), as the
	// system it stands for does (Dynamo, llm-d's precise prefix scorer); otherwise its index is
	// approximate, fed only by the router itself (routing.Profile.Learn). Config.Index can
	// override it for every router of a run.
	Events bool
	// NewReplica, if set, builds the same profile as New with its session scorers' tables
	// configured by opts, for gateway replicas that share session placements
	// (Config.Replicas): the simulator passes the Seed every replica shares and a Feed. Nil:
	// every replica builds New, and session tables, if the profile has any, are not shared.
	NewReplica func(opts routing.SessionOptions) routing.Profile
}

// FCFSPolicy is fairness.FCFS: the oldest request first, across all flows.
func FCFSPolicy() Policy {
	return Policy{Name: "fcfs", New: func() flowcontrol.Policy { return fairness.FCFS() }}
}

// UsherRouter is routing.Usher, usher's default router as the routing package ships it:
//
//	HealthFilter → 1.5·SessionAware(Overload 2) + 2·TokenLoad(131,072) + 1·DynamoCost
//	               + 0.5·KVUtilization → max-score
//
// learning at pick (predict-on-route). It is the router the goal check holds against the peers.
func UsherRouter() Router {
	return Router{
		Name: "usher",
		New:  func() routing.Profile { return routing.Usher(routing.UsherOptions{}) },
		NewReplica: func(o routing.SessionOptions) routing.Profile {
			return routing.Usher(routing.UsherOptions{Session: routing.SessionAwareOptions{SessionOptions: o}})
		},
	}
}

// Routers returns the routers of the comparison matrix, peers first and usher's last. Each is
// a routing package profile, used as is:
//
//	round-robin     routing.RoundRobinProfile
//	least-request   routing.LeastRequest
//	llm-d           routing.LLMDDefault (2·queue + 2·kv-utilisation + 3·prefix)
//	llm-d-precise   routing.LLMDPrecise: the same blend over an index fed by KV events
//	llm-d-sticky    routing.LLMDSticky, prefill-bound (sticky until saturated, token load)
//	sglang          routing.SGLang (cache-aware with its balance thresholds)
//	dynamo          routing.Dynamo (overlap cost, argmin), over KV events and predict-on-route
//	aibrix          routing.AIBrix (prefix match behind a load gate)
//	session-aware   routing.NewSessionAware alone, max-score: placement by session history
//	usher           routing.Usher, as shipped (UsherRouter)
//	usher-latency   routing.NewPredictedLatency alone, max-score (LatencyRouter)
//	usher+latency   routing.Usher plus PredictedLatency (UsherLatencyRouter)
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

// UsherLatencyWeight is the weight of PredictedLatency in usher+latency, against routing.Usher's
// total of 5, chosen by measurement (README.md, "Predicted latency" and "SLO attainment"):
// 1 and 2 tie on latency without targets, and 2 meets more targets.
const UsherLatencyWeight = 2

// LatencyRouter is "usher-latency": routing.NewPredictedLatency alone behind the health filter,
// max-score, learning at pick; every run builds a fresh latency model (a LinearLatency with its
// defaults), which the router learns from every streamed completion.
func LatencyRouter() Router {
	build := func() routing.Profile {
		return routing.Profile{
			Name:    "usher-latency",
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: newPredictedLatency(), Weight: 1}},
			Picker:  routing.MaxScore(),
		}
	}
	return Router{Name: "usher-latency", New: build}
}

// UsherLatencyRouter is "usher+latency": routing.Usher, as shipped, with a PredictedLatency
// term of the given weight (a fresh latency model per run). A weight other than
// UsherLatencyWeight is named after it ("usher+latency3").
func UsherLatencyRouter(weight float64) Router {
	name := "usher+latency"
	if weight != UsherLatencyWeight {
		name += strconv.FormatFloat(weight, 'f', -1, 64)
	}
	build := func(o routing.SessionOptions) routing.Profile {
		p := routing.Usher(routing.UsherOptions{Session: routing.SessionAwareOptions{SessionOptions: o}})
		p.Name = name
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: newPredictedLatency(), Weight: weight})
		return p
	}
	return Router{Name: name, New: func() routing.Profile { return build(routing.SessionOptions{}) }, NewReplica: build}
}

// usherTreesRouter is "usher+trees": usher+latency with the PredictedLatency term over a fresh
// boosted-tree model (newTreeLatency) per run, so that the two models' prediction errors can be
// compared on the same workloads.
func usherTreesRouter() Router {
	const name = "usher+trees"
	build := func(o routing.SessionOptions) routing.Profile {
		p := routing.Usher(routing.UsherOptions{Session: routing.SessionAwareOptions{SessionOptions: o}})
		p.Name = name
		sc, err := routing.NewPredictedLatency(routing.PredictedLatencyOptions{Model: newTreeLatency(treeOptions{})})
		if err != nil {
			panic(err) // the options are the defaults
		}
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: sc, Weight: UsherLatencyWeight})
		return p
	}
	return Router{Name: name, New: func() routing.Profile { return build(routing.SessionOptions{}) }, NewReplica: build}
}

// newPredictedLatency is routing.NewPredictedLatency with its defaults, over a fresh model.
func newPredictedLatency() routing.Scorer {
	sc, err := routing.NewPredictedLatency(routing.PredictedLatencyOptions{})
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

// sessionAwareRouter is routing.NewSessionAware alone, max-score.
func sessionAwareRouter() Router {
	build := func(o routing.SessionOptions) routing.Profile {
		return routing.Profile{
			Name:    "session-aware",
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: routing.NewSessionAware(routing.SessionAwareOptions{SessionOptions: o}), Weight: 1}},
			Picker:  routing.MaxScore(),
		}
	}
	return Router{Name: "session-aware", New: func() routing.Profile { return build(routing.SessionOptions{}) }, NewReplica: build}
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
	sa                     routing.SessionAwareOptions
	session, tokens, kv    float64
	tokenCap               int
	prefill, dynamo        float64
	dyn                    routing.DynamoOptions
	saturation, firstToken bool
}

func (v usherVariant) router() Router {
	build := func(o routing.SessionOptions) routing.Profile {
		sa := v.sa
		sa.SessionOptions = o
		p := routing.Profile{
			Name:    v.name,
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{
				{Scorer: routing.NewSessionAware(sa), Weight: v.session},
				{Scorer: routing.TokenLoad(v.tokenCap), Weight: v.tokens},
				{Scorer: routing.KVUtilization(), Weight: v.kv},
			},
			Picker: routing.MaxScore(),
		}
		if v.prefill > 0 {
			p.Scorers = append(p.Scorers, routing.Weighted{Scorer: routing.PrefillLoad(v.tokenCap), Weight: v.prefill})
		}
		if v.dynamo > 0 {
			p.Scorers = append(p.Scorers, routing.Weighted{Scorer: routing.NewDynamoCost(v.dyn), Weight: v.dynamo})
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
	return Router{Name: v.name, New: func() routing.Profile { return build(v.sa.SessionOptions) }, NewReplica: build}
}

// usherShipped is routing.Usher spelled as a variant, the base the variants change one thing
// of; TestUsherShippedVariant keeps the two equal.
func usherShipped() usherVariant {
	return usherVariant{name: "usher", sa: routing.SessionAwareOptions{Overload: 2}, session: 1.5, tokens: 2, dynamo: 1,
		dyn: routing.DynamoOptions{AbstainWhenQuiet: true}, kv: 0.5, tokenCap: routing.UsherLoadCap}
}

// UsherVariants returns the compositions of usher's router tried while choosing routing.Usher
// (README.md, "Choosing the default"), selectable by name but not part of "all":
//
//	usher-was-default  the previous routing.Usher: 4·SA(o2) + 1·PrefillLoad + 0.5·TokenLoad(65,536)
//	                   + 1·KV, learning at the first token
//	usher-was-best     the bench's previous best: 1·SA(o1.5) + 2·TokenLoad(131,072) + 0.5·KV
//	usher-first-token  routing.Usher learning at the first token instead of at pick
//	usher-no-dynamo    routing.Usher without its DynamoCost term
//	usher-dynamo2      routing.Usher with 2·DynamoCost in place of TokenLoad
//	usher-p1           routing.Usher scoring prefix matches for first turns too (PrefixFirstTurns)
//	usher-w3           routing.Usher with SessionAware at weight 3
//	usher-cap64k       routing.Usher with a 65,536-token cap
//	usher-sat          routing.Usher behind the saturation filter
//	usher-balance-first  routing.Usher placing every turn without a home for balance
//	                   (BalanceFirstTurns), as it did before forks were homed
//	usher-balance-when-quiet  routing.Usher leaving other candidates half their balance while
//	                   no engine queues, placing a partly cached first turn for balance
//	                   (BalanceWhenQuiet), and DynamoCost scoring a quiet fleet too, as it did
//	                   before the quiet rule
//	usher-dynamo-always  routing.Usher with DynamoCost scoring a quiet, settled fleet too (no
//	                   AbstainWhenQuiet), as it did before it abstained
//	usher+latency1     usher+latency with PredictedLatency at weight 1 (UsherLatencyRouter)
//	usher+latency3     usher+latency with PredictedLatency at weight 3
//	usher+trees        usher+latency over bench's boosted-tree model (latencytrees.go)
//	                   instead of routing.LinearLatency: the stronger model, for its error
//
// The first two place turns without a home for balance, and keep balance while the fleet is
// quiet, as they did when they were chosen.
func UsherVariants() []Router {
	o15 := routing.SessionAwareOptions{Overload: 1.5, BalanceFirstTurns: true, BalanceWhenQuiet: true}
	o2 := routing.SessionAwareOptions{Overload: 2, BalanceFirstTurns: true, BalanceWhenQuiet: true}
	p2 := routing.SessionAwareOptions{Overload: 2, PrefixFirstTurns: true}
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
		with("usher-balance-when-quiet", func(v *usherVariant) { v.sa.BalanceWhenQuiet, v.dyn = true, routing.DynamoOptions{} }),
		with("usher-dynamo-always", func(v *usherVariant) { v.dyn = routing.DynamoOptions{} }),
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
