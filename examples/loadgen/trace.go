package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// TraceBlock is the block size of Mooncake traces: hash_ids name blocks of 512 tokens.
const TraceBlock = 512

// TraceRecord is one line of a Mooncake-format trace (the FAST'25 release's JSONL).
type TraceRecord struct {
	// Timestamp is the arrival time in milliseconds from the start of the trace.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are the prompt and answer tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs name the prompt's blocks of TraceBlock tokens: equal leading ids mean a shared
	// prefix.
	HashIDs []uint64 `json:"hash_ids"`
}

var errTrace = errors.New("trace")

// ReadTrace parses a Mooncake-format JSONL trace, skipping blank lines. Records are returned
// sorted by timestamp (stable). O(n log n).
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []TraceRecord
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal([]byte(text), &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", errTrace, line, err)
		}
		if rec.Timestamp < 0 || rec.InputLength < 1 || rec.OutputLength < 0 || len(rec.HashIDs) == 0 {
			return nil, fmt.Errorf("%w: line %d: want timestamp ≥ 0, input_length ≥ 1, output_length ≥ 0 and hash_ids", errTrace, line)
		}
		if want := (rec.InputLength + TraceBlock - 1) / TraceBlock; len(rec.HashIDs) > want {
			return nil, fmt.Errorf("%w: line %d: %d hash_ids for %d tokens (at most %d)", errTrace, line, len(rec.HashIDs), rec.InputLength, want)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errTrace, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp < out[j].Timestamp })
	return out, nil
}

// ReadTraceFile is ReadTrace over a file.
func ReadTraceFile(path string) ([]TraceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTrace(f)
}

// TraceOptions configures the replay of a trace.
type TraceOptions struct {
	// Speed divides the trace's inter-arrival times: 2 replays twice as fast. 0 means 1.
	Speed float64
	// Limit, if > 0, keeps the first Limit requests.
	Limit int
	// Window, if > 0, keeps the requests arriving before it (in replay time).
	Window time.Duration
	// MaxContext, if > 0, fits each request into a server's context: answers are cut to half
	// of it and prompts to what remains (keeping their leading blocks, so prefix sharing
	// survives).
	MaxContext int
	// Tenants spreads the derived sessions over this many API keys; 0 means 1.
	Tenants int
}

// TraceSessions turns trace records into a replay: one unchained Session per request, starting
// at its timestamp divided by Speed, whose user message is the synthesised text of its
// hash_ids (see traceText) and whose answer is exactly output_length tokens (max_tokens with
// ignore_eos; an output_length of 0 asks for 1).
//
// Sessions are derived from the prefix structure, which is all the trace says about them:
// every request starts with the same block (a shared opening), so two requests belong to one
// conversation when their first two hash ids agree — the first block that is the
// conversation's own. A request with a single block is a conversation of its own. Turn
// indices count a conversation's requests in arrival order; the first is turn 0. O(n).
func TraceSessions(recs []TraceRecord, opts TraceOptions) ([]Session, error) {
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 || opts.Limit < 0 || opts.Window < 0 || opts.MaxContext < 0 || opts.Tenants < 0 {
		return nil, fmt.Errorf("%w: speed, limit, window, max context and tenants must not be negative", errTrace)
	}
	if opts.MaxContext > 0 && opts.MaxContext < 2*traceTemplateTokens+2 {
		return nil, fmt.Errorf("%w: max context %d is too small", errTrace, opts.MaxContext)
	}
	tenants := max(opts.Tenants, 1)
	turns := map[uint64]int{}
	var out []Session
	var t0 int64
	for i, rec := range recs {
		if opts.Limit > 0 && len(out) >= opts.Limit {
			break
		}
		if i == 0 {
			t0 = rec.Timestamp
		}
		start := time.Duration(float64(rec.Timestamp-t0) * float64(time.Millisecond) / speed)
		if opts.Window > 0 && start >= opts.Window {
			break
		}
		var key uint64
		var id string
		turn := 0
		if len(rec.HashIDs) >= 2 {
			key = rec.HashIDs[1]
			turn = turns[key]
			turns[key] = turn + 1
			id = fmt.Sprintf("trace-%d", key)
		} else {
			key = uint64(i) | 1<<63
			id = fmt.Sprintf("trace-single-%d", i)
		}
		input, output := rec.InputLength, max(rec.OutputLength, 1)
		if m := opts.MaxContext; m > 0 {
			output = min(output, m/2)
			input = min(input, m-output-traceTemplateTokens)
		}
		out = append(out, Session{
			ID:     id,
			Tenant: fmt.Sprintf("sk-loadgen-tenant-%d", mix64(key)%uint64(tenants)),
			Start:  start,
			Turns:  []Turn{{HashIDs: rec.HashIDs, Tokens: input, MaxTokens: output, Index: turn}},
		})
	}
	return out, nil
}

// traceTemplateTokens is the room left for the chat template around a trace prompt (the
// simulated servers' ChatML adds 8 tokens around one user message and the generation prompt).
const traceTemplateTokens = 16

// traceText synthesises a prompt of exactly tokens tokens (under simfleet.Tokenize) for the
// blocks ids: block i holds TraceBlock words chosen by a hash of (ids[i], position), each word
// one token with its leading space, so blocks are independent of their neighbours and equal
// id prefixes give equal text — and so equal token — prefixes. The last block is cut short
// to the length asked; a prompt longer than its blocks continues the last block's sequence.
//
// The approximation: a real tokenizer splits the same words into roughly, not exactly, one
// token each, and a chat template adds a few tokens before the first block, so block
// boundaries do not fall on the server's own block boundaries; what is preserved is which
// requests share how long a prefix. Different ids give different text from their first
// word on (unless two hashes pick the same words, with chance 1/len(words) per word).
// O(tokens).
func traceText(ids []uint64, tokens int) string {
	var b strings.Builder
	b.Grow(tokens * 6)
	for i := 0; tokens > 0 && i < len(ids); i++ {
		id := ids[i]
		n := min(tokens, TraceBlock)
		if i >= len(ids)-1 {
			n = tokens // the last block takes whatever is left
		}
		base := mix64(id ^ 0x7472616365)
		for j := range n {
			b.WriteByte(' ')
			b.WriteString(words[mix64(base+uint64(j)*0x9e3779b97f4a7c15)%uint64(len(words))])
		}
		tokens -= n
	}
	return b.String()
}

// mix64 is SplitMix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// findTrace looks for name in a shared/traces directory next to one of the directories above
// the working directory (the repository is checked out beside shared/), and returns "" if
// there is none.
func findTrace(name string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "..", "shared", "traces", name)
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
