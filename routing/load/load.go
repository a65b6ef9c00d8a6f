// Package load holds the load scorers of a [routing.Profile]: queue depth ([QueueDepth]),
// running requests ([Running]), the router's own requests in flight ([Active]), KV-cache
// utilisation ([KV]), a queue threshold ([QueueThreshold]), the token backlog ([TokenBacklog])
// and the prefill backlog ([Prefill]). Each writes a score in [0, 1] per candidate, 1 for the
// least loaded, from the candidate's published state or the router's own in-flight counters.
// A signal a backend did not report, or reported too long ago, is imputed from the others,
// never read as zero load. O(candidates) per pick, no allocation; safe for concurrent use.
package load

import (
	"math"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cols"
)

// colsT is the columns a pick fills for the scorers that read them.
type colsT = cols.Cols[routing.Candidate, routing.BackendID, routing.Signal]

// The built-in scorers. Each documents its formula, its cost (all are O(n) in the number of
// candidates and allocate nothing) and what it does with a candidate whose signal is missing or
// stale. The load scorers impute such a candidate: it receives the mean score of the candidates
// whose signal is fresh, so it neither wins as if idle nor loses as if saturated on that term,
// and the other terms of the blend decide. When no candidate has the signal, every candidate
// scores 0.5 (no information). The router counts such candidates in Stats.StaleCandidates.

// DefaultTokenCap is the in-flight token count at which TokenBacklog reaches 0 (llm-d's
// token-load scorer uses 4,194,304).
const DefaultTokenCap = 4194304

// QueueDepth scores by the server's waiting queue, min-max normalised over the candidates
// (llm-d's queue scorer):
//
//	score = (max − queued) / (max − min), or 1 for all when max = min
//
// Candidates without a fresh routing.SignalQueued are imputed (see the package's scorer notes).
func QueueDepth() routing.Scorer { return minMaxScorer{kind: byQueued} }

// Running scores by the server's running batch, min-max normalised like QueueDepth.
// Candidates without a fresh routing.SignalRunning are imputed.
func Running() routing.Scorer { return minMaxScorer{kind: byRunning} }

// Active scores by the router's own in-flight request count, min-max normalised like
// QueueDepth (llm-d's active-request scorer; least-request routing). The counter is always
// fresh, so nothing is imputed.
func Active() routing.Scorer { return minMaxScorer{kind: byActive} }

type loadKind uint8

const (
	byQueued loadKind = iota
	byRunning
	byActive
)

type minMaxScorer struct{ kind loadKind }

func (s minMaxScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	// First the raw values, NaN where the signal is missing or stale; then the normalisation.
	switch s.kind {
	case byQueued:
		for i := range cands {
			dst[i] = math.NaN()
			if cands[i].Fresh&routing.SignalQueued != 0 {
				dst[i] = float64(cands[i].State.Queued)
			}
		}
	case byRunning:
		for i := range cands {
			dst[i] = math.NaN()
			if cands[i].Fresh&routing.SignalRunning != 0 {
				dst[i] = float64(cands[i].State.Running)
			}
		}
	default:
		for i := range cands {
			dst[i] = float64(cands[i].InFlight.Requests)
		}
	}
	minMaxInverse(dst)
}

func (s minMaxScorer) Needs() cols.Mask {
	switch s.kind {
	case byQueued:
		return cols.Queued
	case byRunning:
		return cols.Running
	}
	return cols.Active
}

// addCols implements the router's column path (see routing/internal/cols): one pass takes the range of the raw values, one more
// normalises and adds them.
func (s minMaxScorer) AddCols(_ *routing.Request, c *colsT, w float64, tot []float64) {
	var (
		raw []float64
		st  cols.Stats
	)
	switch s.kind {
	case byQueued:
		raw, st = c.Queued[:len(tot)], c.QueuedStats
	case byRunning:
		raw, st = c.Running[:len(tot)], c.RunningStats
	default:
		raw = c.Active[:len(tot)]
	}
	if !st.OK {
		st = cols.StatsOf(raw) // minMaxInverse's comparisons, in the same order
	}
	addMinMaxInverse(raw, st.Lo, st.Hi, st.Known, w, tot)
}

// minMaxInverse maps raw loads in dst to (max − v)/(max − min), 1 for all when max = min, and
// imputes NaN entries (missing values). O(n).
func minMaxInverse(dst []float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	known := 0
	for _, v := range dst {
		// Plain comparisons, not the min and max builtins: those order NaN and ±0, which the
		// test v == v and the normalisation make moot, at several instructions an element.
		if v == v {
			if v < lo {
				lo = v
			}
			if v > hi {
				hi = v
			}
			known++
		}
	}
	sum := 0.0
	if span := hi - lo; span > 0 {
		inv := 1 / span
		for i, v := range dst {
			if v == v {
				v = (hi - v) * inv
				dst[i] = v
				sum += v
			}
		}
	} else {
		for i, v := range dst {
			if v == v {
				dst[i] = 1
				sum++
			}
		}
	}
	if known < len(dst) {
		cols.Impute(dst, sum, known)
	}
}

// addMinMaxInverse adds w times minMaxInverse(raw) to tot, given the range [lo, hi] of raw's
// known (non-NaN) entries and their number. len(tot) == len(raw). O(n).
func addMinMaxInverse(raw []float64, lo, hi float64, known int, w float64, tot []float64) {
	tot = tot[:len(raw)]
	sum := 0.0
	if span := hi - lo; span > 0 {
		inv := 1 / span
		if known == len(raw) {
			for i, v := range raw {
				tot[i] += w * ((hi - v) * inv)
			}
			return
		}
		for i, v := range raw {
			if v == v {
				v = (hi - v) * inv
				tot[i] += w * v
				sum += v
			}
		}
	} else {
		// Every known value scores 1, and w·1 is w.
		if known == len(raw) {
			for i := range tot {
				tot[i] += w
			}
			return
		}
		for i, v := range raw {
			if v == v {
				tot[i] += w
				sum++
			}
		}
	}
	addImputed(raw, sum, known, w, tot)
}

// addImputed adds w times impute's fill to the entries of tot whose raw value is NaN: the
// mean of the known scores (sum over known of them), or 0.5 when none is known. O(n).
func addImputed(raw []float64, sum float64, known int, w float64, tot []float64) {
	fill := 0.5
	if known > 0 {
		fill = sum / float64(known)
	}
	wf := w * fill
	tot = tot[:len(raw)]
	for i, v := range raw {
		if v != v {
			tot[i] += wf
		}
	}
}

// KV scores by free KV cache: score = 1 − KVUtilization (llm-d's
// kv-cache-utilization scorer). Candidates without a fresh routing.SignalKVUtilization are imputed.
func KV() routing.Scorer { return kvScorer{} }

type kvScorer struct{}

func (kvScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	sum, known := 0.0, 0
	for i := range cands {
		if !cands[i].Fresh.Has(routing.SignalKVUtilization) {
			dst[i] = math.NaN()
			continue
		}
		u := cands[i].State.KVUtilization
		if !(u >= 0 && u <= 1) {
			// A custom filter's candidate whose state was never sanitised: unknown.
			dst[i] = math.NaN()
			continue
		}
		v := 1 - u
		dst[i] = v
		sum += v
		known++
	}
	if known < len(cands) {
		cols.Impute(dst, sum, known)
	}
}

func (kvScorer) Needs() cols.Mask { return cols.KV }

// addCols implements the router's column path (see routing/internal/cols).
func (kvScorer) AddCols(_ *routing.Request, c *colsT, w float64, tot []float64) {
	free := c.KV[:len(tot)]
	if c.KVStats.OK && c.KVStats.Known == len(free) {
		for i, v := range free {
			tot[i] += w * v
		}
		return
	}
	sum, known := 0.0, 0
	for i, v := range free {
		if v == v {
			tot[i] += w * v
			sum += v
			known++
		}
	}
	if known < len(free) {
		addImputed(free, sum, known, w, tot)
	}
}

// QueueThreshold scores by queue depth against a threshold (llm-d's load-aware scorer): an empty
// queue scores 0.5, a queue of q scores 0.5·(1 − q/threshold), and a queue at or above the
// threshold scores 0. threshold ≤ 0 means 128. Candidates without a fresh routing.SignalQueued are
// imputed.
func QueueThreshold(threshold int) routing.Scorer {
	if threshold <= 0 {
		threshold = 128
	}
	return loadAwareScorer{threshold: float64(threshold)}
}

type loadAwareScorer struct{ threshold float64 }

func (s loadAwareScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	sum, known := 0.0, 0
	for i := range cands {
		if !cands[i].Fresh.Has(routing.SignalQueued) {
			dst[i] = math.NaN()
			continue
		}
		q := float64(cands[i].State.Queued)
		v := 0.5 * max(0, 1-q/s.threshold)
		dst[i] = v
		sum += v
		known++
	}
	if known < len(cands) {
		cols.Impute(dst, sum, known)
	}
}

// TokenBacklog scores by the prefill work the router has sent the backend and not yet seen
// finish, plus this request's own uncached tokens there (llm-d's token-load scorer):
//
//	score = 1 − min(InFlight.PrefillTokens + UncachedTokens, cap) / cap
//
// cap ≤ 0 means DefaultTokenCap (4,194,304). The counters are the router's own, always
// fresh.
func TokenBacklog(capTokens int) routing.Scorer {
	if capTokens <= 0 {
		capTokens = DefaultTokenCap
	}
	return tokenLoadScorer{cap: float64(capTokens), capTokens: int64(capTokens)}
}

type tokenLoadScorer struct {
	cap       float64
	capTokens int64 // cap as an integer
}

func (s tokenLoadScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	inv := 1 / s.cap
	for i := range cands {
		t := float64(max(0, cands[i].InFlight.PrefillTokens+int64(cands[i].UncachedTokens)))
		if t > s.cap {
			t = s.cap
		}
		dst[i] = 1 - t*inv
	}
}

func (tokenLoadScorer) Needs() cols.Mask { return cols.Tokens }

// addCols implements the router's column path (see routing/internal/cols).
func (s tokenLoadScorer) AddCols(_ *routing.Request, c *colsT, w float64, tot []float64) {
	inv, capF, capI := 1/s.cap, s.cap, s.capTokens
	tokens := c.Tokens[:len(tot)]
	for i, n := range tokens {
		// Score's min(float64(max(0, n)), cap), compared as integers: float64 rounding is
		// monotone, so n < capI gives a value ≤ cap, and n ≥ capI one ≥ cap, which Score
		// replaces by cap or which equals it.
		t := capF
		if n < capI {
			t = float64(max(0, n))
		}
		tot[i] += w * (1 - t*inv)
	}
}

// Prefill scores by the prefill work the router has sent the backend and not yet seen
// finish, without this request's own tokens:
//
//	score = 1 − min(InFlight.PrefillTokens, cap) / cap
//
// Unlike TokenBacklog it does not reward a backend for holding this request's prefix, so it
// measures only how long the request would queue behind others' prefill there. cap ≤ 0 means
// 65,536 tokens (about 4 s at 15,928 tok/s). The counters are the router's own, always fresh.
func Prefill(capTokens int) routing.Scorer {
	if capTokens <= 0 {
		capTokens = 1 << 16
	}
	return prefillLoadScorer{cap: float64(capTokens)}
}

type prefillLoadScorer struct{ cap float64 }

func (s prefillLoadScorer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	inv := 1 / s.cap
	for i := range cands {
		dst[i] = 1 - min(float64(cands[i].InFlight.PrefillTokens), s.cap)*inv
	}
}
