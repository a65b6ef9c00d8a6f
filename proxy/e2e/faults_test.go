//go:build unix

package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/healthcheck"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
)

// attempts records every attempt the Handler sends, by backend host, with its time.
type attempts struct {
	base http.RoundTripper
	mu   sync.Mutex
	log  []attempt
}

type attempt struct {
	host    string
	at, end time.Time // sent; headers or error (zero while waiting)
}

func (a *attempts) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/completions") || r.Header.Get("User-Agent") == healthcheck.UserAgent {
		return a.base.RoundTrip(r)
	}
	a.mu.Lock()
	a.log = append(a.log, attempt{host: r.URL.Host, at: time.Now()})
	i := len(a.log) - 1
	a.mu.Unlock()
	resp, err := a.base.RoundTrip(r)
	a.mu.Lock()
	a.log[i].end = time.Now()
	a.mu.Unlock()
	return resp, err
}

// silentPicks counts the attempts sent to host while it had an attempt in flight that had
// waited longer than limit for its headers (nothing ever comes from a stuck host), and
// returns the attempts to host in all.
func (a *attempts) silentPicks(host string, limit time.Duration) (silent, toHost int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.log {
		if x.host != host {
			continue
		}
		toHost++
		for _, y := range a.log {
			waiting := y.host == host && y.at.Before(x.at) && (y.end.IsZero() || y.end.After(x.at))
			if waiting && x.at.Sub(y.at) > limit+100*time.Millisecond {
				silent++
				break
			}
		}
	}
	return silent, toHost
}

// afterStall looks at the attempts to host after the first that waited longer than limit for
// headers had ended: those still sent there (probes of an ejected backend, or picks) and how
// many were sent while another to host was in flight (a probe is alone).
func (a *attempts) afterStall(host string, limit time.Duration) (after, overlapping int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first time.Time
	for _, x := range a.log {
		if x.host == host && !x.end.IsZero() && x.end.Sub(x.at) >= limit && (first.IsZero() || x.end.Before(first)) {
			first = x.end
		}
	}
	if first.IsZero() {
		return 0, 0
	}
	for _, x := range a.log {
		if x.host != host || x.at.Before(first) {
			continue
		}
		after++
		for _, y := range a.log {
			if y.host == host && y.at.Before(x.at) && !y.at.Before(first) && (y.end.IsZero() || y.end.After(x.at)) {
				overlapping++
				break
			}
		}
	}
	return after, overlapping
}

// since returns the attempts made at or after t: to host, and in all.
func (a *attempts) since(t time.Time, host string) (toHost, all int, first time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.log {
		if x.at.Before(t) {
			continue
		}
		all++
		if x.host == host {
			if toHost == 0 {
				first = x.at
			}
			toHost++
		}
	}
	return toHost, all, first
}

// last returns how long after from the last attempt to host before to was made.
func (a *attempts) last(from, to time.Time, host string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var d time.Duration
	for _, x := range a.log {
		if x.host == host && x.at.After(from) && x.at.Before(to) {
			d = x.at.Sub(from)
		}
	}
	return d
}

// faultScale stretches the phases of the fault tests by USHER_FAULT_SCALE (default 1), for
// longer runs than CI's: USHER_FAULT_SCALE=10 go test -run 'Killed|Hung' -v ./proxy
func faultScale(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("USHER_FAULT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(f * float64(d))
	}
	return d
}

func hostOf(u string) string {
	p, _ := url.Parse(u)
	return p.Host
}

// result is one request of a load run, as its client saw it.
type result struct {
	start, end time.Time
	err        error
	headers    time.Duration // time to the answer's headers (a whole answer: to its end)
	maxGap     time.Duration // longest silence between two reads of the answer
}

// wait is the longest the client waited: for the answer's headers or between two reads.
func (r result) wait() time.Duration { return max(r.headers, r.maxGap) }

// load sends streamed chat requests from workers goroutines until stop is closed.
func load(base string, workers, maxTokens int, stop <-chan struct{}) <-chan result {
	out := make(chan result, 1<<16)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 60 * time.Second} // beyond the Handler's 30 s header timeout
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				out <- oneStream(client, base, fmt.Sprintf("w%d-%d", w, i), maxTokens)
			}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

func oneStream(client *http.Client, base, session string, maxTokens int) result {
	r := result{start: time.Now()}
	body := fmt.Sprintf(`{"model":"usher/demo","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"tell me about %s"}]}`, maxTokens, session)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Session-Id", session)
	resp, err := client.Do(req)
	r.headers = time.Since(r.start)
	if err != nil {
		r.err, r.end = err, time.Now()
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		r.err, r.end = fmt.Errorf("status %d: %s", resp.StatusCode, data), time.Now()
		return r
	}
	br := bufio.NewReader(resp.Body)
	last, done := time.Now(), false
	for {
		line, err := br.ReadString('\n')
		now := time.Now()
		r.maxGap = max(r.maxGap, now.Sub(last))
		last = now
		if strings.Contains(line, `"error"`) {
			r.err = fmt.Errorf("error event: %s", strings.TrimSpace(line))
		}
		if strings.HasPrefix(line, "data: [DONE]") {
			done = true
		}
		if err != nil {
			if !done && r.err == nil {
				r.err = fmt.Errorf("stream ended without [DONE]: %v", err)
			}
			break
		}
	}
	r.end = time.Now()
	return r
}

// faultHandler serves a Handler over the processes with short timeouts and a fast scrape.
func faultHandler(t *testing.T, procs []*simproc.Proc, rec *attempts, tune func(*proxy.Options)) (*proxy.Handler, string) {
	var backends []proxy.Backend
	for _, p := range procs {
		backends = append(backends, proxy.Backend{URL: p.URL})
	}
	opts := testOptions(backends)
	opts.ScrapeInterval = 50 * time.Millisecond
	opts.Timeouts = proxy.Timeouts{ResponseHeader: time.Second, StreamIdle: time.Second, Dial: time.Second}
	rec.base = proxyseam.DefaultTransport()
	opts.Transport = rec
	if tune != nil {
		tune(&opts)
	}
	return startHandler(t, opts)
}

// kill -9 of one of four server processes under load: no request sent after the kill fails,
// the dead server gets at most 1% of the attempts after its first failure, and it gets
// traffic again within 2 s of coming back.
func TestKilledBackend(t *testing.T) {
	var procs []*simproc.Proc
	for range 4 {
		procs = append(procs, simproc.Start(t, simproc.Options{}))
	}
	rec := &attempts{}
	h, base := faultHandler(t, procs, rec, nil)
	stop := make(chan struct{})
	results := load(base, 24, 16, stop)

	time.Sleep(faultScale(time.Second))
	dead := procs[0]
	killedAt := time.Now()
	dead.Kill()
	time.Sleep(faultScale(2 * time.Second))
	restartedAt := time.Now()
	dead.Restart(t)
	time.Sleep(faultScale(3 * time.Second))
	close(stop)

	var total, failedAfter, inFlightAtKill int
	for r := range results {
		total++
		if r.err == nil {
			continue
		}
		if r.start.After(killedAt) {
			failedAfter++
			t.Errorf("request started %v after the kill failed: %v", r.start.Sub(killedAt), r.err)
		} else {
			inFlightAtKill++
		}
	}
	rs := h.Router().Stats()
	host := hostOf(dead.URL)
	// The first failure is seen within moments of the kill; count from 100 ms after it.
	toDead, all, _ := rec.since(killedAt.Add(100*time.Millisecond), host)
	toDeadWhileDead := toDead
	if n, _, _ := rec.since(restartedAt, host); n > 0 {
		toDeadWhileDead -= n
	}
	_, allWhileDead, _ := rec.since(killedAt.Add(100*time.Millisecond), "")
	_, allAfter, _ := rec.since(restartedAt, "")
	allWhileDead -= allAfter
	n, _, first := rec.since(restartedAt, host)
	lastWhileDead := rec.last(killedAt, restartedAt, host)
	t.Logf("requests %d (ended with an error while streaming from the killed server: %d); attempts to the dead server while dead %d of %d, the last %v after the kill; back: first attempt %v after the restart, %d attempts; router %+v; retries %+v",
		total, inFlightAtKill, toDeadWhileDead, allWhileDead, lastWhileDead, first.Sub(restartedAt), n, rs, proxyseam.Retries(h))
	if allWhileDead == 0 || float64(toDeadWhileDead) > 0.01*float64(allWhileDead) {
		t.Errorf("dead server got %d of %d attempts while dead, want ≤ 1%%", toDeadWhileDead, allWhileDead)
	}
	if n == 0 || first.Sub(restartedAt) > 2*time.Second {
		t.Errorf("restarted server: %d attempts, first %v after the restart; want traffic within 2 s", n, first.Sub(restartedAt))
	}
	_ = all
	closedExactlyOnce(t, h)
}

// SIGSTOP of a server: no client waits longer than the idle timeout + 1 s, its in-flight
// slots are released, and after SIGCONT it serves again.
func TestHungBackend(t *testing.T) {
	var procs []*simproc.Proc
	for range 3 {
		procs = append(procs, simproc.Start(t, simproc.Options{}))
	}
	rec := &attempts{}
	h, base := faultHandler(t, procs, rec, nil)
	stop := make(chan struct{})
	results := load(base, 6, 64, stop)
	time.Sleep(faultScale(time.Second))
	hung := procs[0]
	hung.Stop()
	stoppedAt := time.Now()
	time.Sleep(faultScale(3 * time.Second))
	// Everything that was on the stopped server has been released while it is still stopped.
	eventually(t, "the stopped server's requests to be released", func() bool {
		in, _ := h.Router().InFlight(hung.URL)
		return in.Requests == 0
	})
	hung.Cont()
	contAt := time.Now()
	time.Sleep(faultScale(3 * time.Second))
	close(stop)
	idle := time.Second
	var total, failed int
	var worst time.Duration
	for r := range results {
		total++
		worst = max(worst, r.maxGap)
		if r.maxGap > idle+time.Second {
			t.Errorf("a client waited %v without a byte (request started %v after the stop), want ≤ %v", r.maxGap, r.start.Sub(stoppedAt), idle+time.Second)
		}
		if r.err != nil {
			failed++
			if r.start.After(stoppedAt.Add(100 * time.Millisecond)) {
				t.Errorf("request started %v after the stop failed: %v", r.start.Sub(stoppedAt), r.err)
			}
		}
	}
	n, _, first := rec.since(contAt, hostOf(hung.URL))
	t.Logf("requests %d, failed %d (on the server when it stopped), longest silence %v; after SIGCONT: %d attempts, first after %v; retries %+v",
		total, failed, worst, n, first.Sub(contAt), proxyseam.Retries(h))
	if n == 0 {
		t.Error("the server got no traffic after SIGCONT")
	}
	closedExactlyOnce(t, h)
}

// Slow clients: connections whose bodies never come are closed after the body timeout
// (408), idle keep-alive connections after the idle timeout, bodies beyond the budget of
// bytes being read get 503 with Retry-After at once, and a legitimate request under 600
// such connections still succeeds.
func TestSlowClients(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.Timeouts.Body = 500 * time.Millisecond
	opts.MaxBodyBytesReading = 64 << 20
	h, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Start(context.Background())
	srv := &http.Server{
		Addr:              "127.0.0.1:0",
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	srv.IdleTimeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	// 600 connections announce 1 MB bodies and never send them.
	type slow struct {
		conn   net.Conn
		status int
		closed time.Duration
	}
	slows := make([]slow, 600)
	start := time.Now()
	for i := range slows {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
		slows[i].conn = c
	}
	// A legitimate request meanwhile.
	resp, e := post(t, "http://"+addr+"/v1/chat/completions", `{"model":"usher/demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("legitimate request under 600 slow connections: %d %+v", resp.StatusCode, e)
	}
	var wg sync.WaitGroup
	var busy, timedOut atomic.Int64
	for i := range slows {
		wg.Go(func() {
			s := &slows[i]
			defer s.conn.Close()
			_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(s.conn)
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			s.status = r.StatusCode
			switch {
			case r.StatusCode == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "":
				busy.Add(1)
			case r.StatusCode == http.StatusRequestTimeout:
				timedOut.Add(1)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			if _, err := br.ReadByte(); err != nil { // the server closes the connection
				s.closed = time.Since(start)
			}
		})
	}
	wg.Wait()
	var latest time.Duration
	open := 0
	for _, s := range slows {
		if s.closed == 0 {
			open++
		}
		latest = max(latest, s.closed)
	}
	t.Logf("600 slow bodies: %d answered 503 at once (over the 64 MiB reading budget), %d answered 408; last closed after %v; %d left open",
		busy.Load(), timedOut.Load(), latest, open)
	if busy.Load()+timedOut.Load() != 600 || open != 0 {
		t.Errorf("want every slow connection answered 503 or 408 and closed: %d + %d answered, %d open", busy.Load(), timedOut.Load(), open)
	}
	if busy.Load() == 0 || timedOut.Load() == 0 {
		t.Errorf("want both the budget (503) and the body timeout (408) to act: %d, %d", busy.Load(), timedOut.Load())
	}

	// An idle keep-alive connection is closed by the server's idle timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("health: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	idleStart := time.Now()
	if _, err := br.ReadByte(); err == nil || time.Since(idleStart) > 2*time.Second {
		t.Errorf("idle keep-alive connection: %v after %v, want closed by the server within the idle timeout", err, time.Since(idleStart))
	}
	if st := h.Queue().Stats(); st.Dispatched != 1 {
		t.Errorf("dispatched %d, want 1 (only the legitimate request)", st.Dispatched)
	}
}

// With every backend failing, retries stay within the budget.
func TestRetryBudget(t *testing.T) {
	var calls atomic.Int64
	failing := func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, `{"error":{"message":"engine dead","type":"server_error"}}`)
	}
	var backends []proxy.Backend
	for range 3 {
		backends = append(backends, proxy.Backend{URL: fakeBackend(t, failing).URL})
	}
	opts := testOptions(backends)
	opts.Retry = proxy.Retry{Attempts: 3, BudgetRatio: 0.2, BudgetMin: 3, BudgetWindow: time.Minute}
	h, base := startHandler(t, opts)
	const requests = 200
	for range requests {
		resp, _ := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want the backend's 502 passed through", resp.StatusCode)
		}
	}
	st := proxyseam.Retries(h)
	t.Logf("retry stats %+v, backend calls %d", st, calls.Load())
	if limit := max(3, int(0.2*requests)); st.Retries > uint64(limit) {
		t.Errorf("%d retries for %d requests, want ≤ %d (20%%)", st.Retries, requests, limit)
	}
	if st.Retries == 0 || st.Denied == 0 {
		t.Errorf("retry stats %+v: want some retries and some denied by the budget", st)
	}
	if got := calls.Load(); got != requests+int64(st.Retries) {
		t.Errorf("backend calls %d, want requests + retries = %d", got, requests+int64(st.Retries))
	}
	closedExactlyOnce(t, h)
}

// A refused connection and a backend that sends no headers in time are retried on another
// backend; the client sees a success.
func TestRetryBeforeFirstByte(t *testing.T) {
	ok := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	hang := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leave
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	// A backend that is alive when the fleet is first scraped, then stops listening.
	gone := fakeBackend(t, nil)
	for _, tt := range []struct {
		name, bad string
		after     func()
	}{{"refused", gone.URL, gone.Close}, {"no headers", hang.URL, func() {}}} {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions([]proxy.Backend{{URL: tt.bad}, {URL: ok.URL}})
			opts.Timeouts.ResponseHeader, opts.Timeouts.PerOutputToken = 300*time.Millisecond, time.Millisecond
			opts.ScrapeInterval = time.Hour // the router keeps what the first scrape saw
			h, base := startHandler(t, opts)
			tt.after()
			for range 10 {
				start := time.Now()
				resp, e := post(t, base+"/v1/chat/completions", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d %+v, want 200 after a retry", resp.StatusCode, e)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("request took %v", d)
				}
			}
			rs := h.Router().Stats()
			t.Logf("router %+v retries %+v", rs, proxyseam.Retries(h))
			// The bad backend is charged once or twice, then avoided — or never, when the
			// health checks' first probe found it refusing connections and ejected it.
			id, _ := h.Router().Lookup(tt.bad)
			if ej := outlier.Of(h.Router()).BackendStats(id).Ejections; rs.Failed > 2 || (rs.Failed == 0 && ej == 0) {
				t.Errorf("router failures = %d, ejections of the bad backend %d: want it charged once or twice, or ejected by a probe", rs.Failed, ej)
			}
			closedExactlyOnce(t, h)
		})
	}
}

// A server whose metrics stay healthy but which holds every answer's headers (a stuck engine):
// once it has been silent on all its requests for the stall timeout it gets no new requests,
// and the streamed requests waiting there are retried elsewhere, so no client waits longer
// than the stall timeout and one retry. Without the stall signal (Stall < 0) the clients sent
// there wait out the response-header timeout, and the server keeps being picked until five
// timeouts eject it; the test logs both.
func TestStuckBackend(t *testing.T) {
	const headerTimeout, stall = 4 * time.Second, 2 * time.Second
	run := func(t *testing.T, stallTimeout time.Duration) (worst time.Duration, silent, toStuck, total, after, overlapping int) {
		procs := []*simproc.Proc{simproc.Start(t, simproc.Options{Args: []string{"-fault-hold-headers", "45s"}})}
		for range 3 {
			procs = append(procs, simproc.Start(t, simproc.Options{}))
		}
		rec := &attempts{}
		h, base := faultHandler(t, procs, rec, func(o *proxy.Options) {
			o.Timeouts = proxy.Timeouts{ResponseHeader: headerTimeout, StreamIdle: headerTimeout, Dial: time.Second, Stall: stallTimeout}
		})
		// The stuck server's metrics are healthy: it is picked like the others at first.
		stop := make(chan struct{})
		results := load(base, 24, 16, stop)
		time.Sleep(faultScale(6 * time.Second))
		close(stop)
		for r := range results {
			total++
			worst = max(worst, r.end.Sub(r.start))
			if r.err != nil {
				t.Errorf("request failed: %v", r.err)
			}
		}
		silent, toStuck = rec.silentPicks(hostOf(procs[0].URL), stall)
		after, overlapping = rec.afterStall(hostOf(procs[0].URL), stall)
		closedExactlyOnce(t, h)
		return worst, silent, toStuck, total, after, overlapping
	}
	var off struct {
		worst                  time.Duration
		silent, toStuck, total int
	}
	t.Run("without the stall signal", func(t *testing.T) {
		off.worst, off.silent, off.toStuck, off.total, _, _ = run(t, -1)
	})
	worst, silent, toStuck, total, after, overlapping := run(t, stall)
	t.Logf("stall signal off: %d requests, the longest took %v; %d attempts to the stuck server, %d sent while it had been silent > %v",
		off.total, off.worst.Round(time.Millisecond), off.toStuck, off.silent, stall)
	t.Logf("stall signal on (%v): %d requests, the longest took %v; %d attempts to the stuck server, %d sent while it had been silent > %v",
		stall, total, worst.Round(time.Millisecond), toStuck, silent, stall)
	t.Logf("after the first abandoned attempt: %d attempts to the stuck server, %d of them beside another", after, overlapping)
	if silent != 0 {
		t.Errorf("%d requests were sent to the stuck server after it had been silent for %v", silent, stall)
	}
	// Its first abandoned attempt ejects it: from then on it gets only probes, one at a time
	// (the first after a second's ejection, each failed probe doubling the next wait).
	if overlapping != 0 || after > 3 {
		t.Errorf("after its first stall the stuck server got %d attempts, %d beside another: want probes only, one at a time", after, overlapping)
	}
	// The limit, one retry on a healthy server (a 16-token answer), and scheduling slack.
	if limit := stall + 1500*time.Millisecond; worst > limit {
		t.Errorf("a client waited %v, want at most the stall timeout and one retry (%v)", worst, limit)
	}
}

// A server that resets every stream after 1,500 bytes fails every request it gets, after the
// client has bytes, so none can be retried: its first broken stream ejects it, as a refused
// connection does (one, by default), where a server error would take five.
func TestMidStreamBreaker(t *testing.T) {
	breaker := simproc.Start(t, simproc.Options{Args: []string{"-fault-reset-after", "1500"}})
	procs := []*simproc.Proc{breaker, simproc.Start(t, simproc.Options{}), simproc.Start(t, simproc.Options{})}
	out, err := outlier.New(outlier.Options{BaseEjection: time.Minute, MaxEjection: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := routing.New(routing.Options{Profile: outlier.With(profiles.Usher(profiles.UsherOptions{}), out, 1), Index: ix})
	if err != nil {
		t.Fatal(err)
	}
	rec := &attempts{}
	h, base := faultHandler(t, procs, rec, func(o *proxy.Options) { o.Index, o.Router = ix, r })
	stop := make(chan struct{})
	results := load(base, 2, 64, stop)
	time.Sleep(faultScale(3 * time.Second))
	close(stop)
	var total, broken int
	for res := range results {
		total++
		if res.err != nil {
			broken++
		}
	}
	id, ok := r.Lookup(breaker.URL)
	if !ok {
		t.Fatal("breaker unknown to the router")
	}
	health := out.BackendStats(id)
	until, ejected := health.Until, health.Ejected
	_, toBreaker := rec.silentPicks(hostOf(breaker.URL), time.Hour)
	t.Logf("%d requests, %d broken mid-stream; %d attempts to the breaker; ejected %v (until %v from now); outlier %+v",
		total, broken, toBreaker, ejected, time.Until(until).Round(time.Second), out.Stats())
	if !ejected {
		t.Fatal("the breaker was not ejected")
	}
	// The gateway exports it by backend.
	eventually(t, "the ejection in /metrics", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), fmt.Sprintf("usher_backend_ejections_total{backend=%q} 1", breaker.URL)) &&
			strings.Contains(string(body), fmt.Sprintf("usher_backend_ejected{backend=%q} 1", breaker.URL))
	})
	// Two clients: at most one more request was on the breaker when its first stream broke.
	if toBreaker > 2 || broken > 2 {
		t.Errorf("the breaker got %d requests (%d broke) before its ejection; want it ejected after its first broken stream (at most 2 with 2 clients)", toBreaker, broken)
	}
	closedExactlyOnce(t, h)
}

// A client that leaves is never its backend's failure: twelve clients give up on a server, some
// while it still holds the answer's headers, some mid-stream; the passive health that one
// refused connection would trip ejects nothing, and the server then answers as before.
func TestClientLeavingIsNotAFailure(t *testing.T) {
	proc := simproc.Start(t, simproc.Options{Args: []string{"-fault-hold-headers", "300ms", "-fault-every", "2"}})
	h, base := faultHandler(t, []*simproc.Proc{proc}, &attempts{}, nil)
	out := outlier.Of(h.Router())
	if out == nil {
		t.Fatal("the default router has no passive health")
	}
	body := `{"model":"usher/demo","stream":true,"max_tokens":2000,"ignore_eos":true,"messages":[{"role":"user","content":"go on"}]}`
	for i := range 12 {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if i%2 == 0 { // leave while waiting for headers (or just after)
			time.AfterFunc(100*time.Millisecond, cancel)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			cancel()
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // leave mid-stream
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
	}
	closedExactlyOnce(t, h)
	if st := out.Stats(); st.Ejections != 0 || st.Ejected != 0 {
		t.Fatalf("clients leaving ejected their server: %+v", st)
	}
	resp, e := post(t, base+"/v1/chat/completions", `{"model":"usher/demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the clients left: %d %+v", resp.StatusCode, e)
	}
}

// syncBuffer is a log sink tests read while the Handler writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// What a client hears of a backend's failure names no address, port or Go error; the log has
// the detail under the request id the answer carries. Two failures: a server that resets
// every stream after 1,500 bytes (an error event mid-stream), and a server that closes every
// connection before answering (a 502 after the retries).
func TestFaultsTellNoAddresses(t *testing.T) {
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	check := func(t *testing.T, id, msg, logWant string) {
		t.Helper()
		if id == "" {
			t.Fatalf("no %s in the answer", proxy.RequestIDHeader)
		}
		if leak := leakedDetail.FindString(msg); leak != "" {
			t.Errorf("client message %q shows %q", msg, leak)
		}
		eventually(t, "the failure's log line", func() bool {
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, "request_id="+id) && strings.Contains(line, logWant) {
					return true
				}
			}
			return false
		})
	}

	t.Run("reset mid-stream", func(t *testing.T) {
		breaker := simproc.Start(t, simproc.Options{Args: []string{"-fault-reset-after", "1500"}})
		_, base := faultHandler(t, []*simproc.Proc{breaker}, &attempts{}, func(o *proxy.Options) { o.Logger = logger })
		body := `{"model":"usher/demo","stream":true,"max_tokens":2000,"ignore_eos":true,"messages":[{"role":"user","content":"go on"}]}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var msg string
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, `"error"`) {
				msg = line
			}
		}
		if msg == "" {
			t.Fatalf("no error event in the broken stream:\n%s", data)
		}
		check(t, resp.Header.Get(proxy.RequestIDHeader), msg, "connection reset")
	})

	t.Run("closed before answering", func(t *testing.T) {
		closer := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		})
		_, base := startHandler(t, func() proxy.Options {
			o := testOptions([]proxy.Backend{{URL: closer.URL}})
			o.Logger = logger
			return o
		}())
		resp, e := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%d %+v, want 502", resp.StatusCode, e)
		}
		check(t, resp.Header.Get(proxy.RequestIDHeader), e.Message, "EOF")
	})
}
