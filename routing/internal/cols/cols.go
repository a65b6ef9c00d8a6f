// Package cols is the columnar view of a pick's candidates that package routing fills and the
// built-in scorers (routing/load, routing/prefix, the latency terms) read: one dense slice per
// input, holding for every candidate what a scorer's formula starts from, with the missing and
// stale values already turned into NaN. A pick fills the columns its scorers need once, however
// many scorers use them, and each scorer then runs over contiguous numbers instead of striding
// through Candidates and the states they point to.
//
// A scorer that can score the columns implements, besides routing.Scorer,
//
//	Needs() cols.Mask
//	AddCols(req *routing.Request, c *cols.Cols[routing.Candidate, routing.BackendID, routing.Signal], w float64, tot []float64)
//
// Needs says which columns AddCols reads; AddCols adds w·dst[i] to tot[i] for every candidate
// i < len(tot), where dst[i] is bit for bit what Score would write given the Candidates the
// columns were taken from, every value in [0, 1] whatever the candidates hold. A scorer that
// reads many inputs of each candidate may also implement
//
//	CandNeeds() cols.Mask
//
// to read Cols.Cands, when set, in one pass instead: the router's general path (which has the
// Candidates) then fills only the columns CandNeeds names. The concrete scorer types are
// unexported, so these methods stay off the module's public API.
package cols

import "math"

// Mask is a set of columns.
type Mask uint8

const (
	Queued  Mask = 1 << iota // Cols.Queued
	Running                  // Cols.Running
	KV                       // Cols.KV
	Active                   // Cols.Active
	Tokens                   // Cols.Tokens
	Matched                  // Cols.Matched and Cols.MatchedTokens
	ID                       // Cols.IDs
)

// Cols is the columnar view of one pick's candidates, index for index, over routing's
// Candidate (C), BackendID (ID) and Signal (S) types. Only the columns in the mask that filled
// them are meaningful.
type Cols[C, ID, S any] struct {
	// Queued and Running are State.Queued and State.Running where the signal is fresh, NaN
	// where it is not.
	Queued, Running []float64
	// KV is 1 − State.KVUtilization where SignalKVUtilization is fresh and the value is in
	// [0, 1], NaN otherwise.
	KV []float64
	// Active is InFlight.Requests.
	Active []float64
	// Tokens is InFlight.PrefillTokens + UncachedTokens.
	Tokens []int64
	// Matched and MatchedTokens are MatchedBlocks and MatchedTokens.
	Matched, MatchedTokens []int
	// Fresh is Fresh; only the router's gather fills it, for its own use.
	Fresh []S
	// IDs are the candidates' BackendIDs.
	IDs []ID
	// TTFT and TPOT are scratch for a scorer's own use during its AddCols (routing/latency).
	TTFT, TPOT []float64
	// Cands are the Candidates the columns were taken from, nil when the router gathered them
	// from its snapshot: a scorer that reads many inputs of each candidate reads them here in
	// one pass rather than have the router fill a column for each.
	Cands []C
	// The statistics of Queued, Running and KV, when known beforehand (the snapshot's
	// columns); the scorers compute them otherwise.
	QueuedStats, RunningStats, KVStats Stats
}

// Grow gives every column n entries. It allocates.
func (c *Cols[C, ID, S]) Grow(n int) {
	c.Queued, c.Running = make([]float64, n), make([]float64, n)
	c.KV, c.Active = make([]float64, n), make([]float64, n)
	c.Tokens = make([]int64, n)
	c.Matched, c.MatchedTokens = make([]int, n), make([]int, n)
	c.Fresh = make([]S, n)
	c.IDs = make([]ID, n)
	c.TTFT, c.TPOT = make([]float64, n), make([]float64, n)
}

// Stats summarises a column: the range of its known (non-NaN) entries, their sum in index
// order and their number. OK says whether the other fields are set.
type Stats struct {
	Lo, Hi, Sum float64
	Known       int
	OK          bool
}

// StatsOf returns col's statistics. Lo and Hi are taken with plain comparisons, not the min
// and max builtins: those order NaN and ±0, which the test v == v and the normalisation make
// moot, at several instructions an element. O(len(col)).
func StatsOf(col []float64) Stats {
	st := Stats{Lo: math.Inf(1), Hi: math.Inf(-1), OK: true}
	for _, v := range col {
		if v == v {
			if v < st.Lo {
				st.Lo = v
			}
			if v > st.Hi {
				st.Hi = v
			}
			st.Sum += v
			st.Known++
		}
	}
	return st
}

// KVFree is 1 − u for a utilisation u in [0, 1], NaN for anything else (a custom filter's
// candidate whose state was never sanitised).
func KVFree(u float64) float64 {
	if !(u >= 0 && u <= 1) {
		return math.NaN()
	}
	return 1 - u
}

// Impute replaces the NaN placeholders in dst by the mean of the known scores (sum over known
// of them), or by 0.5 when none is known. O(len(dst)).
func Impute(dst []float64, sum float64, known int) {
	fill := 0.5
	if known > 0 {
		fill = sum / float64(known)
	}
	for i, v := range dst {
		if v != v {
			dst[i] = fill
		}
	}
}
