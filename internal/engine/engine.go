package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/usher-llm/usher/internal/mix"
)

// Errors returned by New and Submit, wrapped with context.
var (
	ErrInvalidOptions = errors.New("engine: invalid options")
	ErrInvalidRequest = errors.New("engine: invalid request")
	ErrTooLong        = errors.New("engine: request exceeds the model length or the KV cache")
	ErrDuplicateID    = errors.New("engine: request id already in the engine")
)

// RequestID names a request inside one engine. The caller chooses it; it must be unique among
// the engine's live requests.
type RequestID uint64

// Request is the work a caller submits. The prompt is given either as token ids (Prompt; the
// engine hashes its full blocks itself) or as precomputed chained block hashes (Blocks, with its
// length in PromptTokens), for callers such as trace replay that know hashes but not tokens.
type Request struct {
	ID RequestID
	// Prompt holds the prompt's token ids. The engine copies it.
	Prompt []uint32
	// Blocks, used when Prompt is empty, holds the chained hashes of the prompt's full blocks
	// of Profile.BlockSize tokens; equal prefixes must give equal hashes. It may cover fewer
	// blocks than the prompt has (the rest is never cached). The engine copies it.
	Blocks []BlockHash
	// PromptTokens is the prompt length when Prompt is empty.
	PromptTokens int
	// OutputTokens is how many tokens the request generates (at least 1). The model does not
	// decide when to stop: the caller does, as a trace does.
	OutputTokens int
	// Output optionally holds the generated token ids, so that full blocks of output are
	// hashed and cached like vLLM does (a later turn that repeats the answer then hits them).
	// Only used together with Prompt. The engine copies it.
	Output []uint32
	// RemotePrefill says a prefill server computed the prompt and its KV has been
	// transferred here (disaggregated serving, vLLM's do_remote_prefill); the caller has
	// already waited for the transfer. When first admitted, every prompt token but the last
	// counts as computed at no cost: the blocks not cached here are allocated, filled and
	// cached as the transfer left them. EventStarted still reports only the local prefix hits.
	// A request preempted later recomputes locally, as vLLM does.
	RemotePrefill bool
	// Adapter is the LoRA adapter the request runs under; empty means the base model. It
	// needs Options.LoRA, and its prompt blocks are chained from PromptRoot(Adapter). Blocks
	// given by the caller must be hashed under the adapter already.
	Adapter string
}

// EventKind says what happened to a request.
type EventKind uint8

// Kinds of Event.
const (
	// EventStarted: first admitted to the running batch; Tokens is the number of prompt tokens
	// served from the prefix cache (vLLM's cached_tokens).
	EventStarted EventKind = iota + 1
	// EventPreempted: evicted from the running batch because the KV cache was full; it waits
	// again at the head of the queue and will recompute (Tokens is its output so far).
	EventPreempted
	// EventToken: one output token was produced; Tokens is the output count so far, so
	// Tokens == 1 is the first token. With Options.OmitTokenEvents only the first is reported.
	EventToken
	// EventFinished: the last output token was produced (Tokens is the output count) and the
	// request left the engine. The same step also reported that token as EventToken.
	EventFinished
	// EventAborted: the request was aborted by the caller and left the engine (Tokens is the
	// output count it reached).
	EventAborted
)

// String returns the kind's lower-case name ("EventKind(n)" for unknown values), for logs
// and test messages.
func (k EventKind) String() string {
	switch k {
	case EventStarted:
		return "started"
	case EventPreempted:
		return "preempted"
	case EventToken:
		return "token"
	case EventFinished:
		return "finished"
	case EventAborted:
		return "aborted"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports one change in a request's life. Every submitted request gets exactly one
// EventFinished or EventAborted, and nothing after it.
type Event struct {
	At      time.Duration // when it happened: the end of the step, or the Abort call
	Arrived time.Duration // when the request was submitted, so At-Arrived is a latency
	ID      RequestID
	Kind    EventKind
	Tokens  int
}

// KVEventKind says what happened to cached blocks.
type KVEventKind uint8

// Kinds of KVEvent, as vLLM publishes them.
const (
	KVBlockStored KVEventKind = iota + 1
	KVBlockRemoved
	KVAllBlocksCleared
)

// KVEvent mirrors vLLM's KV cache events: blocks that became reusable (stored, with their
// parent's hash and, when the engine knows them, their token ids), blocks evicted (removed) and
// a reset of the whole cache.
type KVEvent struct {
	At        time.Duration
	Kind      KVEventKind
	Hashes    []BlockHash
	Parent    BlockHash // hash of the block before Hashes[0]; valid when HasParent
	HasParent bool
	Tokens    []uint32 // token ids of all stored blocks concatenated, nil when unknown
	BlockSize int
	LoRA      string // the adapter the stored blocks were computed under (vLLM's lora_name)
}

// Options configures an Engine. The zero value is valid and models the Demo profile.
type Options struct {
	// Profile gives capacity and costs; the zero Profile means Demo.
	Profile Profile
	// OmitTokenEvents reports only the first output token of each request as an EventToken
	// (TTFT), not every token: enough for a simulator that needs latencies, not streams.
	OmitTokenEvents bool
	// KVEvents records KVEvents, to be drained with KVEvents. Off, nothing is recorded.
	KVEvents bool
	// HashSeed seeds the chained hash of token blocks (vLLM's NONE_HASH); 0 is a fixed default.
	HashSeed uint64
	// LoRA configures adapter slots; the zero value serves the base model only.
	LoRA LoRA
}

type state uint8

const (
	stateWaiting state = iota + 1
	stateRunning
	stateDone
)

type request struct {
	id           RequestID
	arrived      time.Duration
	promptLen    int
	outputLen    int
	tokens       []uint32    // prompt then known output token ids; nil when submitted by Blocks
	hashes       []BlockHash // hashes of the leading full blocks known so far
	blocks       []int32     // block table
	computed     int         // tokens whose KV is computed
	output       int         // output tokens produced
	hashedBlocks int         // leading blocks already offered to the cache
	remote       bool        // Request.RemotePrefill
	adapter      string      // Request.Adapter
	slot         int         // 1 + the LoRA slot it uses while running; 0 for none
	seq          uint64      // submission number, unique in the engine's life
	started      bool
	state        state
}

type batchItem struct {
	r   *request
	id  RequestID
	n   int // tokens computed in this step
	ctx int // tokens computed before this step
}

// Stats is a snapshot of what a model server's /metrics shows.
type Stats struct {
	Waiting, Running int
	KVUsage          float64 // fraction of blocks not free (vLLM's kv_cache_usage_perc)
	UsedBlocks       int     // blocks referenced by running requests
	CachedBlocks     int     // blocks holding reusable content, referenced or not
	BlockSize        int
	NumBlocks        int
	Busy             bool // a step is in progress

	PrefixQueries    int64 // prompt tokens of admitted requests (vLLM prefix_cache_queries)
	PrefixHits       int64 // of those, tokens served from the cache (prefix_cache_hits)
	PromptTokens     int64 // prompt tokens of requests that produced their first token
	GenerationTokens int64 // output tokens produced
	Submitted        int64
	Finished         int64
	Aborted          int64
	Preemptions      int64
	Steps            int64
	LoRALoads        int64 // adapters loaded into a slot
	MaxLoRAs         int   // adapter slots (Options.LoRA.MaxLoRAs)
}

// Engine models one continuous-batching model server (see the package documentation).
//
// An Engine has no clock and starts no goroutine: the caller submits and aborts requests and
// runs steps, passing the time of each call, in virtual or real time. It is not safe for
// concurrent use; a caller serving several goroutines holds a lock around every call.
type Engine struct {
	p    Profile
	opts Options

	kv      *kvCache
	reqs    map[RequestID]*request
	waiting []*request // FIFO from wHead; preempted requests go back to the head
	wHead   int
	running []*request
	batch   []batchItem

	stepping bool
	stepAt   time.Duration

	events   []Event
	kvEvents []KVEvent

	pool     []*request
	deferred []*request // aborted during a step; recycled at its end
	scratch  []int32
	digest   *xxhash.Digest
	buf      []byte

	seq uint64
	st  Stats

	slots     []loraSlot // Options.LoRA.MaxLoRAs adapter slots
	skipped   []*request // waiting requests a step skipped for want of an adapter slot
	stepLoads int        // adapters the step being scheduled loads
}

// New returns an idle Engine with an empty KV cache. It allocates the block table: O(NumBlocks).
func New(opts Options) (*Engine, error) {
	if opts.Profile == (Profile{}) {
		opts.Profile = Demo
	}
	if err := opts.Profile.validate(); err != nil {
		return nil, err
	}
	if err := opts.LoRA.validate(); err != nil {
		return nil, err
	}
	if opts.HashSeed == 0 {
		opts.HashSeed = 0x9e3779b97f4a7c15
	}
	e := &Engine{
		p:      opts.Profile,
		opts:   opts,
		kv:     newKVCache(opts.Profile.NumBlocks),
		reqs:   make(map[RequestID]*request),
		digest: xxhash.New(),
		buf:    make([]byte, 8+4*opts.Profile.BlockSize),
	}
	if opts.KVEvents {
		e.kv.onEvict = e.recordEvict
	}
	e.st.BlockSize, e.st.NumBlocks = e.p.BlockSize, e.p.NumBlocks
	e.slots = make([]loraSlot, opts.LoRA.MaxLoRAs)
	e.st.MaxLoRAs = opts.LoRA.MaxLoRAs
	return e, nil
}

// Profile returns the engine's profile.
func (e *Engine) Profile() Profile { return e.p }

// HashBlock returns the chained hash the engine gives a full block of tokens following the
// block hashed parent (pass hasParent false for a prompt's first block). Callers that submit
// Blocks can use it to produce hashes compatible with prompts submitted as tokens.
func (e *Engine) HashBlock(parent BlockHash, hasParent bool, tokens []uint32) BlockHash {
	if !hasParent {
		parent = BlockHash(e.opts.HashSeed)
	}
	b := e.buf[:0]
	b = binary.LittleEndian.AppendUint64(b, uint64(parent))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	e.buf = b
	e.digest.Reset()
	_, _ = e.digest.Write(b)
	return BlockHash(e.digest.Sum64())
}

// uniqueHash chains a block of content known only to the request numbered seq.
func (e *Engine) uniqueHash(parent BlockHash, seq uint64) BlockHash {
	b := binary.LittleEndian.AppendUint64(e.buf[:0], uint64(parent))
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = append(b, 0xff) // no token block has an odd byte length
	e.buf = b
	e.digest.Reset()
	_, _ = e.digest.Write(b)
	return BlockHash(e.digest.Sum64())
}

// Submit adds a request to the waiting queue at time now. It is considered from the next
// BeginStep. O(prompt tokens) to copy and hash.
func (e *Engine) Submit(req Request, now time.Duration) error {
	bs := e.p.BlockSize
	promptLen := len(req.Prompt)
	if promptLen == 0 {
		promptLen = req.PromptTokens
	}
	switch {
	case promptLen <= 0:
		return fmt.Errorf("%w: request %d has an empty prompt", ErrInvalidRequest, req.ID)
	case req.OutputTokens <= 0:
		return fmt.Errorf("%w: request %d asks for %d output tokens", ErrInvalidRequest, req.ID, req.OutputTokens)
	case len(req.Prompt) == 0 && len(req.Blocks)*bs > promptLen:
		return fmt.Errorf("%w: request %d has %d blocks for %d prompt tokens", ErrInvalidRequest, req.ID, len(req.Blocks), promptLen)
	case promptLen+req.OutputTokens > e.p.MaxModelLen:
		return fmt.Errorf("%w: request %d needs %d tokens, max model length is %d", ErrTooLong, req.ID, promptLen+req.OutputTokens, e.p.MaxModelLen)
	case (promptLen+req.OutputTokens+bs-1)/bs > e.p.NumBlocks:
		return fmt.Errorf("%w: request %d needs more than the %d KV blocks", ErrTooLong, req.ID, e.p.NumBlocks)
	case req.Adapter != "" && len(e.slots) == 0:
		return fmt.Errorf("%w: request %d names adapter %q, and LoRA is not enabled", ErrInvalidRequest, req.ID, req.Adapter)
	}
	if _, dup := e.reqs[req.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicateID, req.ID)
	}
	r := e.newRequest()
	r.id, r.arrived, r.promptLen, r.outputLen = req.ID, now, promptLen, req.OutputTokens
	r.remote = req.RemotePrefill
	r.adapter = req.Adapter
	if len(req.Prompt) > 0 {
		r.tokens = append(r.tokens, req.Prompt...)
		r.tokens = append(r.tokens, req.Output[:min(len(req.Output), req.OutputTokens)]...)
		parent, rooted := e.PromptRoot(req.Adapter)
		for k := 0; (k+1)*bs <= promptLen; k++ {
			parent = e.HashBlock(parent, k > 0 || rooted, r.tokens[k*bs:(k+1)*bs])
			r.hashes = append(r.hashes, parent)
		}
	} else {
		r.hashes = append(r.hashes, req.Blocks...)
	}
	e.seq++
	r.seq = e.seq
	r.state = stateWaiting
	e.reqs[r.id] = r
	e.waiting = append(e.waiting, r)
	e.st.Submitted++
	return nil
}

func (e *Engine) newRequest() *request {
	if n := len(e.pool); n > 0 {
		r := e.pool[n-1]
		e.pool = e.pool[:n-1]
		return r
	}
	return &request{}
}

func (e *Engine) recycle(r *request) {
	*r = request{tokens: r.tokens[:0], hashes: r.hashes[:0], blocks: r.blocks[:0]}
	e.pool = append(e.pool, r)
}

// Abort removes a request at time now, freeing its blocks, and reports whether it was in the
// engine. An abort during a step takes effect at once: the step's work for it is discarded.
// O(waiting + running) to find it in its queue.
func (e *Engine) Abort(id RequestID, now time.Duration) bool {
	r, ok := e.reqs[id]
	if !ok {
		return false
	}
	switch r.state {
	case stateWaiting:
		for i := e.wHead; i < len(e.waiting); i++ {
			if e.waiting[i] == r {
				copy(e.waiting[i:], e.waiting[i+1:])
				e.waiting[len(e.waiting)-1] = nil
				e.waiting = e.waiting[:len(e.waiting)-1]
				break
			}
		}
	case stateRunning:
		for i, q := range e.running {
			if q == r {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.kv.release(r.blocks)
		r.blocks = r.blocks[:0]
		e.releaseLoRA(r)
	}
	r.state = stateDone
	delete(e.reqs, id)
	e.st.Aborted++
	e.events = append(e.events, Event{At: now, Arrived: r.arrived, ID: id, Kind: EventAborted, Tokens: r.output})
	if e.stepping {
		e.deferred = append(e.deferred, r)
	} else {
		e.recycle(r)
	}
	return true
}

// HasWork reports whether any request is waiting or running, i.e. whether BeginStep would
// start a step. O(1).
func (e *Engine) HasWork() bool { return len(e.running) > 0 || len(e.waiting) > e.wHead }

// Busy reports whether a step has begun and not ended. O(1).
func (e *Engine) Busy() bool { return e.stepping }

// BeginStep schedules the next batch at time now and returns how long it takes, or false if
// there is nothing to run. The caller ends it with EndStep at now plus that duration (or
// later, in real time); no other BeginStep may come in between, while Submit and Abort may.
//
// Scheduling follows vLLM's V1 scheduler with chunked prefill. Running requests come first, in
// admission order: each takes one token of the budget to decode, or the rest of its prompt up
// to the remaining budget, and allocates the blocks that needs. When no block is free, the most
// recently admitted running request is preempted (its blocks freed, kept as cache; it returns to
// the head of the waiting queue and recomputes later) until the allocation fits. Then, unless
// this step preempted, waiting requests are admitted in order while the batch is below
// MaxNumSeqs and budget remains: each reuses its longest cached prefix (at least one token is
// always computed) and needs blocks for its first chunk; the first that does not fit stops
// admission (head-of-line blocking, as in vLLM).
//
// O(batch + admitted prompt blocks); steady-state decoding allocates nothing.
func (e *Engine) BeginStep(now time.Duration) (time.Duration, bool) {
	if e.stepping {
		panic("engine: BeginStep called while a step is in progress")
	}
	bs := e.p.BlockSize
	budget := e.p.MaxNumBatchedTokens
	e.batch = e.batch[:0]
	e.stepAt = now
	e.stepLoads = 0
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.promptLen+r.output-r.computed, budget)
		if !e.grow(r, r.computed+n) {
			selfPreempted := false
			for {
				v := e.running[len(e.running)-1]
				e.running[len(e.running)-1] = nil
				e.running = e.running[:len(e.running)-1]
				e.preempt(v, now)
				preempted = true
				if v == r {
					selfPreempted = true
					break
				}
				if e.grow(r, r.computed+n) {
					break
				}
			}
			if selfPreempted {
				break
			}
		}
		e.batch = append(e.batch, batchItem{r: r, id: r.id, n: n, ctx: r.computed})
		budget -= n
	}

	if !preempted || len(e.batch) == 0 {
		for len(e.waiting) > e.wHead && len(e.running) < e.p.MaxNumSeqs && budget > 0 {
			r := e.waiting[e.wHead]
			slot := -1
			if r.adapter != "" {
				var ok bool
				if slot, ok = e.loraSlotFor(r.adapter); !ok {
					// Every slot serves another adapter's running requests: skip it.
					e.waiting[e.wHead] = nil
					e.wHead++
					e.skipped = append(e.skipped, r)
					continue
				}
			}
			numTokens := r.promptLen + r.output
			maxHit := (numTokens - 1) / bs
			hits := e.scratch[:0]
			touchFree := 0
			for k := 0; k < maxHit && k < len(r.hashes); k++ {
				id, ok := e.kv.lookup(r.hashes[k])
				if !ok {
					break
				}
				hits = append(hits, id)
				if e.kv.blocks[id].ref == 0 {
					touchFree++
				}
			}
			e.scratch = hits
			hit := len(hits) * bs
			computed := hit
			if r.remote && !r.started {
				computed = max(computed, r.promptLen-1) // transferred, not computed here
			}
			n := min(numTokens-computed, budget)
			need := (computed+n+bs-1)/bs - len(hits)
			if need > e.kv.free-touchFree {
				break
			}
			for _, id := range hits {
				e.kv.touch(id)
			}
			r.blocks = append(r.blocks, hits...)
			for range need {
				r.blocks = append(r.blocks, e.kv.allocate())
			}
			r.computed = computed
			r.hashedBlocks = len(hits)
			r.state = stateRunning
			if slot >= 0 {
				e.claimLoRA(r, slot)
			}
			e.waiting[e.wHead] = nil
			e.wHead++
			e.running = append(e.running, r)
			if !r.started {
				r.started = true
				e.st.PrefixQueries += int64(numTokens)
				e.st.PrefixHits += int64(hit)
				e.events = append(e.events, Event{At: now, Arrived: r.arrived, ID: r.id, Kind: EventStarted, Tokens: hit})
			}
			e.batch = append(e.batch, batchItem{r: r, id: r.id, n: n, ctx: computed})
			budget -= n
		}
		e.restoreSkipped()
		if e.wHead == len(e.waiting) {
			e.waiting, e.wHead = e.waiting[:0], 0
		} else if e.wHead > 64 && e.wHead*2 > len(e.waiting) {
			k := copy(e.waiting, e.waiting[e.wHead:])
			clear(e.waiting[k:])
			e.waiting, e.wHead = e.waiting[:k], 0
		}
	}

	if len(e.batch) == 0 {
		return 0, false
	}
	var pTokens, dSeqs int
	var pPairs, dCtx int64
	for _, it := range e.batch {
		if it.ctx+it.n <= it.r.promptLen || it.n > 1 {
			pTokens += it.n
			pPairs += int64(it.n) * int64(2*it.ctx+it.n) / 2
		} else {
			dSeqs++
			dCtx += int64(it.ctx)
		}
	}
	e.stepping = true
	e.st.Steps++
	return e.p.stepCost(pTokens, pPairs, dSeqs, dCtx) + time.Duration(e.stepLoads)*e.opts.LoRA.LoadCost, true
}

// grow allocates blocks so that r holds tokens tokens, or reports false leaving r unchanged.
func (e *Engine) grow(r *request, tokens int) bool {
	need := (tokens+e.p.BlockSize-1)/e.p.BlockSize - len(r.blocks)
	if need > e.kv.free {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.kv.allocate())
	}
	return true
}

func (e *Engine) preempt(r *request, now time.Duration) {
	e.releaseLoRA(r)
	e.kv.release(r.blocks)
	r.blocks = r.blocks[:0]
	r.computed = 0
	r.hashedBlocks = 0
	r.state = stateWaiting
	if e.wHead > 0 {
		e.wHead--
		e.waiting[e.wHead] = r
	} else {
		e.waiting = append(e.waiting, nil)
		copy(e.waiting[1:], e.waiting)
		e.waiting[0] = r
	}
	e.st.Preemptions++
	e.events = append(e.events, Event{At: now, Arrived: r.arrived, ID: r.id, Kind: EventPreempted, Tokens: r.output})
}

// EndStep completes the step begun by BeginStep at time now: prompt chunks and decode tokens
// are computed, full blocks become reusable cache, output tokens and finished requests are
// reported as events. It panics if no step is in progress. O(batch + newly full blocks).
func (e *Engine) EndStep(now time.Duration) {
	if !e.stepping {
		panic("engine: EndStep called without BeginStep")
	}
	e.stepping = false
	finished := 0
	for _, it := range e.batch {
		r := it.r
		if r.id != it.id || r.state != stateRunning {
			continue // aborted during the step
		}
		r.computed += it.n
		e.cacheFull(r, now)
		if r.computed < r.promptLen+r.output {
			continue // a prompt chunk that did not reach the end
		}
		r.output++
		e.st.GenerationTokens++
		if r.output == 1 {
			e.st.PromptTokens += int64(r.promptLen)
		}
		if r.output == 1 || !e.opts.OmitTokenEvents {
			e.events = append(e.events, Event{At: now, Arrived: r.arrived, ID: r.id, Kind: EventToken, Tokens: r.output})
		}
		if r.output < r.outputLen {
			continue
		}
		e.events = append(e.events, Event{At: now, Arrived: r.arrived, ID: r.id, Kind: EventFinished, Tokens: r.output})
		e.st.Finished++
		e.releaseLoRA(r)
		e.kv.release(r.blocks)
		r.blocks = r.blocks[:0]
		r.state = stateDone
		delete(e.reqs, r.id)
		finished++
	}
	if finished > 0 {
		k := 0
		for _, r := range e.running {
			if r.state == stateRunning {
				e.running[k] = r
				k++
			} else {
				e.recycle(r)
			}
		}
		clear(e.running[k:])
		e.running = e.running[:k]
	}
	for _, r := range e.deferred {
		e.recycle(r)
	}
	clear(e.deferred)
	e.deferred = e.deferred[:0]
	e.batch = e.batch[:0]
}

// cacheFull offers r's newly full, computed blocks to the prefix cache. A block whose tokens
// the engine does not know (beyond the Blocks given, or output without Output ids) gets a hash
// unique to the request, so it is cached for the request's own recompute after a preemption and
// never matches another request.
func (e *Engine) cacheFull(r *request, now time.Duration) {
	bs := e.p.BlockSize
	var ev *KVEvent
	for (r.hashedBlocks+1)*bs <= r.computed {
		k := r.hashedBlocks
		if k >= len(r.hashes) {
			parent, chained := e.PromptRoot(r.adapter)
			if k > 0 {
				parent, chained = r.hashes[k-1], true
			}
			if (k+1)*bs <= len(r.tokens) {
				r.hashes = append(r.hashes, e.HashBlock(parent, chained, r.tokens[k*bs:(k+1)*bs]))
			} else {
				r.hashes = append(r.hashes, e.uniqueHash(parent, r.seq))
			}
		}
		r.hashedBlocks++
		h := r.hashes[k]
		if !e.kv.store(r.blocks[k], h) {
			ev = nil
			continue
		}
		if !e.opts.KVEvents {
			continue
		}
		if ev == nil {
			e.kvEvents = append(e.kvEvents, KVEvent{At: now, Kind: KVBlockStored, BlockSize: bs, LoRA: r.adapter})
			ev = &e.kvEvents[len(e.kvEvents)-1]
			if k > 0 {
				ev.Parent, ev.HasParent = r.hashes[k-1], true
			}
		}
		ev.Hashes = append(ev.Hashes, h)
		if len(r.tokens) >= (k+1)*bs {
			ev.Tokens = append(ev.Tokens, r.tokens[k*bs:(k+1)*bs]...)
		}
	}
}

func (e *Engine) recordEvict(h BlockHash) {
	if n := len(e.kvEvents); n > 0 && e.kvEvents[n-1].Kind == KVBlockRemoved {
		e.kvEvents[n-1].Hashes = append(e.kvEvents[n-1].Hashes, h)
		return
	}
	e.kvEvents = append(e.kvEvents, KVEvent{At: e.stepAt, Kind: KVBlockRemoved, Hashes: []BlockHash{h}, BlockSize: e.p.BlockSize})
}

// ResetPrefixCache forgets every cached block not in use by a running request (vLLM's
// /reset_prefix_cache) and records KVAllBlocksCleared. O(free blocks).
func (e *Engine) ResetPrefixCache(now time.Duration) {
	e.kv.clear()
	if e.opts.KVEvents {
		e.kvEvents = append(e.kvEvents, KVEvent{At: now, Kind: KVAllBlocksCleared, BlockSize: e.p.BlockSize})
	}
}

// Events appends the events recorded since the last call to dst and forgets them. O(events).
func (e *Engine) Events(dst []Event) []Event {
	dst = append(dst, e.events...)
	e.events = e.events[:0]
	return dst
}

// KVEvents appends the KV events recorded since the last call (only with Options.KVEvents) to
// dst and forgets them. The slices inside the events are owned by the caller afterwards.
// O(events).
func (e *Engine) KVEvents(dst []KVEvent) []KVEvent {
	dst = append(dst, e.kvEvents...)
	clear(e.kvEvents)
	e.kvEvents = e.kvEvents[:0]
	return dst
}

// Stats returns a snapshot of the engine's state and counters. O(1).
func (e *Engine) Stats() Stats {
	s := e.st
	s.Waiting = len(e.waiting) - e.wHead
	s.Running = len(e.running)
	s.Busy = e.stepping
	s.UsedBlocks = e.p.NumBlocks - e.kv.free
	s.CachedBlocks = len(e.kv.cached)
	s.KVUsage = float64(s.UsedBlocks) / float64(e.p.NumBlocks)
	return s
}

// SubBlocks appends, for each coarse block hash, per hashes of consecutive engine blocks
// inside it, for traces that hash prompts at a coarser granularity than the engine's blocks
// (Mooncake traces use 512-token blocks: per = 512/BlockSize). Coarse hashes must already
// identify a whole prefix (equal hash, equal prefix), as trace hash ids do; the derived hashes
// then do too. O(len(coarse)·per), no allocation beyond dst's growth.
func SubBlocks(dst []BlockHash, coarse []uint64, per int) []BlockHash {
	for _, c := range coarse {
		for j := range per {
			dst = append(dst, BlockHash(mix.Mix64(c^(uint64(j)+1)*0x9e3779b97f4a7c15)))
		}
	}
	return dst
}

// Cached reports whether block h is in the prefix cache (in use or free but reusable). O(1).
func (e *Engine) Cached(h BlockHash) bool {
	_, ok := e.kv.lookup(h)
	return ok
}
