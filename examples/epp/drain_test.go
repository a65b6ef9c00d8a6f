package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/usher-llm/usher/proxy/extproc"
)

// eppProcessEnv makes the test binary run main instead of the tests: the drain tests start
// the picker as a process of its own and send it SIGTERM.
const eppProcessEnv = "USHER_EPP_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(eppProcessEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// eppProcess is a picker running as a process.
type eppProcess struct {
	cmd          *exec.Cmd
	addr, health string
	lines        chan string   // its stdout after the startup line
	exited       chan struct{} // closed when it has exited, with err
	err          error
	exitedAt     time.Time
}

var startLine = regexp.MustCompile(`ext_proc on (\S+) \([^)]*\), health on (\S+) `)

// startEPP starts the picker with args (plus loopback listeners) and waits for its startup line.
func startEPPProcess(t testing.TB, args ...string) *eppProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0", "-secure-serving=false"}, args...)...)
	cmd.Env = append(os.Environ(), eppProcessEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &eppProcess{cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	})
	sc := bufio.NewScanner(stdout)
	first := make(chan string, 1)
	go func() {
		started := false
		for sc.Scan() {
			if !started {
				started = true
				first <- sc.Text()
				continue
			}
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		p.exitedAt = time.Now()
		close(p.exited)
	}()
	select {
	case line := <-first:
		m := startLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("startup line %q", line)
		}
		p.addr, p.health = m[1], m[2]
	case <-time.After(30 * time.Second):
		t.Fatal("the picker did not start")
	}
	return p
}

// line waits for a line of the picker's output containing want and returns it.
func (p *eppProcess) line(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("the picker's output ended before %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the picker", want)
		}
	}
}

// wait waits for the picker to exit and returns its error (nil: exit status 0).
func (p *eppProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(30 * time.Second):
		t.Fatal("the picker did not exit")
		return nil
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// openPicked opens an ext_proc stream and runs its request through the pick: the stream is
// then in its response phase, as while the engine generates.
func openPicked(ctx context.Context, conn *grpc.ClientConn) (extprocv3.ExternalProcessor_ProcessClient, string, error) {
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return nil, "", err
	}
	h := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
	}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h}}}); err != nil {
		return nil, "", err
	}
	if _, err := st.Recv(); err != nil {
		return nil, "", err
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), EndOfStream: true}}}); err != nil {
		return nil, "", err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, "", err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return nil, "", fmt.Errorf("refused: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	for _, hv := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == extproc.DestinationHeader {
			return st, string(hv.GetHeader().GetRawValue()), nil
		}
	}
	return nil, "", fmt.Errorf("no destination in %v", r)
}

// respond runs the response of a picked stream through it: headers, then chunks, each
// answered; the last ends the stream.
func respond(st extprocv3.ExternalProcessor_ProcessClient, chunks ...string) error {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("text/event-stream")}}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	for i, c := range chunks {
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(c), EndOfStream: i == len(chunks)-1}}}); err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the last chunk: %v, want the end of the stream", err)
	}
	return nil
}

// On SIGTERM the picker (a process of its own) turns not ready, refuses new streams, and
// lets the stream in flight finish: it exits as soon as that stream ends, well within the
// grace, with status 0. The health port answers throughout.
func TestDrainOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	p := startEPPProcess(t, "-endpoints", "127.0.0.1:1", "-no-scrape", "-no-health-checks", "-shutdown-grace", "60s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, hconn := dial(t, p.addr), dial(t, p.health)
	st, dest, err := openPicked(ctx, conn)
	if err != nil || dest != "127.0.0.1:1" {
		t.Fatalf("before SIGTERM: %q, %v", dest, err)
	}
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l := p.line(t, "shutting down"); !strings.Contains(l, "draining 1 streams") {
		t.Errorf("shutdown line %q, want 1 stream to drain", l)
	}
	health := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := healthpb.NewHealthClient(hconn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health port while draining: %v", err)
		}
		return r.GetStatus()
	}
	if got := health(extproc.HealthInferenceExtension); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("%s while draining: %v, want NOT_SERVING", extproc.HealthInferenceExtension, got)
	}
	if got := health(extproc.HealthLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness while draining: %v, want SERVING", got)
	}
	// New streams, on a new connection, get no destination: refused by the closed listener
	// (or, in the instant before the graceful stop, answered 503 shutting_down).
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	if _, dest, err := openPicked(nctx, dial(t, p.addr)); err == nil {
		t.Errorf("a new stream while draining was picked %q", dest)
	}
	ncancel()
	// The stream in flight is still served: its response runs through, and it ends.
	time.Sleep(200 * time.Millisecond) // a generation that goes on after the signal
	if err := respond(st, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", "data: [DONE]\n\n"); err != nil {
		t.Fatalf("the stream in flight while draining: %v", err)
	}
	p.line(t, "drained in")
	if err := p.wait(t); err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
	if d := time.Since(sent); d > 30*time.Second {
		t.Errorf("exited %v after SIGTERM: the drain waited beyond its last stream", d)
	}
}

// A stream longer than the grace is cut when the grace ends, and the picker exits.
func TestDrainGraceCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	p := startEPPProcess(t, "-endpoints", "127.0.0.1:1", "-no-scrape", "-no-health-checks", "-shutdown-grace", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, _, err := openPicked(ctx, dial(t, p.addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l := p.line(t, "grace of 1s over"); !strings.Contains(l, "cutting 1 streams") {
		t.Errorf("grace line %q, want 1 stream cut", l)
	}
	if _, err := st.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("the stream past the grace: %v, want it cut", err)
	}
	if err := p.wait(t); err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
}

// TestDrainFigure measures the longest stream that survives a rollout, with the default
// -shutdown-grace: streams open at SIGTERM whose responses last 60s, 120s, 128s and 135s
// after it. Those inside the grace finish; the one past it is cut. It takes over two
// minutes, so it runs only with USHER_DRAIN_FIGURE=1.
func TestDrainFigure(t *testing.T) {
	if os.Getenv("USHER_DRAIN_FIGURE") != "1" {
		t.Skip("set USHER_DRAIN_FIGURE=1 (runs for over two minutes)")
	}
	p := startEPPProcess(t, "-endpoints", "127.0.0.1:1", "-no-scrape", "-no-health-checks")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := dial(t, p.addr)
	lengths := []time.Duration{60 * time.Second, 120 * time.Second, 128 * time.Second, 135 * time.Second}
	streams := make([]extprocv3.ExternalProcessor_ProcessClient, len(lengths))
	for i := range lengths {
		st, _, err := openPicked(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(lengths))
	for i, d := range lengths {
		go func() {
			time.Sleep(time.Until(sent.Add(d)))
			results <- result{i, respond(streams[i], "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", "data: [DONE]\n\n")}
		}()
	}
	survived := make([]bool, len(lengths))
	for range lengths {
		r := <-results
		survived[r.i] = r.err == nil
	}
	for i, d := range lengths {
		t.Logf("stream lasting %v after SIGTERM: survived %v", d, survived[i])
		if want := d < defaultShutdownGrace; survived[i] != want {
			t.Errorf("stream lasting %v after SIGTERM (grace %v): survived %v, want %v", d, defaultShutdownGrace, survived[i], want)
		}
	}
	if err := p.wait(t); err != nil {
		t.Errorf("exit: %v", err)
	}
	t.Logf("the picker exited %v after SIGTERM", p.exitedAt.Sub(sent).Round(time.Millisecond))
}
