package bench

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// Errors returned by the workload loaders and Run, wrapped with context.
var (
	// ErrInvalidWorkload: a trace line or a generated workload is unusable.
	ErrInvalidWorkload = errors.New("bench: invalid workload")
	// ErrInvalidConfig: Run was given a configuration it cannot simulate.
	ErrInvalidConfig = errors.New("bench: invalid config")
)

// Request is one request of a Workload.
//
// A request either arrives at a fixed time (open loop, Prev < 0: At is the offset from the start
// of the run) or follows an earlier turn of its session (closed loop, Prev ≥ 0: it arrives At
// after request Prev completed, the user's think time or an agent's tool call; if Prev was shed
// or failed, the session ends there and this request is never sent).
type Request struct {
	At   time.Duration
	Prev int32
	// Session numbers the request's conversation (0, 1, 2, ... in order of first appearance);
	// -1 for a request that belongs to none. The session is the request's flow in the gateway
	// queue and its session id for the router.
	Session int32
	// Turn is the request's position in its session, from 1.
	Turn int32
	// PromptTokens and OutputTokens are the request's lengths.
	PromptTokens int32
	OutputTokens int32
	// IDs are the prompt's content ids, Workload.BlockTokens tokens each (the last one may cover
	// a partial block). Two requests share a prefix of k·BlockTokens tokens exactly when their
	// first k ids are equal; an id always stands for the same content after the same prefix.
	IDs []uint64
	// Adapter is 1 + the index in Workload.Adapters of the LoRA adapter the request runs
	// under; 0 for the base model. Equal ids under two adapters are different content to the
	// engines and the router, as on vLLM.
	Adapter int32
}

// Workload is a list of requests to replay, in the Mooncake trace format: prompts described
// by content ids at a fixed block size instead of tokens. A Workload is immutable once built
// and safe to share between concurrent runs.
type Workload struct {
	// Name labels the workload in reports.
	Name string
	// BlockTokens is the number of prompt tokens each content id stands for (512 in Mooncake
	// traces). It must be a multiple of the simulated engines' block size.
	BlockTokens int
	// Requests holds the requests; the open-loop ones are sorted by At.
	Requests []Request
	// Sessions is the number of distinct sessions.
	Sessions int
	// Adapters names the LoRA adapters requests run under (Request.Adapter); the simulated
	// servers need Config.LoRA to serve them.
	Adapters []string
}

// validate checks the invariants Run relies on.
func (w *Workload) validate() error {
	if w == nil || len(w.Requests) == 0 {
		return fmt.Errorf("%w: no requests", ErrInvalidWorkload)
	}
	if w.BlockTokens <= 0 {
		return fmt.Errorf("%w: BlockTokens %d", ErrInvalidWorkload, w.BlockTokens)
	}
	var last time.Duration
	for i := range w.Requests {
		r := &w.Requests[i]
		switch {
		case r.PromptTokens <= 0 || r.OutputTokens <= 0:
			return fmt.Errorf("%w: request %d has %d prompt and %d output tokens", ErrInvalidWorkload, i, r.PromptTokens, r.OutputTokens)
		case len(r.IDs)*w.BlockTokens < int(r.PromptTokens) || (len(r.IDs)-1)*w.BlockTokens >= int(r.PromptTokens):
			return fmt.Errorf("%w: request %d has %d ids for %d tokens at %d tokens per id", ErrInvalidWorkload, i, len(r.IDs), r.PromptTokens, w.BlockTokens)
		case r.At < 0:
			return fmt.Errorf("%w: request %d at %v", ErrInvalidWorkload, i, r.At)
		case r.Prev >= int32(i):
			return fmt.Errorf("%w: request %d follows request %d", ErrInvalidWorkload, i, r.Prev)
		case r.Session >= int32(w.Sessions):
			return fmt.Errorf("%w: request %d in session %d of %d", ErrInvalidWorkload, i, r.Session, w.Sessions)
		case r.Adapter < 0 || int(r.Adapter) > len(w.Adapters):
			return fmt.Errorf("%w: request %d runs under adapter %d of %d", ErrInvalidWorkload, i, r.Adapter, len(w.Adapters))
		}
		if r.Prev < 0 {
			if r.At < last {
				return fmt.Errorf("%w: open-loop request %d arrives before the one before it", ErrInvalidWorkload, i)
			}
			last = r.At
		}
	}
	return nil
}

// WorkloadStats summarises a workload.
type WorkloadStats struct {
	Requests, Sessions   int
	FirstTurns           int
	PromptTokens         int64
	OutputTokens         int64
	Span                 time.Duration // last open-loop arrival
	IdealBlockHitRate    float64       // see Workload.IdealBlockHitRate
	MeanPrompt, MeanOutp float64
}

// Stats returns the workload's summary. O(requests + ids).
func (w *Workload) Stats() WorkloadStats {
	s := WorkloadStats{Requests: len(w.Requests), Sessions: w.Sessions, IdealBlockHitRate: w.IdealBlockHitRate()}
	for i := range w.Requests {
		r := &w.Requests[i]
		s.PromptTokens += int64(r.PromptTokens)
		s.OutputTokens += int64(r.OutputTokens)
		if r.Turn <= 1 {
			s.FirstTurns++
		}
		if r.Prev < 0 {
			s.Span = max(s.Span, r.At)
		}
	}
	if n := float64(len(w.Requests)); n > 0 {
		s.MeanPrompt, s.MeanOutp = float64(s.PromptTokens)/n, float64(s.OutputTokens)/n
	}
	return s
}

// IdealBlockHitRate is the share of all content ids that are prefix hits for one server with an
// infinite cache, replaying the requests in order: an id counts when it and every id before it
// in its request appeared in an earlier request under the same adapter. O(ids).
func (w *Workload) IdealBlockHitRate() float64 {
	seen := make(map[contentKey]struct{}, len(w.Requests)*8)
	hit, total := 0, 0
	for i := range w.Requests {
		ids, a := w.Requests[i].IDs, w.Requests[i].Adapter
		k := 0
		for k < len(ids) {
			if _, ok := seen[contentKey{ids[k], a}]; !ok {
				break
			}
			k++
		}
		hit += k
		total += len(ids)
		for _, id := range ids[k:] {
			seen[contentKey{id, a}] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// idealHits returns, per request, the prompt tokens an infinite cache shared by every server
// would serve, replaying in workload order with engine blocks of blockSize tokens: the leading
// ids seen before, capped as the engine caps a hit (at least the last prompt token is computed,
// whole blocks only). O(ids).
func (w *Workload) idealHits(blockSize int) []int32 {
	out := make([]int32, len(w.Requests))
	seen := make(map[contentKey]struct{}, len(w.Requests)*8)
	for i := range w.Requests {
		r := &w.Requests[i]
		k := 0
		for k < len(r.IDs) {
			if _, ok := seen[contentKey{r.IDs[k], r.Adapter}]; !ok {
				break
			}
			k++
		}
		maxHit := (int(r.PromptTokens) - 1) / blockSize * blockSize
		out[i] = int32(min(k*w.BlockTokens/blockSize*blockSize, maxHit))
		for _, id := range r.IDs[k:] {
			seen[contentKey{id, r.Adapter}] = struct{}{}
		}
	}
	return out
}

// contentKey is a content id under an adapter (Request.Adapter): the same id under two
// adapters is different KV, as on vLLM.
type contentKey struct {
	id      uint64
	adapter int32
}

// Scaled returns a copy of w whose open-loop arrivals come rate times as fast (their At divided
// by rate). Think times of closed-loop turns are not scaled: a faster arrival of sessions does
// not make users type faster. The copy shares the ids with w. It panics if rate ≤ 0 (misuse).
func (w *Workload) Scaled(rate float64) *Workload {
	if !(rate > 0) {
		panic("bench: Workload.Scaled with a non-positive rate")
	}
	c := *w
	c.Requests = slices.Clone(w.Requests)
	if rate != 1 {
		for i := range c.Requests {
			if c.Requests[i].Prev < 0 {
				c.Requests[i].At = time.Duration(float64(c.Requests[i].At) / rate)
			}
		}
	}
	return &c
}

// SpreadArrivals returns a copy of w in which open-loop requests that arrive at the same
// instant are spread evenly over the time to the next instant at which any arrives, in their
// order (the last instant's over the mean gap between instants). A trace with coarse
// timestamps arrives in bunches: the Mooncake conversation trace's 12,031 requests fall on
// 1,180 instants 3 s apart, about ten at once. A single gateway places a bunch one request
// after another, seeing each pick; gateway replicas that share state every 50 ms place their
// shares of it blind to each other. Closed-loop turns are unchanged. The copy shares the ids
// with w. O(len(w.Requests)).
func (w *Workload) SpreadArrivals() *Workload {
	c := *w
	c.Requests = slices.Clone(w.Requests)
	var open []int
	for i := range c.Requests {
		if c.Requests[i].Prev < 0 {
			open = append(open, i)
		}
	}
	instants, first := 0, time.Duration(0)
	for k, i := range open {
		if k == 0 || c.Requests[i].At != c.Requests[open[k-1]].At {
			instants++
		}
		if k == 0 {
			first = c.Requests[i].At
		}
	}
	meanGap := time.Duration(0)
	if instants > 1 {
		meanGap = (c.Requests[open[len(open)-1]].At - first) / time.Duration(instants-1)
	}
	for a := 0; a < len(open); {
		at := c.Requests[open[a]].At
		b := a + 1
		for b < len(open) && c.Requests[open[b]].At == at {
			b++
		}
		gap := meanGap
		if b < len(open) {
			gap = c.Requests[open[b]].At - at
		}
		for k := a; k < b; k++ {
			c.Requests[open[k]].At = at + gap*time.Duration(k-a)/time.Duration(b-a)
		}
		a = b
	}
	return &c
}

// Head returns a copy of w limited to its first n requests, for short runs. A closed-loop turn
// always follows an earlier request, so every turn kept still has its previous turn; sessions
// are numbered as in w (some may have no request left).
func (w *Workload) Head(n int) *Workload {
	if n >= len(w.Requests) {
		return w
	}
	c := *w
	c.Requests = slices.Clone(w.Requests[:n])
	return &c
}

// The Mooncake conversation trace ships with the module, gzipped (traces/README.md gives its
// source and licence), so a clone or a binary replays it without a download.
//
//go:embed traces/mooncake-conversation.jsonl.gz
var mooncakeGz []byte

// Mooncake returns the Mooncake conversation trace that ships with the package (the FAST'25
// release of kvcache-ai/Mooncake, Apache-2.0: 12,031 requests over an hour of production
// traffic), read by LoadMooncake with opts. Each call decodes it afresh (about 3 MB of JSON).
func Mooncake(opts MooncakeOptions) (*Workload, error) {
	zr, err := gzip.NewReader(bytes.NewReader(mooncakeGz))
	if err != nil {
		return nil, fmt.Errorf("bench: embedded trace: %w", err)
	}
	defer zr.Close()
	return LoadMooncake(zr, opts)
}

// MooncakeOptions configures LoadMooncake.
type MooncakeOptions struct {
	// BlockTokens is the trace's tokens per hash id. Zero: 512 (Mooncake's).
	BlockTokens int
	// OpeningShare: a leading hash id shared by at least this share of all requests is part of
	// a common opening (a system prompt), not of a conversation. Zero: 0.01.
	OpeningShare float64
	// Limit keeps only the first Limit requests; zero keeps all.
	Limit int
}

type mooncakeLine struct {
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// LoadMooncake reads a Mooncake-format trace: one JSON object per line with timestamp
// (milliseconds from the start), input_length, output_length and hash_ids (prefix block ids,
// 512 tokens each). All requests are open loop, at their timestamps.
//
// Sessions are derived from the ids, since the trace has no session field. A conversation's
// next turn repeats the previous prompt and answer, so its ids start with the previous turn's
// ids (all but a trailing partial block). The leading ids that a large share of all requests
// carry (OpeningShare, 1%: block 0, the system prompt every request starts with) are a common
// opening; the first id after the opening names the session. On the conversation trace that
// is hash_ids[1]: 7,373 sessions over 12,031 requests, the longest with 43 turns. A request
// made only of opening ids belongs to no session. Two conversations that share a document
// beyond the opening would be merged; the ids cannot tell them apart. O(lines + ids).
func LoadMooncake(r io.Reader, opts MooncakeOptions) (*Workload, error) {
	if opts.BlockTokens == 0 {
		opts.BlockTokens = 512
	}
	if opts.OpeningShare == 0 {
		opts.OpeningShare = 0.01
	}
	if opts.BlockTokens < 0 || opts.OpeningShare < 0 || opts.OpeningShare > 1 {
		return nil, fmt.Errorf("%w: BlockTokens %d, OpeningShare %v", ErrInvalidWorkload, opts.BlockTokens, opts.OpeningShare)
	}
	w := &Workload{Name: "mooncake", BlockTokens: opts.BlockTokens}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInvalidWorkload, line, err)
		}
		if m.InputLength <= 0 || m.OutputLength <= 0 || m.Timestamp < 0 || len(m.HashIDs) == 0 ||
			m.InputLength > 1<<30 || m.OutputLength > 1<<30 {
			return nil, fmt.Errorf("%w: line %d: input %d, output %d, timestamp %v, %d hash ids",
				ErrInvalidWorkload, line, m.InputLength, m.OutputLength, m.Timestamp, len(m.HashIDs))
		}
		if need := (m.InputLength + opts.BlockTokens - 1) / opts.BlockTokens; need != len(m.HashIDs) {
			return nil, fmt.Errorf("%w: line %d: %d hash ids for %d tokens (want %d)", ErrInvalidWorkload, line, len(m.HashIDs), m.InputLength, need)
		}
		at := time.Duration(m.Timestamp * float64(time.Millisecond))
		if n := len(w.Requests); n > 0 && at < w.Requests[n-1].At {
			return nil, fmt.Errorf("%w: line %d: timestamp goes backwards", ErrInvalidWorkload, line)
		}
		w.Requests = append(w.Requests, Request{
			At: at, Prev: -1, Session: -1,
			PromptTokens: int32(m.InputLength), OutputTokens: int32(m.OutputLength),
			IDs: m.HashIDs,
		})
		if opts.Limit > 0 && len(w.Requests) >= opts.Limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: reading trace: %w", err)
	}
	if len(w.Requests) == 0 {
		return nil, fmt.Errorf("%w: empty trace", ErrInvalidWorkload)
	}
	deriveSessions(w, opts.OpeningShare)
	return w, nil
}

// deriveSessions assigns sessions and turns from shared id prefixes (see LoadMooncake).
func deriveSessions(w *Workload, openingShare float64) {
	count := make(map[uint64]int32)
	for i := range w.Requests {
		for _, id := range w.Requests[i].IDs {
			count[id]++
		}
	}
	threshold := int32(max(2, openingShare*float64(len(w.Requests))))
	sessions := make(map[uint64]int32)
	var turns []int32
	for i := range w.Requests {
		r := &w.Requests[i]
		for _, id := range r.IDs {
			if count[id] >= threshold {
				continue
			}
			s, ok := sessions[id]
			if !ok {
				s = int32(len(turns))
				sessions[id] = s
				turns = append(turns, 0)
			}
			turns[s]++
			r.Session, r.Turn = s, turns[s]
			break
		}
		if r.Session < 0 {
			r.Turn = 1
		}
	}
	w.Sessions = len(turns)
}

// LoadMooncakeFile opens path and calls LoadMooncake.
func LoadMooncakeFile(path string, opts MooncakeOptions) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	w, err := LoadMooncake(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// TraceSessions returns the sessions of the Mooncake conversation trace that ships with the
// package (Mooncake, read with opts) as closed-loop sessions: a session's first turn arrives
// at its timestamp, and each later turn follows the previous one's answer after the gap
// between their timestamps in the trace (the user's think time, plus the recorded service's
// answer time, which the trace does not separate). Requests in no session stay open loop.
// Its sessions are heavy-tailed: 7,373 of them, 1.63 turns on average, 8 at the 99th
// percentile, and the chance that a session that has run k turns ends there falls from 0.69
// at k = 1 to about a quarter (bench/README.md, "Task completion time").
func TraceSessions(opts MooncakeOptions) (*Workload, error) {
	w, err := Mooncake(opts)
	if err != nil {
		return nil, err
	}
	return closeSessions(w), nil
}

// closeSessions makes every later turn of a session of w (open loop) follow its previous turn
// after the gap between their arrivals, in place, and returns w renamed trace-sessions.
// O(requests).
func closeSessions(w *Workload) *Workload {
	w.Name = "trace-sessions"
	last := make([]int32, w.Sessions)
	for i := range last {
		last[i] = -1
	}
	at := make([]time.Duration, w.Sessions)
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Session < 0 {
			continue
		}
		if p := last[r.Session]; p >= 0 {
			arrival := r.At
			r.Prev, r.At = p, arrival-at[r.Session]
			at[r.Session] = arrival
		} else {
			at[r.Session] = r.At
		}
		last[r.Session] = int32(i)
	}
	return w
}
