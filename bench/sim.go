package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/internal/glue/slo"
	"github.com/usher-llm/usher/internal/heap"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/saturation"
)

// GateKind selects the saturation gate of the simulated gateway's admission queue.
type GateKind uint8

const (
	// GateConcurrency (the zero value) admits while fewer than MaxInFlight·Servers requests
	// are in flight: flowcontrol.Options.MaxInFlight. The queue sees every completion, so the gate
	// is exact and needs no metrics.
	GateConcurrency GateKind = iota
	// GateSaturation is llm-d's saturation detector on the scraped metrics: the pool's level
	// is the mean over servers of max(queued/5, kv_util/0.8), metrics older than 200 ms count
	// as saturated (level 1), and dispatch stops at level 1: flowcontrol.Options.Saturation, with
	// Queue.Notify after every scrape. It sees dispatches only at the next scrape, as llm-d does.
	GateSaturation
	// GateBoth is GateConcurrency and GateSaturation together.
	GateBoth
	// GateNone admits everything at once; the servers' own queues absorb the load.
	GateNone
	// GateUsher is GateConcurrency and usher's saturation gauge, saturation.Level
	// with its defaults: dispatch stops while every server has 4 requests waiting (counting
	// those the router sent since the last scrape) or 95% of its KV cache in use, so the
	// excess above the knee waits in the fair queue instead of inside the servers.
	GateUsher
	// GateUsherMean is GateUsher with the gauge's pool level the mean over servers.
	GateUsherMean
)

var gateNames = [...]string{"concurrency", "saturation", "both", "none", "usher", "usher-mean"}

// String returns the gate's name as ParseGate accepts it.
func (g GateKind) String() string {
	if int(g) < len(gateNames) {
		return gateNames[g]
	}
	return "GateKind(" + strconv.Itoa(int(g)) + ")"
}

// ParseGate returns the gate named s ("concurrency", "saturation", "both", "none").
func ParseGate(s string) (GateKind, error) {
	for i, n := range gateNames {
		if n == s {
			return GateKind(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown gate %q", ErrInvalidConfig, s)
}

// IndexMode says how the routers' prefix index is fed in a run.
type IndexMode uint8

const (
	// IndexAuto (the zero value) lets each Router say: exact when Router.Events is set,
	// approximate otherwise.
	IndexAuto IndexMode = iota
	// IndexApprox feeds every router's index from the router alone (routing.Profile.Learn).
	IndexApprox
	// IndexExact feeds every router's index from the engines' KV events, delivered after
	// Config.EventDelay, on top of what the router itself learns.
	IndexExact
)

var indexModeNames = [...]string{"auto", "approx", "exact"}

// String returns the mode's name as ParseIndexMode accepts it.
func (m IndexMode) String() string {
	if int(m) < len(indexModeNames) {
		return indexModeNames[m]
	}
	return "IndexMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseIndexMode returns the mode named s ("auto", "approx", "exact").
func ParseIndexMode(s string) (IndexMode, error) {
	for i, n := range indexModeNames {
		if n == s {
			return IndexMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown index mode %q", ErrInvalidConfig, s)
}

// Defaults for the zero Config.
const (
	DefaultServers        = 16
	DefaultMaxInFlight    = 32
	DefaultScrapeInterval = 50 * time.Millisecond // llm-d's scrape interval
	DefaultSeed           = 1
	// DefaultEventDelay is how long a KV event takes from the engine's step to the index in
	// exact mode: vLLM publishes a step's events when the step ends, and a subscriber over
	// ZMQ or a message bus applies them a few to tens of milliseconds later.
	DefaultEventDelay = 20 * time.Millisecond
	// DefaultSyncInterval is how often each gateway replica hands what it learnt to the
	// others (Config.Replicas): the replica package's flush interval (replica.DefaultInterval).
	DefaultSyncInterval = 50 * time.Millisecond
	// MaxReplicas bounds Config.Replicas.
	MaxReplicas = 64
)

// NoSync as Config.SyncLag: gateway replicas share nothing, each routes on what it alone
// learnt (any negative SyncLag means the same).
const NoSync time.Duration = -1

// EngineProfile holds the capacity and cost parameters of one simulated model server:
// Config.Profile's type. It is a plain value; start from BenchProfile, Qwen3Profile or
// DemoProfile and adjust fields. The capacity fields mirror vLLM's flags: BlockSize (tokens per
// KV block), NumBlocks (num_gpu_blocks), MaxNumSeqs, MaxNumBatchedTokens (the token budget of a
// step, with chunked prefill) and MaxModelLen. One engine step costs
//
//	StepBase
//	+ Σ over prefill chunks of n tokens starting at context c:
//	      n·PrefillPerToken + n·(c + n/2)·PrefillAttnPerTokenPair
//	+ (decoding sequences)·DecodePerSeq + (their total context tokens)·DecodePerContextToken
//
// where the per-token-pair and per-context-token costs are in Picoseconds. Name and Model label
// the server. Sizes must be positive, costs not negative, and a step must cost something: Run
// reports a profile that breaks these rules with an error wrapping ErrInvalidConfig.
type EngineProfile = engine.Profile

// Picoseconds is a duration in units of 10⁻¹² s, the unit of EngineProfile's per-token costs
// that are too small for time.Duration.
type Picoseconds = engine.Picoseconds

// Qwen3Profile returns the engine profile of Qwen3-32B (bf16) served by vLLM with tensor
// parallelism 2 on two H100 80 GB GPUs, with vLLM's 16-token blocks and a 40,960-token maximum
// model length: the calibration BenchProfile adapts. Each call returns a fresh copy.
func Qwen3Profile() EngineProfile { return engine.Qwen3_32B_H100 }

// DemoProfile returns a small, fast engine profile for running simulated servers in real time
// (2,048 blocks of 16 tokens, 32 sequences at once). Each call returns a fresh copy.
func DemoProfile() EngineProfile { return engine.Demo }

// BenchProfile is the engine profile the simulator uses by default: Qwen3-32B on 2×H100
// (Qwen3Profile) with two changes. The maximum model length is raised to 131,072
// tokens (the model's context with YaRN scaling), because 574 requests of the Mooncake
// conversation trace are longer than the profile's 40,960. KV blocks are 64 tokens instead of
// 16 (4,500 blocks, the same 288k tokens): the engine's and the index's work is per block, so
// this makes a replay four times cheaper, and it loses no prefix resolution on traces whose
// ids cover 512 tokens (llm-d's approximate index also uses 64-token blocks). The price is up
// to 63 instead of 15 tokens of a prompt's tail that can never be a hit.
func BenchProfile() EngineProfile {
	p := engine.Qwen3_32B_H100
	p.MaxModelLen = 131072
	p.BlockSize = 64
	p.NumBlocks = engine.Qwen3_32B_H100.NumBlocks * engine.Qwen3_32B_H100.BlockSize / 64
	return p
}

// Config describes one simulated cluster and gateway. The zero value is valid: 16 servers of
// BenchProfile behind an FCFS queue with a concurrency gate of 32 requests per server, routed
// by usher's profile with a prefix index, metrics scraped every 50 ms.
type Config struct {
	// Servers is the number of model servers. Zero: DefaultServers (16).
	Servers int
	// Profile is every server's engine profile. Zero: BenchProfile().
	Profile EngineProfile
	// Policy is the admission queue's fairness policy. Zero: FCFS.
	Policy Policy
	// Router is the routing configuration. Zero: usher's.
	Router Router
	// Gate selects the saturation gate. Zero: GateConcurrency.
	Gate GateKind
	// MaxInFlight is the concurrency gate's limit per server. Zero: DefaultMaxInFlight (32).
	MaxInFlight int
	// TTL is how long a request may wait for admission. Zero: flowcontrol.DefaultTTL (60 s).
	TTL time.Duration
	// QueueCapacity bounds the requests waiting in the gateway. Zero: flowcontrol's default
	// (10,000).
	QueueCapacity int
	// ScrapeInterval is how often the servers' metrics are scraped into the router's
	// BackendState (and the saturation gate). Zero: DefaultScrapeInterval (50 ms).
	ScrapeInterval time.Duration
	// StaleAfter is the router's staleness limit for scraped signals. Zero: routing's default
	// (2 s).
	StaleAfter time.Duration
	// NoIndex runs the router without a prefix index (prefix scorers then see no matches).
	NoIndex bool
	// Index says how the prefix index is fed. Zero: IndexAuto (each Router's Events).
	Index IndexMode
	// EventDelay is the delay of KV events in exact mode. Zero: DefaultEventDelay (20 ms);
	// negative: applied at the end of the step that produced them.
	EventDelay time.Duration
	// Frontend and FrontendPerToken are the time a request takes from the router's pick to
	// its arrival in the server's engine: Frontend plus FrontendPerToken per prompt token —
	// the HTTP hop and the server's own parsing and tokenizing, and (folded in here, since it
	// delays the answer the same way) the gateway's tokenizing before the pick. The request is
	// in flight for the router meanwhile, and its TTFT includes it. Zero (the default): the
	// request reaches the engine at the pick, as the policy comparisons assume. bench's
	// calibration against real processes measures it (bench/README.md, "Calibration").
	Frontend, FrontendPerToken time.Duration
	// IndexCapacity is the prefix index's capacity per server in blocks. Zero: the servers'
	// KV capacity (NumBlocks), so the approximate index forgets about as much as a server does.
	IndexCapacity int
	// Seed makes the router's random choices reproducible. Zero: DefaultSeed.
	Seed uint64
	// EarlyShed configures the queue's early shedding (flowcontrol.EarlyShed). Zero: off;
	// on whenever Targets or LaterTargets are set (see Targets).
	EarlyShed flowcontrol.EarlyShed
	// Targets are the latency targets (service-level objectives) of every request, and
	// LaterTargets, when not zero, those of later turns of a session instead: set on every
	// routing.Request (so a PredictedLatency scorer routes by them) and admitted as the
	// gateway admits a request with targets (proxy/slo.go, sloDeadline): a request with a TTFT
	// target T must be dispatched by arrival + T − p̂, where p̂ is the best TTFT the router
	// predicts for it at arrival (routing.Router.Predict), but not sooner than 50 ms after
	// arrival; a deadline at or beyond the TTL is left to the TTL. A router without a latency
	// model predicts p̂ = 0 — where the gateway would leave such a request to the TTL — so
	// that every router is admitted by the same rule and only the prediction differs. Early
	// shedding is then on (EarlyShed.Enabled), so a request whose estimated wait exceeds that
	// budget is refused on arrival. Result.SLO counts which requests met their targets. Zero:
	// no targets.
	Targets, LaterTargets routing.Latency
	// Goals are latency goals measured, not enforced: unlike Targets they change nothing in
	// admission or routing. Result.Attained says, per goal, the share of the workload's
	// requests that completed attaining it (Goal.Attains; see Goodput). Empty: none.
	Goals []Goal
	// SLOShedAbove refuses on arrival (RejectedWait, as early shedding) a request with a TTFT
	// target T whose router predicts no server can serve it within SLOShedAbove·T, once the
	// router has taught its model latency.ColdOutcomes observations: the gateway's
	// proxy.Options.SLOShedAbove. It acts only on routers with a latency model. Zero: off.
	SLOShedAbove float64
	// ContinueAfterShed keeps a closed-loop session going when one of its turns is shed or
	// fails: the next turn is sent its think time after the shed, as if the user had carried
	// on (its prompt then finds nothing cached for the turn that was never served). Every
	// policy is then offered the same turns, whatever it sheds. Zero: the session ends there
	// and its later turns are abandoned, as a user who gives up.
	ContinueAfterShed bool
	// SessionIdle is the idle limit of a session: it is over, abandoned, when no turn of it
	// arrives within SessionIdle of its previous turn's answer (Result.Tasks, TaskStats). Zero:
	// DefaultIdleFactor times the workload's longest think time (Workload.LongestThink).
	SessionIdle time.Duration
	// MaxTime stops the simulation at this virtual time; requests still waiting or running
	// then are counted as unfinished. Zero: run until every request has finished.
	MaxTime time.Duration
	// Replicas is the number of gateway replicas in front of the servers, as behind a
	// Kubernetes Service without session affinity: requests are spread over them round-robin
	// by arrival, and each has its own queue (its share of the concurrency limit,
	// MaxInFlight·Servers/Replicas rounded up), router, prefix index and session table; the
	// servers are shared (package doc, "Gateway replicas"). Zero or one: one gateway.
	Replicas int
	// SyncLag is how late what one replica learns reaches the others: every SyncInterval each
	// replica's new prefix chains, session placements, in-flight counts and fairness usage
	// deltas are handed over,
	// and applied by every other replica SyncLag later. Zero: at the flush instant. Negative
	// (NoSync): never; each replica routes alone. Ignored with one replica.
	SyncLag time.Duration
	// SyncInterval is how often the replicas flush. Zero: DefaultSyncInterval (50 ms).
	SyncInterval time.Duration

	// PrefillServers, if positive, disaggregates the fleet (see disagg.go): servers
	// 0..PrefillServers-1 are prefill servers and the rest decode servers. Each request is
	// picked a decode server; when Decider approves, a prefill server computes its prompt (a
	// one-token request), the KV is transferred to the decode server in TransferLatency plus
	// TransferPerToken per prompt token the decode server does not hold, and the decode
	// server serves it from there (engine.Request.RemotePrefill). Zero: every server serves
	// both, as before.
	PrefillServers int
	// Decider decides which requests of a disaggregated fleet are prefilled on a prefill
	// server. Nil: disagg.NewPrefix's defaults (llm-d's rule, 512 uncached tokens).
	// Set without PrefillServers, every server serves both and a request the Decider approves
	// is prefilled on another server than its decode server (dynamic disaggregation).
	//
	// A *disagg.Planner (without PrefillServers, one gateway replica; a fresh one per run)
	// makes every server a kv_both server (routing.BackendState.KVBoth) whose role the planner
	// sets: its Plan is the simulator's tick at every scrape, and Result.Roles records the
	// servers in prefill over time.
	Decider disagg.Decider
	// TransferPerToken and TransferLatency are the KV transfer's cost (see PrefillServers).
	TransferPerToken, TransferLatency time.Duration
	// LoRA gives every server adapter slots and a load cost, for workloads whose requests
	// run under LoRA adapters (Workload.Adapters); the engines follow the rules of
	// internal/glue/simfleet's servers (internal/engine). Zero: no LoRA.
	LoRA LoRA
	// Slowdowns change servers' speed during the run (see Slowdown), for seeing how a
	// router and its latency model follow a server that slows down. Nil: every server keeps
	// its Profile's speed.
	Slowdowns []Slowdown
	// Quota are tenants' quotas, as proxy.Options.Quota holds them (package proxy/quota, its
	// Now replaced by the virtual clock): a session is a tenant (its flow's name, "s" and
	// the session; a request without one is a tenant of its own), and every gateway replica
	// shares one Limiter, as replicas do that sync every instant. A request that does not fit
	// is refused on arrival (RejectedCapacity), and a completed one settles to its prompt and
	// output tokens. No limits: no quotas.
	Quota quota.Options
}

// Slowdown makes one server's engine steps take Factor times as long as its profile says from
// virtual time At on, as a server whose GPU is throttled or shared would: prefill and decode
// alike. A later Slowdown of the same server replaces an earlier one (Factor 1 restores it).
type Slowdown struct {
	// Server is the server's index, in [0, Config.Servers).
	Server int
	// Factor multiplies the duration of every step the server begins from At on; positive.
	Factor float64
	// At is when it takes effect, from the start of the run.
	At time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if o.Servers == 0 {
		o.Servers = DefaultServers
	}
	if o.Profile == (EngineProfile{}) {
		o.Profile = BenchProfile()
	}
	if o.Profile.BlockSize <= 0 {
		return o, fmt.Errorf("%w: engine profile %q: BlockSize %d must be positive", ErrInvalidConfig, o.Profile.Name, o.Profile.BlockSize)
	}
	if o.Policy.New == nil {
		o.Policy = FCFSPolicy()
	}
	if o.Router.New == nil {
		o.Router = UsherRouter()
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.TTL == 0 {
		o.TTL = flowcontrol.DefaultTTL
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.EventDelay == 0 {
		o.EventDelay = DefaultEventDelay
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.hasTargets() {
		o.EarlyShed.Enabled = true
	}
	switch {
	case o.Replicas == 1:
		o.SyncLag = 0 // nobody to sync with
	case o.SyncLag < 0:
		o.SyncLag = NoSync
	}
	switch {
	case o.Servers < 0 || o.Servers > 4096:
		return o, fmt.Errorf("%w: %d servers", ErrInvalidConfig, o.Servers)
	case o.Replicas < 0 || o.Replicas > MaxReplicas:
		return o, fmt.Errorf("%w: %d gateway replicas (at most %d)", ErrInvalidConfig, o.Replicas, MaxReplicas)
	case o.MaxInFlight < 0 || o.TTL < 0 || o.QueueCapacity < 0 || o.ScrapeInterval < 0 || o.IndexCapacity < 0 || o.MaxTime < 0 || o.SessionIdle < 0 || o.SyncInterval < 0 ||
		o.Frontend < 0 || o.FrontendPerToken < 0:
		return o, fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	case o.Gate > GateUsherMean:
		return o, fmt.Errorf("%w: gate %v", ErrInvalidConfig, o.Gate)
	case o.Index > IndexExact:
		return o, fmt.Errorf("%w: index mode %v", ErrInvalidConfig, o.Index)
	case o.PrefillServers < 0 || (o.PrefillServers > 0 && o.PrefillServers >= o.Servers):
		return o, fmt.Errorf("%w: %d prefill servers of %d: want 0, or fewer than the servers", ErrInvalidConfig, o.PrefillServers, o.Servers)
	case o.TransferPerToken < 0 || o.TransferLatency < 0:
		return o, fmt.Errorf("%w: negative transfer time", ErrInvalidConfig)
	case o.Targets.TTFT < 0 || o.Targets.TPOT < 0 || o.LaterTargets.TTFT < 0 || o.LaterTargets.TPOT < 0:
		return o, fmt.Errorf("%w: negative latency target", ErrInvalidConfig)
	case o.SLOShedAbove != 0 && !(o.SLOShedAbove >= 1 && o.SLOShedAbove <= 1000):
		return o, fmt.Errorf("%w: SLOShedAbove %v: want 0 (off) or a factor from 1 to 1000", ErrInvalidConfig, o.SLOShedAbove)
	}
	for _, d := range o.Slowdowns {
		if d.Server < 0 || d.Server >= o.Servers || !(d.Factor > 0) || math.IsInf(d.Factor, 1) || d.At < 0 {
			return o, fmt.Errorf("%w: slowdown %+v: want a server in [0, %d), a positive finite factor and a time ≥ 0", ErrInvalidConfig, d, o.Servers)
		}
	}
	if _, ok := o.Decider.(*disagg.Planner); ok && (o.PrefillServers > 0 || o.Replicas > 1) {
		return o, fmt.Errorf("%w: a role planner plans for every server of one gateway: PrefillServers %d, Replicas %d", ErrInvalidConfig, o.PrefillServers, o.Replicas)
	}
	if o.PrefillServers > 0 && o.Decider == nil {
		o.Decider, _ = disagg.NewPrefix(disagg.PrefixOptions{}) // valid options
	}
	return o, nil
}

// hasTargets reports whether requests have latency targets (Config.Targets, LaterTargets).
func (c *Config) hasTargets() bool {
	return c.Targets != (routing.Latency{}) || c.LaterTargets != (routing.Latency{})
}

// targetsOf returns the latency targets of w: LaterTargets for a later turn of a session when
// set, Targets otherwise.
func (c *Config) targetsOf(w *Request) routing.Latency {
	if w.Turn > 1 && c.LaterTargets != (routing.Latency{}) {
		return c.LaterTargets
	}
	return c.Targets
}

// event kinds.
const (
	evStep      uint8 = iota + 1 // a server's step ends; arg = server
	evFollowup                   // a closed-loop turn arrives; arg = request
	evScrape                     // metrics are scraped
	evTick                       // a queue's earliest deadline; arg = replica
	evKV                         // delayed KV events reach the index
	evSync                       // the gateway replicas flush what they learnt
	evSyncApply                  // flushed changes reach the other replicas
	evSubmit                     // a picked request reaches its server's engine; arg = request
	evTransfer                   // a prefilled request's KV reaches its decode server; arg = request
)

// event is what happens at a time in the simulator's event heap, ordered by (time, sequence):
// simultaneous events run in the order they were scheduled, which makes runs deterministic.
type event struct {
	kind uint8
	arg  int32
}

// vclock is the queue's and router's clock: virtual time, moved only by the event loop.
type vclock struct{ now time.Time }

func (c *vclock) Now() time.Time { return c.now }

// NewTimer is never called: the simulator only uses the queue's asynchronous Enqueue and Notify.
func (c *vclock) NewTimer(time.Duration) flowcontrol.Timer {
	panic("bench: the virtual clock has no timers (blocking Admit is not used in simulation)")
}

// epoch is virtual time zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// request states.
const (
	rsNone      uint8 = iota // not arrived
	rsQueued                 // waiting in the gateway
	rsRunning                // dispatched to a server
	rsDone                   // completed
	rsShed                   // expired or rejected by the gateway
	rsFailed                 // no backend, or the server refused it
	rsAbandoned              // a closed-loop turn whose session ended before it
)

type simReq struct {
	w          *Request
	quota      *quotaseam.Grant // its reservation (Config.Quota); nil without quotas
	idx        int32
	state      uint8
	gw         uint8 // the gateway replica it arrived at
	outcome    flowcontrol.Outcome
	server     int32
	arrival    time.Duration
	wait       time.Duration
	picked     time.Duration // when the router picked its server
	pickNo     int32         // its place in the order of picks, from 0; -1 before its pick
	firstToken time.Duration
	finish     time.Duration
	cached     int32
	ticket     flowcontrol.Ticket
	res        routing.Result
	targets    routing.Latency // Config.targetsOf, set at arrival
	// Disaggregated serving: the prefill pick, its server, and the phase.
	pres    routing.Result
	pserver int32
	phase   uint8
}

type server struct {
	e       *engine.Engine
	name    string
	busy    bool
	stepped time.Duration // Σ of its steps' durations: its busy time
	load    int           // requests submitted and not finished
	lastAt  time.Duration
	area    float64 // ∫ load dt, in request·seconds
	started bool    // on the kick list
	// slow are the server's Config.Slowdowns, by At; nil when it keeps its speed.
	slow []Slowdown
}

// sim is one run. It is single-goroutine: the queue's and router's concurrency machinery is
// exercised by one caller in virtual time.
type sim struct {
	cfg   Config
	w     *Workload
	clock vclock
	now   time.Duration
	gw    []gateway // the gateway replicas, at least one
	rr    int       // the replica the next arrival goes to
	srv   []server
	reqs  []simReq
	next  []int32 // the closed-loop turn that follows each request, -1 if none
	flows []flowcontrol.FlowID
	sess  []string
	seed  prefixcache.BlockHash
	seeds []prefixcache.BlockHash // by Request.Adapter: the chain seed under each adapter

	events   heap.Heap[event]
	seq      uint64
	nextOpen int // next open-loop request to arrive
	notes    []flowcontrol.Record
	kicks    []int32
	states   []routing.BackendState
	engEv    []engine.Event
	tokens   []uint32
	chain    []prefixcache.BlockHash
	blocks   []engine.BlockHash
	level    float64
	scraped  time.Duration
	pending  int   // requests arrived or scheduled and not yet ended
	picks    int32 // decode picks made so far (simReq.pickNo)
	scrapes  bool
	nEvents  int64
	preempts int64
	samples  int     // scrapes at which the gateway's population was sampled
	inSystem float64 // Σ over samples of requests queued or in flight in the gateway

	// Exact mode: the engines' KV events on their way to the indexes, in delivery order.
	exact   bool
	kvq     []pendingKV
	kvHead  int
	kvBuf   []engine.KVEvent
	kvChain []prefixcache.BlockHash
	kvApply int64 // events applied (to every replica's index)

	sync syncState // with several replicas: what they hand each other

	quota        *quota.Limiter // Config.Quota's; nil without limits
	quotaRefused int            // requests the quota refused

	pd pdStats // disaggregated serving
	// planner is Config.Decider when it is a role planner; roles its record (Result.Roles).
	planner *disagg.Planner
	roles   []RoleSample
}

// pendingKV is one engine KV event in transit to the index.
type pendingKV struct {
	at  time.Duration
	srv int32
	ev  engine.KVEvent
}

// Run simulates w on the cluster cfg describes and returns the measurements. It is
// deterministic: the same workload, configuration and seed give the same Result (apart from
// the wall-clock fields). Run starts no goroutine and may be called concurrently for different
// configurations sharing one Workload.
func Run(w *Workload, cfg Config) (*Result, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := w.validate(); err != nil {
		return nil, err
	}
	if w.BlockTokens%c.Profile.BlockSize != 0 {
		return nil, fmt.Errorf("%w: workload blocks of %d tokens are not a multiple of the engine's %d", ErrInvalidConfig, w.BlockTokens, c.Profile.BlockSize)
	}
	s, err := newSim(w, c)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s.loop()
	return s.result(time.Since(start)), nil
}

func newSim(w *Workload, c Config) (*sim, error) {
	s := &sim{cfg: c, w: w}
	s.clock.now = epoch
	s.seed = prefixcache.Seed(c.Profile.Model, "", "")
	s.seeds = make([]prefixcache.BlockHash, len(w.Adapters)+1)
	s.seeds[0] = s.seed
	for k, a := range w.Adapters {
		s.seeds[k+1] = prefixcache.Seed(c.Profile.Model, a, "")
	}
	if len(w.Adapters) > 0 && c.LoRA.MaxLoRAs == 0 {
		return nil, fmt.Errorf("%w: the workload runs under LoRA adapters and Config.LoRA has no slots", ErrInvalidConfig)
	}
	s.exact = !c.NoIndex && (c.Index == IndexExact || (c.Index == IndexAuto && c.Router.Events))
	s.gw = make([]gateway, c.Replicas)
	for k := range s.gw {
		if err := s.newGateway(k); err != nil {
			return nil, err
		}
	}
	s.srv = make([]server, c.Servers)
	for i := range s.srv {
		e, err := engine.New(engine.Options{Profile: c.Profile, OmitTokenEvents: true, KVEvents: s.exact, LoRA: c.LoRA})
		if err != nil {
			return nil, fmt.Errorf("%w: engine profile: %w", ErrInvalidConfig, err)
		}
		s.srv[i] = server{e: e, name: "server-" + strconv.Itoa(i)}
	}
	for _, d := range c.Slowdowns {
		sv := &s.srv[d.Server]
		sv.slow = append(sv.slow, d)
	}
	for i := range s.srv {
		slices.SortStableFunc(s.srv[i].slow, func(a, b Slowdown) int { return cmp.Compare(a.At, b.At) })
	}
	s.reqs = make([]simReq, len(w.Requests))
	for i := range s.reqs {
		s.reqs[i] = simReq{w: &w.Requests[i], idx: int32(i), server: -1, pickNo: -1}
	}
	s.next = make([]int32, len(w.Requests))
	for i := range s.next {
		s.next[i] = -1
	}
	for i := range w.Requests {
		if p := w.Requests[i].Prev; p >= 0 {
			if s.next[p] >= 0 {
				return nil, fmt.Errorf("%w: requests %d and %d both follow request %d", ErrInvalidWorkload, s.next[p], i, p)
			}
			s.next[p] = int32(i)
		}
	}
	s.sess = make([]string, w.Sessions)
	s.flows = make([]flowcontrol.FlowID, w.Sessions)
	for i := range s.sess {
		s.sess[i] = "s" + strconv.Itoa(i)
		s.flows[i] = flowcontrol.FlowID(s.sess[i])
	}
	if len(c.Quota.Limits) > 0 {
		qo := c.Quota
		qo.Shared, qo.Now = nil, func() time.Time { return s.clock.now }
		var err error
		if s.quota, err = quota.New(qo); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	s.states = make([]routing.BackendState, c.Servers)
	s.planner, _ = c.Decider.(*disagg.Planner)
	// The first scrape publishes the backends before anything arrives.
	s.scrape()
	for k := range s.gw {
		if err := s.registerServers(&s.gw[k]); err != nil {
			return nil, err
		}
	}
	s.scrapes = c.ScrapeInterval > 0
	if s.scrapes {
		s.schedule(c.ScrapeInterval, evScrape, 0)
	}
	if s.syncs() {
		s.schedule(c.SyncInterval, evSync, 0)
	}
	for i := range w.Requests {
		if w.Requests[i].Prev < 0 {
			s.pending++
		}
	}
	return s, nil
}

// newGateway builds gateway replica k: its queue, prefix index and router.
func (s *sim) newGateway(k int) error {
	c := &s.cfg
	g := &s.gw[k]
	g.tickAt = -1
	maxInFlight, sat := s.gate(k)
	var err error
	pol := c.Policy.New
	if c.Policy.forWorkload != nil {
		pol = func() flowcontrol.Policy { return c.Policy.forWorkload(s.w) }
	}
	g.q, err = flowcontrol.New(flowcontrol.Options{
		Policy:      pol(),
		MaxInFlight: maxInFlight,
		Saturation:  sat,
		Clock:       &s.clock,
		TTL:         c.TTL,
		Capacity:    flowcontrol.Limits{Requests: c.QueueCapacity},
		EarlyShed:   c.EarlyShed,
		Observer:    flowcontrol.Observer{Outcome: func(r flowcontrol.Record) { s.notes = append(s.notes, r) }},
	})
	if err != nil {
		return fmt.Errorf("bench: flowcontrol: %w", err)
	}
	ropts := routing.Options{
		Profile:    s.profile(g),
		BlockSize:  c.Profile.BlockSize,
		StaleAfter: c.StaleAfter,
		Now:        s.clock.Now,
		Seed:       replicaSeed(c.Seed, k),
	}
	if !c.NoIndex {
		iopts := prefixcache.Options{
			DefaultCapacity: c.Profile.NumBlocks,
			MaxBytes:        int64(c.Servers) * int64(max(c.IndexCapacity, 2*c.Profile.NumBlocks)) * prefixcache.PairBytes * 2,
			MaxChainBlocks:  c.Profile.MaxModelLen/c.Profile.BlockSize + 1,
			MaxBackends:     max(c.Servers, 1),
		}
		// Exact mode shares no chains: every replica applies every engine's KV events itself.
		if s.syncs() && !s.exact {
			g.feed = prefixpeer.NewBuffer(0)
			iopts.Feed = g.feed
		}
		g.index, err = prefixcache.New(iopts)
		if err != nil {
			return fmt.Errorf("bench: prefixcache: %w", err)
		}
		ropts.Index = g.index
	}
	g.router, err = routing.New(ropts)
	if err != nil {
		return fmt.Errorf("bench: routing: %w", err)
	}
	if g.placed != nil {
		g.sessions = peer.Placers(g.router)
	}
	return nil
}

// registerServers sets up g's index for the servers, which the first scrape registered with
// it: an approximate index forgets about as much as a server does (its KV capacity) unless
// IndexCapacity says otherwise; an exact one follows the engine's evictions, so its own
// capacity only bounds what the router predicts beyond them.
func (s *sim) registerServers(g *gateway) error {
	if g.index == nil {
		return nil
	}
	capacity := s.cfg.IndexCapacity
	if capacity == 0 && s.exact {
		capacity = 2 * s.cfg.Profile.NumBlocks
	}
	g.ixIDs = make([]prefixcache.HolderID, len(s.srv))
	for i := range s.srv {
		id, ok := g.index.Lookup(s.srv[i].name)
		if !ok {
			return fmt.Errorf("bench: server %s is not in the prefix index", s.srv[i].name)
		}
		g.ixIDs[i] = id
		if capacity > 0 {
			if err := g.index.SetCapacity(id, capacity); err != nil {
				return fmt.Errorf("bench: prefixcache: %w", err)
			}
		}
	}
	return nil
}

// gate returns the queue's saturation gate for gateway replica k: its limit on requests in
// flight (0: none) and its saturation pools.
func (s *sim) gate(k int) (maxInFlight int, sat []flowcontrol.Pool) {
	n := len(s.gw)
	conc := (s.cfg.MaxInFlight*s.cfg.Servers + n - 1) / n
	llmd := []flowcontrol.Pool{{Level: s.saturation}}
	switch s.cfg.Gate {
	case GateConcurrency:
		return conc, nil
	case GateSaturation:
		return 0, llmd
	case GateBoth:
		return conc, llmd
	case GateUsher, GateUsherMean:
		opts := saturation.Options{Mean: s.cfg.Gate == GateUsherMean}
		return conc, []flowcontrol.Pool{{Level: func() float64 { return saturation.Level(s.gw[k].router, opts) }}}
	}
	return 0, nil
}

// saturation is llm-d's saturation level from the last scrape: the mean over servers of
// max(queued/5, kv_util/0.8); scraped metrics older than 200 ms count as saturated.
func (s *sim) saturation() float64 {
	if s.now-s.scraped > 200*time.Millisecond {
		return 1
	}
	return s.level
}

func (s *sim) schedule(at time.Duration, kind uint8, arg int32) {
	s.seq++
	s.events.Push(int64(at), s.seq, event{kind, arg})
}

func (s *sim) setNow(t time.Duration) {
	s.now = t
	s.clock.now = epoch.Add(t)
}

// loop runs events until every request has ended (or MaxTime).
func (s *sim) loop() {
	reqs := s.w.Requests
	for s.pending > 0 {
		// The next event is the earlier of the next open-loop arrival and the heap's top;
		// arrivals go first on a tie, as they were "scheduled" before the run began.
		for s.nextOpen < len(reqs) && reqs[s.nextOpen].Prev >= 0 {
			s.nextOpen++
		}
		arrival := s.nextOpen < len(reqs)
		if e := s.events.Top(); arrival && e != nil && time.Duration(e.At) < reqs[s.nextOpen].At {
			arrival = false
		}
		if !arrival && s.events.Len() == 0 {
			break // nothing can happen any more (unreachable: pending work has events)
		}
		var t time.Duration
		if arrival {
			t = reqs[s.nextOpen].At
		} else {
			t = time.Duration(s.events.Top().At)
		}
		if s.cfg.MaxTime > 0 && t > s.cfg.MaxTime {
			break
		}
		s.setNow(t)
		s.nEvents++
		if arrival {
			i := s.nextOpen
			s.nextOpen++
			s.arrive(int32(i))
		} else {
			e := s.events.Pop().Val
			switch e.kind {
			case evStep:
				s.stepEnd(e.arg)
			case evFollowup:
				s.arrive(e.arg)
			case evScrape:
				s.scrape()
				if s.cfg.Gate != GateConcurrency && s.cfg.Gate != GateNone {
					for k := range s.gw {
						s.gw[k].q.Notify()
					}
				}
				s.schedule(s.now+s.cfg.ScrapeInterval, evScrape, 0)
			case evTick:
				g := &s.gw[e.arg]
				g.tickAt = -1
				if next := g.q.Notify(); !next.IsZero() {
					s.scheduleTick(e.arg, next.Sub(epoch))
				}
			case evKV:
				s.deliverKV()
			case evSync:
				s.flush()
				s.schedule(s.now+s.cfg.SyncInterval, evSync, 0)
			case evSyncApply:
				s.applySync()
			case evSubmit:
				r := &s.reqs[e.arg]
				s.submit(r, s.chainOf(r))
			case evTransfer:
				r := &s.reqs[e.arg]
				r.phase = phaseDecode
				s.submit(r, s.chainOf(r))
			}
		}
		s.settle()
	}
	s.finishLoads()
}

// scheduleTick schedules gateway replica k's queue tick at at, unless one is due by then.
func (s *sim) scheduleTick(k int32, at time.Duration) {
	g := &s.gw[k]
	if g.tickAt >= 0 && g.tickAt <= at {
		return
	}
	g.tickAt = at
	s.schedule(at, evTick, k)
}

// arrive sends request i to the queue of the next gateway replica, round-robin.
func (s *sim) arrive(i int32) {
	r := &s.reqs[i]
	r.arrival = s.now
	r.state = rsQueued
	r.gw = uint8(s.rr)
	if s.rr++; s.rr == len(s.gw) {
		s.rr = 0
	}
	flow := flowcontrol.FlowID("r" + strconv.Itoa(int(i)))
	if r.w.Session >= 0 {
		flow = s.flows[r.w.Session]
	}
	fr := flowcontrol.Request{
		Flow:         flow,
		PromptTokens: flowcontrol.Tokens(r.w.PromptTokens),
		OutputTokens: flowcontrol.Tokens(r.w.OutputTokens),
		Arrival:      s.clock.now,
		Value:        r,
	}
	if s.quota != nil {
		r.quota = new(quotaseam.Grant)
		quotaseam.Reserve(s.quota, &quotaseam.Ask{Tenant: string(flow), Model: "m", PromptTokens: int64(r.w.PromptTokens),
			OutputTokens: int64(r.w.OutputTokens), Now: s.clock.now}, r.quota)
		if r.quota.Refused {
			s.quotaRefused++
			r.outcome = flowcontrol.RejectedCapacity
			r.finish = s.now
			s.end(r, rsShed)
			return
		}
	}
	r.targets = s.cfg.targetsOf(r.w)
	if r.targets.TTFT > 0 {
		var shed bool
		if fr.Deadline, shed = s.sloDeadline(r); shed {
			r.outcome = flowcontrol.RejectedWait
			r.finish = s.now
			s.end(r, rsShed)
			return
		}
	}
	// The outcome (dispatched at once, rejected, or later) comes through the observer.
	_, _ = s.gw[r.gw].q.Enqueue(fr)
	at := s.now + s.cfg.TTL
	if !fr.Deadline.IsZero() {
		at = fr.Deadline.Sub(epoch)
	}
	s.scheduleTick(int32(r.gw), at)
}

// sloDeadline returns the admission deadline of r, arriving now with a TTFT target T (see
// Config.Targets), and whether to refuse it at once: the gateway's rule (proxy/slo.go,
// Handler.sloDeadline), arrival + T − p̂ with p̂ the best TTFT r's router predicts over the
// eligible servers (0 for a router without a latency model), no sooner than slo.MinWait from
// now, and zero (the TTL) when that is at or beyond the TTL; refused when Config.SLOShedAbove
// is set, p̂ exceeds that many times T and the model is warm. O(servers) plus hashing r's
// chain.
func (s *sim) sloDeadline(r *simReq) (time.Time, bool) {
	rr := s.routingRequest(r, s.chainOf(r))
	router := s.gw[r.gw].router
	var p time.Duration
	if best, ok := latency.Predict(router, &rr); ok {
		p = best.TTFT
	}
	c := slo.Config{ShedAbove: s.cfg.SLOShedAbove}
	return c.Admit(p, router.Stats().LatencyOutcomes, r.targets.TTFT, s.cfg.TTL, s.clock.now, s.clock.now)
}

// settle handles the queue's outcomes produced by the last operation (dispatches, expiries,
// rejections; a completion may dispatch more) and starts a step on every idle server that
// got work.
func (s *sim) settle() {
	for k := 0; k < len(s.notes); k++ {
		rec := s.notes[k]
		r := rec.Request.Value.(*simReq)
		r.outcome = rec.Outcome
		switch rec.Outcome {
		case flowcontrol.Dispatched:
			r.ticket = rec.Ticket
			r.wait = rec.Wait
			s.dispatch(r)
		default:
			r.finish = s.now // when it was turned away
			s.end(r, rsShed)
		}
	}
	clear(s.notes)
	s.notes = s.notes[:0]
	for _, i := range s.kicks {
		sv := &s.srv[i]
		sv.started = false
		s.begin(i)
	}
	s.kicks = s.kicks[:0]
}

// chainOf computes r's block chain as the router and the engine see it: every content id
// stands for BlockTokens/BlockSize engine blocks whose tokens are derived from (id, position
// in the id), so equal id prefixes give equal chains, hashed by prefixcache.HashTokens.
func (s *sim) chainOf(r *simReq) []prefixcache.BlockHash {
	bs := s.cfg.Profile.BlockSize
	per := s.w.BlockTokens / bs
	n := int(r.w.PromptTokens) / bs
	if cap(s.tokens) < n*bs {
		s.tokens = make([]uint32, n*bs)
	}
	tok := s.tokens[:n*bs]
	for b := range n {
		id := r.w.IDs[b/per]
		blk := tok[b*bs : (b+1)*bs]
		blk[0], blk[1] = uint32(id), uint32(id>>32)
		if bs > 2 {
			blk[2] = uint32(b % per)
			for k := 3; k < bs; k++ {
				blk[k] = 0x9e3779b9 + uint32(k)
			}
		}
	}
	s.chain = prefixcache.HashTokens(s.chain[:0], s.seeds[r.w.Adapter], tok, bs)
	return s.chain
}

// dispatch routes an admitted request and submits it to the chosen server.
func (s *sim) dispatch(r *simReq) {
	chain := s.chainOf(r)
	rr := s.routingRequest(r, chain)
	res, err := s.gw[r.gw].router.Pick(&rr)
	if err != nil {
		r.ticket.Done(flowcontrol.Usage{})
		s.end(r, rsFailed)
		return
	}
	r.res = res
	r.server = int32(res.ID)
	r.state = rsRunning
	r.picked, r.pickNo = s.now, s.picks
	s.picks++
	if s.cfg.Decider != nil {
		s.decide(r, &rr)
	}
	if d := s.cfg.Frontend + time.Duration(r.w.PromptTokens)*s.cfg.FrontendPerToken; d > 0 {
		s.schedule(s.now+d, evSubmit, r.idx)
		return
	}
	s.submit(r, chain)
}

// routingRequest returns the routing.Request of r, whose block chain is chain, as of now.
func (s *sim) routingRequest(r *simReq, chain []prefixcache.BlockHash) routing.Request {
	sess := ""
	if r.w.Session >= 0 {
		sess = s.sess[r.w.Session]
	}
	// Streamed, as chat and agent clients ask: the router then learns its latency models (if
	// any) from every completion. OutputTokens stays 0: a trace gives the answer's actual
	// length, which a gateway does not know at the pick, and no max_tokens.
	rr := routing.Request{
		Chain:        chain,
		BlockSize:    s.cfg.Profile.BlockSize,
		PromptTokens: int(r.w.PromptTokens),
		Session:      sess,
		Now:          s.clock.now,
		Stream:       true,
		Targets:      r.targets,
	}
	if a := r.w.Adapter; a > 0 {
		rr.Model, rr.Adapter = s.w.Adapters[a-1], s.w.Adapters[a-1]
	}
	if s.cfg.Decider != nil {
		rr.Role = routing.RoleDecode
	}
	return rr
}

// submit hands a picked request, whose block chain is chain, to its server's engine.
func (s *sim) submit(r *simReq, chain []prefixcache.BlockHash) {
	s.blocks = s.blocks[:0]
	for _, h := range chain {
		s.blocks = append(s.blocks, engine.BlockHash(h))
	}
	i := r.server
	req := engine.Request{
		ID:           engine.RequestID(r.idx),
		Blocks:       s.blocks,
		PromptTokens: int(r.w.PromptTokens),
		OutputTokens: int(r.w.OutputTokens),
	}
	if a := r.w.Adapter; a > 0 {
		req.Adapter = s.w.Adapters[a-1]
	}
	switch r.phase {
	case phasePrefill:
		i, req.OutputTokens = r.pserver, 1
	case phaseDecode:
		req.RemotePrefill = true
	}
	sv := &s.srv[i]
	err := sv.e.Submit(req, s.now)
	if err != nil {
		if r.phase == phasePrefill {
			r.pres.Done(routing.DoneInfo{Err: err})
		}
		r.res.Done(routing.DoneInfo{Err: err})
		r.ticket.Done(flowcontrol.Usage{})
		s.end(r, rsFailed)
		return
	}
	s.addLoad(sv, 1)
	if !sv.busy && !sv.started {
		sv.started = true
		s.kicks = append(s.kicks, i)
	}
}

// begin starts a step on idle server i if it has work.
func (s *sim) begin(i int32) {
	sv := &s.srv[i]
	if sv.busy {
		return
	}
	d, ok := sv.e.BeginStep(s.now)
	if !ok {
		return
	}
	if f := sv.factor(s.now); f != 1 {
		d = time.Duration(float64(d) * f)
	}
	sv.busy = true
	sv.stepped += d
	s.schedule(s.now+d, evStep, i)
}

// factor is how many times as long as its profile says the server's steps take at now
// (Config.Slowdowns): the Factor of its latest Slowdown due by now, 1 before any. O(slowdowns).
func (sv *server) factor(now time.Duration) float64 {
	f := 1.0
	for _, d := range sv.slow {
		if d.At > now {
			break
		}
		f = d.Factor
	}
	return f
}

// stepEnd completes server i's step and handles what it produced.
func (s *sim) stepEnd(i int32) {
	sv := &s.srv[i]
	sv.busy = false
	sv.e.EndStep(s.now)
	if s.exact {
		s.publishKV(i)
	}
	s.engEv = sv.e.Events(s.engEv[:0])
	for _, ev := range s.engEv {
		r := &s.reqs[ev.ID]
		if r.phase == phasePrefill && r.pserver == i {
			s.prefillEvent(r, sv, ev)
			continue
		}
		switch ev.Kind {
		case engine.EventStarted:
			r.cached = int32(ev.Tokens)
		case engine.EventPreempted:
			s.preempts++
		case engine.EventToken:
			if ev.Tokens == 1 {
				r.firstToken = s.now
				r.res.FirstToken(s.clock.now)
			}
		case engine.EventFinished:
			r.finish = s.now
			s.addLoad(sv, -1)
			r.res.Done(routing.DoneInfo{FirstTokenAt: epoch.Add(r.firstToken), PromptTokens: int(r.w.PromptTokens), OutputTokens: ev.Tokens, End: s.clock.now})
			r.ticket.Done(flowcontrol.Usage{
				PromptTokens: flowcontrol.Tokens(r.w.PromptTokens),
				CachedTokens: flowcontrol.Tokens(r.cached),
				OutputTokens: flowcontrol.Tokens(ev.Tokens),
			})
			s.end(r, rsDone)
		}
	}
	s.begin(i)
}

// publishKV takes server i's KV events from the step that just ended and sends them on their
// way to the index: applied now with a negative EventDelay, else after it.
func (s *sim) publishKV(i int32) {
	s.kvBuf = s.srv[i].e.KVEvents(s.kvBuf[:0])
	if len(s.kvBuf) == 0 {
		return
	}
	at := s.now + s.cfg.EventDelay
	for _, ev := range s.kvBuf {
		s.kvq = append(s.kvq, pendingKV{at: at, srv: i, ev: ev})
	}
	clear(s.kvBuf)
	if s.cfg.EventDelay < 0 {
		s.deliverKV()
		return
	}
	s.schedule(at, evKV, 0)
}

// deliverKV applies every KV event due by now, in the order the engines produced them, to
// every gateway replica's index (each subscribes to every engine). The simulated engines hash
// blocks exactly as the router does (their block hashes are the request's chain), so a stored
// block is inserted under its own hash and a removed one removed: the index then holds what
// each engine holds, which is what prefixcache.ApplyStored and ApplyRemovedFrom achieve with a real
// engine's opaque hashes. Exact-mode indexes have no Feed, so nothing here is shared.
func (s *sim) deliverKV() {
	for s.kvHead < len(s.kvq) && s.kvq[s.kvHead].at <= s.now {
		p := &s.kvq[s.kvHead]
		s.kvChain = s.kvChain[:0]
		for _, h := range p.ev.Hashes {
			s.kvChain = append(s.kvChain, prefixcache.BlockHash(h))
		}
		for k := range s.gw {
			g := &s.gw[k]
			id := g.ixIDs[p.srv]
			var err error
			switch p.ev.Kind {
			case engine.KVBlockStored:
				err = g.index.Insert(id, s.kvChain)
			case engine.KVBlockRemoved:
				err = g.index.Remove(id, s.kvChain)
			case engine.KVAllBlocksCleared:
				err = g.index.ApplyCleared(id)
			}
			if err != nil {
				panic("bench: applying a KV event: " + err.Error()) // ids are registered, hashes valid
			}
		}
		s.kvApply++
		*p = pendingKV{}
		s.kvHead++
	}
	if s.kvHead == len(s.kvq) {
		s.kvq, s.kvHead = s.kvq[:0], 0
	} else if s.kvHead > 4096 && s.kvHead > len(s.kvq)/2 {
		n := copy(s.kvq, s.kvq[s.kvHead:])
		clear(s.kvq[n:])
		s.kvq, s.kvHead = s.kvq[:n], 0
	}
}

// end records the final state of r and, for a closed-loop session, sends or abandons the
// next turn.
func (s *sim) end(r *simReq, st uint8) {
	r.state = st
	if r.quota != nil {
		var u quotaseam.Usage // a request that never completed used nothing
		if st == rsDone {
			u = quotaseam.Usage{Prompt: int64(r.w.PromptTokens), Output: int64(r.w.OutputTokens)}
		}
		quotaseam.Settle(r.quota, u)
	}
	s.pending--
	next := s.next[r.idx]
	if next < 0 {
		return
	}
	if st == rsDone || s.cfg.ContinueAfterShed {
		s.pending++
		s.schedule(s.now+s.w.Requests[next].At, evFollowup, next)
		return
	}
	// The session ends: every later turn of it is abandoned.
	for ; next >= 0; next = s.next[next] {
		s.reqs[next].state = rsAbandoned
	}
}

// addLoad changes server load by d, integrating the load over time.
func (s *sim) addLoad(sv *server, d int) {
	sv.area += float64(sv.load) * (s.now - sv.lastAt).Seconds()
	sv.lastAt = s.now
	sv.load += d
}

func (s *sim) finishLoads() {
	for i := range s.srv {
		s.addLoad(&s.srv[i], 0)
	}
}

// scrape publishes every server's metrics to the router, as a metrics scraper would, and
// refreshes the saturation level.
func (s *sim) scrape() {
	level := 0.0
	for i := range s.srv {
		st := s.srv[i].e.Stats()
		s.states[i] = routing.BackendState{
			Name:             s.srv[i].name,
			Role:             s.role(i),
			KVBoth:           s.planner != nil,
			Health:           routing.Healthy,
			Known:            routing.AllSignals,
			Queued:           st.Waiting,
			Running:          st.Running,
			KVUtilization:    min(max(st.KVUsage, 0), 1),
			KVCapacityBlocks: st.NumBlocks,
			BlockSize:        st.BlockSize,
			UpdatedAt:        s.clock.now,
		}
		if st.MaxLoRAs > 0 {
			// Fresh slices: the router's snapshot keeps the ones it is given.
			bs := &s.states[i]
			bs.RunningAdapters, bs.WaitingAdapters = s.srv[i].e.Adapters(nil, nil)
			bs.MaxAdapters = st.MaxLoRAs
			bs.Known |= routing.SignalAdapters
		}
		level += max(float64(st.Waiting)/5, st.KVUsage/0.8)
	}
	if len(s.srv) > 0 {
		s.level = level / float64(len(s.srv))
	}
	s.scraped = s.now
	for k := range s.gw {
		g := &s.gw[k]
		st := g.q.Stats()
		s.inSystem += float64(st.Queued + st.InFlight)
		if err := g.router.Update(s.states); err != nil {
			panic("bench: router rejected the backend set: " + err.Error()) // names are unique
		}
	}
	if s.planner != nil {
		if n := s.planner.Plan(s.clock.now, s.gw[0].router); n > 0 || len(s.roles) == 0 {
			prefill := 0
			for _, r := range s.planner.Stats().Roles {
				if r == routing.RolePrefill {
					prefill++
				}
			}
			s.roles = append(s.roles, RoleSample{At: s.now, Prefill: prefill})
		}
	}
	s.samples++
}
