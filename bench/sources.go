package bench

import (
	"fmt"
	"strings"
)

// LoadOptions says how LoadWorkload builds a workload.
type LoadOptions struct {
	// Seed drives the synthetic generators; the same seed gives the same workload.
	Seed uint64
	// Trace is the path of a Mooncake-format trace. Empty: the conversation trace that ships
	// with the package (Mooncake).
	Trace string
}

// WorkloadSource is one workload the comparison can select by name.
type WorkloadSource struct {
	Name string
	// Seeded reports whether LoadOptions.Seed changes the workload. It is false for the
	// recorded trace: over seeds, only the router's random choices vary there.
	Seeded bool
	// Load builds the workload with its documented defaults.
	Load func(LoadOptions) (*Workload, error)
}

// WorkloadSources returns the workloads the comparison can select by name, in this order:
//
//	mooncake      the Mooncake conversation trace (Mooncake, MooncakeOptions{})
//	chat          Chat: multi-turn conversations under a few system prompts
//	agentic       Agentic: coding-agent sessions sharing long opening instructions
//	bursty        Bursty: on/off bursts of single requests over shared prefixes
//	prefix-group  PrefixGroup: Zipf-popular prefix groups, bursty arrivals, fan-outs of
//	              siblings, no sessions
//	forks         Forks: short conversations whose first turns fork earlier ones or open
//	              popular shared documents
//	lora          LoRAWorkload: single requests under Zipf-popular LoRA adapters
//	trace-sessions    TraceSessions: the trace's sessions, closed loop (a heavy tail
//	                  of session lengths: a falling hazard)
//	increasing-hazard IncreasingHazard: agentic sessions of 6 to 10 turns (a rising
//	                  hazard)
//
// Each call returns a fresh slice.
func WorkloadSources() []WorkloadSource {
	return []WorkloadSource{
		{"mooncake", false, func(o LoadOptions) (*Workload, error) {
			if o.Trace == "" {
				return Mooncake(MooncakeOptions{})
			}
			return LoadMooncakeFile(o.Trace, MooncakeOptions{})
		}},
		{"chat", true, func(o LoadOptions) (*Workload, error) { return Chat(ChatOptions{Seed: o.Seed}), nil }},
		{"agentic", true, func(o LoadOptions) (*Workload, error) { return Agentic(AgenticOptions{Seed: o.Seed}), nil }},
		{"bursty", true, func(o LoadOptions) (*Workload, error) { return Bursty(BurstyOptions{Seed: o.Seed}), nil }},
		{"prefix-group", true, func(o LoadOptions) (*Workload, error) {
			return PrefixGroup(PrefixGroupOptions{Seed: o.Seed}), nil
		}},
		{"forks", true, func(o LoadOptions) (*Workload, error) { return Forks(ForksOptions{Seed: o.Seed}), nil }},
		{"lora", true, func(o LoadOptions) (*Workload, error) { return LoRAWorkload(LoRAOptions{Seed: o.Seed}), nil }},
		{"trace-sessions", false, func(o LoadOptions) (*Workload, error) {
			if o.Trace == "" {
				return TraceSessions(MooncakeOptions{})
			}
			w, err := LoadMooncakeFile(o.Trace, MooncakeOptions{})
			if err != nil {
				return nil, err
			}
			return closeSessions(w), nil
		}},
		{"increasing-hazard", true, func(o LoadOptions) (*Workload, error) {
			return IncreasingHazard(AgenticOptions{Seed: o.Seed}), nil
		}},
	}
}

// WorkloadNames returns the names of WorkloadSources, comma-separated.
func WorkloadNames() string {
	var names []string
	for _, s := range WorkloadSources() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// LoadWorkload builds the workload of WorkloadSources named name. An unknown name is an error
// wrapping ErrInvalidConfig.
func LoadWorkload(name string, o LoadOptions) (*Workload, error) {
	for _, s := range WorkloadSources() {
		if s.Name == name {
			return s.Load(o)
		}
	}
	return nil, fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalidConfig, name, WorkloadNames())
}
