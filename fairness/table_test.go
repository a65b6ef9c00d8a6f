package fairness

import (
	"maps"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
)

// naiveTable is the reference for table: a plain map with explicit idle times.
type naiveTable struct {
	state     map[flowRef]int
	idleSince map[flowRef]int64
	order     map[flowRef]int64 // when it became idle, with a sequence for ties
	seq       int64
	maxIdle   int
	forget    int64

	// Usage growth (grow, report): unreported growth per flow, and that of forgotten flows.
	grown   map[flowRef]float64
	gone    []peer.UsageDelta
	sharing bool
}

func (n *naiveTable) use(r flowRef) *int {
	if _, ok := n.state[r]; !ok {
		n.state[r] = 0
	}
	delete(n.idleSince, r)
	delete(n.order, r)
	v := n.state[r]
	return &v
}

func (n *naiveTable) release(r flowRef, now int64) {
	if _, ok := n.state[r]; ok {
		if _, idle := n.idleSince[r]; !idle {
			n.idleSince[r] = now
			n.seq++
			n.order[r] = n.seq
		}
	}
	for {
		// the longest idle is the one with the smallest order
		var oldest flowRef
		found := false
		for r, o := range n.order {
			if !found || o < n.order[oldest] {
				oldest, found = r, true
			}
		}
		if !found || !(len(n.order) > n.maxIdle || now-n.idleSince[oldest] > n.forget) {
			return
		}
		if g := n.grown[oldest]; n.sharing && g > 0 && len(n.gone) < n.maxIdle {
			n.gone = append(n.gone, peer.UsageDelta{Flow: string(oldest.id), Band: oldest.band, Amount: g})
		}
		delete(n.state, oldest)
		delete(n.idleSince, oldest)
		delete(n.order, oldest)
		delete(n.grown, oldest)
	}
}

// report is table.report with amount = growth: positive growth is reported and reset, the
// rest kept; then the forgotten flows' growth. Amounts are summed per flow.
func (n *naiveTable) report() map[flowRef]float64 {
	n.sharing = true
	out := map[flowRef]float64{}
	for r, g := range n.grown {
		if g > 0 {
			out[r] += g
			n.grown[r] = 0
		}
	}
	for _, d := range n.gone {
		out[deltaRef(&d)] += d.Amount
	}
	n.gone = nil
	return out
}

// FuzzTable drives table and the naive reference with the same operations and compares
// which flows are remembered, with what state, and what usage growth they report.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 200, 201, 202})
	f.Add([]byte("use release use use release release forget"))
	f.Add([]byte{4, 1, 4, 2, 1, 1, 1, 2, 5, 0, 4, 3, 1, 3, 4, 4, 1, 4, 4, 5, 1, 5, 2, 6, 4, 9, 5, 0, 2, 20, 5, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tb := newTable[int](3, 10)
		nv := &naiveTable{state: map[flowRef]int{}, idleSince: map[flowRef]int64{}, order: map[flowRef]int64{}, maxIdle: 3, forget: 10, grown: map[flowRef]float64{}}
		var now int64
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			r := flowRef{id: flowcontrol.FlowID([]byte{'a' + arg%8}), band: int(arg/8) % 2}
			switch op % 6 {
			case 0:
				s := tb.use(r)
				*s++
				v := nv.use(r)
				nv.state[r] = *v + 1
			case 1:
				tb.release(r, now)
				nv.release(r, now)
			case 2:
				now += int64(arg % 7)
				tb.sweep(now)
				nv.release(flowRef{id: "-"}, now) // sweep only: "-" is never used
			case 3:
				if got, want := tb.get(r), nv.state[r]; (got == nil) != !has(nv.state, r) || (got != nil && *got != want) {
					t.Fatalf("op %d: get(%v) = %v, want %d (present %v)", i/2, r, got, want, has(nv.state, r))
				}
			case 4: // growth, possibly negative (a correction)
				g := float64(arg%5) - 1
				_, k := tb.useAt(r)
				*tb.grow(k) += g
				nv.use(r)
				nv.grown[r] += g
			case 5:
				got := map[flowRef]float64{}
				for _, d := range tb.report(nil, func(g float64, _ *int) float64 { return g }) {
					got[deltaRef(&d)] += d.Amount
				}
				if want := nv.report(); !maps.Equal(got, want) {
					t.Fatalf("op %d: report %v, want %v", i/2, got, want)
				}
				if len(tb.dirty) != 0 {
					t.Fatalf("op %d: %d slots dirty after a report", i/2, len(tb.dirty))
				}
			}
			for k, d := range tb.dirty {
				if s := &tb.slots[d]; s.dpos != int32(k) || tb.index[s.ref] != d {
					t.Fatalf("op %d: dirty list entry %d is slot %d (dpos %d, %v)", i/2, k, d, s.dpos, s.ref)
				}
			}
			if tb.len() != len(nv.state) {
				t.Fatalf("op %d: table remembers %d flows, reference %d", i/2, tb.len(), len(nv.state))
			}
			if tb.idle != len(nv.order) {
				t.Fatalf("op %d: table has %d idle, reference %d", i/2, tb.idle, len(nv.order))
			}
		}
	})
}

func has(m map[flowRef]int, r flowRef) bool { _, ok := m[r]; return ok }

func TestTableBoundsIdleFlows(t *testing.T) {
	tb := newTable[int](2, time.Minute)
	for i := range 5 {
		r := flowRef{id: flowcontrol.FlowID(rune('a' + i))}
		*tb.use(r) = i + 1
		tb.release(r, int64(i))
	}
	if got := tb.len(); got != 2 {
		t.Fatalf("remembered %d idle flows, want MaxIdle = 2", got)
	}
	if tb.get(flowRef{id: "a"}) != nil || tb.get(flowRef{id: "e"}) == nil {
		t.Errorf("the longest idle should be forgotten first")
	}
	// An active flow is never forgotten, however long.
	active := flowRef{id: "busy"}
	*tb.use(active) = 42
	tb.sweep(int64(time.Hour))
	if s := tb.get(active); s == nil || *s != 42 {
		t.Errorf("active flow forgotten: %v", s)
	}
	if tb.len() != 1 {
		t.Errorf("idle flows older than Forget remain: %d remembered", tb.len())
	}
}
