package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
)

// overheadConfig is the command line of -overhead.
type overheadConfig struct {
	rounds      int
	phase       time.Duration
	gatewayBin  string
	gatewayArgs string
	profile     string
	floor       bool // also run the load through a bare reverse proxy (-bare-proxy)
}

// Overhead compares the gateway with the server behind it under the same load.
type Overhead struct {
	Direct  Report `json:"direct"`
	Gateway Report `json:"gateway"`
	// ThroughputRatio is the gateway's completed requests per second over the direct ones'
	// (and TokenRatio the same for output tokens).
	ThroughputRatio float64 `json:"throughput_ratio"`
	TokenRatio      float64 `json:"output_token_ratio"`
	// Added latencies: gateway minus direct, in milliseconds.
	AddedTTFTP50 float64 `json:"added_ttft_p50_ms"`
	AddedTTFTP99 float64 `json:"added_ttft_p99_ms"`
	AddedE2EP50  float64 `json:"added_e2e_p50_ms"`
	AddedE2EP99  float64 `json:"added_e2e_p99_ms"`
	AddedITLP50  float64 `json:"added_inter_token_p50_ms"`
	AddedITLP99  float64 `json:"added_inter_token_p99_ms"`
	// GatewayCPUPerRequest is the gateway process's CPU time (user and system, its threads
	// summed; not the simulated server's nor the load generator's, which run in this
	// process) during the rounds, less its idle rate (metrics scraping) measured for 2 s
	// before them, over the GatewayRequests that succeeded through it, in milliseconds: a
	// figure other processes on the machine disturb far less than the latencies. Failed
	// requests are not counted, so that fast errors cannot lower it. Linux only (read from
	// /proc, in nanoseconds where the kernel keeps schedstat); 0 elsewhere.
	GatewayCPUPerRequest float64 `json:"gateway_cpu_ms_per_request"`
	GatewayRequests      int     `json:"gateway_requests"`
	GatewayErrors        int     `json:"gateway_errors"`
	// MeanPromptTokens and MeanOutputTokens describe the gateway's requests, to read the CPU
	// figure against (the target is stated for a 4k-token prompt and a 64-token answer).
	MeanPromptTokens float64 `json:"mean_prompt_tokens"`
	MeanOutputTokens float64 `json:"mean_output_tokens"`
	// CPUSource says where the CPU times came from: "schedstat" (ns) or "stat" (10 ms ticks).
	CPUSource string `json:"cpu_source,omitempty"`
	// GatewayIdleCPU is the share of a core the idle gateway uses (scraping its backends).
	GatewayIdleCPU float64 `json:"gateway_idle_cpu"`
	// Floor, with -floor, is the same load through a bare httputil.ReverseProxy in a process
	// of its own, run at the same time: FloorCPUPerRequest is its CPU per successful request,
	// measured like the gateway's, the least any Go net/http gateway spends here, and
	// GatewayCPUAboveFloor the gateway's less that — what usher's pipeline itself costs.
	Floor                *Report `json:"floor,omitempty"`
	FloorCPUPerRequest   float64 `json:"floor_cpu_ms_per_request,omitempty"`
	FloorRequests        int     `json:"floor_requests,omitempty"`
	GatewayCPUAboveFloor float64 `json:"gateway_cpu_ms_above_floor,omitempty"`
	AddedTTFTP50Floor    float64 `json:"floor_added_ttft_p50_ms,omitempty"`
	AddedTTFTP99Floor    float64 `json:"floor_added_ttft_p99_ms,omitempty"`
	// Rounds are the per-round added TTFT p50 and p99, to show the spread.
	Rounds []OverheadRound `json:"rounds"`
}

// OverheadRound is one round's comparison.
type OverheadRound struct {
	First        string  `json:"started_first"`
	AddedTTFTP50 float64 `json:"added_ttft_p50_ms"`
	AddedTTFTP99 float64 `json:"added_ttft_p99_ms"`
	AddedE2EP50  float64 `json:"added_e2e_p50_ms"`
	AddedE2EP99  float64 `json:"added_e2e_p99_ms"`
}

// runOverhead starts a simulated server and the gateway in front of it and drives the same
// synthetic load at both at once, in rounds. Both copies of a round run the same sessions
// (same seed: same arrival times, turns, lengths and think times) with a salt of their own in
// the prompts, so each meets an equally cold cache, and both share the machine and the
// server at the same moments: noise from other processes and from the engine's step timing
// falls on both alike, and the difference between the two distributions is the gateway's.
// (Running them in alternating phases instead was dominated by the load of other processes
// on a shared machine.) The gateway's own CPU use slows the direct copy slightly too, so on a
// machine with few cores the added latency is, if anything, understated by the share of a
// core the gateway takes.
func runOverhead(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	oc := cfg.overhead
	if oc.rounds < 1 || oc.phase <= 0 {
		return errors.New("-rounds and -phase must be positive")
	}
	p, ok := engine.ProfileByName(oc.profile)
	if !ok {
		return fmt.Errorf("-sim-profile %q: want demo or qwen3-32b-h100", oc.profile)
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 1, Options: simfleet.Options{Engine: engine.Options{Profile: p}}})
	if err != nil {
		return err
	}
	defer fleet.Close()
	simURL := fleet.URLs()[0]

	bin := oc.gatewayBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "loadgen-gateway-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(stderr, "loadgen: building ./examples/gateway")
		if bin, err = buildGateway(ctx, dir); err != nil {
			return err
		}
	}
	args := append([]string{"-listen", "127.0.0.1:0", "-backend", simURL}, strings.Fields(oc.gatewayArgs)...)
	gw, err := startGateway(ctx, bin, args, stderr)
	if err != nil {
		return err
	}
	defer func() { _, _ = gw.stop() }()
	fmt.Fprintf(stderr, "loadgen: simulated server %s (%s profile), gateway %s\n", simURL, p.Name, gw.url)

	direct := newTarget("direct", simURL, cfg.run.Concurrency)
	through := newTarget("gateway", gw.url, cfg.run.Concurrency)
	defer direct.close()
	defer through.close()
	targets := []*Target{direct, through}
	// procs[i] is the process whose CPU targets[i]'s requests are charged to (nil: none).
	procs := []*gatewayProc{nil, gw}
	if oc.floor {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("-floor: %w", err)
		}
		bare, err := startGateway(ctx, self, []string{"-bare-proxy", simURL}, stderr)
		if err != nil {
			return fmt.Errorf("-floor: the bare reverse proxy: %w", err)
		}
		defer func() { _, _ = bare.stop() }()
		fmt.Fprintf(stderr, "loadgen: bare reverse proxy %s\n", bare.url)
		floor := newTarget("floor", bare.url, cfg.run.Concurrency)
		defer floor.close()
		targets, procs = append(targets, floor), append(procs, bare)
	}
	for _, t := range targets {
		cfg.configure(t)
		t.Model = p.Model
	}

	synth := cfg.synth
	synth.Duration = oc.phase
	// Per proxied target, its successful requests (for its CPU per request) and their tokens.
	counts := make([]struct{ sent, failed, prompt, output atomic.Int64 }, len(targets))
	counting := atomic.Bool{}
	phase := func(i int, salt string, d, delay time.Duration) ([]result, time.Duration, error) {
		if !sleep(ctx, delay) {
			return nil, 0, ctx.Err()
		}
		o := synth
		o.Salt = salt
		if d > 0 {
			o.Duration = d
		}
		sessions, err := Synthetic(o)
		if err != nil {
			return nil, 0, err
		}
		ro := cfg.run
		ro.Progress = nil
		res, el := run(ctx, targets[i], sessions, ro)
		if counting.Load() {
			c := &counts[i]
			for j := range res {
				if !res[j].ok() {
					c.failed.Add(1)
					continue
				}
				c.sent.Add(1)
				c.prompt.Add(int64(res[j].prompt))
				c.output.Add(int64(res[j].output))
			}
		}
		return res, el, ctx.Err()
	}
	// Warm every path up (connections, the gateway's first scrape, the Go runtime).
	for i, t := range targets {
		if _, _, err := phase(i, "warm-up "+t.Name+". ", 2*time.Second, 0); err != nil {
			return err
		}
	}

	// Keep the server stepping: a resident stream decodes throughout, so that each request
	// meets an engine mid-step as on a busy server (and every copy meets the same phase
	// distribution) rather than an idle one whose first step timing depends on how long it
	// has been idle.
	fillCtx, stopFill := context.WithCancel(ctx)
	fillDone := make(chan struct{})
	go func() {
		defer close(fillDone)
		filler := Session{ID: "loadgen-filler", Tenant: "sk-loadgen-filler", Turns: []Turn{{User: "Keep the engine busy.", MaxTokens: 4000}}}
		for fillCtx.Err() == nil {
			var res result
			direct.do(fillCtx, &filler, filler.messages(0, nil), "", 4000, &res)
			if !res.ok() && fillCtx.Err() == nil {
				sleep(fillCtx, 100*time.Millisecond)
			}
		}
	}()
	defer func() { stopFill(); <-fillDone }()

	n := len(targets)
	all := make([][]result, n)
	elapsed := make([]time.Duration, n)
	var rounds []OverheadRound
	// The proxies' CPU: 2 s idle first, for the rate of their background work (scraping),
	// which is subtracted from what they use during the rounds.
	idleStart, cpuStart := make([]time.Duration, n), make([]time.Duration, n)
	cpuOK := true
	var src string
	for i, pr := range procs {
		if pr != nil {
			var err error
			idleStart[i], src, err = procCPU(pr.cmd.Process.Pid)
			cpuOK = cpuOK && err == nil
		}
	}
	idleFrom := time.Now()
	sleep(ctx, 2*time.Second)
	idleFor := time.Since(idleFrom)
	for i, pr := range procs {
		if pr != nil {
			var err error
			cpuStart[i], _, err = procCPU(pr.cmd.Process.Pid)
			cpuOK = cpuOK && err == nil
		}
	}
	roundsFrom := time.Now()
	counting.Store(true)
	for r := range oc.rounds {
		// Every copy of the load runs at once, each request of one paired with the same
		// request of the others (same lengths, turns and think times), so that all meet the
		// same machine load and engine; the copies started later are offset by a fraction of
		// the mean time between sessions, so that paired requests do not race each other into
		// the same engine step, and the rounds rotate which copy leads.
		offset := time.Duration(0.37 / synth.Rate * float64(time.Second))
		reps := make([]Report, n)
		res := make([][]result, n)
		el := make([]time.Duration, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		lead := r % n
		for k := range n {
			i := (lead + k) % n
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], el[i], errs[i] = phase(i, fmt.Sprintf("Round %d, %s. ", r, targets[i].Name), 0, time.Duration(k)*offset)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for i, t := range targets {
			all[i] = append(all[i], res[i]...)
			elapsed[i] += el[i]
			reps[i] = summarize(t.Name, t.URL, "", res[i], el[i])
			fmt.Fprintf(stderr, "loadgen: round %d %-7s: %d requests, %d errors, TTFT p50 %.2f ms p99 %.2f ms, E2E p50 %.1f ms p99 %.1f ms\n",
				r, t.Name, reps[i].Requests, reps[i].Errors, reps[i].TTFT.P50, reps[i].TTFT.P99, reps[i].E2E.P50, reps[i].E2E.P99)
		}
		rounds = append(rounds, OverheadRound{
			First:        targets[lead].Name,
			AddedTTFTP50: reps[1].TTFT.P50 - reps[0].TTFT.P50, AddedTTFTP99: reps[1].TTFT.P99 - reps[0].TTFT.P99,
			AddedE2EP50: reps[1].E2E.P50 - reps[0].E2E.P50, AddedE2EP99: reps[1].E2E.P99 - reps[0].E2E.P99,
		})
	}
	copies := "both copies at once"
	if n > 2 {
		copies = "the three copies at once"
	}
	workload := fmt.Sprintf("synthetic: seed %d, %.3g sessions/s, answers %d-%d tokens, think %v; %d rounds of %v, %s",
		synth.Seed, synth.Rate, synth.MinAnswer, synth.MaxAnswer, synth.Think, oc.rounds, oc.phase, copies)
	o := Overhead{
		Direct:  summarize("direct", simURL, workload, all[0], elapsed[0]),
		Gateway: summarize("gateway", gw.url, workload, all[1], elapsed[1]),
		Rounds:  rounds,
	}
	o.ThroughputRatio = ratioF(o.Gateway.RequestsPerSec, o.Direct.RequestsPerSec)
	o.TokenRatio = ratioF(o.Gateway.OutputTokPerSec, o.Direct.OutputTokPerSec)
	o.AddedTTFTP50, o.AddedTTFTP99 = o.Gateway.TTFT.P50-o.Direct.TTFT.P50, o.Gateway.TTFT.P99-o.Direct.TTFT.P99
	o.AddedE2EP50, o.AddedE2EP99 = o.Gateway.E2E.P50-o.Direct.E2E.P50, o.Gateway.E2E.P99-o.Direct.E2E.P99
	o.AddedITLP50, o.AddedITLP99 = o.Gateway.ITL.P50-o.Direct.ITL.P50, o.Gateway.ITL.P99-o.Direct.ITL.P99
	// cpuPerRequest is proxy i's CPU during the rounds less its idle rate, per success, in ms.
	roundsFor := time.Since(roundsFrom)
	cpuPerRequest := func(i int) (float64, bool) {
		end, _, err := procCPU(procs[i].cmd.Process.Pid)
		sent := counts[i].sent.Load()
		if err != nil || !cpuOK || sent == 0 {
			return 0, false
		}
		idleRate := float64(cpuStart[i]-idleStart[i]) / float64(idleFor)
		busy := float64(end-cpuStart[i]) - idleRate*float64(roundsFor)
		if i == 1 {
			o.GatewayIdleCPU = idleRate
		}
		return max(busy, 0) / float64(time.Millisecond) / float64(sent), true
	}
	if v, ok := cpuPerRequest(1); ok {
		c := &counts[1]
		sent := c.sent.Load()
		o.GatewayCPUPerRequest = v
		o.GatewayRequests, o.GatewayErrors = int(sent), int(c.failed.Load())
		o.MeanPromptTokens = float64(c.prompt.Load()) / float64(sent)
		o.MeanOutputTokens = float64(c.output.Load()) / float64(sent)
		o.CPUSource = src
	}
	if n > 2 {
		f := summarize("floor", targets[2].URL, workload, all[2], elapsed[2])
		o.Floor = &f
		o.AddedTTFTP50Floor, o.AddedTTFTP99Floor = f.TTFT.P50-o.Direct.TTFT.P50, f.TTFT.P99-o.Direct.TTFT.P99
		if v, ok := cpuPerRequest(2); ok {
			o.FloorCPUPerRequest, o.FloorRequests = v, int(counts[2].sent.Load())
			o.GatewayCPUAboveFloor = o.GatewayCPUPerRequest - v
		}
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	}
	o.WriteText(stdout)
	return nil
}

func ratioF(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteText writes both reports and the comparison.
func (o *Overhead) WriteText(w io.Writer) {
	o.Direct.WriteText(w)
	fmt.Fprintln(w)
	o.Gateway.WriteText(w)
	fmt.Fprintf(w, "\ngateway overhead (gateway − direct, the same load side by side, %d rounds)\n", len(o.Rounds))
	fmt.Fprintf(w, "  throughput ratio  %.3f req/s, %.3f output tok/s\n", o.ThroughputRatio, o.TokenRatio)
	fmt.Fprintf(w, "  added TTFT        p50 %+.3f ms   p99 %+.3f ms\n", o.AddedTTFTP50, o.AddedTTFTP99)
	fmt.Fprintf(w, "  added end-to-end  p50 %+.3f ms   p99 %+.3f ms\n", o.AddedE2EP50, o.AddedE2EP99)
	fmt.Fprintf(w, "  added inter-token p50 %+.3f ms   p99 %+.3f ms\n", o.AddedITLP50, o.AddedITLP99)
	for i, r := range o.Rounds {
		fmt.Fprintf(w, "  round %d (%s started first): TTFT p50 %+.3f p99 %+.3f ms, E2E p50 %+.3f p99 %+.3f ms\n",
			i, r.First, r.AddedTTFTP50, r.AddedTTFTP99, r.AddedE2EP50, r.AddedE2EP99)
	}
	verdict := "meets"
	if o.AddedTTFTP99 > 1 || o.AddedE2EP99 > 1 {
		verdict = "misses"
	}
	fmt.Fprintf(w, "  target p99 added ≤ 1 ms: %s (TTFT %+.3f ms, E2E %+.3f ms)\n", verdict, o.AddedTTFTP99, o.AddedE2EP99)
	if o.GatewayRequests > 0 {
		fmt.Fprintf(w, "  gateway CPU       %.3f ms per request: the gateway process only, from /proc (%s), over %d successful requests (%d failed, not counted),\n",
			o.GatewayCPUPerRequest, o.CPUSource, o.GatewayRequests, o.GatewayErrors)
		fmt.Fprintf(w, "                    less its idle use (%.2f%% of a core); requests of %.0f prompt and %.0f output tokens on average\n",
			100*o.GatewayIdleCPU, o.MeanPromptTokens, o.MeanOutputTokens)
		verdict = "meets"
		if o.GatewayCPUPerRequest > 1 {
			verdict = "misses"
		}
		fmt.Fprintf(w, "  target CPU ≤ 1 ms per request: %s\n", verdict)
	}
	if o.Floor != nil {
		fmt.Fprintf(w, "  floor             a bare httputil.ReverseProxy (its own process, the same load at the same time):\n")
		fmt.Fprintf(w, "                    %.3f ms CPU per request over %d successful requests; added TTFT p50 %+.3f ms p99 %+.3f ms\n",
			o.FloorCPUPerRequest, o.FloorRequests, o.AddedTTFTP50Floor, o.AddedTTFTP99Floor)
		fmt.Fprintf(w, "  gateway above the floor  %+.3f ms CPU per request: usher's pipeline (parse, hash, admit, route, account)\n", o.GatewayCPUAboveFloor)
	}
	fmt.Fprintf(w, "\nsummary: gateway %.3f ms CPU/request, added TTFT p50 %+.3f ms p99 %+.3f ms", o.GatewayCPUPerRequest, o.AddedTTFTP50, o.AddedTTFTP99)
	if o.Floor != nil {
		fmt.Fprintf(w, "; bare reverse proxy %.3f ms CPU/request (gateway %+.3f ms above it)", o.FloorCPUPerRequest, o.GatewayCPUAboveFloor)
	}
	fmt.Fprintln(w)
}

// procCPU returns the CPU time process pid used so far, its threads summed, and where it read
// it: "schedstat", the sum of each thread's /proc/pid/task/tid/schedstat run time, in
// nanoseconds; else "stat", user plus system time from /proc/pid/stat, in clock ticks of
// 10 ms (the kernel's USER_HZ on every common Linux) — too coarse for the 2 s idle window,
// where one tick is half a percent of a core. Threads that exited drop out of the schedstat
// sum; a Go program's threads live as long as it does.
func procCPU(pid int) (time.Duration, string, error) {
	if d, err := schedstatCPU(pid); err == nil {
		return d, "schedstat", nil
	}
	d, err := statCPU(pid)
	return d, "stat", err
}

func schedstatCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(data))
		var ns int64
		if len(f) == 0 {
			return 0, errors.New("empty schedstat")
		}
		if _, err := fmt.Sscan(f[0], &ns); err != nil {
			return 0, err
		}
		sum += ns
	}
	if sum == 0 {
		return 0, errors.New("no schedstat run time")
	}
	return time.Duration(sum), nil
}

func statCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields count from
	// the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	var utime, stime int64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// moduleRoot walks up from the working directory to the go.mod of usher.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/usher-llm/usher\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the usher module: run from the repository or give -gateway-bin")
		}
		dir = parent
	}
}

// buildGateway builds ./examples/gateway into dir and returns the binary's path.
func buildGateway(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building the gateway needs the go command on PATH (or -gateway-bin): %w", err)
	}
	bin := filepath.Join(dir, "gateway")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./examples/gateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./examples/gateway: %v\n%s", err, out)
	}
	return bin, nil
}

// gatewayProc is a gateway running as a child process.
type gatewayProc struct {
	cmd      *exec.Cmd
	url      string
	done     chan struct{}
	stopOnce sync.Once
}

// startGateway runs the gateway binary and waits for the line announcing its address
// ("usher gateway listening on http://...").
func startGateway(ctx context.Context, bin string, args []string, stderr io.Writer) (*gatewayProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProc{cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		defer close(g.done)
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok && !sent {
				u, _, _ := strings.Cut(rest, " ")
				urlc <- u
				sent = true
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case g.url = <-urlc:
		return g, nil
	case <-g.done:
		return nil, errors.New("the gateway exited before listening")
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	g.stop()
	return nil, errors.New("the gateway did not start listening")
}

// stop interrupts the gateway (graceful shutdown), kills it if it lingers, and returns the
// CPU time it used. Later calls do nothing.
func (g *gatewayProc) stop() (time.Duration, error) {
	stopped := false
	g.stopOnce.Do(func() {
		stopped = true
		_ = g.cmd.Process.Signal(os.Interrupt)
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
		}
	})
	if !stopped || g.cmd.ProcessState == nil {
		return 0, errors.New("gateway already stopped")
	}
	st := g.cmd.ProcessState
	return st.UserTime() + st.SystemTime(), nil
}
