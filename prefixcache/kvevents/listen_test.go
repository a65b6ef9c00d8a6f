package kvevents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

// runSubscriber runs s until the test ends and returns once Run has bound
// the listening socket.
func runSubscriber(t *testing.T, s *Subscriber) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run = %v before it was ready", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run never got ready")
	}
}

// TestListenManyPublishers: four publishers connect, as vLLM does when its
// endpoint names the gateway, to one listening Subscriber over loopback
// TCP, each in its own wire shape (one sends parent_block_hash 0 for "no
// parent", one counts from 1). One drops a batch, recovered through its
// replay endpoint; one restarts, which is detected, and its backend is
// rebuilt from the new process's replay. Each time, the index ends up
// holding exactly what every engine holds.
func TestListenManyPublishers(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	shared := prompts(rng, 40, e2eBlockSize, 12)
	dir := t.TempDir()
	shapes := []struct {
		enc   Encoding
		first uint64
	}{
		{enc: Encoding{ZeroParent: true}}, // arrays, int hashes, parent 0
		{enc: Encoding{MapEvents: true, Hashes: HashAsInt}},
		{enc: Encoding{MapBatch: true, MapEvents: true, Hashes: HashAsBytes}},
		{first: 1},
	}
	var nodes []*node
	var sources []Source
	replays := map[string]string{}
	for i, sh := range shapes {
		pod := fmt.Sprintf("pod-%d", i)
		if _, err := ix.AddBackend(pod, 1<<14); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &node{t: t, pod: pod, eng: newEngine(uint64(10+i), e2eBlockSize),
			rng: rand.New(rand.NewPCG(uint64(i), 3)), prompts: shared, enc: sh.enc})
		// Unix sockets for replay: their addresses are known before the
		// publishers exist, which the Subscriber's configuration needs.
		replays[pod] = "ipc://" + filepath.Join(dir, pod)
		sources = append(sources, Source{Backend: pod, Model: e2eModel, ReplayEndpoint: replays[pod]})
	}
	var mu sync.Mutex
	var pubErrs []error
	pubOpts := func(i int) PublisherOptions {
		return PublisherOptions{Connect: true, FirstSequence: shapes[i].first, ReplayWithTopic: i == 2,
			OnError: func(err error) {
				if sentinelTail(err) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				pubErrs = append(pubErrs, fmt.Errorf("pod-%d: %w", i, err))
			}}
	}

	sub, err := New(Options{Index: ix, Listen: "tcp://127.0.0.1:0", ListenSources: sources, ProbeInterval: 50 * time.Millisecond,
		OnError: func(backend string, err error) {
			// Replay endpoints are unreachable before the publishers
			// start and while one restarts; anything else is a bug.
			if !errors.Is(err, ErrReplay) {
				t.Errorf("%s: %v", backend, err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runSubscriber(t, sub)
	addr := sub.ListenAddr()
	for i, n := range nodes {
		n.start(addr, replays[n.pod], pubOpts(i))
		defer func() { n.shutdown() }()
	}
	// heard publishes until source i has applied a batch: a PUB socket
	// drops what it publishes before the subscription reaches it, and the
	// first batch that gets through brings the rest by replay.
	heard := func(i int, cond func(SourceStatus) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(sub.Sources()[i]); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", nodes[i].pod, sub.Sources()[i])
			}
			nodes[i].publish(1)
		}
	}
	for i, n := range nodes {
		n.publish(5)
		heard(i, func(ss SourceStatus) bool { return ss.Batches > 0 })
	}
	converge(t, ix, sub, nodes...)

	// pod-1's PUB socket drops a batch; the next one reveals the gap (or
	// the idle probe finds it first), and the replay recovers it.
	before := sub.Stats()
	if _, err := nodes[1].pub.Drop(nodes[1].step()); err != nil {
		t.Fatal(err)
	}
	nodes[1].publish(1)
	converge(t, ix, sub, nodes...)
	eventually(t, func() bool { st := sub.Stats(); return st.Gaps+st.Stale > before.Gaps+before.Stale },
		"the dropped batch counted neither as a gap nor as stale")

	// pod-2 restarts: a new process, an empty cache, new engine hashes,
	// sequence numbers from 0 again, connecting anew.
	b := nodes[2]
	b.shutdown()
	b.eng = newEngine(99, e2eBlockSize)
	b.start(addr, replays[b.pod], pubOpts(2))
	b.publish(8)
	heard(2, func(ss SourceStatus) bool { return ss.Resets >= 1 })
	converge(t, ix, sub, nodes...)

	// Everyone keeps going; pod-0 drops its whole cache.
	for _, n := range nodes {
		n.publish(10)
	}
	if _, err := nodes[0].pub.Publish(&Batch{Timestamp: 9, Events: []BlockEvent{nodes[0].eng.clear()}}); err != nil {
		t.Fatal(err)
	}
	nodes[0].publish(5)
	converge(t, ix, sub, nodes...)

	eventually(t, func() bool {
		for i, ss := range sub.Sources() {
			if !ss.Connected || !ss.HasApplied || ss.Applied != nodes[i].pub.Sequence()-1 {
				return false
			}
		}
		return true
	}, "Sources() never showed every source connected and caught up")
	for i, ss := range sub.Sources() {
		wantResets := int64(0)
		if i == 2 {
			wantResets = 1
		}
		if ss.Backend != nodes[i].pod || ss.Learnt || ss.Lost != 0 || ss.Resets != wantResets || ss.Events == 0 || ss.LastBatch.IsZero() {
			t.Errorf("source %d: %+v; want backend %s, not learnt, events, a last batch, no loss, %d resets", i, ss, nodes[i].pod, wantResets)
		}
	}
	if got, want := perSource(sub.Sources()...), sharedCounters(sub.Stats()); got != want {
		t.Errorf("Sources() add up to %+v, Stats has %+v", got, want)
	}
	st := sub.Stats()
	t.Logf("stats %+v", st)
	if st.DecodeErrors != 0 || st.ApplyErrors != 0 || st.Lost != 0 || st.Unregistered != 0 || st.Rejected != 0 {
		t.Errorf("stats %+v: want no decode, apply, lost, unregistered or rejected", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range pubErrs {
		t.Errorf("publisher: %v", err)
	}
}

// sentinelTailRE matches the failure to send the last frame of an
// end-of-replay message: frame n of n.
var sentinelTailRE = regexp.MustCompile(`send end-of-replay: zmq4: error sending frame (\d+)/(\d+): `)

// sentinelTail reports whether a Publisher's error is the one a client
// causes by closing the connection as soon as it has read the whole
// end-of-replay message, as the Subscriber does: zmq4 writes the empty
// payload, the last frame, after its header, and that empty write fails
// once the client has gone (see PublisherOptions.OnError). A client that
// left earlier makes an earlier frame or reply fail.
func sentinelTail(err error) bool {
	m := sentinelTailRE.FindStringSubmatch(err.Error())
	return errors.Is(err, ErrReplay) && m != nil && m[1] == m[2]
}

// TestListenUnknownPods drives the listening socket's dispatch directly:
// pods outside ListenSources are rejected without AcceptUnknown, learnt up
// to MaxSources with it, and at the bound a new pod replaces one silent
// for SilentAfter. Reports of messages no source takes are throttled.
func TestListenUnknownPods(t *testing.T) {
	type report struct {
		backend string
		err     error
	}
	setup := func(t *testing.T, accept bool) (context.Context, *Subscriber, *recorder, func() []report) {
		var mu sync.Mutex
		var reports []report
		rec := newRecorder("pod-a", "pod-x", "pod-y", "pod-z")
		s, err := New(Options{Index: rec, Listen: "tcp://127.0.0.1:0", ListenSources: []Source{{Backend: "pod-a", Model: "m"}},
			AcceptUnknown: accept, MaxSources: 2, SilentAfter: time.Minute,
			OnError: func(backend string, err error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, report{backend, err})
			}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		s.lis.wg = &wg
		t.Cleanup(func() { cancel(); wg.Wait() })
		return ctx, s, rec, func() []report {
			mu.Lock()
			defer mu.Unlock()
			return append([]report(nil), reports...)
		}
	}
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	backends := func(s *Subscriber) string {
		var out []string
		for _, ss := range s.Sources() {
			name := ss.Source.Backend
			if ss.Learnt {
				name += "(learnt)"
			}
			out = append(out, name)
		}
		return strings.Join(out, " ")
	}

	t.Run("rejected", func(t *testing.T) {
		ctx, s, _, reports := setup(t, false)
		l := s.lis
		for i := range 5 {
			l.dispatch(ctx, frames(Topic("pod-x", "m"), uint64(i), storedBatch(1)), at(i))
		}
		l.dispatch(ctx, frames("kv-events", 0, storedBatch(1)), at(6)) // vLLM's default topic
		l.dispatch(ctx, [][]byte{{1}}, at(7))
		l.dispatch(ctx, frames(Topic("pod-a", "m"), 0, storedBatch(1)), at(8))
		if got := s.Stats(); got.Rejected != 5 || got.DecodeErrors != 2 {
			t.Errorf("stats %+v: want 5 rejected, 2 decode errors", got)
		}
		got := reports()
		if len(got) != 3 { // the 1st, 2nd and 4th of 7
			t.Fatalf("%d reports, want 3: %v", len(got), got)
		}
		for _, r := range got {
			if r.backend != "pod-x" || !errors.Is(r.err, ErrUnknownSource) {
				t.Errorf("report %q: %v; want pod-x, ErrUnknownSource", r.backend, r.err)
			}
		}
		if got := got[2].err.Error(); !strings.Contains(got, "(4 such messages so far)") {
			t.Errorf("third report %q does not give the count", got)
		}
		if got, want := backends(s), "pod-a"; got != want {
			t.Errorf("sources %q, want %q", got, want)
		}
		if got := len(l.byPod["pod-a"].inbox); got != 1 {
			t.Errorf("pod-a's inbox holds %d messages, want 1", got)
		}
	})

	t.Run("learnt up to MaxSources", func(t *testing.T) {
		ctx, s, rec, reports := setup(t, true)
		l := s.lis
		l.dispatch(ctx, frames(Topic("pod-x", "m"), 0, storedBatch(10)), at(0))
		l.dispatch(ctx, frames(Topic("pod-y", "m"), 0, storedBatch(20)), at(1))
		l.dispatch(ctx, frames(Topic("pod-z", "m"), 0, storedBatch(30)), at(2)) // at the bound, nobody silent
		if got, want := backends(s), "pod-a pod-x(learnt) pod-y(learnt)"; got != want {
			t.Errorf("sources %q, want %q", got, want)
		}
		if got := reports(); s.Stats().Rejected != 1 || len(got) != 1 || got[0].backend != "pod-z" || !errors.Is(got[0].err, ErrUnknownSource) {
			t.Errorf("Rejected %d, reports %v; want pod-z rejected", s.Stats().Rejected, got)
		}
		// pod-y stays busy; pod-x has been silent for SilentAfter and
		// makes room for pod-z.
		l.dispatch(ctx, frames(Topic("pod-y", "m"), 1, storedBatch(21)), at(59))
		l.dispatch(ctx, frames(Topic("pod-z", "m"), 1, storedBatch(31)), at(60))
		if got, want := backends(s), "pod-a pod-y(learnt) pod-z(learnt)"; got != want {
			t.Errorf("sources %q, want %q", got, want)
		}
		// The learnt sources apply their batches on their own goroutines,
		// to the backends named after their pods.
		eventually(t, func() bool {
			ss := s.Sources()
			return ss[1].Batches == 2 && ss[2].Batches == 1 && ss[1].Connected && ss[2].Backend == "pod-z"
		}, "learnt sources did not apply their batches")
		var got []string
		for _, line := range rec.take() {
			if !strings.HasPrefix(line, "1 ") { // pod-x's first batch may or may not have been applied
				got = append(got, line)
			}
		}
		slices.Sort(got) // sources are not ordered with respect to each other
		if want := "2 stored [20] 2 stored [21] 3 stored [31]"; strings.Join(got, " ") != want {
			t.Errorf("index calls %q, want %q", got, want)
		}
	})

	t.Run("full inbox drops", func(t *testing.T) {
		ctx, s, _, _ := setup(t, false)
		l := s.lis // pod-a has no goroutine here: nothing empties its inbox
		for i := range inboxSize + 3 {
			l.dispatch(ctx, frames(Topic("pod-a", "m"), uint64(i), storedBatch(1)), at(i))
		}
		if got := s.Stats().Dropped; got != 3 {
			t.Errorf("Dropped = %d, want 3", got)
		}
	})
}

// TestDispatchDoesNotAllocate: handing a message to its source, and
// rejecting one from an unknown pod or with a bad topic (a flood from a
// stray client), allocate nothing.
func TestDispatchDoesNotAllocate(t *testing.T) {
	s, err := New(Options{Index: newRecorder(), Listen: "tcp://127.0.0.1:0", ListenSources: []Source{{Backend: "pod-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	l, inbox := s.lis, s.lis.byPod["pod-a"].inbox
	now := time.Unix(1_000_000, 0)
	for _, topic := range []string{Topic("pod-a", "m"), Topic("pod-x", "m"), "kv-events"} {
		msg := frames(topic, 1, storedBatch(1))
		allocs := testing.AllocsPerRun(100, func() {
			l.dispatch(t.Context(), msg, now)
			select {
			case <-inbox:
			default:
			}
		})
		if allocs != 0 {
			t.Errorf("dispatch of %q: %.1f allocations, want 0", topic, allocs)
		}
	}
	if st := s.Stats(); st.Rejected == 0 || st.DecodeErrors == 0 || st.Dropped != 0 {
		t.Errorf("stats %+v: want rejected and decode errors, no drop", st)
	}
}

// TestListenAddr: Ready and ListenAddr report the bound address; a
// Subscriber that cannot bind says so from Run and never gets ready; a
// later Run binds the port the first one got.
func TestListenAddr(t *testing.T) {
	rec := newRecorder("pod-b")
	s, err := New(Options{Index: rec, Listen: "tcp://127.0.0.1:0", AcceptUnknown: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ListenAddr(); got != "" {
		t.Errorf("ListenAddr before Run = %q, want \"\"", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	addr := s.ListenAddr()
	if !regexp.MustCompile(`^tcp://127\.0\.0\.1:[1-9][0-9]*$`).MatchString(addr) {
		t.Fatalf("ListenAddr = %q", addr)
	}

	other, err := New(Options{Index: rec, Listen: addr, AcceptUnknown: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a bound address = %v, want a listen error", err)
	}
	select {
	case <-other.Ready():
		t.Error("Ready closed although Run could not bind")
	default:
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { done <- s.Run(context.Background()) }()
	defer func() { s.Close(); <-done }()
	pub, err := NewPublisher(PublisherOptions{Endpoint: addr, Connect: true, Topic: Topic("pod-b", "m")})
	if err != nil {
		t.Fatalf("the second Run does not listen on %s: %v", addr, err)
	}
	defer pub.Close()
	for deadline := time.Now().Add(20 * time.Second); len(s.Sources()) == 0 || s.Sources()[0].Batches == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing arrived on the second Run: %+v", s.Stats())
		}
		pub.Publish(storedBatch(1))
	}
	if got := s.ListenAddr(); got != addr {
		t.Errorf("ListenAddr = %q after the second Run, want %q", got, addr)
	}
}

// goroutines counts the live goroutines, leaving out the writer goroutine
// zmq4 v0.17.0 leaks for every PUB socket closed (see Publisher.Close).
func goroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "(*pubMWriter).run") {
			count++
		}
	}
	return count
}

// TestListenCloseLeavesNoGoroutines: after Close, the goroutines of
// listen mode (the socket's reader, one per source, learnt ones included,
// and zmq4's for the socket and its connections) are gone.
func TestListenCloseLeavesNoGoroutines(t *testing.T) {
	baseline := goroutines()
	rec := newRecorder("pod-b")
	s, err := New(Options{Index: rec, Listen: "tcp://127.0.0.1:0", AcceptUnknown: true, MaxSources: 4,
		ListenSources: []Source{{Backend: "pod-a", ReplayEndpoint: "tcp://127.0.0.1:1"}}, ProbeInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	<-s.Ready()
	pub, err := NewPublisher(PublisherOptions{Endpoint: s.ListenAddr(), Connect: true, Topic: Topic("pod-b", "m")})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); len(s.Sources()) < 2 || s.Sources()[1].Batches == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing arrived: %+v", s.Stats())
		}
		pub.Publish(storedBatch(1))
	}
	pub.Close()
	s.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	eventually(t, func() bool { return goroutines() <= baseline }, "goroutines left behind after Close")
}
