//go:build unix

package simproc

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// command is the import path Build compiles.
const command = "github.com/usher-llm/usher/internal/glue/simfleet/cmd/simserver"

// Bounds on every wait.
const (
	buildTimeout  = 5 * time.Minute  // go build, with a cold cache
	startTimeout  = 30 * time.Second // from exec to the listening line
	rebindTimeout = 5 * time.Second  // Restart retries a bind this long
	rebindPause   = 50 * time.Millisecond
	killTimeout   = 10 * time.Second // from SIGKILL to the process reaped
	stopTimeout   = 5 * time.Second  // from SIGSTOP to every thread stopped
	waitDelay     = time.Second      // os/exec: how long Wait waits for the pipes after exit
)

var build = sync.OnceValues(func() (string, error) {
	// The go command that runs the tests sets GOROOT for them: build with the same toolchain,
	// else with the go command on PATH.
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); os.Getenv("GOROOT") == "" || err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			return "", fmt.Errorf("simproc: no go command in $GOROOT/bin or on PATH: %w", err)
		}
	}
	sweep()
	dir, err := os.MkdirTemp("", fmt.Sprintf("usher-simserver-%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("simproc: %w", err)
	}
	bin := filepath.Join(dir, "simserver")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, gobin, "build", "-o", bin, command).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("simproc: go build %s: %w\n%s", command, err, out)
	}
	return bin, nil
})

// sweep removes the build directories of test processes that have exited: a test helper
// cannot hook the end of the process, so each directory outlives its own process and is
// removed by a later one.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "usher-simserver-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.Split(filepath.Base(d), "-")[2])
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

// Build compiles the simserver command once per test process (later calls return the same
// path) into a temporary directory and returns the binary's path. It runs the go command of
// runtime.GOROOT(), or the one on PATH, in the current directory, which must be inside a
// module that can build github.com/usher-llm/usher (go test runs tests in their package's
// directory). A failed build fails tb, and every later call.
func Build(tb testing.TB) string {
	tb.Helper()
	bin, err := build()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Options configures a server process. Zero values take the command's defaults.
type Options struct {
	// Listen is the HTTP address (-listen); empty means 127.0.0.1:0, a free loopback port.
	Listen string
	// Profile is the engine profile name (-profile): demo (the default) or qwen3-32b-h100.
	Profile string
	// KVEvents is the ZMQ endpoint of the KV-event PUB socket (-kv-events), e.g.
	// tcp://127.0.0.1:0; empty means no KV events. Replay is the replay ROUTER endpoint
	// (-replay), which needs KVEvents.
	KVEvents, Replay string
	// Pod is the pod name in the KV-event topic (-pod); empty means the bound listen address.
	Pod string
	// Args are extra command-line arguments, after the ones above.
	Args []string
}

// Proc is a simserver process started by Start, or the latest one Restart started in its
// place. Its exported fields are immutable. PID, Alive, Kill, Stop and Cont are safe for
// concurrent use, also with Restart; Restart is not safe for concurrent use with itself.
type Proc struct {
	// URL is the server's base URL as bound, e.g. http://127.0.0.1:40123; the OpenAI API is
	// under /v1. Restart keeps it.
	URL string
	// KVEvents and Replay are the bound KV-event PUB and replay endpoints, e.g.
	// tcp://127.0.0.1:40124, or "" when not configured. Restart keeps them.
	KVEvents, Replay string

	bin    string
	args   []string // what Restart runs: the bound addresses instead of port 0
	stderr *tail    // of every process, logged when the test fails

	mu  sync.Mutex
	cur *process
}

// process is one run of the binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// Start starts a server process and waits, up to 30 s, until it listens; the test's cleanup
// kills it (and logs its stderr if the test failed). It fails tb if the process does not
// start or exits first.
func Start(tb testing.TB, o Options) *Proc {
	tb.Helper()
	p := &Proc{bin: Build(tb), stderr: &tail{}}
	pr, line, err := launch(p.bin, flags(cmp.Or(o.Listen, "127.0.0.1:0"), o), p.stderr)
	if err == nil {
		p.URL, p.KVEvents, p.Replay, err = parse(line)
		if err != nil {
			pr.kill()
		}
	}
	if err != nil {
		tb.Fatalf("simproc: start: %v\n%s", err, p.stderr)
	}
	o.KVEvents, o.Replay = p.KVEvents, p.Replay
	p.args = flags(strings.TrimPrefix(p.URL, "http://"), o)
	p.cur = pr
	tb.Cleanup(func() {
		p.Kill()
		if s := p.stderr.String(); tb.Failed() && s != "" {
			tb.Logf("simserver %s stderr:\n%s", p.URL, s)
		}
	})
	return p
}

func flags(listen string, o Options) []string {
	args := []string{"-listen", listen, "-exit-on-eof"}
	for _, f := range [][2]string{{"-profile", o.Profile}, {"-kv-events", o.KVEvents}, {"-replay", o.Replay}, {"-pod", o.Pod}} {
		if f[1] != "" {
			args = append(args, f[0], f[1])
		}
	}
	return append(args, o.Args...)
}

// errExited reports a process that exited before it printed its listening line.
var errExited = errors.New("exited before listening")

// launch starts bin and waits for the first line on its stdout.
func launch(bin string, args []string, stderr *tail) (*process, string, error) {
	cmd := exec.Command(bin, args...)
	first := &firstLine{c: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr, cmd.WaitDelay = first, stderr, waitDelay
	// The write end stays open in this process until Wait: if this process dies, the server
	// reads end of file and shuts down (-exit-on-eof).
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	pr := &process{cmd: cmd, done: make(chan struct{})}
	// The only goroutine per process (with os/exec's copiers): it ends when the process does.
	go func() { _ = cmd.Wait(); close(pr.done) }()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line := <-first.c:
		return pr, line, nil
	case <-pr.done:
		// Wait has returned, so the stdout copier has written whatever there was.
		select {
		case line := <-first.c:
			return pr, line, nil
		default:
			return nil, "", fmt.Errorf("%s %s: %w (%v)", bin, strings.Join(args, " "), errExited, cmd.ProcessState)
		}
	case <-timer.C:
		pr.kill()
		return nil, "", fmt.Errorf("%s %s: no listening line after %v", bin, strings.Join(args, " "), startTimeout)
	}
}

// parse reads "simserver listening on URL [kv-events=EP] [replay=EP]".
func parse(line string) (url, kv, replay string, err error) {
	f := strings.Fields(line)
	if len(f) < 4 || f[0] != "simserver" || f[1] != "listening" || f[2] != "on" {
		return "", "", "", fmt.Errorf("unexpected first line %q", line)
	}
	for _, kvp := range f[4:] {
		switch k, v, _ := strings.Cut(kvp, "="); k {
		case "kv-events":
			kv = v
		case "replay":
			replay = v
		default:
			return "", "", "", fmt.Errorf("unexpected first line %q", line)
		}
	}
	return f[3], kv, replay, nil
}

func (p *Proc) current() *process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// PID returns the process id of the current process (a new one after Restart).
func (p *Proc) PID() int { return p.current().cmd.Process.Pid }

// Alive reports whether the current process has not exited yet (a stopped process is alive;
// a killed one is not, once Kill has returned).
func (p *Proc) Alive() bool {
	select {
	case <-p.current().done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the current process and waits, up to 10 s, until it has exited and
// its sockets are closed. Killing a dead process does nothing.
func (p *Proc) Kill() { p.current().kill() }

func (pr *process) kill() {
	_ = pr.cmd.Process.Kill()
	timer := time.NewTimer(killTimeout)
	defer timer.Stop()
	select {
	case <-pr.done:
	case <-timer.C:
	}
}

// Stop sends SIGSTOP and waits, up to 5 s, until every thread of the process has stopped:
// the process keeps its sockets, and the kernel keeps accepting connections into the listen
// backlog, but nothing answers until Cont. (The signal stops the threads one by one, each
// when it next runs, so a loaded machine can serve a request after kill(2) has returned. The
// wait reads /proc/PID/task; where there is none it sleeps 100 ms instead.)
func (p *Proc) Stop() {
	pr := p.current()
	if pr.cmd.Process.Signal(syscall.SIGSTOP) == nil {
		waitStopped(pr.cmd.Process.Pid)
	}
}

// waitStopped polls until every thread of pid is in a stop state, or pid is gone.
func waitStopped(pid int) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	if _, err := os.Stat(dir); err != nil {
		time.Sleep(100 * time.Millisecond)
		return
	}
	for deadline := time.Now().Add(stopTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return // exited
		}
		all := len(tasks) > 0
		for _, task := range tasks {
			// "tid (comm) S ...": the state follows the last parenthesis.
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			i := bytes.LastIndexByte(b, ')')
			if err == nil && (i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't')) {
				all = false
				break
			}
		}
		if all {
			return
		}
	}
}

// Cont sends SIGCONT, resuming a stopped process.
func (p *Proc) Cont() { _ = p.current().cmd.Process.Signal(syscall.SIGCONT) }

// Restart kills the current process if it is still alive and starts a new one on the same
// host and port, with the same KV-event endpoints and the same flags: a restarted vLLM
// server, with an empty cache and KV-event sequence numbers starting again at 0. A bind that
// fails (the port may still be held briefly) is retried for up to 5 s. It fails tb if no
// process listens by then.
func (p *Proc) Restart(tb testing.TB) {
	tb.Helper()
	p.Kill()
	deadline := time.Now().Add(rebindTimeout)
	for attempt := 1; ; attempt++ {
		pr, line, err := launch(p.bin, p.args, p.stderr)
		if err == nil {
			var url, kv, replay string
			if url, kv, replay, err = parse(line); err == nil && (url != p.URL || kv != p.KVEvents || replay != p.Replay) {
				err = fmt.Errorf("restarted on %s, want %s %s %s", line, p.URL, p.KVEvents, p.Replay)
			}
			if err != nil {
				pr.kill()
				tb.Fatalf("simproc: restart: %v\n%s", err, p.stderr)
			}
			p.mu.Lock()
			p.cur = pr
			p.mu.Unlock()
			return
		}
		if !errors.Is(err, errExited) || time.Now().After(deadline) {
			tb.Fatalf("simproc: restart (attempt %d): %v\n%s", attempt, err, p.stderr)
		}
		time.Sleep(rebindPause)
	}
}

// firstLine is the stdout of a process: it sends the first line on c and discards the rest.
// Only os/exec's copying goroutine writes to it.
type firstLine struct {
	c    chan string // buffered: one line
	buf  []byte
	sent bool
}

func (w *firstLine) Write(b []byte) (int, error) {
	if !w.sent {
		w.buf = append(w.buf, b...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.c <- string(w.buf[:i])
			w.sent, w.buf = true, nil
		}
	}
	return len(b), nil
}

// tail keeps the last tailBytes written to it; it is safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 64 << 10

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
