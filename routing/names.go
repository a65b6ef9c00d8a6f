package routing

import (
	"fmt"
	"slices"
	"strings"
)

// ByNameOptions are the settings ProfileByName passes to the profiles that take them; every
// other setting is the profile's default.
type ByNameOptions struct {
	// Session configures the session table of the profiles that keep one (usher's
	// SessionAware): its capacity and idle time, and the seams replicas share placements by.
	Session SessionOptions
}

// namedProfile is one entry of the registry.
type namedProfile struct {
	name string
	make func(ByNameOptions) Profile
}

// profiles is the registry, in the order ProfileNames lists it. Each profile's Name is its
// registry name.
var profiles = []namedProfile{
	{"usher", func(o ByNameOptions) Profile {
		return Usher(UsherOptions{Session: SessionAwareOptions{SessionOptions: o.Session}})
	}},
	{"llm-d", func(ByNameOptions) Profile { return LLMDDefault() }},
	{"llm-d-precise", func(ByNameOptions) Profile { return LLMDPrecise() }},
	{"llm-d-sticky", func(ByNameOptions) Profile { return LLMDSticky(LLMDStickyOptions{}) }},
	{"sglang", func(ByNameOptions) Profile { return SGLang(SGLangOptions{}) }},
	{"dynamo", func(ByNameOptions) Profile { return Dynamo(DynamoOptions{}) }},
	{"aibrix", func(ByNameOptions) Profile { return AIBrix() }},
	{"round-robin", func(ByNameOptions) Profile { return RoundRobinProfile() }},
	{"least-request", func(ByNameOptions) Profile { return LeastRequest() }},
}

// ProfileNames returns the names ProfileByName knows, one per profile: usher (the default),
// the peers' (llm-d, llm-d-precise, llm-d-sticky, sglang, dynamo, aibrix) and the baselines
// (round-robin, least-request). The gateway's -router flag and the bench simulator's
// -routers take these names. The slice is a fresh copy.
func ProfileNames() []string {
	out := make([]string, len(profiles))
	for i, p := range profiles {
		out[i] = p.name
	}
	return out
}

// ProfileByName returns a new profile of the named kind with its defaults and the settings of
// o that apply to it, or an error wrapping ErrInvalidOptions for an unknown name. The
// profiles that learn from KV events (llm-d-precise, and dynamo in exact deployments) need an
// index fed by them; see Profile.Learn. Safe for concurrent use; each call builds new filters
// and scorers.
func ProfileByName(name string, o ByNameOptions) (Profile, error) {
	i := slices.IndexFunc(profiles, func(p namedProfile) bool { return p.name == name })
	if i < 0 {
		return Profile{}, fmt.Errorf("%w: router %q: want one of %s", ErrInvalidOptions, name, strings.Join(ProfileNames(), ", "))
	}
	return profiles[i].make(o), nil
}
