package flowcontroltest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTimers(t *testing.T) {
	c := new(flowcontroltest.FakeClock)
	c.Set(start)
	a, b := c.NewTimer(time.Second), c.NewTimer(3*time.Second)
	steps := []struct {
		advance     time.Duration
		aFired      bool
		bFired      bool
		armedBefore int
	}{
		{500 * time.Millisecond, false, false, 2},
		{500 * time.Millisecond, true, false, 2},
		{2 * time.Second, false, true, 1},
	}
	for i, s := range steps {
		if got := flowcontroltest.Timers(c); got != s.armedBefore {
			t.Errorf("step %d: %d timers armed, want %d", i, got, s.armedBefore)
		}
		c.Advance(s.advance)
		if got := fired(a); got != s.aFired {
			t.Errorf("step %d: a fired = %v, want %v", i, got, s.aFired)
		}
		if got := fired(b); got != s.bFired {
			t.Errorf("step %d: b fired = %v, want %v", i, got, s.bFired)
		}
	}
	a.Reset(time.Second)
	if !a.Stop() {
		t.Error("Stop of an armed timer = false")
	}
	c.Advance(time.Hour)
	if fired(a) || a.Stop() {
		t.Error("stopped timer fired or reports armed")
	}
	a.Reset(time.Second)
	c.Advance(time.Second) // fires; the value sits in the channel
	a.Reset(time.Minute)   // discards it
	if fired(a) {
		t.Error("stale value received after Reset")
	}
	a.Reset(0)
	if !fired(a) {
		t.Error("Reset(0) did not fire at once")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Hour + 3*time.Second + time.Second)) {
		t.Errorf("Now = %v", got)
	}
}

func fired(t flowcontrol.Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestMisuse(t *testing.T) {
	c := new(flowcontroltest.FakeClock)
	c.Set(start)
	for name, f := range map[string]func(){
		"negative advance": func() { c.Advance(-1) },
		"backwards":        func() { c.Set(start.Add(-time.Second)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// A blocked Admit sleeps on a timer of the fake clock; advancing the clock past its
// deadline expires it, without any real waiting.
func ExampleFakeClock() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(start)
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		MaxInFlight: 1,
		TTL:         time.Minute,
	})
	busy, _ := q.Admit(context.Background(), flowcontrol.Request{})
	errc := make(chan error)
	go func() {
		_, err := q.Admit(context.Background(), flowcontrol.Request{})
		errc <- err
	}()
	clk.WaitTimers(1) // the second Admit is asleep
	clk.Advance(time.Minute)
	err := <-errc
	fmt.Println(err, errors.Is(err, flowcontrol.ErrExpired))
	busy.Done(flowcontrol.Usage{})
	// Output:
	// flowcontrol: deadline passed while waiting true
}
