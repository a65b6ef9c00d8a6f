package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// LoRA adapters.
//
// A server started with LoRA holds at most MaxLoRAs adapters in GPU slots (vLLM's
// --max-loras); its batch may mix requests of at most that many distinct adapters. When the
// scheduler meets a waiting request whose adapter is not among those of the running batch:
//
//   - if fewer than MaxLoRAs adapters are in use, it is admitted; its adapter is taken from a
//     slot where it is already resident, or loaded into an empty slot or in place of the least
//     recently used adapter no running request uses (LRU eviction of idle adapters), and the
//     step that admits it costs LoadCost more per adapter loaded: vLLM loads adapters
//     synchronously at the start of the forward pass, so the whole batch waits for the load;
//   - otherwise it is skipped, stays waiting (its adapter is a waiting adapter), and the
//     requests behind it may still be admitted — vLLM V1's skipped_waiting_requests.
//
// A request's prompt blocks are chained from a root that hashes its adapter, so a prefix cached
// under one adapter (or the base model) is a miss under another, as vLLM folds the LoRA name
// into its block hashes.

// LoRA configures adapter slots. The zero value disables LoRA: requests naming an adapter are
// rejected.
type LoRA struct {
	// MaxLoRAs is the number of adapter slots (vLLM --max-loras). Zero: no LoRA.
	MaxLoRAs int
	// LoadCost is the time to load an adapter into a slot, added to the step that loads it.
	LoadCost time.Duration
}

// maxLoRAs bounds LoRA.MaxLoRAs (vLLM allows a few hundred).
const maxLoRAs = 1 << 12

func (l LoRA) validate() error {
	if l.MaxLoRAs < 0 || l.MaxLoRAs > maxLoRAs || l.LoadCost < 0 {
		return fmt.Errorf("%w: LoRA slots %d (want 0..%d), load cost %v (want ≥ 0)", ErrInvalidOptions, l.MaxLoRAs, maxLoRAs, l.LoadCost)
	}
	return nil
}

// loraSlot is one GPU adapter slot: the adapter resident there ("" for none), the running
// requests using it, and the step that last admitted one (for LRU).
type loraSlot struct {
	name   string
	active int
	used   int64
}

// PromptRoot returns the parent hash a prompt's first block chains from under adapter: (0,
// false) for the base model, as HashBlock's first block; for an adapter, a root hashed from
// it, so that the same tokens under two adapters give unrelated chains. O(len(adapter)).
func (e *Engine) PromptRoot(adapter string) (BlockHash, bool) {
	if adapter == "" {
		return 0, false
	}
	b := binary.LittleEndian.AppendUint64(e.buf[:0], e.opts.HashSeed)
	b = append(b, 0xfe) // with the odd length below, never a token block's input
	b = append(b, adapter...)
	if len(b)%2 == 0 {
		b = append(b, 0)
	}
	e.buf = b
	e.digest.Reset()
	_, _ = e.digest.Write(b)
	return BlockHash(e.digest.Sum64()), true
}

// loraSlotFor returns the slot that would serve adapter a now: the one holding it, else an
// empty one, else the least recently used idle one; ok is false when every slot is in use by
// another adapter's running requests. O(MaxLoRAs).
func (e *Engine) loraSlotFor(a string) (slot int, ok bool) {
	empty, idle := -1, -1
	for i := range e.slots {
		s := &e.slots[i]
		switch {
		case s.name == a:
			return i, true
		case s.name == "":
			if empty < 0 {
				empty = i
			}
		case s.active == 0:
			if idle < 0 || s.used < e.slots[idle].used {
				idle = i
			}
		}
	}
	if empty >= 0 {
		return empty, true
	}
	return idle, idle >= 0
}

// claimLoRA makes r's adapter resident in slot (loading it when another one is there) and
// counts r as using it. O(1).
func (e *Engine) claimLoRA(r *request, slot int) {
	s := &e.slots[slot]
	if s.name != r.adapter {
		s.name = r.adapter
		e.stepLoads++
		e.st.LoRALoads++
	}
	s.active++
	s.used = e.st.Steps
	r.slot = slot + 1
}

// releaseLoRA stops counting r against its slot (finished, aborted or preempted). O(1).
func (e *Engine) releaseLoRA(r *request) {
	if r.slot > 0 {
		e.slots[r.slot-1].active--
		r.slot = 0
	}
}

// restoreSkipped puts the waiting requests BeginStep skipped back at the head of the queue, in
// their order. Each was popped by advancing wHead, so the positions before wHead are free.
func (e *Engine) restoreSkipped() {
	n := len(e.skipped)
	if n == 0 {
		return
	}
	e.wHead -= n
	copy(e.waiting[e.wHead:], e.skipped)
	clear(e.skipped)
	e.skipped = e.skipped[:0]
}

// Adapters appends to running the distinct adapters of the running requests and to waiting
// those of the waiting requests (an adapter may be in both), in order of first appearance: what
// vLLM's vllm:lora_requests_info lists. O((running + waiting)·distinct adapters).
func (e *Engine) Adapters(running, waiting []string) ([]string, []string) {
	for _, r := range e.running {
		if r.adapter != "" && !slices.Contains(running, r.adapter) {
			running = append(running, r.adapter)
		}
	}
	for _, r := range e.waiting[e.wHead:] {
		if r.adapter != "" && !slices.Contains(waiting, r.adapter) {
			waiting = append(waiting, r.adapter)
		}
	}
	return running, waiting
}

// Resident appends the adapters held in GPU slots to dst, in slot order. O(MaxLoRAs).
func (e *Engine) Resident(dst []string) []string {
	for _, s := range e.slots {
		if s.name != "" {
			dst = append(dst, s.name)
		}
	}
	return dst
}
