// Package kvevents keeps a prefixcache.Index exact by listening to the KV-cache events model
// servers publish: vLLM with --kv-events-config (publisher "zmq"), and SGLang, which uses the
// same framing.
//
// # The model
//
// The package has two pieces: a Decoder for the msgpack batches, and a Subscriber that follows
// many publishers over ZeroMQ, recovers lost batches through their
// replay endpoints, and applies every event to the index. One goroutine per Source applies its
// batches in sequence order; the index is the only thing sources share.
//
// # Who binds: connect mode and listen mode
//
// ZeroMQ lets either end of a PUB/SUB pair bind, and vLLM's publisher picks by its endpoint: it
// binds a wildcard host ("tcp://*:5557"), ipc:// and inproc:// endpoints, and connects to a
// concrete host ("tcp://gateway:5557", llm-d's pattern). Its replay endpoint is always bound.
// The Subscriber follows both, and may do both at once:
//
//   - Connect mode (Options.Sources): each engine binds "tcp://*:5557" and the Subscriber
//     connects to every engine's address, one connection and one Source each.
//   - Listen mode (Options.Listen): each engine connects to "tcp://<gateway>:5557" and Run binds
//     that port; sources are told apart by topic, so each engine sets "topic":
//     "kv@<pod>@<model>". Options.ListenSources gives each pod's replay endpoint, and
//     Options.AcceptUnknown admits pods not configured, without replay, up to
//     Options.MaxSources (a learnt source silent for SilentAfter makes room for a new one).
//
// In listen mode each source gets the same sequence, replay and restart handling as in connect
// mode, with what listen mode cannot see replaced: a publisher's connection is invisible behind
// the socket, so a source counts as connected from its first message until an idle probe of its
// replay endpoint fails, and its next message is treated as a new connection. When Run starts,
// each configured source with a replay endpoint catches up through it, so a restarted gateway
// learns what idle engines hold. The reader hands each message to its source's goroutine
// through a bounded queue without waiting, so a source stuck in a slow replay holds no other
// up; what its full queue drops (Stats.Dropped) it later sees as a gap.
//
// Anyone who can reach the listening endpoint can publish: bind it where only model servers
// reach it. zmq4 performs each incoming handshake on its accepting goroutine without a
// deadline, so a client that connects and says nothing stalls further accepts until it
// disconnects; a model server's bound socket has the same weakness.
//
// # The wire format
//
// Every message has three frames: the topic (UTF-8, by convention "kv@<pod>@<model>", the
// pod being free of '@' and both parts non-empty), the sequence number as 8 bytes big-endian (+1 per batch; vLLM counts from 0,
// some servers from 1), and the payload, a msgpack EventBatch: the array [ts, events,
// data_parallel_rank] (rank omitted when unset) or the map {"ts", "events",
// "data_parallel_rank"} (SGLang names the rank "attn_dp_rank"). A data-parallel server is a
// backend per rank: vLLM publishes each rank on its own endpoint, one Source each; SGLang
// publishes every rank on one endpoint, one Source whose RankBackends name each rank's backend.
// Each event is a positional array whose first element is the type tag,
//
//	["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//	 lora_name, extra_keys, group_idx]
//	["BlockRemoved", block_hashes, medium, group_idx]
//	["AllBlocksCleared"]
//
// with trailing defaults omitted, or a map with a "type" key and the same field names in any
// order. A nil or 0 parent_block_hash starts a sequence. A hash is an int (hence possibly
// negative) or a byte string (32 bytes for sha256, 16 for xxh3-128); byte strings are folded to
// their last 8 bytes read big-endian, ints to their 64-bit pattern. Events of an
// unknown type are skipped and counted, and unknown map keys and extra positional fields are
// ignored, so a newer publisher does not break an older subscriber. Anything else wrong is an
// error wrapping ErrMalformed that names the field and byte offset; no input makes the decoder
// panic (FuzzDecode).
//
// The Decoder reads the payload in place: headers, strings, integers and nils come straight
// from the bytes, and every announced length is checked against the bytes that remain, so a
// garbage header claiming gigabytes costs nothing. The low-level decoder of
// github.com/vmihailenco/msgpack/v5 handles floats and names what is wrong whenever the fast
// path does not recognise what it sees.
//
// # Two key spaces
//
// An engine's block hash is opaque to a router: vLLM hashes with sha256 or xxh3 from a
// per-process random seed, so a gateway cannot compute it for an incoming request. The index
// therefore keys blocks by usher's own chain — prefixcache.HashTokens from Seed(model,
// lora_name, cache_salt) — and the Subscriber hands it each BlockStored's token ids to recompute that
// chain; the index remembers which engine hash became which usher hash, and resolves
// BlockRemoved through it. A BlockStored that continues a chain needs its parent's usher hash:
// if the index never saw the parent the event cannot be placed and counts as an apply error,
// which is why the Subscriber replays history when it joins. The model in the seed comes from
// the Source or the topic and must be the name the gateway hashes requests with; an adapter
// sent only as a lora_id gets a seed of its own ("lora_id:<id>"). The cache_salt comes from
// extra_keys, where vLLM lists, per block, what else it folded into the block's hash — the
// adapter's name, multimodal identifiers, and, on the first block of a chain, the salt last
// (BlockEvent.Salt) — so a salted request's chain and its engine's blocks agree. A publisher that
// sends no extra_keys has its chains indexed under the unsalted seed.
//
// # Replay
//
// vLLM keeps its last batches (buffer_steps) and serves them on a ROUTER socket, the
// replay_endpoint. A client sends an empty delimiter frame and the start sequence as 8 bytes
// big-endian; the server answers with one [seq, payload] message per kept batch with seq >=
// start (some servers put the topic first), and ends with EndOfReplay and an empty payload.
// The Subscriber uses a DEALER socket, accepts both reply shapes, and reads every reply up to
// EndOfReplay (within ReplayTimeout) before closing, since a server still sending to a closed
// connection fails.
//
// # Failure handling
//
// The Subscriber tracks the last applied sequence number and a hash of its payload, and the
// anchor: the last applied batch known to come from the publisher process the backend follows
// — the last one a replay applied or found, or, in connect mode, the last batch of a connection
// whose replay check passed. (In listen mode a live batch could come from an unseen
// replacement process, so the anchor stays at the last replay.) Then:
//
//   - The first batch seen from a source is where it starts, whatever its number.
//   - On connecting it asks the replay endpoint for the history from the anchor. If the first
//     reply is that same batch, the publisher is the process it was following and the rest is
//     what it missed. If not — the publisher restarted, or the outage outlasted its buffer —
//     the backend is cleared and the whole available history replayed. Comparing payloads
//     rather than numbers also catches a restart that already passed the old number. (When the
//     history no longer reaches an anchor left behind by a long run of live batches but still
//     holds the last applied batch unchanged, that is accepted: a busy source is not rebuilt
//     for being busy.)
//   - A live batch past the next expected number is a gap: the missing batches are replayed,
//     with the same check, before it is applied. Without a replay endpoint (or when it fails)
//     they are counted as lost.
//   - A live sequence number that goes back is a restart on that connection (reset, replay).
//     Without a replay endpoint, a reconnect whose first batch is not past the last applied
//     one is treated as a restart too.
//   - A live batch not known to come from the followed process whose BlockStored continues a
//     block the index never saw (prefixcache.ErrUnknownParent) is evidence of a restart the
//     numbers did not show, so the history is checked against the anchor as on connecting;
//     after a restart the backend is rebuilt and the explained errors are not reported (the
//     reset is). Otherwise, or without a replay endpoint, they are apply errors. Checks are at
//     least ProbeInterval apart. Errors in replayed batches are not evidence.
//   - A dropped connection is redialled with exponential backoff from MinBackoff to
//     MaxBackoff, reset once a connection delivers.
//   - A connection silent for ProbeInterval is probed through the replay endpoint, since a PUB
//     connection can lose its subscription or outlive its publisher without an error. Batches
//     published since are applied at once, but only counted as missed (Stats.Stale, and in
//     connect mode the connection replaced) once the connection proves it missed them: see
//     Replays racing the live stream.
//   - A malformed message or batch is counted and skipped (its sequence number consumed); an
//     event the index rejects is counted; neither stops the stream. Options.OnError sees each
//     error; Subscriber.Stats and Subscriber.Sources count them per source. Reports about
//     messages no source takes are throttled (the 1st, 2nd, 4th, 8th...).
//   - A configured source that delivers no batch for Options.SilentAfter is reported once with
//     ErrSilent, and again only after a batch and a new silence; so is a listening socket that
//     receives nothing. Connected and silent usually means idle; never connected or never
//     heard from usually means misconfigured.
//
// # Replays racing the live stream
//
// A publisher keeps a batch in its history the moment it publishes it and sends it a moment
// later, so a replay can return batches the live connection is about to deliver. An idle
// probe that fires just as an engine resumes after a pause is such a replay: it asks for
// what happened since the last batch, and gets the batch already on its way. Counted as
// missed, such batches made idle probes look stale — on a fleet of simulated servers
// publishing into a listening socket, every stale probe examined had found batches that
// arrived live a few milliseconds later, none that the live path lost — and in connect mode
// replaced a working connection.
//
// So a batch a replay applies (any replay: an idle probe, a gap's recovery, the check on
// connecting) is applied at once, keeping the index current, but counted neither as live nor
// as replay-only until the live connection settles it. A connection delivers one publisher's
// batches in order, so: when it delivers the batch, it is live (Stats.Live; the replay merely
// came first); when it delivers a later batch first, the batches before it were missed
// (Stats.ReplayOnly, and the probe that found them is stale); when it delivers nothing for a
// grace (ProbeInterval, and at least a second) after the replay, as the next idle probe finds,
// or ends, they count as missed too. The first two rules are exact. The third is a grace: in
// connect mode the silent connection is then replaced, so nothing it held can still arrive;
// in listen mode the publisher's connection is not the Subscriber's to replace, and a batch
// it delivers after the grace is counted in Stats.Late, which stays 0 unless the live path
// stalls for longer than the grace. A reset (a publisher restart) discards the batches still
// unsettled.
//
// Rejected: waiting a grace period before applying what a probe found (the index would lag
// by the grace whenever the live path really lost batches); replaying only up to the last
// batch seen live (the probe exists to find what was published after it); and applying the
// probe's batches but dropping their count when they arrive live (a counter cannot go down).
//
// # Complexity
//
// Decoding is linear in the batch's bytes, in either encoding, and decoding into a reused Batch
// allocates nothing once its buffers have grown to the largest batch seen. Applying a batch
// costs one index Insert or Remove per event; the index regrowing after a clear is the only
// allocation, amortised. BenchmarkDecode, BenchmarkApplyEvents and BenchmarkSubscriberLoopback
// measure these; current figures are in bench/BENCHMARKS.md.
//
// # Alternatives not taken
//
//   - Reflection-based msgpack.Unmarshal into tagged structs: allocations per field and event,
//     and it cannot tell the two event encodings apart without decoding twice.
//   - Engine hashes as the index's keys: the gateway cannot compute them.
//   - Treating every reconnect as a restart (a blip would empty a warm backend) or none (a
//     restarted engine's blocks would stay indexed forever).
//   - cgo bindings to libzmq: usher builds without cgo; github.com/go-zeromq/zmq4 is pure Go.
//   - A SUB socket per pod in listen mode: publishers connect to one address, and zmq4 does not
//     say which connection a message came from, so the topic is a source's only name.
//   - Binding in New: New would hold a socket and goroutines before Run, and need Close.
//   - Blocking the reader while a source is busy: one slow replay would stall every engine.
//   - Keeping every pod ever seen: pod names change at every rollout.
//   - Checking the history on every live batch, or whenever any connection ends, rather than
//     on evidence: a replay per batch, or every source replayed at every pod's restart.
//   - Resetting on the first unknown-parent error without a check: an index smaller than the
//     engine's cache loses parents the engine keeps.
//   - Checking against the last applied batch only: an unseen restart's first batch, once
//     applied, would vouch for itself.
//
// # Goroutines and concurrency
//
// New binds nothing and starts nothing. Run binds the listening socket (Ready and ListenAddr
// report it), runs one goroutine per source and one per live connection reading its socket,
// one reading and one watching the listening socket, and returns after all of them have
// exited; zmq4 runs its own goroutines per socket and connection.
//
// A Subscriber is safe for concurrent use; a Decoder is not (use one per goroutine).
// BlockEvent, Batch, Source, Options, Stats and SourceStatus are plain values with no
// synchronisation of their own.
package kvevents
