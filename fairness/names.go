package fairness

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// ByNameOptions are the settings ByName passes to the policies that need one; every other
// setting is the policy's default.
type ByNameOptions struct {
	// BoundedWait is W for "bounded-wait" (required there); BoundedWaitHeadroom its headroom
	// and FirstTurnShare its reserved share of dispatches (both zero by default).
	BoundedWait         time.Duration
	BoundedWaitHeadroom time.Duration
	FirstTurnShare      float64
	// SLOTTFT is the time-to-first-token target of "slo". Zero: 2 s.
	SLOTTFT time.Duration
}

// named is one entry of the registry.
type named struct {
	name string
	make func(ByNameOptions) (flowcontrol.Policy, error)
}

// names is the registry, in the order Names lists it.
var names = []named{
	{"fcfs", func(ByNameOptions) (flowcontrol.Policy, error) { return flowcontrol.FCFS{}, nil }},
	{"priority", func(ByNameOptions) (flowcontrol.Policy, error) { return flowcontrol.StrictPriority{}, nil }},
	{"round-robin", func(ByNameOptions) (flowcontrol.Policy, error) { return NewRoundRobin(), nil }},
	{"turn-priority", func(ByNameOptions) (flowcontrol.Policy, error) { return NewTurnPriority(TurnPriorityOptions{}) }},
	{"las", func(ByNameOptions) (flowcontrol.Policy, error) { return NewLAS(LASOptions{}) }},
	{"las-reference", func(ByNameOptions) (flowcontrol.Policy, error) { return NewLASReference(LASReferenceOptions{}) }},
	{"vtc", func(ByNameOptions) (flowcontrol.Policy, error) { return NewVTC(VTCOptions{}) }},
	{"edf", func(ByNameOptions) (flowcontrol.Policy, error) { return EDF{}, nil }},
	{"slo", func(o ByNameOptions) (flowcontrol.Policy, error) {
		ttft := o.SLOTTFT
		if ttft == 0 {
			ttft = 2 * time.Second
		}
		return NewSLODeadline(SLODeadlineOptions{TTFT: ttft})
	}},
	{"bounded-wait", func(o ByNameOptions) (flowcontrol.Policy, error) {
		return NewBoundedWait(BoundedWaitOptions{Wait: o.BoundedWait, Headroom: o.BoundedWaitHeadroom, FirstTurnShare: o.FirstTurnShare})
	}},
	{"hierarchy", func(ByNameOptions) (flowcontrol.Policy, error) { return NewHierarchy(HierarchyOptions{}) }},
}

// Names returns the names ByName knows, one per policy: fcfs, priority (flowcontrol's FCFS
// and StrictPriority), round-robin, turn-priority (llm-d's), las, las-reference (llm-d's LAS),
// vtc, edf, slo, bounded-wait and hierarchy. The gateway's -policy flag and the bench
// simulator's -policies take these names. The slice is a fresh copy.
func Names() []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.name
	}
	return out
}

// ByName returns a new policy of the named kind with its defaults and the settings of o that
// apply to it. An unknown name, or settings the policy rejects, give an error wrapping
// ErrInvalidOptions. Safe for concurrent use; each call builds a new policy.
func ByName(name string, o ByNameOptions) (flowcontrol.Policy, error) {
	i := slices.IndexFunc(names, func(n named) bool { return n.name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: policy %q: want one of %s", ErrInvalidOptions, name, strings.Join(Names(), ", "))
	}
	p, err := names[i].make(o)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", name, err)
	}
	return p, nil
}
