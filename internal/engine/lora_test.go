package engine

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func loraEngine(t testing.TB, slots int, cost time.Duration) *Engine {
	return newEngine(t, tiny, func(o *Options) { o.LoRA = LoRA{MaxLoRAs: slots, LoadCost: cost}; o.KVEvents = true })
}

// checkSlots verifies each slot's count of running requests against a recount.
func checkSlots(t *testing.T, e *Engine) {
	t.Helper()
	active := make([]int, len(e.slots))
	for _, r := range e.running {
		if r.adapter == "" {
			continue
		}
		if r.slot == 0 || e.slots[r.slot-1].name != r.adapter {
			t.Fatalf("running request %d of adapter %q holds slot %d", r.id, r.adapter, r.slot)
		}
		active[r.slot-1]++
	}
	for i, s := range e.slots {
		if s.active != active[i] {
			t.Fatalf("slot %d (%q): active %d, recount %d", i, s.name, s.active, active[i])
		}
	}
}

func TestLoRASlotsSkipAndLoad(t *testing.T) {
	e := loraEngine(t, 1, 50*time.Millisecond)
	must(t, e.Submit(Request{ID: 1, Prompt: seq(0, 8), OutputTokens: 3, Adapter: "a"}, 0))
	must(t, e.Submit(Request{ID: 2, Prompt: seq(100, 8), OutputTokens: 3, Adapter: "b"}, 0))
	must(t, e.Submit(Request{ID: 3, Prompt: seq(200, 8), OutputTokens: 3, Adapter: "a"}, 0))
	must(t, e.Submit(Request{ID: 4, Prompt: seq(300, 8), OutputTokens: 3}, 0))
	d, ok := e.BeginStep(0)
	if !ok || d < 50*time.Millisecond {
		t.Fatalf("first step: %v %v, want the load cost in it", d, ok)
	}
	run, wait := e.Adapters(nil, nil)
	if !slices.Equal(run, []string{"a"}) || !slices.Equal(wait, []string{"b"}) {
		t.Errorf("adapters running %q waiting %q, want [a] [b]", run, wait)
	}
	if st := e.Stats(); st.Running != 3 || st.Waiting != 1 || st.LoRALoads != 1 {
		t.Errorf("stats %+v: want 3 running (a, a, base), b waiting, 1 load", st)
	}
	checkSlots(t, e)
	e.EndStep(d)
	e.Events(nil)
	// Request 2 waits until a's requests finish, then b replaces a.
	evs, _ := drive(t, e, d)
	checkSlots(t, e)
	if got := e.Stats().LoRALoads; got != 2 {
		t.Errorf("loads = %d, want 2", got)
	}
	var order []RequestID
	for _, ev := range evs {
		if ev.Kind == EventStarted {
			order = append(order, ev.ID)
		}
	}
	if !slices.Equal(order, []RequestID{2}) {
		t.Errorf("started after the first step: %v, want [2]", order)
	}
	if got := e.Resident(nil); !slices.Equal(got, []string{"b"}) {
		t.Errorf("resident %q, want [b]", got)
	}
}

func TestLoRAEvictsLeastRecentlyUsedIdle(t *testing.T) {
	e := loraEngine(t, 2, time.Millisecond)
	now := time.Duration(0)
	for i, a := range []string{"a", "b", "c", "a", "b"} {
		must(t, e.Submit(Request{ID: RequestID(i + 1), Prompt: seq(10*i, 8), OutputTokens: 1, Adapter: a}, now))
		_, now = drive(t, e, now)
		checkSlots(t, e)
	}
	// a, b loaded into slots 0 and 1; c evicts a (slot 0); a evicts b (slot 1); b evicts c.
	if st := e.Stats(); st.LoRALoads != 5 {
		t.Errorf("loads = %d, want 5", st.LoRALoads)
	}
	if got := e.Resident(nil); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("resident %q, want [b a]", got)
	}
	must(t, e.Submit(Request{ID: 9, Prompt: seq(0, 8), OutputTokens: 1, Adapter: "a"}, now))
	drive(t, e, now)
	if st := e.Stats(); st.LoRALoads != 5 {
		t.Errorf("resident adapter reloaded: loads = %d, want 5", st.LoRALoads)
	}
}

func TestLoRAPrefixPerAdapter(t *testing.T) {
	e := loraEngine(t, 2, 0)
	prompt := seq(0, 17)
	var got []int
	for i, a := range []string{"x", "x", "y", "", ""} {
		id := RequestID(i + 1)
		must(t, e.Submit(Request{ID: id, Prompt: prompt, OutputTokens: 1, Adapter: a}, 0))
		evs, _ := drive(t, e, 0)
		got = append(got, startedTokens(evs, id))
	}
	if want := []int{0, 16, 0, 0, 16}; !slices.Equal(got, want) {
		t.Errorf("cached tokens per turn %v, want %v (per adapter)", got, want)
	}
	root, ok := e.PromptRoot("x")
	if h := e.HashBlock(root, ok, prompt[:4]); !e.Cached(h) {
		t.Error("PromptRoot chain does not find the adapter's first block")
	}
	if _, ok := e.PromptRoot(""); ok {
		t.Error("PromptRoot of the base model is chained")
	}
	kvs := e.KVEvents(nil)
	var names []string
	for _, ev := range kvs {
		if ev.Kind == KVBlockStored {
			names = append(names, ev.LoRA)
		}
	}
	if !slices.Equal(names, []string{"x", "y", ""}) {
		t.Errorf("stored events' LoRA names %q, want [x y \"\"]", names)
	}
}

func TestLoRAErrors(t *testing.T) {
	e := newEngine(t, tiny, nil)
	if err := e.Submit(Request{ID: 1, Prompt: seq(0, 4), OutputTokens: 1, Adapter: "a"}, 0); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("adapter without LoRA: %v", err)
	}
	for _, l := range []LoRA{{MaxLoRAs: -1}, {MaxLoRAs: 1, LoadCost: -time.Second}, {MaxLoRAs: 1 << 20}} {
		if _, err := New(Options{LoRA: l}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("LoRA %+v: %v", l, err)
		}
	}
}

// Many adapters over few slots, with aborts and preemption: the slot counts stay right and
// every request ends.
func TestLoRAStress(t *testing.T) {
	p := tiny
	p.NumBlocks = 24
	e := newEngine(t, p, func(o *Options) { o.LoRA = LoRA{MaxLoRAs: 2, LoadCost: time.Millisecond} })
	now := time.Duration(0)
	id := RequestID(0)
	ended := 0
	for step := range 400 {
		if step%2 == 0 {
			id++
			ad := []string{"", "a", "b", "c", "d"}[int(id)%5]
			must(t, e.Submit(Request{ID: id, Prompt: seq(int(id)*3, 5+int(id)%13), OutputTokens: 1 + int(id)%7, Adapter: ad}, now))
		}
		if step%7 == 3 {
			e.Abort(id-1, now)
		}
		if d, ok := e.BeginStep(now); ok {
			now += d
			e.EndStep(now)
		}
		checkInvariants(t, e)
		checkSlots(t, e)
		for _, ev := range e.Events(nil) {
			if ev.Kind == EventFinished || ev.Kind == EventAborted {
				ended++
			}
		}
	}
	evs, _ := drive(t, e, now)
	for _, ev := range evs {
		if ev.Kind == EventFinished || ev.Kind == EventAborted {
			ended++
		}
	}
	if ended != int(id) {
		t.Errorf("%d of %d requests ended", ended, id)
	}
	checkSlots(t, e)
}
