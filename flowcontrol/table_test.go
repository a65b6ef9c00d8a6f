package flowcontrol

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFlowTable runs random adds, lookups and removals against a map, with hashes drawn
// from a few values so that probe runs are long, overlap and wrap around the table's end.
func TestFlowTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab flowTable
	ref := map[FlowID]*flow{}
	for step := range 20000 {
		id := FlowID(fmt.Sprint("f", rng.IntN(300)))
		h := uint64(rng.IntN(8))*0x9e3779b97f4a7c15 | uint64(len(id)) // few distinct hashes
		if f := ref[id]; f != nil {
			h = f.hash
		}
		got, want := tab.get(id, h), ref[id]
		if got != want {
			t.Fatalf("step %d: get(%s) = %p, want %p", step, id, got, want)
		}
		switch {
		case want == nil:
			f := &flow{hash: h}
			f.st.ID = id
			tab.add(f)
			ref[id] = f
		case rng.IntN(2) == 0:
			tab.remove(want)
			delete(ref, id)
		}
		if tab.n != len(ref) {
			t.Fatalf("step %d: n = %d, want %d", step, tab.n, len(ref))
		}
	}
	for id, f := range ref {
		if got := tab.get(id, f.hash); got != f {
			t.Fatalf("get(%s) = %p, want %p", id, got, f)
		}
	}
}
