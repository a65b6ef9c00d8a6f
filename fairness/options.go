package fairness

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidOptions is returned (wrapped) by the constructors when their options are
// invalid.
var ErrInvalidOptions = errors.New("fairness: invalid options")

// DefaultMaxIdle is the number of idle flows a policy remembers when Memory.MaxIdle is zero.
const DefaultMaxIdle = 1 << 16

// Memory bounds a policy's per-flow history. History is kept per queue flow — the flow id
// the gateway assigned, in one band — and is only what the queue observed (dispatches,
// completions with their usage), never a request field a client could set.
//
// A flow with work queued or in flight is always remembered (the queue's own capacity bounds
// how many there are). Once idle, a flow is remembered for Forget and among at most MaxIdle
// idle flows (the longest idle is forgotten first); a forgotten flow that returns starts
// from scratch. The zero value means the policy's defaults.
type Memory struct {
	// MaxIdle bounds the idle flows remembered; zero means DefaultMaxIdle.
	MaxIdle int
	// Forget is how long an idle flow is remembered; zero means the policy's default.
	Forget time.Duration
}

func (m Memory) resolve(forget time.Duration) (Memory, error) {
	if m.MaxIdle < 0 || m.Forget < 0 {
		return m, fmt.Errorf("%w: negative Memory field", ErrInvalidOptions)
	}
	if m.MaxIdle == 0 {
		m.MaxIdle = DefaultMaxIdle
	}
	if m.Forget == 0 {
		m.Forget = forget
	}
	return m, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}
