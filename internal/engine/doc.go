// Package engine models one continuous-batching LLM model server — the scheduler and KV cache
// of a vLLM-like engine — as a clock-free state machine.
//
// The same model drives two things: the discrete-event cluster simulator in bench/, in virtual
// time, and the simulated vLLM-compatible HTTP servers in internal/glue/simfleet, in real time. It
// therefore owns no clock and starts no goroutine. The caller passes the time into every call
// and decides how long to wait between them:
//
//	e.Submit(req, now)          // a request arrives; it waits
//	d, ok := e.BeginStep(now)   // schedule a batch; it takes d
//	...                         // (virtual time jumps by d, or a timer sleeps d)
//	e.EndStep(now + d)          // the batch is done: tokens, finishes
//	evs = e.Events(evs[:0])     // what happened, stamped with times
//	e.Abort(id, now)            // the client went away
//
// # The model
//
// KV cache. The device holds NumBlocks blocks of BlockSize tokens. A prompt is a chain of block
// hashes: the hash of block i covers block i's tokens and the hash of block i−1, so equal
// prefixes give equal hashes and share blocks. A block, once computed and full, enters a cache
// map from hash to block. Blocks not referenced by any running request sit on one free list
// ordered by the time they were freed; allocation takes the least recently freed block,
// evicting its content from the cache (LRU). A request's blocks are freed last block first, so a
// prompt's tail, the part least likely to be shared, is evicted before its head; blocks with
// no cached content are reused before any cached block. A new request reuses its longest
// cached prefix, but always computes at least its last prompt token (the engine needs logits to
// sample from), exactly as vLLM does. Blocks of output are cached too when the caller gives the
// output token ids; blocks whose tokens the engine cannot know get hashes unique to the request,
// so only the request's own recompute can hit them.
//
// Scheduling. This follows vLLM's V1 scheduler with chunked prefill. Each step has a budget of
// MaxNumBatchedTokens. Running requests go first, in admission order: one token each to decode,
// or the rest of a prompt up to the remaining budget. Then waiting requests are admitted in
// arrival order while fewer than MaxNumSeqs run and budget remains, each with the first chunk
// of its uncached prompt. A step's output is one token for every request whose known tokens are
// all computed at its end.
//
// KV full. When a running request needs a block and none is free, the engine preempts the most
// recently admitted running request: it frees its blocks (they stay cached until evicted) and
// puts it back at the head of the waiting queue, to recompute later — vLLM's recompute
// preemption. While a step preempts, it admits nobody. A waiting request whose first chunk does
// not fit in the free blocks is not admitted, and nobody behind it either (head-of-line FIFO
// admission control). So a full cache is met with both: admission waits, running work is
// preempted. Requests that could never fit (prompt plus output above MaxModelLen or the whole
// cache) are rejected by Submit.
//
// Cost. A step costs a fixed StepBase, plus per prompt token a linear-layer cost and an
// attention cost growing with the context before it, plus per decoding sequence a fixed cost
// and a cost per context token read. Profiles name calibrated parameter sets: Qwen3_32B_H100
// reproduces the figures llm-d calibrates its router with (an uncached 8192-token chunk ≈ 0.40 s;
// sustained prefill ≈ 16k tok/s), and Demo runs fast enough to watch in real time.
//
// Events. Every request gets EventStarted at its first admission (with the tokens served from
// cache, vLLM's cached_tokens), EventToken per output token (or only the first, for
// simulators that need TTFT and not streams), EventPreempted when preempted, and exactly one
// EventFinished or EventAborted, after which nothing. With Options.KVEvents the engine also
// records vLLM-style KV events (BlockStored with parent hash and token ids, BlockRemoved,
// AllBlocksCleared) for a publisher to send to a router's precise prefix index.
//
// Determinism. The engine iterates no map and draws no random number: the same calls give the
// same events, bit for bit.
//
// # Rejected alternatives
//
// A goroutine per engine with a ticker would tie the model to wall time and make the simulator
// slow and nondeterministic. Advancing by NextEventTime/Advance(to) was considered: it hides the
// step boundary, but the boundary is what both drivers need (the HTTP server streams a step's
// tokens when it ends; the simulator schedules a completion event), so the two-phase
// BeginStep/EndStep is the interface, with aborts and arrivals allowed in between as in a real
// engine, where an abort during a forward pass discards that request's output. Swap-based
// preemption (to CPU memory) is left out: vLLM V1 only recomputes. A watermark of reserved
// blocks is left out as well: vLLM V1 has none, and the thrash it avoids is part of what a
// router should see. Admission counted in whole-prompt blocks (reserving a request's full
// prompt before admitting it) would under-use the cache compared with vLLM, which reserves
// chunk by chunk.
//
// # Concurrency
//
// An Engine is not safe for concurrent use: it is one server's state machine, driven by one
// goroutine (the simulated server holds a lock around every call; the simulator runs it in
// virtual time on one goroutine). Profile, Options, Request, Event, KVEvent, Stats and the unit
// types are plain values.
package engine
