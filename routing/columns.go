package routing

import (
	"math"
	"time"

	colx "github.com/usher-llm/usher/routing/internal/cols"
)

// The built-in scorers (unitScorer) do not read Candidates. They read cols: one dense slice
// per input, holding for every candidate what the scorer's formula starts from, with the
// missing and stale values already turned into NaN. A pick fills the columns its scorers need
// once, however many scorers use them, and each scorer then runs over contiguous numbers
// instead of striding through Candidates and the states they point to.
//
// Pick fills them in one of two ways, which agree value for value:
//
//   - from the Candidates, after the filters (cols.from): the general path;
//   - straight from the snapshot (candParams.gather) when every backend is a candidate and
//     no filter can change that (Router.fast): no Candidate is built but the chosen one.
//
// Each built-in scorer's Score, which custom code and tests may call, computes the same values
// from Candidates; TestUnitScorerColumns checks the two bit for bit.

// colMask is a set of columns (see package routing/internal/cols).
type colMask = colx.Mask

const (
	colQueued  = colx.Queued
	colRunning = colx.Running
	colKV      = colx.KV
	colActive  = colx.Active
	colTokens  = colx.Tokens
	colMatched = colx.Matched
	colID      = colx.ID
)

// cols is the columnar view of one pick's candidates, index for index (see package
// routing/internal/cols). Only the columns in the mask that filled them are meaningful.
type cols = colx.Cols[Candidate, BackendID, Signal]

// colStats summarises a column.
type colStats = colx.Stats

var (
	statsOf = colx.StatsOf
	kvFree  = colx.KVFree
)

// from fills the columns in need from cands (len(cands) ≤ the columns' length).
// O(len(cands)), no allocation.
func colsFrom(c *cols, cands []Candidate, need colMask) {
	n := len(cands)
	c.Cands = cands
	c.QueuedStats, c.RunningStats, c.KVStats = colStats{}, colStats{}, colStats{}
	if need&colQueued != 0 {
		dst := c.Queued[:n]
		for i := range cands {
			v := math.NaN()
			if cd := &cands[i]; cd.Fresh&SignalQueued != 0 {
				v = float64(cd.State.Queued)
			}
			dst[i] = v
		}
	}
	if need&colRunning != 0 {
		dst := c.Running[:n]
		for i := range cands {
			v := math.NaN()
			if cd := &cands[i]; cd.Fresh&SignalRunning != 0 {
				v = float64(cd.State.Running)
			}
			dst[i] = v
		}
	}
	if need&colKV != 0 {
		dst := c.KV[:n]
		for i := range cands {
			v := math.NaN()
			if cd := &cands[i]; cd.Fresh&SignalKVUtilization != 0 {
				v = kvFree(cd.State.KVUtilization)
			}
			dst[i] = v
		}
	}
	if need&colActive != 0 {
		dst := c.Active[:n]
		for i := range cands {
			dst[i] = float64(cands[i].InFlight.Requests)
		}
	}
	if need&colTokens != 0 {
		dst := c.Tokens[:n]
		for i := range cands {
			dst[i] = cands[i].InFlight.PrefillTokens + int64(cands[i].UncachedTokens)
		}
	}
	if need&colMatched != 0 {
		m, mt := c.Matched[:n], c.MatchedTokens[:n]
		for i := range cands {
			m[i], mt[i] = cands[i].MatchedBlocks, cands[i].MatchedTokens
		}
	}
	if need&colID != 0 {
		ids := c.IDs[:n]
		for i := range cands {
			ids[i] = cands[i].ID
		}
	}
}

// summarise sets what s keeps for picks besides its backends, from them: the range of their
// updated times, and the polled signals' columns with their statistics as they are while every
// backend is fresh (Fresh = Known). O(n); it allocates the columns.
func (s *snapshot) summarise() {
	n := len(s.backends)
	col := make([]float64, 3*n)
	s.queued, s.running, s.kv = col[:n:n], col[n:2*n:2*n], col[2*n:]
	s.oldest, s.newest = math.MaxInt64, math.MinInt64
	for i := range s.backends {
		b := &s.backends[i]
		if b.updated == 0 {
			s.never = true
		}
		s.oldest, s.newest = min(s.oldest, b.updated), max(s.newest, b.updated)
		known := b.state.Known
		s.queued[i], s.running[i], s.kv[i] = math.NaN(), math.NaN(), math.NaN()
		if known&SignalQueued != 0 {
			s.queued[i] = float64(b.state.Queued)
		}
		if known&SignalRunning != 0 {
			s.running[i] = float64(b.state.Running)
		}
		if known&SignalKVUtilization != 0 {
			s.kv[i] = kvFree(b.state.KVUtilization)
		}
	}
	s.queuedStats, s.runningStats, s.kvStats = statsOf(s.queued), statsOf(s.running), statsOf(s.kv)
}

// allFresh reports whether no backend's signals are stale at nowNs, in O(1): whether every
// age nowNs − updated is at most staleAfter. When nowNs − oldest and nowNs − newest do not
// overflow, every age lies between them without overflowing either; when one does, it
// reports false and the caller takes each backend's age as candidates does.
func (s *snapshot) allFresh(nowNs int64, staleAfter time.Duration) bool {
	if s.never {
		return false
	}
	if staleAfter < 0 {
		return true
	}
	maxAge, minAge := nowNs-s.oldest, nowNs-s.newest
	if subOverflows(nowNs, s.oldest, maxAge) || subOverflows(nowNs, s.newest, minAge) {
		return false
	}
	return time.Duration(maxAge) <= staleAfter
}

// subOverflows reports whether d = x − y overflowed int64.
func subOverflows(x, y, d int64) bool { return (x^y)&(x^d) < 0 }

// gather points view at the columns in need holding the values the Candidates of s's backends
// would give, every backend a candidate at its own index, and returns how many of them are
// stale: fill's arithmetic without the Candidates. The polled signals' columns are the
// snapshot's own while every backend is fresh (view must then only be read); the others are
// computed into own (columns of at least len(s.backends) entries), one pass per column, which
// keeps each loop's working set in registers and reads only the state and counters the
// columns need. O(len(s.backends)·columns), no allocation.
func (p *candParams) gather(s *snapshot, own, view *cols, need colMask) (stale int) {
	backends := s.backends
	n := len(backends)
	if s.allFresh(p.nowNs, p.staleAfter) {
		view.Queued, view.Running, view.KV = s.queued, s.running, s.kv
		view.QueuedStats, view.RunningStats, view.KVStats = s.queuedStats, s.runningStats, s.kvStats
	} else {
		stale = p.gatherSignals(backends, own, need)
		view.Queued, view.Running, view.KV = own.Queued, own.Running, own.KV
		view.QueuedStats, view.RunningStats, view.KVStats = colStats{}, colStats{}, colStats{}
	}
	view.Active, view.Tokens, view.Matched, view.MatchedTokens = own.Active, own.Tokens, own.Matched, own.MatchedTokens
	view.IDs, view.TTFT, view.TPOT, view.Cands = own.IDs, own.TTFT, own.TPOT, nil
	if need&colID != 0 {
		ids := own.IDs[:n]
		for i := range backends {
			ids[i] = backends[i].id
		}
	}
	if need&colActive != 0 {
		dst := own.Active[:n]
		for i := range backends {
			l := backends[i].load
			dst[i] = float64(l.requests.Load() + l.peerRequests.Load())
		}
	}
	if need&(colTokens|colMatched) != 0 {
		matched, tokens := own.Matched[:n], own.MatchedTokens[:n]
		if match, chain, bs := p.match, p.chain, p.bs; len(match) > 0 {
			for i := range backends {
				m := 0
				if ix := backends[i].index; ix >= 0 && ix < int64(len(match)) {
					m = min(int(match[ix]), chain)
				}
				matched[i], tokens[i] = m, m*bs
			}
		} else {
			clear(matched)
			clear(tokens)
		}
		if need&colTokens != 0 {
			dst, prompt := own.Tokens[:n], p.prompt
			for i := range backends {
				l := backends[i].load
				dst[i] = l.prefill.Load() + l.peerPrefill.Load() + int64(max(0, prompt-tokens[i]))
			}
		}
	}
	return stale
}

// gatherSignals is gather's part for the polled signals when some backend may be stale: it
// computes each backend's fresh signals as fill does and, from them, the signal columns in
// need, and returns how many backends are stale. O(len(backends)·columns).
func (p *candParams) gatherSignals(backends []backend, c *cols, need colMask) (stale int) {
	n := len(backends)
	fresh := c.Fresh[:n]
	nowNs, staleAfter := p.nowNs, p.staleAfter
	for i := range backends {
		b := &backends[i]
		f := Signal(0)
		if b.updated != 0 {
			if age := time.Duration(nowNs - b.updated); staleAfter < 0 || age <= staleAfter {
				f = b.state.Known
				stale--
			}
		}
		fresh[i] = f
	}
	stale += n
	if need&colQueued != 0 {
		dst := c.Queued[:n]
		for i := range backends {
			v := math.NaN()
			if fresh[i]&SignalQueued != 0 {
				v = float64(backends[i].state.Queued)
			}
			dst[i] = v
		}
	}
	if need&colRunning != 0 {
		dst := c.Running[:n]
		for i := range backends {
			v := math.NaN()
			if fresh[i]&SignalRunning != 0 {
				v = float64(backends[i].state.Running)
			}
			dst[i] = v
		}
	}
	if need&colKV != 0 {
		dst := c.KV[:n]
		for i := range backends {
			v := math.NaN()
			if fresh[i]&SignalKVUtilization != 0 {
				v = kvFree(backends[i].state.KVUtilization)
			}
			dst[i] = v
		}
	}
	return stale
}
