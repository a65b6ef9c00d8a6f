// Command simserver runs one simulated vLLM-compatible model server (package simfleet) as a
// process of its own, so that fault tests can kill -9 it, SIGSTOP it and restart it:
//
//	go run ./internal/glue/simfleet/cmd/simserver -listen 127.0.0.1:8000 \
//	  -kv-events tcp://127.0.0.1:5557 -replay tcp://127.0.0.1:5558
//
// A port of 0 picks a free one. Once the HTTP listener and the KV-event sockets are bound it
// prints exactly one line to stdout, with the bound addresses, and nothing else:
//
//	simserver listening on http://127.0.0.1:8000 kv-events=tcp://127.0.0.1:5557 replay=tcp://127.0.0.1:5558
//
// (the kv-events and replay parts only when configured; with a wildcard host the address is
// printed as bound, e.g. tcp://[::]:5557). KV events are published as vLLM publishes them, on
// the topic kv@POD@MODEL. It serves until SIGINT or SIGTERM, then lets the requests in flight
// finish for up to -shutdown-grace; a second signal ends it at once. Errors go to stderr; a
// flag error exits with status 2, and a bind error with status 1, before the line is printed.
// Package internal/glue/simfleet/simproc builds and drives it from tests.
//
// -lora-modules a,b,c serves LoRA adapters on the model (vLLM's --lora-modules), with
// -max-loras slots and -lora-load-cost per adapter load.
//
// The -fault-* flags make it misbehave on the OpenAI endpoints while /metrics and /health stay
// healthy, to reproduce field faults on a real process: -fault-hold-headers 45s (a stuck
// server), -fault-reset-after 1500 (every stream reset after 1,500 bytes), -fault-status 502,
// -fault-slow-write 200ms, each on every request or one in -fault-every.
//
// -slow-factor 3 slows the server down as a noisy neighbour or a thermally throttled GPU would:
// every engine step takes 3× its modelled duration (step base, prefill and decode costs alike;
// Server.SetSlowdown), from the start or, with -slow-after 30s, from 30 s after the server
// started. A script can also set the factor at a time of its choosing, and read it back:
//
//	curl -X POST 'http://127.0.0.1:8000/debug/slow?factor=3'   # answers {"factor":3}
//	curl http://127.0.0.1:8000/debug/slow                      # the factor now
//
// (factor=1 restores the modelled speed). Each change of the factor is noted on stderr.
//
// The server takes either role of vLLM's disaggregated serving per request, from its
// kv_transfer_params (see package simfleet): -kv-transfer-per-token and -kv-transfer-latency
// set the modelled KV transfer's cost (5.2µs and 1ms by default), -kv-transfer-timeout how
// long a prefill's KV waits for its decode server (60s), and -kv-side-channel the host:port
// prefill answers advertise, when the address requests arrive on is not the one decode
// servers reach.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "simserver:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "simserver:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("simserver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve the OpenAI API on (port 0: any free port)")
	profile := fs.String("profile", engine.Demo.Name, "engine profile: demo or qwen3-32b-h100")
	kvEndpoint := fs.String("kv-events", "", "ZMQ endpoint the KV-event PUB socket binds, e.g. tcp://*:5557 (empty: no KV events)")
	replay := fs.String("replay", "", "ZMQ endpoint the KV-event replay ROUTER socket binds (needs -kv-events)")
	pod := fs.String("pod", "", "pod name in the KV-event topic kv@POD@MODEL (default: the bound listen address)")
	servedModel := fs.String("served-model-name", "", "the model name the server serves, as vLLM's --served-model-name (default: the profile's)")
	grace := fs.Duration("shutdown-grace", 5*time.Second, "how long shutdown waits for requests in flight")
	exitOnEOF := fs.Bool("exit-on-eof", false, "also shut down when stdin reaches end of file, i.e. when the parent holding it dies")
	// Engine parameters over the profile's (0: the profile's), so that a process can be
	// configured as the bench simulator's servers are.
	var tune engine.Profile
	fs.IntVar(&tune.NumBlocks, "kv-blocks", 0, "KV blocks on the device (vLLM's num_gpu_blocks; 0: the profile's)")
	fs.IntVar(&tune.BlockSize, "block-size", 0, "tokens per KV block (vLLM's --block-size; 0: the profile's)")
	fs.IntVar(&tune.MaxNumSeqs, "max-num-seqs", 0, "most requests running at once (vLLM's --max-num-seqs; 0: the profile's)")
	fs.IntVar(&tune.MaxNumBatchedTokens, "max-batched-tokens", 0, "token budget of one step (vLLM's --max-num-batched-tokens; 0: the profile's)")
	fs.IntVar(&tune.MaxModelLen, "max-model-len", 0, "most prompt plus output tokens of one request (0: the profile's)")
	fs.DurationVar(&tune.StepBase, "step-base", 0, "fixed cost of every engine step (0: the profile's)")
	fs.DurationVar(&tune.PrefillPerToken, "prefill-per-token", 0, "compute cost of one prompt token (0: the profile's)")
	fs.DurationVar(&tune.DecodePerSeq, "decode-per-seq", 0, "cost of one decoding sequence in a step (0: the profile's)")
	var faults simfleet.Faults
	fs.DurationVar(&faults.HoldHeaders, "fault-hold-headers", 0, "fault: hold the response headers of every OpenAI request this long (metrics stay healthy)")
	fs.IntVar(&faults.ResetAfterBytes, "fault-reset-after", 0, "fault: reset the connection (TCP RST) after this many bytes of each answer's body")
	fs.IntVar(&faults.Status, "fault-status", 0, "fault: answer every OpenAI request with this HTTP status, e.g. 502")
	fs.DurationVar(&faults.SlowWrite, "fault-slow-write", 0, "fault: sleep this long before each write of an answer")
	fs.IntVar(&faults.Every, "fault-every", 0, "apply the faults to one request in N (0: all)")
	slowFactor := fs.Float64("slow-factor", 1, "slowdown: every engine step takes this many times its modelled duration (a noisy neighbour, a throttled GPU); also settable with POST /debug/slow?factor=F")
	slowAfter := fs.Duration("slow-after", 0, "slowdown: apply -slow-factor this long after the start (0: from the start)")
	var transfer simfleet.Options
	loraModules := fs.String("lora-modules", "", "LoRA adapters served on the model, comma-separated names (vLLM's --lora-modules; name=path is accepted, the path ignored)")
	fs.IntVar(&transfer.LoRA.MaxLoRAs, "max-loras", 0, "LoRA adapter slots: most adapters in one batch (vLLM's --max-loras; 0: 1)")
	fs.DurationVar(&transfer.LoRA.LoadCost, "lora-load-cost", 0, "time to load a LoRA adapter into a slot (0: 50ms; negative: free)")
	fs.DurationVar(&transfer.TransferPerToken, "kv-transfer-per-token", 0, "disaggregated serving: time to receive one prompt token's KV from a prefill server (0: 5.2µs, Qwen3-32B over 400 Gb/s RDMA; negative: none)")
	fs.DurationVar(&transfer.TransferLatency, "kv-transfer-latency", 0, "disaggregated serving: fixed time of one KV transfer (0: 1ms; negative: none)")
	fs.DurationVar(&transfer.TransferTimeout, "kv-transfer-timeout", 0, "disaggregated serving: how long a prefill keeps its KV for a decode server to pull (0: 60s)")
	fs.StringVar(&transfer.SideChannel, "kv-side-channel", "", "disaggregated serving: host:port of this server's listener that prefill answers advertise for decode servers to pull KV from (default: the address each prefill request came to)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	p, ok := engine.ProfileByName(*profile)
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	case !ok:
		return usageError{fmt.Errorf("unknown -profile %q (demo, qwen3-32b-h100)", *profile)}
	case tune.NumBlocks < 0 || tune.BlockSize < 0 || tune.MaxNumSeqs < 0 || tune.MaxNumBatchedTokens < 0 || tune.MaxModelLen < 0 ||
		tune.StepBase < 0 || tune.PrefillPerToken < 0 || tune.DecodePerSeq < 0:
		return usageError{errors.New("engine flags must not be negative")}
	case *replay != "" && *kvEndpoint == "":
		return usageError{errors.New("-replay needs -kv-events")}
	case !(*slowFactor > 0) || math.IsInf(*slowFactor, 1) || *slowAfter < 0:
		return usageError{errors.New("-slow-factor must be positive and -slow-after not negative")}
	case transfer.TransferTimeout < 0:
		return usageError{errors.New("-kv-transfer-timeout must not be negative")}
	case faults.HoldHeaders < 0 || faults.ResetAfterBytes < 0 || faults.SlowWrite < 0 || faults.Every < 0 ||
		(faults.Status != 0 && (faults.Status < 400 || faults.Status > 599)):
		return usageError{errors.New("fault flags: durations and counts must not be negative, -fault-status is 400..599")}
	}

	p = override(p, tune)
	for _, m := range strings.Split(*loraModules, ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(m), "="); name != "" {
			transfer.LoRA.Adapters = append(transfer.LoRA.Adapters, name)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *exitOnEOF {
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	line := "simserver listening on http://" + ln.Addr().String()
	opts := transfer
	opts.Engine = engine.Options{Profile: p}
	opts.Model = *servedModel
	if *kvEndpoint != "" {
		if *pod == "" {
			*pod = ln.Addr().String()
		}
		pub, err := kvpub.New(kvpub.Options{
			Endpoint: *kvEndpoint,
			Topic:    kvpub.Topic(*pod, cmp.Or(*servedModel, p.Model)), ReplayEndpoint: *replay,
		})
		if err != nil {
			return err
		}
		defer pub.Close()
		runCtx, cancelRun := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { _ = pub.Run(runCtx); close(ran) }()
		defer func() { cancelRun(); <-ran }()
		opts.OnKVEvents = simfleet.PublishKVEvents(pub, func(err error) { fmt.Fprintln(os.Stderr, "simserver:", err) })
		line += " kv-events=" + pub.Endpoint()
		if *replay != "" {
			line += " replay=" + pub.ReplayEndpoint()
		}
	}
	s, err := simfleet.New(opts)
	if errors.Is(err, simfleet.ErrInvalidOptions) {
		return usageError{err} // e.g. a -kv-side-channel that is not host:port
	}
	if err != nil {
		return err
	}
	defer s.Close()
	if *slowFactor != 1 {
		slow := time.AfterFunc(*slowAfter, func() { _ = setSlowdown(s, *slowFactor) }) // validated above
		defer slow.Stop()
	}
	s.Start()
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/slow", func(w http.ResponseWriter, r *http.Request) { handleSlow(s, w, r) })
	mux.Handle("/", faults.Wrap(s))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintln(out, line)

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	stop() // a second signal ends the process at once
	// Requests in flight finish on the running engine; then (deferred) the engine stops, and
	// the publisher after it.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		_ = hs.Close()
	}
	return nil
}

// handleSlow serves /debug/slow: GET answers the slowdown factor, POST ?factor=F sets it.
func handleSlow(s *simfleet.Server, w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		f, err := strconv.ParseFloat(r.URL.Query().Get("factor"), 64)
		if err == nil {
			err = setSlowdown(s, f)
		}
		if err != nil {
			http.Error(w, "factor: want a positive number, e.g. /debug/slow?factor=3", http.StatusBadRequest)
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"factor\":%g}\n", s.Slowdown())
}

// setSlowdown sets the server's slowdown factor and notes it on stderr.
func setSlowdown(s *simfleet.Server, f float64) error {
	if err := s.SetSlowdown(f); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "simserver: every engine step now takes %g× its modelled duration\n", f)
	return nil
}

// override returns p with every non-zero parameter of t in place of its own.
func override(p, t engine.Profile) engine.Profile {
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&p.NumBlocks, t.NumBlocks)
	set(&p.BlockSize, t.BlockSize)
	set(&p.MaxNumSeqs, t.MaxNumSeqs)
	set(&p.MaxNumBatchedTokens, t.MaxNumBatchedTokens)
	set(&p.MaxModelLen, t.MaxModelLen)
	setD(&p.StepBase, t.StepBase)
	setD(&p.PrefillPerToken, t.PrefillPerToken)
	setD(&p.DecodePerSeq, t.DecodePerSeq)
	return p
}
