package routing

import (
	"testing"
	"time"
)

// both is a filter and a scorer that observes picks and outcomes, as routing/outlier's Detector.
type both struct{}

func (*both) Filter(_ *Request, cands []Candidate) []Candidate { return cands }
func (*both) Score(*Request, []Candidate, []float64)           {}
func (*both) Picked(*Request, *Candidate, time.Time)           {}
func (*both) Completed(BackendID, time.Time, DoneInfo)         {}

// A component that is both a filter and a scorer is registered once as an observer and once as
// a completer.
func TestHookedOnce(t *testing.T) {
	x := &both{}
	r, err := New(Options{Profile: Profile{Filters: []Filter{x}, Scorers: []Weighted{{Scorer: x, Weight: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.completers); n != 1 {
		t.Fatalf("%d completers, want the component once", n)
	}
	if n := len(r.observers); n != 1 {
		t.Fatalf("%d observers, want the component once", n)
	}
}
