package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBareProxyStreams checks that the floor relays an SSE stream event by event: the client
// reads the first event while the backend still holds the second back, so every write is
// flushed as the gateway's relay flushes it.
func TestBareProxyStreams(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"n\":1}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer backend.Close()
	u, err := url.Parse(backend.URL)
	require.NoError(t, err)
	front := httptest.NewServer(newBareProxy(u))
	defer front.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "the first event did not arrive before the backend sent the second")
	require.Equal(t, "data: {\"n\":1}\n", line)
	close(release)
	rest := new(bytes.Buffer)
	_, err = rest.ReadFrom(br)
	require.NoError(t, err)
	require.Contains(t, rest.String(), "data: [DONE]")
}

func TestBareProxyFlag(t *testing.T) {
	for _, bad := range []string{"not a url", "ftp://x", "http://"} {
		err := runBareProxy(context.Background(), bad, &bytes.Buffer{})
		require.ErrorContains(t, err, "-bare-proxy", "URL %q", bad)
	}
	// A good URL serves until the context ends, after announcing its address.
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runBareProxy(ctx, "http://127.0.0.1:1", &out) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, out.String(), "listening on http://127.0.0.1:")
}

func TestOverheadTextFloor(t *testing.T) {
	o := Overhead{Direct: Report{Target: "direct"}, Gateway: Report{Target: "gateway"}, GatewayRequests: 10, GatewayCPUPerRequest: 3.5,
		Floor: &Report{Target: "floor"}, FloorRequests: 9, FloorCPUPerRequest: 3.25, GatewayCPUAboveFloor: 0.25, Rounds: []OverheadRound{{First: "floor"}}}
	var b bytes.Buffer
	o.WriteText(&b)
	for _, s := range []string{"round 0 (floor started first)", "3.250 ms CPU per request over 9 successful requests",
		"gateway above the floor  +0.250 ms", "bare reverse proxy 3.250 ms CPU/request (gateway +0.250 ms above it)"} {
		require.Contains(t, b.String(), s)
	}
}
