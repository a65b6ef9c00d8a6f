package routing

import (
	"slices"
	"strconv"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

// Role is the part of inference a backend serves. The zero value, RoleBoth, is an ordinary
// aggregated server that prefills and decodes.
type Role uint8

const (
	// RoleBoth serves prefill and decode (an aggregated server). It is the zero value.
	RoleBoth Role = iota
	// RolePrefill serves prefill only (disaggregated serving).
	RolePrefill
	// RoleDecode serves decode only (disaggregated serving).
	RoleDecode
)

// String returns "both", "prefill" or "decode".
func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// serves reports whether a backend of role r can take work that needs role want. A request
// asking for RoleBoth (the zero value) accepts any backend.
func (r Role) serves(want Role) bool {
	return want == RoleBoth || r == RoleBoth || r == want
}

// Health is what the writer knows about a backend's liveness. The zero value is HealthUnknown:
// no probe has answered yet, which is not the same as a failed probe.
type Health uint8

const (
	// HealthUnknown means no probe has answered yet. Backends in this state are routable; the
	// staleness of their signals decides how scorers treat them.
	HealthUnknown Health = iota
	// Healthy means the last probe or scrape succeeded.
	Healthy
	// Unhealthy means the backend failed its probes or is draining. Filters drop it.
	Unhealthy
)

// String returns "unknown", "healthy" or "unhealthy".
func (h Health) String() string {
	switch h {
	case HealthUnknown:
		return "unknown"
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	}
	return "Health(" + strconv.Itoa(int(h)) + ")"
}

// Signal is a set of the polled signals a BackendState carries. A signal whose bit is clear is
// missing: the writer did not observe it, and its field in BackendState is meaningless. Missing
// is never the same as zero (an idle server) nor as infinite load (a saturated one).
type Signal uint8

const (
	// SignalQueued: BackendState.Queued is known.
	SignalQueued Signal = 1 << iota
	// SignalRunning: BackendState.Running is known.
	SignalRunning
	// SignalKVUtilization: BackendState.KVUtilization is known.
	SignalKVUtilization
	// SignalKVCapacity: BackendState.KVCapacityBlocks and BackendState.BlockSize are known.
	SignalKVCapacity

	// AllSignals is every load signal above. SignalAdapters, which only servers with LoRA
	// enabled export, is not in it.
	AllSignals = SignalQueued | SignalRunning | SignalKVUtilization | SignalKVCapacity

	// SignalAdapters: BackendState.RunningAdapters, WaitingAdapters and MaxAdapters are known
	// (vLLM's vllm:lora_requests_info gauge).
	SignalAdapters Signal = 1 << 4
)

// Has reports whether every signal in want is in s.
func (s Signal) Has(want Signal) bool { return s&want == want }

// BackendState is one model server as the router's writer describes it: identity, role, health
// and the signals polled from the server. It is a plain value; a metrics scraper fills one per
// backend and hands the whole set to Router.Update, which copies it into an immutable snapshot.
//
// The router adds what polling cannot know in time: its own in-flight counters (requests
// dispatched and not finished; uncached prompt tokens still in prefill), which change the
// moment Pick returns. Scorers see both through Candidate.
//
// Missing and stale signals are explicit. A field is meaningful only when its bit is in Known,
// and all of them only while UpdatedAt is recent (Options.StaleAfter). A signal that is missing
// or stale is neither treated as zero nor as infinite load: each filter and scorer documents what
// it does with it (the built-in load scorers impute the mean of the candidates that have it, and
// count candidates with stale signals in Stats.StaleCandidates).
//
// A BackendState is a plain value: copy it freely; the router never retains the caller's copy.
// Its slices (Models, RunningAdapters, WaitingAdapters) are shared, not copied, by Update, and
// never modified by the router: do not modify their elements after handing them over (build
// new slices for the next update).
type BackendState struct {
	// Name identifies the backend (for example its address). It must be non-empty and unique
	// within an update; it is also the name the prefix index knows the backend by, and the key
	// that carries in-flight counters across updates.
	Name string
	// Role is the part of inference the backend serves. Zero: RoleBoth.
	Role Role
	// KVBoth says the server has a KV connector that sends and receives (vLLM's kv_role
	// kv_both): it can prefill for another server and decode what another prefilled. With
	// Role RoleBoth, the role planner a Router was given (routing/disagg's Planner) may narrow
	// the picks it takes to prefill or decode from one pick to the next; without one it is a
	// RoleBoth backend. Zero: a server without one, which a RoleBoth server is unless it says so.
	KVBoth bool
	// Health is the liveness verdict of the writer. Zero: HealthUnknown.
	Health Health
	// Known is the set of signals below that were observed. Zero: nothing is known.
	Known Signal

	// Queued is the number of requests waiting in the server's queue (vLLM
	// num_requests_waiting). Valid when Known has SignalQueued; must be ≥ 0.
	Queued int
	// Running is the number of requests in the running batch (vLLM num_requests_running).
	// Valid when Known has SignalRunning; must be ≥ 0.
	Running int
	// KVUtilization is the fraction of KV cache blocks in use, in [0, 1] (vLLM
	// kv_cache_usage_perc). Valid when Known has SignalKVUtilization.
	KVUtilization float64
	// KVCapacityBlocks is the number of KV cache blocks the server has (vLLM num_gpu_blocks).
	// Valid when Known has SignalKVCapacity; must be > 0.
	KVCapacityBlocks int
	// BlockSize is the number of tokens per KV cache block (vLLM block_size). Valid when Known
	// has SignalKVCapacity; must be > 0.
	BlockSize int

	// Models lists the model names the server serves: base models and the LoRA adapters it can
	// load (what its GET /v1/models lists). Nil or empty: it serves any model. A Router only
	// routes a request naming Request.Model to backends that list it or list nothing. It is
	// configuration, not a polled signal: no Known bit, never stale. Empty names are ignored.
	Models []string
	// RunningAdapters lists the LoRA adapters of the requests in the server's running batch,
	// and WaitingAdapters those of its waiting requests (vLLM's running_lora_adapters and
	// waiting_lora_adapters labels). An adapter may be in both. Valid when Known has
	// SignalAdapters; names must be non-empty.
	RunningAdapters, WaitingAdapters []string
	// MaxAdapters is the number of adapters the server can hold in its GPU slots at once (vLLM
	// max_lora). Valid when Known has SignalAdapters; must be > 0.
	MaxAdapters int

	// UpdatedAt is when the signals were observed. The zero time means never: every signal is
	// then treated as missing, whatever Known says.
	UpdatedAt time.Time
}

// sanitize clears the Known bits of values that are out of range and reports how many it
// cleared. A scraper that reads garbage must not make a backend look idle or saturated.
func (s *BackendState) sanitize() int {
	bad := 0
	if s.Known.Has(SignalQueued) && s.Queued < 0 {
		s.Known &^= SignalQueued
		bad++
	}
	if s.Known.Has(SignalRunning) && s.Running < 0 {
		s.Known &^= SignalRunning
		bad++
	}
	if s.Known.Has(SignalKVUtilization) && !(s.KVUtilization >= 0 && s.KVUtilization <= 1) {
		s.Known &^= SignalKVUtilization
		bad++
	}
	if s.Known.Has(SignalKVCapacity) && (s.KVCapacityBlocks <= 0 || s.BlockSize <= 0) {
		s.Known &^= SignalKVCapacity
		bad++
	}
	if s.Known.Has(SignalAdapters) && !adaptersValid(s) {
		s.Known &^= SignalAdapters
		bad++
	}
	if s.UpdatedAt.IsZero() {
		s.Known = 0
	}
	return bad
}

// maxAdapterSlots bounds BackendState.MaxAdapters: vLLM's max_loras is a handful to a few
// hundred; anything beyond this is a parse error, not a server.
const maxAdapterSlots = 1 << 16

// adaptersValid reports whether s's adapter signals make sense: MaxAdapters in
// [1, maxAdapterSlots], lists no longer than that and no empty names. More distinct running
// adapters than slots is not rejected: some vLLM versions render both labels from one map of
// every adapter with requests, running or waiting. O(r + w) for r running and w waiting names.
func adaptersValid(s *BackendState) bool {
	if s.MaxAdapters <= 0 || s.MaxAdapters > maxAdapterSlots ||
		len(s.RunningAdapters) > maxAdapterSlots || len(s.WaitingAdapters) > maxAdapterSlots {
		return false
	}
	return !slices.Contains(s.WaitingAdapters, "") && !slices.Contains(s.RunningAdapters, "")
}

// InFlight is a count of work sent to a backend that has not finished: the router's own
// (Router.InFlight), which changes at once on Pick, unlike polled signals, or its peers'
// (reported by the replication layer, package replica), or both summed (Candidate.InFlight).
type InFlight struct {
	// Requests picked and not yet Done.
	Requests int64
	// PrefillTokens is the sum of uncached prompt tokens of requests picked whose first token
	// has not yet arrived: the prefill work the backend still has to do for this router.
	PrefillTokens int64
	// Blocks is the sum of the prompt blocks (⌈prompt tokens / block size⌉) of requests picked
	// and not yet Done: the KV cache this router's work occupies there, as Dynamo's router counts
	// active blocks.
	Blocks int64
}

// Candidate is one eligible backend as filters, scorers and pickers see it during one Pick.
// Candidates live in a scratch buffer owned by the pick: a Scorer may read them during its call
// and must not keep pointers to them. Only the goroutine running the pick touches them.
type Candidate struct {
	// State is the backend's published state. It is immutable: never write through it.
	State *BackendState
	// ID is the router's stable identifier of the backend.
	ID BackendID
	// Fresh is the set of signals that are known and not stale at the time of the pick. Scorers
	// test Fresh, not State.Known.
	Fresh Signal
	// Stale is true when the backend's signals were observed longer ago than
	// Options.StaleAfter, or never; Fresh is then empty.
	Stale bool
	// InFlight is the in-flight work on this backend, read at the start of Pick: the router's
	// own counters plus the counts other gateway replicas hold there, as the replication
	// layer last set them (zero for a router that is never told). [Router.InFlight] returns
	// the own part.
	InFlight InFlight
	// MatchedBlocks is the number of leading blocks of Request.Chain that the prefix index says
	// this backend holds in GPU memory (0 without an index), at most len(Chain).
	MatchedBlocks int
	// MatchedTokens is MatchedBlocks times the request's block size.
	MatchedTokens int
	// UncachedTokens is the prompt tokens this backend would have to prefill: the prompt length
	// minus the tokens of MatchedBlocks, never below zero.
	UncachedTokens int
	// Age is how long ago the signals were observed; negative when they never were.
	Age time.Duration
	// AdapterInFlight is the number of this router's requests for Request.Adapter picked onto
	// this backend and not yet Done (0 when the request names no adapter): the adapter is in
	// use there whatever the last scrape said. Peers' requests are not counted. The count is
	// kept in a fixed table (see Router); in the rare case it is full, a request is not counted.
	AdapterInFlight int
	// Silence is how long, at the time of the pick, the backend has sent nothing on any of
	// this router's requests while streamed ones (Request.Stream) were in flight there: as
	// Result.Silence, counted from the pick of the first stream when nothing came since. Zero
	// when no stream is in flight, and until the router first hears of progress
	// (Result.Progress): a caller that never reports it sees no backend fall silent.
	Silence time.Duration

	slot uint32 // 1 + the index in the snapshot; 0 for candidates built outside a Router
	ix   int32  // 1 + the prefix index id; 0 when unknown (no index, or built outside a Router)
	// lora is the backend's interned model and adapter sets in the snapshot (nil without
	// them, or for a candidate built outside a Router).
	lora *loraSets
}

// BackendID is the router's stable identifier of a backend: the same name keeps the same id
// across updates for the lifetime of the Router. Ids are small and dense, starting at 0.
//
// It numbers backends in one Router's set, and nothing else: a prefixcache.Index numbers the
// same backends its own way (its ids are interned when a name is first added there, by this
// router or by anyone else), so the two generally differ, and both are plain integers that Go
// lets index any slice. Index a prefixcache result (Match's slice) only with the index's ids —
// the index's own Lookup of the backend's name (BackendState.Name): a name is the only id that
// means the same thing everywhere (between routers, replicas, packages, the index).
type BackendID uint32

// Request is what Pick needs to know about one request. It is passed by pointer and only read,
// during Pick; Pick copies what it keeps (the chain, when there is a prefix index), so the caller
// may reuse it as soon as Pick returns, and may share one Request between concurrent picks.
// Fields can be added later without breaking callers.
type Request struct {
	// Chain is the prompt's chained block hashes, computed once by the caller (see
	// prefixcache). Empty means no prefix information.
	Chain []prefixcache.BlockHash
	// BlockSize is the number of tokens per block in Chain. Zero: Options.BlockSize.
	BlockSize int
	// PromptTokens is the prompt length in tokens. Zero with a non-empty Chain means
	// len(Chain) × BlockSize.
	PromptTokens int
	// Session identifies a conversation (for example the x-session-id header). Empty: none.
	Session string
	// Role is the role the request needs. Zero (RoleBoth): any backend.
	Role Role
	// Now is the time of the pick. Zero: Options.Now().
	Now time.Time
	// Exclude lists backends the pick must not choose, for example those a retry already
	// tried. Checked before the filters, O(len(Exclude)) per backend; keep it short.
	Exclude []BackendID
	// Model is the model name the request asks for (the body's "model"). Empty: any. When
	// some backend lists Models, only backends that list Model, or list nothing, are
	// candidates; when none is, Pick fails with ErrNoBackendForModel.
	Model string
	// Adapter is the LoRA adapter the request needs; empty means the base model. A request
	// that names an adapter as its model has Model and Adapter both set to that name (as vLLM
	// serves it). The router counts its own in-flight requests per backend and adapter
	// (Candidate.AdapterInFlight), and routing/lora's affinity scorer scores by it.
	Adapter string
	// Stream says the answer is streamed, so a live backend sends bytes soon (a stream's
	// headers come when the server accepts it): only streamed requests in flight make a
	// backend that sends nothing count as silent (see Result.Progress). A whole answer's
	// headers come only with the answer, which may take minutes.
	Stream bool
	// OutputTokens is the expected answer length (for example max_tokens, or an estimate);
	// routing/latency's scorer weighs the predicted time per output token by it. Zero: unknown.
	OutputTokens int
	// Targets are the latencies the request should get (its service-level objective); zero
	// fields set none. routing/latency's scorer sends a request with targets to a backend predicted to
	// meet them, with the most headroom. Set them from the operator's configuration (per band,
	// or from a header the operator trusts), never from what a client may send unchecked.
	Targets Latency

	indexed bool // set on the router's copy when the Router has a prefix index
	// On the router's copy: the snapshot's interned sets the ids below refer to (nil when the
	// snapshot has none), and Model's and Adapter's ids there (-1: not listed by any backend).
	lora               *loraIndex
	modelID, adapterID int32
}

// clamp01 maps a score into [0, 1]; NaN becomes 0. It reports whether it changed the value.
func clamp01(v float64) (float64, bool) {
	switch {
	case v >= 0 && v <= 1:
		return v, false
	case v > 1:
		return 1, true
	case v < 0:
		return 0, true
	}
	return 0, true // NaN
}
