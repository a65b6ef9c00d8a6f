// Package kvevents keeps a prefixcache.Index exact by listening to the KV-cache events model
// servers publish: vLLM with --kv-events-config (publisher "zmq"), and SGLang, which uses the
// same framing. It holds three pieces: a Decoder for the msgpack batches, an Encoding and a
// Publisher that speak the same wire format (tests and simulated servers use them as the real
// thing), and a Subscriber that follows many publishers over ZeroMQ, recovers lost batches
// through their replay endpoints and applies every event to the index.
//
// # Who binds: connect mode and listen mode
//
// ZeroMQ lets either end of a PUB/SUB pair bind, and vLLM's publisher picks by its endpoint: it
// binds a wildcard host ("tcp://*:5557"), ipc:// and inproc:// endpoints, and connects to a
// concrete host ("tcp://gateway:5557", llm-d's pattern; other vLLM-compatible servers connect
// too). Its replay endpoint is always bound. The Subscriber follows both:
//
//   - Connect mode (Options.Sources): each engine runs with "endpoint": "tcp://*:5557" and the
//     Subscriber connects to every engine's address, one connection and one Source each.
//   - Listen mode (Options.Listen): each engine runs with "endpoint":
//     "tcp://<gateway>:5557" and Run binds that port ("tcp://0.0.0.0:5557"); every engine
//     connects to the one socket. Sources are told apart by topic, so each engine must set
//     "topic": "kv@<pod>@<model>"; Options.ListenSources gives each pod's replay endpoint
//     ("replay_endpoint": "tcp://*:5558" on the engine, "tcp://<pod>:5558" here), and
//     Options.AcceptUnknown admits pods not configured, without replay, at most
//     Options.MaxSources of them.
//
// A Subscriber may do both at once. If neither side binds, nothing arrives and nothing fails:
// that is what the silence warnings below are for. In listen mode each source gets the same
// sequence, replay and restart handling as in connect mode (see Failure handling), with what
// listen mode cannot see replaced: a publisher's connection is invisible behind the socket, so
// a source counts as connected from its first message until an idle probe of its replay
// endpoint fails, and the first message after that is treated as a new connection (checked
// against the replay endpoint before it is applied). A publisher that restarts between two
// probes reconnects unseen; its batches are not known to come from the process the backend
// follows until a replay vouches for them, and blocks that continue blocks the index never
// saw bring that check at once (see Failure handling). When Run starts, each configured source
// with a replay endpoint catches up through it, so a restarted gateway learns what idle
// engines hold; a source not heard from since is not probed (an engine that is down would be
// asked every second), so one whose only batches were dropped before its subscription
// arrived is caught up by its next batch. One goroutine reads the socket and hands each
// message to its source's goroutine through a queue of 256 messages, without waiting: a
// source stuck in a slow replay does not hold the others up, and what its full queue drops
// (Stats.Dropped) it later sees as a gap. Anyone who can reach the listening endpoint can
// publish; bind it where only model servers reach it. (zmq4 performs each incoming
// connection's handshake on its accepting goroutine without a deadline, so a client that
// connects and says nothing stalls further accepts until it disconnects; a Publisher's bound
// socket has the same weakness.)
//
// # The wire format
//
// Every message has three frames: the topic (UTF-8, by convention "kv@<pod>@<model>", see
// ParseTopic), the sequence number as 8 bytes big-endian (vLLM counts from 0 after the
// process starts, some servers from 1, then +1 per batch), and the payload, a msgpack
// EventBatch. The batch is the array [ts, events, data_parallel_rank] (trailing rank
// omitted when unset) or the map {"ts", "events", "data_parallel_rank"} (SGLang names the rank
// "attn_dp_rank"). A server running data parallelism is a backend per rank: vLLM publishes
// each rank on its own endpoint (its port plus the rank), one Source each; SGLang publishes
// every rank on one endpoint, one Source whose RankBackends name each rank's backend, to which
// each batch is applied by its rank. Each event is either a legacy positional array whose first element is the
// type tag,
//
//	["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//	 lora_name, extra_keys, group_idx]
//	["BlockRemoved", block_hashes, medium, group_idx]
//	["AllBlocksCleared"]
//
// with trailing fields at their defaults omitted, or a map with a "type" key and the same field
// names, in any order. parent_block_hash is nil for a chain that starts a sequence; 0 (an int,
// or a byte string that folds to 0) means the same, as some publishers send it, in either
// encoding. A hash is an int (vLLM's older integer hashes, or Python's hash(), hence
// negative int64 values) or a byte string: 32 bytes for sha256, 16 for xxh3-128. Byte strings
// are folded to their last 8 bytes read big-endian (FoldHash), ints to their 64-bit pattern; a
// 64-bit key is all the index needs and collisions among one engine's live blocks are
// negligible. Events of an unknown type are skipped and counted, unknown map keys and extra
// positional fields are ignored, so a newer publisher does not break an older subscriber.
// Anything else that is wrong is an error wrapping ErrMalformed that names the field and the
// byte offset; no input makes the decoder panic (FuzzDecode checks this, and that every
// accepted batch survives re-encoding in every encoding).
//
// The Decoder reads the payload in place: array and map headers, strings, integers and nils
// come straight from the payload bytes, and so do the headers of values it skips (every
// announced length is checked against the bytes that remain, so a garbage header claiming
// gigabytes costs nothing; the library's Skip allocated up to megabytes for it). The
// low-level Decoder of github.com/vmihailenco/msgpack/v5 handles the rest — floats, and
// saying exactly what is wrong whenever a fast path does not recognise what it sees. Going
// through the library's reader for every value made decoding three to seven times slower on
// the benchmark batches. Decoding into a reused Batch allocates nothing in
// steady state (media and the last LoRA name are interned).
//
// # Two key spaces
//
// An engine's block hash is opaque to a router: vLLM hashes (parent hash or a per-process
// random NONE_HASH, token ids, extra keys) with sha256 over pickle or CBOR, or xxh3, and the
// seed changes at every restart. A gateway cannot compute it for an incoming request. So the
// index keeps usher's own chain — prefixcache.HashTokens from Seed(model, lora_name, "") — as
// its key, exactly what the gateway computes for requests, and the Subscriber hands it each
// BlockStored's token ids so it can recompute that chain; the index remembers, per backend,
// which engine hash became which usher hash. BlockRemoved carries engine hashes only and is
// resolved through that map. A BlockStored that continues a chain (parent_block_hash set)
// needs its parent's usher hash: if the index never saw the parent, the event cannot be placed
// and is counted as an apply error. That is why the Subscriber replays history when it joins.
// The model in the seed comes from the Source or the topic and must be the name the gateway
// hashes requests with; the adapter is the event's lora_name (an adapter sent only as a
// lora_id gets a seed of its own, "lora_id:<id>", so its blocks never match base-model
// requests). Engines do not publish the per-request cache_salt, so salted requests
// are indexed under the unsalted seed; a gateway that salts should not rely on exact mode for
// them.
//
// # Replay
//
// vLLM keeps its last batches (buffer_steps, 10,000 by default) and serves them on a ROUTER
// socket, the replay_endpoint. A client sends the start sequence as 8 bytes big-endian (after
// an empty delimiter frame, which vLLM's server expects); the server answers with one message
// [seq, payload] per kept batch with seq >= start, some servers putting the topic first, and
// ends with seq 0xFFFFFFFFFFFFFFFF (EndOfReplay) and an empty payload. Publisher implements
// the server side; the Subscriber uses a DEALER socket and accepts both reply shapes. It
// reads every reply up to EndOfReplay (within ReplayTimeout) before closing the connection,
// even when the first reply already told it what it needed: a server still sending to a
// closed connection fails ("failed to send end-of-replay sentinel: use of closed network
// connection"), and the Publisher reports such failures through PublisherOptions.OnError.
//
// # Failure handling
//
// One goroutine per Source applies its batches in sequence order; the index is the only thing
// sources share. The Subscriber tracks the last applied sequence number and a hash of its
// payload, and the anchor: the last applied batch known to come from the publisher process
// the backend follows — the last one a replay applied or found in the history, or, in connect
// mode, the last batch of a connection whose replay check passed (a connection is one
// process). In listen mode a live batch could come from a process that replaced the old one
// unseen, so the anchor stays at the last replay until the next one. Then:
//
//   - The first batch seen from a source is where it starts, whatever its number: a publisher
//     counting from 1, or one that has been running for a while, has lost nothing before it.
//   - On connecting it asks the replay endpoint for the history from the anchor (all of it
//     the first time). If the first reply is that same batch, the publisher is the process it
//     was following and the rest of the reply is what it missed. If not, the publisher
//     restarted — its engine's cache is gone and its sequence numbers mean something new — so
//     the backend is cleared (AllBlocksCleared) and the whole new history replayed. Comparing
//     payloads rather than sequence numbers also catches a restarted publisher that has
//     already passed the old sequence number. A history that no longer holds the batch (an
//     outage longer than the publisher's buffer) is handled the same way: the backend's state
//     is unknown, so it is rebuilt from what the history still holds. (When the history no
//     longer reaches back to an anchor left behind by a long run of live batches, but still
//     holds the last applied batch, finding that batch unchanged is accepted instead: a busy
//     listen-mode source is not rebuilt for being busy.)
//   - A live batch past the next expected number is a gap: the PUB socket dropped messages (a
//     slow subscriber, the high-water mark, or the moment between connecting and the
//     subscription reaching the publisher). The missing batches are replayed, with the same
//     check as on connecting, before the live one is applied: in listen mode, where a
//     reconnection is invisible, a gap is how a restarted publisher that passed the old
//     sequence number shows. Without a replay endpoint (or when it fails) the missing
//     batches are counted as lost.
//   - A live sequence number that goes back is a restart on that connection (reset, replay).
//     Without a replay endpoint, a reconnect whose first batch is not past the last applied
//     one is treated as a restart too; gaps are then counted as lost.
//   - A live batch not known to come from the followed process whose BlockStored continues a
//     block the index never saw (prefixcache.ErrUnknownParent) is evidence of a restart the
//     numbers did not show: in listen mode a publisher that restarted between two probes,
//     whose first batches the PUB socket dropped, can first show the number after the last
//     one applied, or one already applied from a replay (skipped as a duplicate); or the
//     replay a gap asked for failed. So the history is checked against the anchor, as on
//     connecting: after a restart the backend is rebuilt from the new history, which places
//     those blocks, and their errors, explained, are neither counted nor reported (the reset
//     is). Otherwise — the stream checks out (the index can lose a parent the engine keeps,
//     to its own capacity) or the replay endpoint does not answer — they are apply errors.
//     Checks are at least ProbeInterval apart (a second if probing is disabled), so that a
//     stream that keeps continuing blocks the index evicted is not replayed batch by batch;
//     a failed check is retried on the next such error after that. Sources without a replay
//     endpoint have nothing to check against: the errors are counted and nothing is reset,
//     since lost batches explain them as well as a restart does. Errors in replayed batches
//     are not evidence (a history that no longer reaches a chain's start cannot place it).
//   - A dropped connection (a publisher that exits closes it) is redialled with exponential
//     backoff, MinBackoff doubling up to MaxBackoff, reset once a connection delivers.
//   - A connection silent for ProbeInterval is probed through the replay endpoint, because a
//     PUB connection can lose its subscription or outlive its publisher without an error and
//     an idle engine publishes nothing. Batches it missed are applied and the connection is
//     replaced.
//   - A malformed message or batch is counted and skipped (its sequence number is consumed);
//     an event the index rejects is counted; neither stops the stream. Options.OnError sees
//     each of these errors; Subscriber.Stats counts them and Subscriber.Sources shows each
//     source's backend, connection, position and last batch time, and its own batches,
//     events, losses, resets, reconnects, stale probes, decode and apply errors. Messages on
//     the listening socket that no source takes (no kv@<pod>@<model> topic, an unknown pod)
//     come from whoever connects, so their reports are throttled: the 1st, 2nd, 4th, 8th...
//   - A configured source that delivers no batch for Options.SilentAfter (30 s) is reported
//     once, with ErrSilent and whether it is connected, and again only after a batch and a new
//     silence; so is a listening socket that receives nothing. An idle engine publishes
//     nothing, so a warning asks for a look: a source connected and silent is usually idle,
//     one never connected or never heard from usually misconfigured (neither side binds,
//     a wrong topic, a firewall).
//
// Alternatives not taken: reflection-based msgpack.Unmarshal into tagged structs (one
// allocation per field and per event, and it cannot tell the two event encodings apart without
// decoding twice); using engine hashes as the index's keys (the gateway cannot compute them);
// treating every reconnect as a restart (a network blip would empty a warm backend) or none
// (a restarted engine's blocks would stay indexed forever); cgo bindings to libzmq (usher
// builds without cgo; github.com/go-zeromq/zmq4 speaks ZMTP 3 in Go). For listen mode: a SUB
// socket per pod (publishers connect to one address; zmq4 does not say which connection a
// message came from, so the topic is the only name a source has); binding in New (the
// address would be known at once, but New would hold a socket and zmq4's goroutines before
// Run, and need Close even if Run never came); blocking the reader while a source is busy
// (one slow replay endpoint would stall every engine behind TCP backpressure); keeping every
// pod ever seen (pod names change at every rollout, and MaxSources would fill for good: a
// learnt source silent for SilentAfter makes room for a new one instead); checking the
// history on every live batch (a replay per batch) or whenever any connection to the socket
// ends (zmq4 does not say whose, so every source would replay at every pod's restart) rather
// than on evidence; resetting on the first unknown-parent error without a check (an index
// smaller than the engine's cache loses parents the engine keeps, and the backend would be
// rebuilt for it); checking against the last applied batch only (the first batch of an
// unseen restart, once applied, would vouch for itself).
//
// # Cost
//
// Decoding is linear in the batch's bytes, in either encoding, and a Decoder decoding into a
// reused Batch allocates nothing once its buffers have grown to the largest batch seen. Applying a batch to a prefixcache.Index costs one Insert or Remove per event
// (see prefixcache's complexity notes); the index regrowing after a backend's clear is the
// only allocation, amortised. BenchmarkDecode, BenchmarkApplyEvents and
// BenchmarkSubscriberLoopback (through real loopback sockets) measure these; the current
// figures are in bench/BENCHMARKS.md.
//
// # Goroutines
//
// New binds nothing and starts nothing. Run binds the listening socket (Ready and ListenAddr
// report it), runs one goroutine per source (connect-mode, configured listen-mode and learnt)
// and, per live connection, one that reads the socket (zmq4's Recv can only be interrupted by
// closing the socket), plus one reading the listening socket, watches the listening socket
// for silence on its own goroutine, and returns after all of them have exited. The zmq4
// library runs its own goroutines per socket and connection. Publisher.Run serves replay
// requests on the caller's goroutine.
//
// A Subscriber and a Publisher are safe for concurrent use; a Decoder is not (use one per
// goroutine). Event, Batch, Source, Options, PublisherOptions, Stats and SourceStatus are plain
// values with no synchronisation of their own.
package kvevents
