package extproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestParseEndpoints(t *testing.T) {
	got, err := ParseEndpoints([]byte("# pool\n10.0.0.1:8000\n\n  10.0.0.2:8000 kv-events=tcp://10.0.0.2:5557,replay=tcp://10.0.0.2:5558\n[fd00::1]:8000 metrics=http://[fd00::1]:9090/metrics\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{
		{Address: "10.0.0.1:8000"},
		{Address: "10.0.0.2:8000", KVEvents: "tcp://10.0.0.2:5557", Replay: "tcp://10.0.0.2:5558"},
		{Address: "[fd00::1]:8000", Metrics: "http://[fd00::1]:9090/metrics"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"10.0.0.1", "10.0.0.1:80 color=red", "10.0.0.1:80 metrics", "a:1\na:1", "10.0.0.1:80 metrics=ftp://x", "10.0.0.1:80 replay=tcp://x:1"} {
		if _, err := ParseEndpoints([]byte(bad)); !errors.Is(err, ErrInvalidEndpoint) {
			t.Errorf("ParseEndpoints(%q) = %v, want ErrInvalidEndpoint", bad, err)
		}
	}
}

func TestFileSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints")
	if err := os.WriteFile(path, []byte("10.0.0.1:8000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	updates := make(chan []Endpoint, 8)
	errs := make(chan error, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	src := FileSource{Path: path, Interval: 5 * time.Millisecond, OnError: func(err error) { errs <- err }}
	go func() { done <- src.Run(ctx, func(eps []Endpoint) { updates <- eps }) }()
	next := func() []Endpoint {
		select {
		case eps := <-updates:
			return eps
		case <-time.After(5 * time.Second):
			t.Fatal("no update")
			return nil
		}
	}
	if got := next(); len(got) != 1 || got[0].Address != "10.0.0.1:8000" {
		t.Fatalf("first set %+v", got)
	}
	// Replace the file whole, as a deployment does (a ConfigMap's symlink swap): written in
	// place, the poller may read it empty between the truncation and the write.
	replace := func(content string) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace("not an endpoint\n")
	select {
	case <-errs:
	case <-time.After(5 * time.Second):
		t.Fatal("a bad file was not reported")
	}
	replace("10.0.0.1:8000\n10.0.0.2:8000\n")
	if got := next(); len(got) != 2 {
		t.Fatalf("after the change: %+v, want 2 endpoints (the bad file kept nothing)", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

func TestRunFollowsSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints")
	if err := os.WriteFile(path, []byte("10.0.0.9:8000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Source: FileSource{Path: path, Interval: 5 * time.Millisecond}, ScrapeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.eps.Load().list) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not apply the file's endpoints")
		}
		time.Sleep(time.Millisecond)
	}
	if got := s.Router().Backends(nil); len(got) != 1 || got[0].Name != "10.0.0.9:8000" {
		t.Errorf("router backends %+v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
