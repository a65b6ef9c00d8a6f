// Command loadgen drives an OpenAI-compatible endpoint — usher's gateway, a simulated vLLM
// server, a real vLLM — with streamed chat completions and reports what clients saw: time to
// first token, inter-token latency and end-to-end latency (p50, p90, p99), throughput, the
// prefix-cache hit rate the server reports (usage.prompt_tokens_details.cached_tokens over
// prompt tokens), and first turns against later turns of conversations (their waits and their
// rejections).
//
// Two workloads:
//
//   - the built-in synthetic one (default): agentic coding sessions that share long opening
//     instructions and grow turn by turn (each turn sends the conversation so far: the previous
//     answers as the server gave them, then a new instruction, often with a file or a log),
//     with think time between turns, mixed with single-turn questions; sessions arrive as a
//     Poisson process, are identified by the X-Session-Id header and belong to tenants (API
//     keys). Deterministic for a -seed. -sessions increasing-hazard makes every session 6 to
//     10 turns, uniform, as the simulator's increasing-hazard workload (a task of a typical
//     number of steps: the chance that a session ends rises with the turns it has run).
//   - a Mooncake-format trace (-trace file, or -trace mooncake for the conversation trace
//     shipped in bench/traces), replayed by timestamp (-speed, -limit),
//     with prompt text synthesised so that the trace's shared hash_id prefixes become shared
//     token prefixes, and answers of the trace's output_length (max_tokens with ignore_eos).
//
// Examples:
//
//	go run ./examples/gateway &                 # usher in front of a simulated fleet
//	go run ./examples/loadgen -url http://127.0.0.1:8080 -duration 30s -rate 3
//	go run ./examples/loadgen -url http://127.0.0.1:8080 -trace mooncake -speed 2 -limit 500
//
// Every report also measures the sessions as tasks (TaskStats, bench.TaskStats's definitions):
// the time from a session's first send to its last answer, think times included, and the sum
// of its response times, over the sessions completed; the sessions abandoned (a turn shed or
// failed, or a think time past -session-idle) and those censored by the end of the run (an
// interrupt, -limit) are counted apart. -split T also reports the turns sent before T apart
// from those sent after it, and the sessions over by T, to see a policy that learns as it runs
// (the gateway's Gittins) before and after it has; -think-scale F multiplies the think times of
// a replay's closed-loop sessions (the trace's run to minutes), which changes the workload.
//
// With -frontier it runs no load but reads reports that -json wrote (a run per policy, each
// named with -label), prints them as a markdown table of first turns against later turns and
// draws the admission frontier (first-turn p99 TTFT against later-turn p50 TTFT, the marker
// growing with the first turns rejected) as DIR/frontier.png and DIR/frontier.svg, then a
// table of task completion time with a row per label (the median and range of its runs),
// and, for reports with -split, one of the turns before and after the split:
//
//	go run ./examples/loadgen -url http://127.0.0.1:8080 -json -label fcfs >out/fcfs.json
//	go run ./examples/loadgen -frontier out out/fcfs.json out/turn-priority.json
//
// examples/loadgen/frontier.sh runs the whole comparison, one gateway per policy (with
// PARALLEL=1, the policies of a seed at once).
//
// With -overhead it measures the gateway itself: it starts one simulated server and the
// gateway (built from ./examples/gateway) in front of it, and drives the same load at both in
// alternating rounds; -floor adds a third copy through a bare httputil.ReverseProxy (this
// program with -bare-proxy, in a process of its own), the floor of any net/http gateway, and
// reports the gateway's CPU per request above it:
//
//	go run ./examples/loadgen -overhead -floor
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/usher-llm/usher/bench"
)

// config is the command line.
type config struct {
	url, model, api     string
	tracePath           string
	benchWorkload       string
	phaseLength         time.Duration // -phase-length: with -workload phases, each phase's length
	speed               float64
	thinkScale          float64 // -think-scale
	limit               int
	duration            time.Duration
	maxContext          int
	synth               SyntheticOptions
	run                 RunOptions
	retries             int
	apiKey              string
	tenantHeader        string
	sessionHeader       string
	ignoreEOS           bool
	jsonOut             bool
	quiet               bool
	overhead            overheadConfig
	overheadMode        bool
	syntheticMaxContext int
	label               string
	sessionIdle         time.Duration // -session-idle; 0: defaultIdle of the workload
	split               time.Duration // -split; 0: none
	shape               string        // -sessions: the synthetic sessions' preset
	frontierDir         string        // -frontier: where the plots go ("" when not in that mode)
	frontierReports     []string      // its reports, the arguments after the flags
	frontierTitle       string
	table               bool   // -table: print the reports given as arguments, a row each
	bareProxy           string // -bare-proxy: serve a bare reverse proxy to this URL and nothing else
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the OpenAI-compatible endpoint; several, comma-separated, take the requests in turn (gateway replicas behind a Service)")
	fs.StringVar(&c.model, "model", "", "model to ask for; empty: the first of GET /v1/models")
	fs.StringVar(&c.api, "api", "chat", "chat (/v1/chat/completions) or completions (/v1/completions, messages joined into one prompt)")
	fs.StringVar(&c.benchWorkload, "workload", "", "replay one of the bench simulator's workloads, as the simulator runs it (with -seed): "+bench.WorkloadNames()+", long-prompt (bench.LongPrompts: the P/D tables' long prompts; -limit requests, 4,000 without) or phases (bench.PhaseMix: chat, long prompts, chat, -phase-length each, at -speed times each part's rate; -duration does not cut it); the prompts are synthesised from its block ids, so the same requests reach the gateway and the simulator")
	fs.DurationVar(&c.phaseLength, "phase-length", 10*time.Minute, "with -workload phases: how long each of its three phases lasts (sessions start within it)")
	fs.StringVar(&c.tracePath, "trace", "", "Mooncake-format JSONL trace to replay ('mooncake': the Mooncake conversation trace shipped in bench/traces); empty: synthetic workload")
	fs.Float64Var(&c.speed, "speed", 1, "trace: replay speed (2 = twice as fast as recorded)")
	fs.Float64Var(&c.thinkScale, "think-scale", 1, "trace and -workload: multiply the think time before each closed-loop turn (which -speed leaves alone) by this, e.g. 0.1 to fit sessions whose gaps run to minutes into a short run (it changes the workload: say so with the figures)")
	fs.IntVar(&c.limit, "limit", 0, "send at most this many requests (0: no limit)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "synthetic: sessions start within this window; trace: replay the requests arriving within it (0: whole trace)")
	fs.IntVar(&c.maxContext, "max-context", 0, "trace: fit requests into this many tokens (0: the max_model_len GET /v1/models reports, if any; -1: no limit)")
	fs.StringVar(&c.shape, "sessions", "agentic", "synthetic: the shape of the sessions' lengths — agentic (3 to 10 turns, cut by -session-context, and -single-turn single requests) or increasing-hazard (6 to 10 turns uniform, as the simulator's increasing-hazard workload: no single-turn sessions and a session context of 24000 tokens so that none is cut, unless those flags say otherwise)")
	fs.Uint64Var(&c.synth.Seed, "seed", 1, "synthetic: seed of the workload")
	fs.Float64Var(&c.synth.Rate, "rate", 2, "synthetic: sessions (conversations or single requests) starting per second")
	fs.Float64Var(&c.synth.SingleTurn, "single-turn", 0.3, "synthetic: share of single-turn sessions")
	fs.IntVar(&c.synth.Tenants, "tenants", 4, "tenants (API keys); tenant i has weight 1/(i+1) (trace: sessions spread evenly)")
	fs.IntVar(&c.synth.SystemTokens, "system-tokens", 1500, "synthetic: tokens of the agents' shared opening instructions")
	fs.IntVar(&c.synth.MinTurns, "min-turns", 3, "synthetic: fewest turns of an agentic session")
	fs.IntVar(&c.synth.MaxTurns, "max-turns", 10, "synthetic: most turns of an agentic session")
	fs.DurationVar(&c.synth.Think, "think", time.Second, "synthetic: mean think time between turns (negative: none)")
	fs.IntVar(&c.synth.MinAnswer, "min-answer", 32, "synthetic: shortest answer (max_tokens)")
	fs.IntVar(&c.synth.MaxAnswer, "max-answer", 256, "synthetic: longest answer (max_tokens)")
	fs.IntVar(&c.syntheticMaxContext, "session-context", 7500, "synthetic: tokens a session may grow to (prompt plus answer)")
	fs.IntVar(&c.run.Concurrency, "concurrency", 256, "most requests in flight (a request due while they are reached waits; its latency counts from when it is sent)")
	fs.IntVar(&c.retries, "retries", 3, "resend a request rejected with 429/503 up to this many times, after its Retry-After")
	fs.StringVar(&c.apiKey, "api-key", "", "send this API key instead of one per tenant")
	fs.StringVar(&c.tenantHeader, "tenant-header", "", "also send the tenant in this header")
	fs.StringVar(&c.sessionHeader, "session-header", "X-Session-Id", "header carrying the session id")
	fs.BoolVar(&c.ignoreEOS, "ignore-eos", true, "send ignore_eos so answers are exactly max_tokens long (vLLM, SGLang, the simulator)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the report as JSON")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress line")
	fs.DurationVar(&c.sessionIdle, "session-idle", 0, "a session whose next turn is not sent within this long of its previous answer is abandoned (task completion time); 0: twice the workload's longest think time")
	fs.DurationVar(&c.split, "split", 0, "also report the turns sent before this moment of the run and those sent after it apart, and the sessions over (idle past -session-idle) by then, to see a policy that learns (Gittins) before and after it has (0: no split)")
	fs.StringVar(&c.label, "label", "", "name of the run, written in the report (the -frontier table and plot name a run by it)")
	fs.StringVar(&c.frontierDir, "frontier", "", "report mode: read the -json reports given as arguments (none: every DIR/*.json), print their markdown table of first against later turns, and write DIR/frontier.png and .svg; runs no load")
	fs.StringVar(&c.frontierTitle, "title", "admission frontier", "frontier: the plot's title")
	fs.BoolVar(&c.table, "table", false, "report mode: read the -json reports given as arguments and print a markdown row each (requests, errors, rejections, prefix hit rate of later turns and of all prompts, TTFT); runs no load")
	fs.BoolVar(&c.overheadMode, "overhead", false, "measure the gateway's overhead: start a simulated server and the gateway in front of it, drive the same load at both (defaults: -rate 3 -think 100ms -min-answer 16 -max-answer 64 -session-context 4000)")
	fs.IntVar(&c.overhead.rounds, "rounds", 3, "overhead: rounds (each runs the load at both targets at once)")
	fs.DurationVar(&c.overhead.phase, "phase", 15*time.Second, "overhead: how long sessions start in each round")
	fs.StringVar(&c.overhead.gatewayBin, "gateway-bin", "", "overhead: gateway binary to run (empty: go build ./examples/gateway)")
	fs.StringVar(&c.overhead.gatewayArgs, "gateway-args", "", "overhead: extra gateway flags, space-separated")
	fs.StringVar(&c.overhead.profile, "sim-profile", "demo", "overhead: profile of the simulated server (demo, qwen3-32b-h100)")
	fs.BoolVar(&c.overhead.floor, "floor", false, "overhead: also drive the same load through a bare httputil.ReverseProxy in a process of its own (this program with -bare-proxy), the floor of any Go net/http gateway on this machine, and report the gateway's CPU above it")
	fs.StringVar(&c.bareProxy, "bare-proxy", "", "serve a bare httputil.ReverseProxy (flushing every write) to this URL on a loopback port, print its address and run until interrupted; what -overhead -floor starts")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.overheadMode {
		// The overhead load: many short requests, so that a round gives enough samples for
		// a p99, unless the command line says otherwise.
		for name, v := range map[string]any{"rate": 3.0, "think": 100 * time.Millisecond, "min-answer": 16, "max-answer": 64, "session-context": 4000} {
			if set[name] {
				continue
			}
			switch p := v.(type) {
			case float64:
				c.synth.Rate = p
			case time.Duration:
				c.synth.Think = p
			case int:
				switch name {
				case "min-answer":
					c.synth.MinAnswer = p
				case "max-answer":
					c.synth.MaxAnswer = p
				default:
					c.syntheticMaxContext = p
				}
			}
		}
	}
	switch c.shape {
	case "agentic":
	case "increasing-hazard":
		// A task of a typical number of steps: the chance that a session ends rises with
		// the turns it has run (0 before 6, then 1/5, 1/4, 1/3, 1/2, 1).
		for name, apply := range map[string]func(){
			"min-turns":       func() { c.synth.MinTurns = 6 },
			"max-turns":       func() { c.synth.MaxTurns = 10 },
			"single-turn":     func() { c.synth.SingleTurn = 0 },
			"session-context": func() { c.syntheticMaxContext = 24000 },
		} {
			if !set[name] {
				apply()
			}
		}
	default:
		return c, fmt.Errorf("-sessions %q: want agentic or increasing-hazard", c.shape)
	}
	if c.frontierDir != "" || c.table {
		c.frontierReports = fs.Args()
		if c.table && len(c.frontierReports) == 0 {
			return c, errors.New("-table needs the reports' files as arguments")
		}
		return c, nil
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (reports are read with -frontier DIR)", fs.Args())
	}
	switch {
	case c.api != "chat" && c.api != "completions":
		return c, fmt.Errorf("-api %q: want chat or completions", c.api)
	case c.speed <= 0:
		return c, fmt.Errorf("-speed %v: want > 0", c.speed)
	case !(c.thinkScale > 0):
		return c, fmt.Errorf("-think-scale %v: want > 0", c.thinkScale)
	case c.sessionIdle < 0:
		return c, fmt.Errorf("-session-idle %v: want ≥ 0", c.sessionIdle)
	case c.split < 0:
		return c, fmt.Errorf("-split %v: want ≥ 0", c.split)
	case c.limit < 0 || c.retries < 0 || c.run.Concurrency < 1:
		return c, errors.New("-limit and -retries must not be negative, -concurrency must be positive")
	}
	if c.synth.SingleTurn == 0 {
		c.synth.SingleTurn = -1 // the flag's 0 means none; the options' 0 means the default
	}
	c.synth.MaxContext = c.syntheticMaxContext
	c.synth.Duration = c.duration
	c.run.Limit = c.limit
	return c, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs the command line args and returns the exit status: 0, 1 when the run failed, 2
// for a bad command line.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	if !cfg.quiet {
		cfg.run.Progress = stderr
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				cfg.run.ProgressCR = true
			}
		}
		if !cfg.run.ProgressCR {
			cfg.run.ProgressEvery = 5 * time.Second
		}
	}
	switch {
	case cfg.bareProxy != "":
		err = runBareProxy(ctx, cfg.bareProxy, stdout)
	case cfg.frontierDir != "":
		err = runFrontier(cfg, stdout, stderr)
	case cfg.table:
		err = runTable(cfg.frontierReports, stdout)
	case cfg.overheadMode:
		err = runOverhead(ctx, cfg, stdout, stderr)
	default:
		err = runLoad(ctx, cfg, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	return 0
}

// configure applies the command line's endpoint settings to a target.
func (c *config) configure(t *Target) {
	t.Completions = c.api == "completions"
	t.APIKey = c.apiKey
	t.TenantHeader = c.tenantHeader
	t.SessionHeader = c.sessionHeader
	t.IgnoreEOS = c.ignoreEOS
	t.Retries = c.retries
	t.Model = c.model
}

// runLoad runs one workload against -url and prints the report.
func runLoad(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	t := newTarget("target", cfg.url, cfg.run.Concurrency)
	defer t.close()
	cfg.configure(t)
	var maxLen int
	if t.Model == "" || ((cfg.tracePath != "" || cfg.benchWorkload != "") && cfg.maxContext == 0) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		model, n, err := t.discoverModel(dctx)
		cancel()
		if err != nil && t.Model == "" {
			return fmt.Errorf("finding the model (give -model): %w", err)
		}
		if t.Model == "" {
			t.Model = model
		}
		maxLen = n
	}
	sessions, workload, err := cfg.workload(maxLen)
	if err != nil {
		return err
	}
	turns := 0
	for i := range sessions {
		turns += len(sessions[i].Turns)
	}
	fmt.Fprintf(stderr, "loadgen: %s: %d sessions, %d requests, against %s (model %s)\n", workload, len(sessions), turns, t.URL, t.Model)
	start := time.Now()
	results, elapsed := run(ctx, t, sessions, cfg.run)
	rep := summarize(t.Name, t.URL, workload, results, elapsed)
	rep.Label = cfg.label
	idle := cfg.sessionIdle
	if idle == 0 {
		idle = defaultIdle(sessions)
	}
	rep.Tasks = taskStats(sessions, results, idle, runEnd(results))
	if cfg.split > 0 {
		st := splitStats(results, start, cfg.split, idle)
		rep.Split = &st
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteText(stdout)
	return nil
}

// workload builds the sessions the command line asks for; maxLen is the server's
// max_model_len when known.
func (c *config) workload(maxLen int) ([]Session, string, error) {
	mc := c.maxContext
	switch {
	case mc < 0:
		mc = 0
	case mc == 0:
		mc = maxLen
	}
	if c.benchWorkload != "" {
		if c.tracePath != "" {
			return nil, "", fmt.Errorf("-workload and -trace exclude each other")
		}
		opts := TraceOptions{Speed: c.speed, Limit: c.limit, Window: c.duration, MaxContext: mc, Tenants: c.synth.Tenants}
		desc := fmt.Sprintf("bench workload %s (seed %d) at %.3gx", c.benchWorkload, c.synth.Seed, c.speed)
		var w *bench.Workload
		var err error
		switch c.benchWorkload {
		case "long-prompt":
			w = bench.LongPrompts(cmp.Or(c.limit, 4000), c.synth.Seed)
		case "phases":
			// Each part is scaled before the phases are cut, as bench.PhaseMix does: scaling
			// the whole would shorten the phases.
			w, err = bench.PhaseMix(c.synth.Seed, c.speed, c.phaseLength)
			opts.Speed, opts.Window = 1, 0
			desc = fmt.Sprintf("bench phases (seed %d): chat, long prompts, chat, %v each, at %.3gx", c.synth.Seed, c.phaseLength, c.speed)
		default:
			w, err = bench.LoadWorkload(c.benchWorkload, bench.LoadOptions{Seed: c.synth.Seed})
		}
		if err != nil {
			return nil, "", fmt.Errorf("-workload: %w", err)
		}
		opts.ThinkScale = c.thinkScale
		s, err := TraceSessions(w, opts)
		if c.thinkScale != 1 {
			desc += fmt.Sprintf(", think times ×%.3g", c.thinkScale)
		}
		return s, desc, err
	}
	if c.tracePath == "" {
		s, err := Synthetic(c.synth)
		desc := fmt.Sprintf("synthetic %s: seed %d, %.3g sessions/s for %v, %d–%d turns, %.0f%% single-turn, %d tenants",
			c.shape, c.synth.Seed, c.synth.Rate, c.synth.Duration, c.synth.MinTurns, c.synth.MaxTurns, 100*max(c.synth.SingleTurn, 0), c.synth.Tenants)
		return s, desc, err
	}
	path := c.tracePath
	var recs *bench.Workload
	var err error
	if path == "mooncake" {
		recs, err = bench.Mooncake(bench.MooncakeOptions{})
	} else {
		recs, err = bench.LoadMooncakeFile(path, bench.MooncakeOptions{})
	}
	if err != nil {
		return nil, "", fmt.Errorf("-trace: %w (-trace mooncake replays the Mooncake conversation trace that ships in bench/traces; a path names a Mooncake-format JSONL file)", err)
	}
	s, err := TraceSessions(recs, TraceOptions{Speed: c.speed, Limit: c.limit, Window: c.duration, MaxContext: mc, Tenants: c.synth.Tenants, ThinkScale: c.thinkScale})
	desc := fmt.Sprintf("trace %s at %.3gx", path, c.speed)
	if mc > 0 {
		desc += fmt.Sprintf(", fitted to %d tokens", mc)
	}
	return s, desc, err
}
