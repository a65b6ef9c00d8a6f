package outlier_test

import (
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
)

// probed reports an active probe of b id, sent at sent, ending now.
func (f *outlierFixture) probed(id int, sent time.Time, info routing.DoneInfo) {
	f.o.Probed(routing.BackendID(id), sent, info)
}

// With active checks, an ejected backend gets no user request, not even as a half-open probe,
// however long its ejection is over; the checker's successful probe restores it.
func TestActiveNoUserRequestIsAProbe(t *testing.T) {
	f := newOutlierFixture(t, 4, outlier.Options{})
	f.probed(1, f.clock.Now(), success) // the checker's first report: active from now on
	f.hit(0, connectFail)
	for _, wait := range []time.Duration{0, time.Second, 10 * time.Second, 20 * time.Second} {
		f.clock.Advance(wait)
		f.avoids(0, 200)
		f.probed(0, f.clock.Now(), connectFail) // the checker finds it still down
	}
	if st := f.o.Stats(); st.Probes != 0 || st.Ejected != 1 {
		t.Fatalf("stats %+v: want no user request claimed as a probe, b0 still out", st)
	}
	f.clock.Advance(time.Second)
	f.probed(0, f.clock.Now(), success)
	if _, ok := f.ejectedFor(0); ok {
		t.Fatal("the checker's successful probe did not restore b0")
	}
	f.hit(0, success)
	h := f.o.BackendStats(0)
	if h.Restored != 1 || h.Probes != 0 || !h.LastSuccess.Equal(f.clock.Now()) {
		t.Errorf("b0 %+v: want 1 restoration, 0 user probes, last success now", h)
	}
}

// Step table on a fake clock: what a probe's outcome does to an ejected backend.
func TestActiveProbeSteps(t *testing.T) {
	type step struct {
		advance time.Duration
		what    string // "probe ok", "probe fail", "probe stall", "request fail", "probe overload"
		sentAgo time.Duration
		out     bool // still out of rotation after the step
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"success before the back-off is over waits for it", []step{
			{300 * time.Millisecond, "probe ok", 0, true},
			{700 * time.Millisecond, "probe ok", 0, false},
		}},
		{"failed probes do not lengthen the back-off", []step{
			{time.Second, "probe fail", 0, true},
			{time.Second, "probe fail", 0, true},
			{time.Second, "probe fail", 0, true},
			{time.Second, "probe ok", 0, false},
		}},
		{"a success sent before a later failure does not restore", []step{
			{time.Second, "request fail", 0, true}, // a request stalled there, reported now
			{0, "probe ok", 10 * time.Millisecond, true},
			{time.Second, "probe ok", 0, false}, // sent after the failure
		}},
		{"a stalled probe, then one that got through sent earlier", []step{
			{2 * time.Second, "probe stall", 0, true},
			{0, "probe ok", 500 * time.Millisecond, true},
			{time.Second, "probe ok", 0, false},
		}},
		{"overload is neutral", []step{
			{2 * time.Second, "probe overload", 0, true},
			{0, "probe ok", 0, false},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newOutlierFixture(t, 3, outlier.Options{})
			f.probed(2, f.clock.Now(), success) // active
			f.hit(0, connectFail)               // ejected for 1 s
			for i, s := range tt.steps {
				f.clock.Advance(s.advance)
				sent := f.clock.Now().Add(-s.sentAgo)
				switch s.what {
				case "probe ok":
					f.probed(0, sent, success)
				case "probe fail":
					f.probed(0, sent, connectFail)
				case "probe stall":
					f.probed(0, sent, routing.DoneInfo{Err: errConnect, Failure: routing.FailureConnect})
				case "probe overload":
					f.probed(0, sent, overload)
				case "request fail":
					// A request picked before the ejection, reported now: ignored for the
					// ejection, but heard of.
					f.o.Completed(0, f.clock.Now().Add(-5*time.Second), timeoutFail)
				}
				if _, out := f.ejectedFor(0); out != s.out {
					t.Fatalf("step %d (%s after %v): out of rotation %v, want %v", i+1, s.what, s.advance, out, s.out)
				}
			}
			if st := f.o.Stats(); st.Probes != 0 || st.Ejections != 1 {
				t.Errorf("stats %+v: want 0 user probes and the one ejection", st)
			}
		})
	}
}

// A probe of a backend in rotation counts as a request's outcome: a refused probe ejects at
// once, server errors count toward the consecutive-failure limit.
func TestActiveProbeInRotation(t *testing.T) {
	f := newOutlierFixture(t, 4, outlier.Options{MaxEjectedPercent: 100})
	f.probed(0, f.clock.Now(), connectFail)
	if _, out := f.ejectedFor(0); !out {
		t.Fatal("a refused probe did not eject b0")
	}
	for range 4 {
		f.probed(1, f.clock.Now(), serverFail)
	}
	if _, out := f.ejectedFor(1); out {
		t.Fatal("4 failed probes ejected b1, want 5")
	}
	f.probed(1, f.clock.Now(), serverFail)
	if _, out := f.ejectedFor(1); !out {
		t.Fatal("5 failed probes did not eject b1")
	}
}

// Without a checker the Detector is passive health alone: half-open admits one user request as
// its probe (the behaviour library users who run no checker keep).
func TestPassiveWithoutChecker(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	f.hit(0, connectFail)
	f.clock.Advance(time.Second)
	f.hit(0, success)
	if st := f.o.Stats(); st.Probes != 1 || st.Restored != 1 {
		t.Errorf("stats %+v: want the user request as the probe that restored b0", st)
	}
}

// A checker that stops reporting does not keep a backend out for good: one the checker has
// not reported on for MaxEjection returns at the next sweep.
func TestActiveCheckerGone(t *testing.T) {
	f := newOutlierFixture(t, 4, outlier.Options{MaxEjection: 5 * time.Second, Window: time.Second})
	f.probed(1, f.clock.Now(), success)
	f.hit(0, connectFail)
	f.clock.Advance(2 * time.Second)
	f.probed(0, f.clock.Now(), connectFail) // still down
	f.clock.Advance(4 * time.Second)
	f.hit(1, success) // a sweep: b0 reported on 4 s ago
	if _, out := f.ejectedFor(0); !out {
		t.Fatal("b0 returned while the checker reported on it within MaxEjection")
	}
	f.clock.Advance(2 * time.Second)
	f.hit(1, success)
	if _, out := f.ejectedFor(0); out {
		t.Fatal("b0 still out 6 s after the checker's last report (MaxEjection 5 s)")
	}
}
