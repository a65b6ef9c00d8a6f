// Package redistest gives tests real Redis servers: Debian's redis-server (or a
// protocol-compatible valkey-server) as a child process on a loopback port, with no
// persistence, stopped when the test ends (Start), or the server CI started for the whole run,
// named by USHER_REDIS_ADDR (Shared). Without a binary (and without USHER_REDIS_ADDR) the
// test is skipped, unless USHER_REQUIRE_REDIS is set (CI sets it), in which case it fails.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// QuietLog silences go-redis's own log, process-wide: it writes a line for every dial its
// pool fails, many a second in a test that stops Redis.
func QuietLog() { redis.SetLogger(quietLog{}) }

type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

// Server is one redis-server process.
type Server struct {
	// Addr is its host:port on the loopback interface.
	Addr string
	bin  string
	port int
	cmd  *exec.Cmd
	t    testing.TB
}

// Binary returns the path of redis-server (or valkey-server), or "" when neither is installed.
// USHER_REDIS_SERVER overrides the search.
func Binary() string {
	if p := os.Getenv("USHER_REDIS_SERVER"); p != "" {
		return p
	}
	for _, name := range []string{"redis-server", "valkey-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Shared returns the address of a Redis server the test may use but not stop: the one
// USHER_REDIS_ADDR names when set (.ci/run starts one), else a server of its own as Start.
// Tests sharing a server keep apart by their own key names (a cluster per test).
func Shared(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("USHER_REDIS_ADDR"); addr != "" {
		if err := ping(addr); err != nil {
			t.Fatalf("USHER_REDIS_ADDR=%s: %v", addr, err)
		}
		return addr
	}
	return Start(t).Addr
}

// Start starts a server on a free loopback port and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("USHER_REQUIRE_REDIS") != "" {
			t.Fatal("redis-server not found and USHER_REQUIRE_REDIS is set (apt-get install redis-server)")
		}
		t.Skip("redis-server not installed (apt-get install redis-server); USHER_REQUIRE_REDIS makes this a failure")
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin, port: port, t: t}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the binary on s.port and waits until it answers PING.
func (s *Server) start() error {
	dir := s.t.TempDir()
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return errors.New("redistest: redis-server did not answer PING within 10 s")
}

// ping sends PING over RESP and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redistest: PING answered %q", line)
	}
	return nil
}

// Kill stops the server with SIGKILL (as a crash would) and waits for it. Idempotent.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty (nothing was persisted).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}
