package bench

import (
	"fmt"
	"strings"
	"time"
)

// Phase is one part of a phase-changing workload (Phases): the requests of Workload whose
// session starts (whose open-loop arrival comes) before Duration, with their later turns.
type Phase struct {
	Workload *Workload
	Duration time.Duration
}

// Phases returns a workload that plays its parts one after the other: part k's sessions start
// within [D₀+…+Dₖ₋₁, D₀+…+Dₖ), where D are the parts' durations, and keep their later turns
// (which may run past the part's end). Scale each part before (Workload.Scaled): scaling the
// result would shorten the phases. Each part's content ids are moved to a space of their own,
// so that two generated workloads, which number their content alike, share no prefix, and
// neither do two parts made from one workload. The parts must have the same BlockTokens and no
// LoRA adapters. O(requests + ids); the result shares nothing with the parts.
func Phases(parts ...Phase) (*Workload, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no phases", ErrInvalidWorkload)
	}
	out := &Workload{BlockTokens: parts[0].Workload.BlockTokens}
	var names []string
	var start time.Duration
	for k, p := range parts {
		w := p.Workload
		switch {
		case w.BlockTokens != out.BlockTokens:
			return nil, fmt.Errorf("%w: phase %d has blocks of %d tokens, phase 0 of %d", ErrInvalidWorkload, k, w.BlockTokens, out.BlockTokens)
		case len(w.Adapters) > 0:
			return nil, fmt.Errorf("%w: phase %d runs under LoRA adapters", ErrInvalidWorkload, k)
		case p.Duration <= 0:
			return nil, fmt.Errorf("%w: phase %d lasts %v", ErrInvalidWorkload, k, p.Duration)
		}
		names = append(names, fmt.Sprintf("%s %v", w.Name, p.Duration))
		idx := make([]int32, len(w.Requests)) // new index of each request kept, -1 if not
		sessions := map[int32]int32{}
		space := uint64(k+1) << 48
		for i := range w.Requests {
			r := w.Requests[i]
			idx[i] = -1
			switch {
			case r.Prev < 0 && r.At >= p.Duration:
				continue
			case r.Prev < 0:
				r.At += start
			case idx[r.Prev] < 0:
				continue
			default:
				r.Prev = idx[r.Prev]
			}
			if r.Session >= 0 {
				s, ok := sessions[r.Session]
				if !ok {
					s = int32(out.Sessions)
					sessions[r.Session] = s
					out.Sessions++
				}
				r.Session = s
			}
			ids := make([]uint64, len(r.IDs))
			for j, id := range r.IDs {
				ids[j] = id ^ space
			}
			r.IDs = ids
			idx[i] = int32(len(out.Requests))
			out.Requests = append(out.Requests, r)
		}
		start += p.Duration
	}
	out.Name = "phases: " + strings.Join(names, ", ")
	if err := out.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// LongPrompts is the long-prompt workload of bench/README's P/D tables (pdcompare's
// long-prompt): requests single-turn requests arriving as a Poisson process at 6/s, each a
// shared document of lognormal length (median 6,144 tokens) plus 2,048 tokens of its own on
// average, answers of 128 tokens on average. O(requests).
func LongPrompts(requests int, seed uint64) *Workload {
	return PrefixGroup(PrefixGroupOptions{Requests: requests, Rate: 6, PrefixTokens: 6144, SuffixTokens: 2048,
		OutputTokens: 128, FanOut: []float64{1}, BurstFactor: 1, Seed: seed}).Head(requests)
}

// PhaseMix is the phase-changing workload of bench/README's P/D phase run: the Chat workload
// (seed) for phase, LongPrompts for phase, then Chat again (seed+1000) for phase, each part at
// rate times its own arrival rate (Phases, each part scaled before). O(requests).
func PhaseMix(seed uint64, rate float64, phase time.Duration) (*Workload, error) {
	if !(rate > 0) || phase <= 0 {
		return nil, fmt.Errorf("%w: phase mix at rate %v, phases of %v", ErrInvalidWorkload, rate, phase)
	}
	chat := func(s uint64) *Workload { return Chat(ChatOptions{Seed: s}).Scaled(rate) }
	n := int(phase.Seconds()*6*rate*1.2) + 100 // LongPrompts' 6/s, scaled, with room
	return Phases(Phase{Workload: chat(seed), Duration: phase}, Phase{Workload: LongPrompts(n, seed).Scaled(rate), Duration: phase},
		Phase{Workload: chat(seed + 1000), Duration: phase})
}
