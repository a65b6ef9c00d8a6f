// Package prefix holds the scorers that place a request by how much of its prompt a backend
// already holds, read from the prefix index the Router matched once per pick
// ([routing.Candidate].MatchedBlocks): the matched share ([Ratio]), the matched length
// ([Length]), and a tiered scorer that counts blocks offloaded to CPU memory or a shared store
// at their transfer cost relative to recomputing them ([NewTiered]). O(candidates) per pick,
// no allocation; safe for concurrent use.
package prefix

import (
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cols"
)

// colsT is the columns a pick fills for the scorers that read them.
type colsT = cols.Cols[routing.Candidate, routing.BackendID, routing.Signal]

// DefaultLengthTokens is the matched length at which PrefixLength's length term reaches 1
// (llm-d's optional length term uses 8192 tokens).
const DefaultLengthTokens = 8192

// Ratio scores a candidate by the share of the prompt's blocks it already holds:
//
//	score = MatchedBlocks / len(routing.Request.Chain)
//
// (llm-d's prefix-cache scorer). A request without a chain scores 0 everywhere. The prefix index
// is the router's own knowledge, never stale, so nothing is imputed.
func Ratio() routing.Scorer { return prefixScorer{} }

// Length is Ratio damped for short matches, because a short prompt fully matched is
// worth little prefill:
//
//	score = MatchedBlocks/len(Chain) · min(1, matched_tokens/lengthTokens)²
//
// where matched_tokens is routing.Candidate.MatchedTokens (MatchedBlocks · block size). lengthTokens ≤ 0 means
// DefaultLengthTokens (8192, llm-d's optional length term).
func Length(lengthTokens int) routing.Scorer {
	if lengthTokens <= 0 {
		lengthTokens = DefaultLengthTokens
	}
	return prefixScorer{length: float64(lengthTokens)}
}

type prefixScorer struct{ length float64 }

func (p prefixScorer) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	total := len(req.Chain)
	if total == 0 {
		clear(dst)
		return
	}
	inv := 1 / float64(total)
	for i := range cands {
		m := max(0, min(cands[i].MatchedBlocks, total))
		v := float64(m) * inv
		if p.length > 0 {
			l := min(1, float64(max(0, cands[i].MatchedTokens))/p.length)
			v *= l * l
		}
		dst[i] = v
	}
}

func (prefixScorer) Needs() cols.Mask { return cols.Matched }

// addCols implements the router's column path (see routing/internal/cols). Without a chain every score is 0 and the totals, which are
// never negative zero, stay as they are.
func (p prefixScorer) AddCols(req *routing.Request, c *colsT, w float64, tot []float64) {
	total := len(req.Chain)
	if total == 0 {
		return
	}
	inv := 1 / float64(total)
	matched, tokens := c.Matched[:len(tot)], c.MatchedTokens[:len(tot)]
	if p.length <= 0 {
		for i, m := range matched {
			tot[i] += w * (float64(max(0, min(m, total))) * inv)
		}
		return
	}
	for i, m := range matched {
		v := float64(max(0, min(m, total))) * inv
		l := min(1, float64(max(0, tokens[i]))/p.length)
		v *= l * l
		tot[i] += w * v
	}
}
