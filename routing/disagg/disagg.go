package disagg

import (
	"errors"
	"fmt"

	"github.com/usher-llm/usher/routing/internal/hook"

	"github.com/usher-llm/usher/routing"
)

// A Decider decides, per request, whether disaggregated serving is worth it: whether the
// request's prompt is prefilled on a prefill server and its KV transferred to the decode
// server the router chose (true), or the decode server prefills it itself (false).
//
// Disaggregated serving is two picks: the decode pick first (Request.Role RoleDecode), whose
// Result says how much of the prompt the decode server is believed to hold; then, if the
// Decider says so, the prefill pick (Role RolePrefill). The caller passes the decode pick's
// Result, open; the Decider must not close it or keep it.
//
// Disaggregate is called on the request path: it must be fast, allocation-free and safe for
// concurrent use.
type Decider interface {
	Disaggregate(req *routing.Request, decode *routing.Result) bool
}

// Func adapts a function to a Decider; it is as safe for concurrent use as the
// function.
type Func func(req *routing.Request, decode *routing.Result) bool

// Disaggregate calls f.
func (f Func) Disaggregate(req *routing.Request, decode *routing.Result) bool {
	return f(req, decode)
}

// Always is the Decider that disaggregates every request. Always and Never are immutable and
// safe for concurrent use.
var Always Decider = constDecider(true)

// Never is the Decider that disaggregates nothing: decode servers serve every request whole.
var Never Decider = constDecider(false)

// constDecider always says the same (a comparable type, unlike a Func).
type constDecider bool

func (d constDecider) Disaggregate(*routing.Request, *routing.Result) bool { return bool(d) }

// PrefixOptions configures NewPrefix.
type PrefixOptions struct {
	// MinUncachedTokens is the shortest uncached part of the prompt (prompt tokens the decode
	// server is not believed to hold) that is sent to a prefill server; a shorter one the
	// decode server prefills itself. Zero: 512. Negative: an error.
	MinUncachedTokens int `json:"min_uncached_tokens"`
	// BusyDecodes, if positive, makes the decider also weigh what an aggregated prefill
	// costs the decode server's other requests: a prefill of U uncached tokens stalls the R
	// answers it is producing (its running requests as scraped, or this router's requests
	// in flight there, whichever is larger) for about U tokens' compute, so the prefill is
	// sent away when U is at least MinUncachedTokens × BusyDecodes / max(R, BusyDecodes)
	// — at MinUncachedTokens when R ≥ BusyDecodes, at up to BusyDecodes × MinUncachedTokens
	// on a server with one answer running, and never on an idle decode server unless U is
	// that long. Zero: off (llm-d's prefix-based decider: the uncached length alone).
	BusyDecodes int `json:"busy_decodes"`
}

// prefix is the decider [NewPrefix] returns.
type prefix struct {
	min, busy int
}

// defaultMinUncached is both deciders' MinUncachedTokens when zero.
const defaultMinUncached = 512

// ErrInvalidOptions is wrapped by the errors of the decider constructors.
var ErrInvalidOptions = errors.New("disagg: invalid decider options")

// NewPrefix returns llm-d's prefix-based decider, optionally made aware of the decode server's
// load ([PrefixOptions].BusyDecodes): disaggregate when the part of the prompt the decode
// server does not hold is long enough to be worth a prefill elsewhere and a transfer.
// Its Disaggregate is O(1) and allocates nothing; the decider is immutable, safe for
// concurrent use.
func NewPrefix(o PrefixOptions) (Decider, error) {
	if o.MinUncachedTokens < 0 || o.BusyDecodes < 0 {
		return nil, fmt.Errorf("%w: min_uncached_tokens %d, busy_decodes %d: want ≥ 0", ErrInvalidOptions, o.MinUncachedTokens, o.BusyDecodes)
	}
	if o.MinUncachedTokens == 0 {
		o.MinUncachedTokens = defaultMinUncached
	}
	return &prefix{min: o.MinUncachedTokens, busy: o.BusyDecodes}, nil
}

// Disaggregate implements Decider.
func (d *prefix) Disaggregate(req *routing.Request, decode *routing.Result) bool {
	u := decode.UncachedTokens
	if d.busy == 0 {
		return u >= d.min
	}
	r := 0
	if decode.Backend != nil && decode.Backend.Known&routing.SignalRunning != 0 {
		r = decode.Backend.Running
	}
	if own, ok := hook.OwnRequests(decode); ok {
		// This router's requests there, the new one (already counted) excluded.
		r = max(r, int(own)-1)
	}
	need := d.min * d.busy / max(r, 1)
	return u >= max(d.min, need)
}

// PoolAwareOptions configures [NewPoolAware].
type PoolAwareOptions struct {
	// MinUncachedTokens is the shortest uncached part of the prompt sent to a prefill server,
	// as for [NewPrefix]. Zero: 512. Negative: an error.
	MinUncachedTokens int `json:"min_uncached_tokens"`
}

// poolAware is the decider [NewPoolAware] returns.
type poolAware struct{ min int }

// NewPoolAware returns the prefix rule weighed by the prefill pool's load: a request whose decode
// server lacks at least MinUncachedTokens of its prompt is prefilled elsewhere only while some
// server that prefills (RolePrefill or RoleBoth, not the decode server itself, not unhealthy)
// has no more prefill work in flight — uncached prompt tokens picked and not yet prefilled, this
// router's and its peers' — than the decode server has with this request. Below the prefill
// pool's capacity it disaggregates almost as often as [NewPrefix]'s decider; past it, where the prefix
// rule keeps queueing prefills on a saturated pool (in the simulator, first tokens 30× later),
// it sends them back to the decode servers, which then degrade as an aggregated fleet does.
//
// It reads the pool from the router that made the decode pick (through the Result), so it
// needs no wiring; a Result that no Router made (a test's) is judged by the prefix rule alone.
// O(backends) per decision, no allocation; immutable, safe for concurrent use.
func NewPoolAware(o PoolAwareOptions) (Decider, error) {
	if o.MinUncachedTokens < 0 {
		return nil, fmt.Errorf("%w: min_uncached_tokens %d: want ≥ 0", ErrInvalidOptions, o.MinUncachedTokens)
	}
	if o.MinUncachedTokens == 0 {
		o.MinUncachedTokens = defaultMinUncached
	}
	return &poolAware{min: o.MinUncachedTokens}, nil
}

// Disaggregate implements Decider.
func (d *poolAware) Disaggregate(_ *routing.Request, decode *routing.Result) bool {
	if decode.UncachedTokens < d.min {
		return false
	}
	found, ok := hook.PrefillElsewhere(decode)
	return found || !ok
}
