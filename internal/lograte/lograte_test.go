package lograte

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

var errParent = errors.New("prefixcache: unknown parent block")

func TestOneLinePerKindPerInterval(t *testing.T) {
	var buf syncBuf
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 50*time.Millisecond)
	for i := range 100 {
		l.Warn("kv events", "a", fmt.Errorf("%w: engine hash %#x", errParent, i))
	}
	l.Warn("kv events", "b", fmt.Errorf("%w: engine hash 1", errParent))
	l.Warn("kv events", "a", errors.New("zmq: connection reset"))
	time.Sleep(150 * time.Millisecond)
	lines := buf.lines()
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (first of each of three kinds, one summary):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	summary := lines[3]
	for _, want := range []string{"kv events (repeated)", "source=a", "count=99", "engine hash 0x63"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
	// Quiet for an interval: the kind starts over and is logged at once.
	time.Sleep(60 * time.Millisecond)
	l.Warn("kv events", "a", fmt.Errorf("%w: engine hash 7", errParent))
	if got := len(buf.lines()); got != 5 {
		t.Errorf("after a quiet interval: %d lines, want 5", got)
	}
}

func TestKindsBounded(t *testing.T) {
	var buf syncBuf
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for i := range 3 * maxKinds {
		l.Warn("kv events", fmt.Sprint("backend-", i), errParent)
	}
	l.mu.Lock()
	n := len(l.kinds)
	l.mu.Unlock()
	if n > maxKinds+1 {
		t.Errorf("%d kinds remembered, want at most %d", n, maxKinds+1)
	}
	if got := len(buf.lines()); got != maxKinds+1 {
		t.Errorf("%d lines, want %d", got, maxKinds+1)
	}
}
