package lora

import (
	"fmt"
	"math"
	"slices"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cols"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// Defaults of [AffinityOptions].
const (
	// DefaultLoaded is [AffinityOptions.Loaded]'s default.
	DefaultLoaded = 1.0
	// DefaultLoading is [AffinityOptions.Loading]'s default.
	DefaultLoading = 0.8
	// DefaultFreeSlot is [AffinityOptions.FreeSlot]'s default.
	DefaultFreeSlot = 0.6
	// DefaultWait is [AffinityOptions.Wait]'s default.
	DefaultWait = 1.0
)

// AffinityOptions configures [NewAffinity]. Zero fields take the defaults above.
type AffinityOptions struct {
	// Loaded is the score of a backend where the request's adapter is in use: in its
	// [routing.BackendState.RunningAdapters], or in this router's requests in flight there
	// ([routing.Candidate.AdapterInFlight]; the scrape lags). Zero: [DefaultLoaded] (1). In
	// [0, 1].
	Loaded float64
	// Loading is the score of a backend where the adapter is only waiting (its requests are
	// queued or it is being loaded): sending one more there costs no second load. Zero:
	// [DefaultLoading] (0.8). In [0, 1].
	Loading float64
	// FreeSlot is the score of a backend with a free adapter slot (fewer distinct adapters
	// running or waiting than [routing.BackendState.MaxAdapters]): the adapter must be loaded,
	// but nothing waits for a slot. It is scaled by (1 + free/MaxAdapters)/2, so emptier
	// servers take new adapters first. Zero: [DefaultFreeSlot] (0.6). In [0, 1]. A backend
	// with no free slot scores 0: the request would wait for another adapter's requests to
	// finish.
	FreeSlot float64
	// Wait weighs the adapters waiting at a backend and not running there, a sign that its
	// slots are contended: Loading and FreeSlot scores are divided by 1 + Wait·waiting.
	// Zero: [DefaultWait] (1). Negative: no penalty. At most 1e6.
	Wait float64
}

// NewAffinity returns a scorer for requests that need a LoRA adapter
// ([routing.Request.Adapter]), or an error wrapping [routing.ErrInvalidOptions] when a field
// of o is out of range.
//
// A backend where the adapter is in use scores Loaded; one where it is only waiting scores
// Loading; one with a free adapter slot scores FreeSlot scaled by the share of slots free; one
// whose slots are all in use scores 0; the last two are divided by 1 + Wait·(adapters waiting
// there and not running). A request without an adapter scores 0 everywhere, so the term
// changes nothing for base-model traffic.
//
// A backend without fresh [routing.SignalAdapters], and with none of this router's requests
// for the adapter in flight, is imputed the mean score of the candidates that have the signal
// fresh (0.5 when none has), as the load scorers do.
//
// This is GIE's LoRA-affinity tiers (running 1, capacity 0.8, waiting 0.6, full 0) with three
// changes measured on the bench simulator (bench/README.md, "LoRA adapters"): the router's own
// in-flight requests count as running, because a scrape lags the burst that loads an adapter;
// waiting adapters count against a backend, because they mean its slots are contended; and a
// backend where the adapter already waits ranks above a free slot, since joining it costs no
// second load. Weigh it against a load term: on its own it would pin each adapter to the first
// backend that ran it.
//
// Score is O(n·log k) for n candidates and k adapters per backend and allocates nothing. The
// scorer is immutable and safe for concurrent use.
func NewAffinity(o AffinityOptions) (routing.Scorer, error) {
	a := &affinity{loaded: o.Loaded, loading: o.Loading, free: o.FreeSlot, wait: o.Wait}
	for _, f := range []struct {
		name string
		v    *float64
		def  float64
	}{{"Loaded", &a.loaded, DefaultLoaded}, {"Loading", &a.loading, DefaultLoading}, {"FreeSlot", &a.free, DefaultFreeSlot}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if !(*f.v >= 0 && *f.v <= 1) {
			return nil, fmt.Errorf("%w: AffinityOptions.%s %v (want a value in [0, 1])", routing.ErrInvalidOptions, f.name, *f.v)
		}
	}
	switch {
	case a.wait == 0:
		a.wait = DefaultWait
	case a.wait < 0:
		a.wait = 0
	case !(a.wait <= 1e6):
		return nil, fmt.Errorf("%w: AffinityOptions.Wait %v (want a finite value ≤ 1e6)", routing.ErrInvalidOptions, o.Wait)
	}
	return a, nil
}

// affinity is NewAffinity's scorer.
type affinity struct {
	loaded, loading, free, wait float64
}

// Score implements routing.Scorer. O(n·log k), no allocation.
func (a *affinity) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	if req.Adapter == "" {
		clear(dst)
		return
	}
	// Impute from the candidates scored on fresh signals only: one known solely from this
	// router's in-flight count says nothing of the others.
	sum, known, unknown := 0.0, 0, 0
	for i := range cands {
		c := &cands[i]
		if !c.Fresh.Has(routing.SignalAdapters) {
			v := math.NaN()
			if c.AdapterInFlight > 0 {
				v = a.loaded
			} else {
				unknown++
			}
			dst[i] = v
			continue
		}
		v := a.score(req, c)
		dst[i] = v
		sum += v
		known++
	}
	if unknown > 0 {
		cols.Impute(dst, sum, known)
	}
}

// score returns the score of c, which has fresh SignalAdapters, for req.Adapter.
func (a *affinity) score(req *routing.Request, c *routing.Candidate) float64 {
	if c.AdapterInFlight > 0 {
		return a.loaded
	}
	running, waiting, used, waitOnly, ok := hook.Adapter(req, c)
	if !ok {
		// A candidate built outside a Router: read the names. O(k²) for k names.
		st := c.State
		running = slices.Contains(st.RunningAdapters, req.Adapter)
		waiting = slices.Contains(st.WaitingAdapters, req.Adapter)
		used, waitOnly = distinctAdapters(st.RunningAdapters, st.WaitingAdapters)
	}
	switch {
	case running:
		return a.loaded
	case waiting:
		return a.loading / (1 + a.wait*float64(waitOnly-1))
	}
	slots := c.State.MaxAdapters
	if used >= slots || slots <= 0 {
		return 0
	}
	share := float64(slots-used) / float64(slots)
	return a.free * (1 + share) / 2 / (1 + a.wait*float64(waitOnly))
}

// distinctAdapters returns the number of distinct names in running ∪ waiting and of those
// in waiting only. O((r + w)²).
func distinctAdapters(running, waiting []string) (used, waitOnly int) {
	for i, r := range running {
		if r != "" && !slices.Contains(running[:i], r) {
			used++
		}
	}
	for i, w := range waiting {
		if w != "" && !slices.Contains(waiting[:i], w) && !slices.Contains(running, w) {
			used++
			waitOnly++
		}
	}
	return used, waitOnly
}
