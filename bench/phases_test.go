package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing/disagg"
)

// TestPhases: each part's sessions start within its phase, later turns follow their own
// session's earlier ones, and two parts built from one workload share no content.
func TestPhases(t *testing.T) {
	chat := Chat(ChatOptions{Sessions: 40, Rate: 1, Seed: 1})
	long := PrefixGroup(PrefixGroupOptions{Requests: 40, Rate: 1, PrefixTokens: 1024, SuffixTokens: 256, OutputTokens: 16, FanOut: []float64{1}, BurstFactor: 1, Seed: 1})
	w, err := Phases(Phase{chat, 10 * time.Second}, Phase{long, 10 * time.Second}, Phase{chat, 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	phaseOf := func(at time.Duration) int { return int(at / (10 * time.Second)) }
	seen := map[uint64]int{} // first id of a prompt → phase
	sessions := map[int32]int{}
	for i, r := range w.Requests {
		if r.Prev < 0 {
			if p := phaseOf(r.At); p > 2 {
				t.Fatalf("request %d arrives at %v, after the last phase", i, r.At)
			}
		}
		root := i
		for w.Requests[root].Prev >= 0 {
			root = int(w.Requests[root].Prev)
		}
		p := phaseOf(w.Requests[root].At)
		if r.Session >= 0 {
			if q, ok := sessions[r.Session]; ok && q != p {
				t.Fatalf("session %d in phases %d and %d", r.Session, q, p)
			}
			sessions[r.Session] = p
		}
		if q, ok := seen[r.IDs[0]]; ok && q != p {
			t.Fatalf("request %d (phase %d) shares its first block with phase %d", i, p, q)
		}
		seen[r.IDs[0]] = p
	}
	if len(sessions) == 0 || w.Sessions != len(sessions) {
		t.Errorf("%d sessions numbered, %d seen", w.Sessions, len(sessions))
	}
	if _, err := Phases(Phase{chat, 0}); !errors.Is(err, ErrInvalidWorkload) {
		t.Errorf("a phase of no time: %v", err)
	}
}

// TestPlannerRun: a role planner on long prompts moves servers into prefill, records them, and
// refuses a fleet split or replicas.
func TestPlannerRun(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 600, Rate: 9, PrefixTokens: 6144, SuffixTokens: 2048, OutputTokens: 64, FanOut: []float64{1}, BurstFactor: 1, Seed: 1})
	p, err := disagg.NewPlanner(disagg.PlannerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(w, Config{Servers: 8, Profile: Qwen3Profile(), Decider: p, TransferPerToken: 5200 * time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != len(w.Requests) {
		t.Errorf("%d of %d completed", res.Completed, len(w.Requests))
	}
	most := 0
	for _, r := range res.Roles {
		most = max(most, r.Prefill)
	}
	if most == 0 || most > 7 || res.RoleChanges == 0 || res.Disaggregated == 0 {
		t.Errorf("at most %d servers in prefill, %d changes, %.2f disaggregated: want some", most, res.RoleChanges, res.Disaggregated)
	}
	if res.Roles[0] != (RoleSample{}) {
		t.Errorf("first sample %+v, want every server in both at the start", res.Roles[0])
	}
	for _, bad := range []Config{{Servers: 4, PrefillServers: 1, Decider: p}, {Servers: 4, Replicas: 2, Decider: p}} {
		if _, err := Run(w, bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// TestPhaseMix: the long prompts come in the middle phase, chat before and after it, each at
// the rate asked; a rate or phase that is not positive is refused.
func TestPhaseMix(t *testing.T) {
	const phase = 20 * time.Second
	w, err := PhaseMix(1, 1.5, phase)
	if err != nil {
		t.Fatal(err)
	}
	var starts [3]int
	var prompt [3]int64
	for _, r := range w.Requests {
		if r.Prev >= 0 {
			continue
		}
		p := min(int(r.At/phase), 2)
		starts[p]++
		prompt[p] += int64(r.PromptTokens)
	}
	long := LongPrompts(1000, 1).Scaled(1.5)
	wantLong := 0
	for _, r := range long.Requests {
		if r.At < phase {
			wantLong++
		}
	}
	if starts[1] != wantLong {
		t.Errorf("middle phase: %d requests start, want LongPrompts' %d within %v at ×1.5", starts[1], wantLong, phase)
	}
	for _, p := range []int{0, 2} {
		if starts[p] == 0 || prompt[p]/int64(starts[p]) >= prompt[1]/int64(starts[1]) {
			t.Errorf("phase %d: %d sessions of %d prompt tokens on average; want chat, shorter than the middle phase's %d", p, starts[p], prompt[p]/int64(max(starts[p], 1)), prompt[1]/int64(starts[1]))
		}
	}
	for _, c := range []struct {
		rate  float64
		phase time.Duration
	}{{0, phase}, {-1, phase}, {1, 0}} {
		if _, err := PhaseMix(1, c.rate, c.phase); !errors.Is(err, ErrInvalidWorkload) {
			t.Errorf("PhaseMix(rate %v, phase %v): %v, want ErrInvalidWorkload", c.rate, c.phase, err)
		}
	}
}
