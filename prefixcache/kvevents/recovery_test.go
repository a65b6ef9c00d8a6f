package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

// TestFirstSequenceIsTheStart: the first sequence number seen from a
// source is where it starts, whether the publisher counts from 0 (vLLM),
// 1 (other servers) or has been running for a while; only a gap after it
// is a loss. Each way a source can first see a publisher is stepped: the
// replay made on connecting, a live batch with the earlier ones replayed,
// and live batches without a replay endpoint.
func TestFirstSequenceIsTheStart(t *testing.T) {
	for _, first := range []uint64{0, 1, 1000} {
		for _, how := range []string{"sync on connect", "live, replayed", "live, no replay"} {
			t.Run(fmt.Sprintf("first=%d/%s", first, how), func(t *testing.T) {
				pub := startPublisher(t, PublisherOptions{FirstSequence: first})
				for h := range uint64(3) {
					if seq, err := pub.Publish(storedBatch(first + h)); err != nil || seq != first+h {
						t.Fatalf("Publish = %d, %v; want %d", seq, err, first+h)
					}
				}
				src := Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a"}
				if how != "live, no replay" {
					src.ReplayEndpoint = pub.ReplayEndpoint()
				}
				rec := newRecorder("pod-a")
				s, st := testSubscriber(t, rec, src)
				switch how {
				case "sync on connect":
					st.sync(t.Context())
				case "live, replayed":
					// The PUB socket dropped the first two before the
					// subscription reached it.
					st.live(t.Context(), frames("", first+2, storedBatch(first+2)))
				default:
					for h := range uint64(3) {
						st.live(t.Context(), frames("", first+h, storedBatch(first+h)))
					}
				}
				var want []string
				for h := range uint64(3) {
					want = append(want, fmt.Sprintf("0 stored [%d]", first+h))
				}
				if got := rec.take(); !reflect.DeepEqual(got, want) {
					t.Fatalf("index calls %q, want %q", got, want)
				}
				if got := s.Stats(); got.Lost != 0 || got.Gaps != 0 || got.Resets != 0 || got.Batches != 3 {
					t.Errorf("stats %+v: want 3 batches, no loss, gap or reset", got)
				}
				ss := s.Sources()[0]
				if ss.Lost != 0 || !ss.HasApplied || ss.Applied != first+2 {
					t.Errorf("source %+v: want Lost 0, Applied %d", ss, first+2)
				}
				// A gap after the start is a loss (without replay) or
				// recovered (with).
				pub.Drop(storedBatch(first + 3))
				pub.Publish(storedBatch(first + 4))
				st.live(t.Context(), frames("", first+4, storedBatch(first+4)))
				wantLost := int64(0)
				if src.ReplayEndpoint == "" {
					wantLost = 1
				}
				if got := s.Stats(); got.Lost != wantLost || got.Gaps != 1 {
					t.Errorf("after a gap: stats %+v: want 1 gap, %d lost", got, wantLost)
				}
			})
		}
	}
}

// TestReplayReadsToEndOfReplay: when the first reply shows a restarted
// publisher, the answer is known at once, but the Subscriber reads the
// rest of the reply up to the end-of-replay message before closing the
// connection; closing early made publishers fail to send the rest ("failed
// to send end-of-replay sentinel: use of closed network connection"). The
// Publisher reports every reply it could not send, so the test sees it
// (all but the empty last frame of the end-of-replay message, which zmq4
// may fail to write after the Subscriber, having read the message, left:
// see sentinelTail).
func TestReplayReadsToEndOfReplay(t *testing.T) {
	var mu sync.Mutex
	var pubErrs []error
	pub := startPublisher(t, PublisherOptions{OnError: func(err error) {
		if sentinelTail(err) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		pubErrs = append(pubErrs, err)
	}})
	// Enough history that the publisher is still sending when the
	// answer is known (the socket buffers do not hold it all).
	const batches = 400
	tokens := seqTokens(1, 4096)
	for h := range uint64(batches) {
		pub.Publish(&Batch{Events: []BlockEvent{{Kind: BlockStored, Hashes: []uint64{h}, Tokens: tokens, BlockSize: 4096}}})
	}
	rec := newRecorder("pod-a")
	s, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a"})
	// The source last applied batch 5 of a previous process.
	st.apply(5, Encoding{}.Append(nil, storedBatch(99)), false)
	rec.take()

	st.sync(t.Context())
	got := rec.take()
	if len(got) != batches+1 || got[0] != "0 cleared" || got[batches] != fmt.Sprintf("0 stored [%d]", batches-1) {
		t.Fatalf("got %d index calls (%.40q...), want a clear and %d stores", len(got), got, batches)
	}
	if st := s.Stats(); st.Resets != 1 || st.Replays != 2 || st.ReplayErrors != 0 {
		t.Errorf("stats %+v: want 1 reset, 2 replays, no replay error", st)
	}
	// The publisher serves one request at a time and the second exchange
	// was read to its end: whatever the first one failed to send has
	// been reported by now.
	mu.Lock()
	defer mu.Unlock()
	if len(pubErrs) != 0 {
		t.Errorf("the publisher failed to send %d replies, the first: %v", len(pubErrs), pubErrs[0])
	}
}

// TestSilenceCheck steps the silence rule on a fake clock.
func TestSilenceCheck(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	q := silence{after: 10 * time.Second, since: t0}
	steps := []struct {
		name      string
		now, last time.Time
		warn      bool
		wait      time.Duration
	}{
		{"quiet, not long enough", at(4), time.Time{}, false, 6 * time.Second},
		{"quiet for after: warn", at(10), time.Time{}, true, 10 * time.Second},
		{"still quiet: once per silence", at(20), time.Time{}, false, 10 * time.Second},
		{"still quiet, much later", at(500), time.Time{}, false, 10 * time.Second},
		{"a batch arrived", at(503), at(501), false, 8 * time.Second},
		{"a new silence", at(511), at(501), true, 10 * time.Second},
		{"same silence", at(530), at(501), false, 10 * time.Second},
	}
	for _, tt := range steps {
		warn, _, wait := q.check(tt.now, tt.last)
		if warn != tt.warn || wait != tt.wait {
			t.Errorf("%s: check = %v, wait %v; want %v, %v", tt.name, warn, wait, tt.warn, tt.wait)
		}
	}
	// A batch from before the watch started (a previous Run) does not
	// make the silence older than the watch.
	q = silence{after: 10 * time.Second, since: t0}
	if warn, idle, wait := q.check(at(5), t0.Add(-time.Hour)); warn || idle != 5*time.Second || wait != 5*time.Second {
		t.Errorf("last batch before the watch: check = %v, idle %v, wait %v; want false, 5s, 5s", warn, idle, wait)
	}
}

// TestSilenceWarnings: with a short SilentAfter, a connect source that
// cannot connect, a listen source never heard from and the listening
// socket itself each get one warning; none repeats while the silence
// lasts; once batches have arrived, a new silence is warned about again.
func TestSilenceWarnings(t *testing.T) {
	const after = 40 * time.Millisecond
	var mu sync.Mutex
	warnings := map[string][]string{}
	count := func(backend string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(warnings[backend])
	}
	rec := newRecorder("pod-c", "pod-l")
	s, err := New(Options{
		Index:         rec,
		Sources:       []Source{{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-c"}},
		Listen:        "tcp://127.0.0.1:0",
		ListenSources: []Source{{Backend: "pod-l", Model: "m"}},
		MinBackoff:    5 * time.Millisecond,
		SilentAfter:   after,
		OnError: func(backend string, err error) {
			if !errors.Is(err, ErrSilent) {
				t.Errorf("%s: %v", backend, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			warnings[backend] = append(warnings[backend], err.Error())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer func() { s.Close(); <-done }()
	eventually(t, func() bool { return count("pod-c") >= 1 && count("pod-l") >= 1 && count("") >= 1 },
		"not every silent source was warned about")
	// Asserting that nothing more comes needs a wait: ten times SilentAfter.
	time.Sleep(10 * after)
	mu.Lock()
	for backend, want := range map[string]string{
		"pod-c": "not connected to tcp://127.0.0.1:1; no batch ever",
		"pod-l": "not heard from on the listening socket " + s.ListenAddr(),
		"":      "nothing received on the listening socket " + s.ListenAddr(),
	} {
		if got := warnings[backend]; len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("warnings about %q: %q; want one containing %q", backend, got, want)
		}
	}
	mu.Unlock()

	// pod-l's engine connects and publishes, then goes quiet.
	pub, err := NewPublisher(PublisherOptions{Endpoint: s.ListenAddr(), Connect: true, Topic: Topic("pod-l", "m")})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for deadline := time.Now().Add(20 * time.Second); s.Sources()[1].Batches == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no batch arrived: %+v", s.Sources())
		}
		pub.Publish(storedBatch(1))
	}
	eventually(t, func() bool { return count("pod-l") == 2 && count("") == 2 }, "a second silence was not warned about")
	if got := count("pod-c"); got != 1 {
		t.Errorf("%d warnings about pod-c, want 1: its silence never ended", got)
	}
	mu.Lock()
	if got := warnings["pod-l"][1]; !strings.Contains(got, "heard from on the listening socket; an idle engine publishes nothing") {
		t.Errorf("second warning about pod-l: %q", got)
	}
	mu.Unlock()
}

// chainedBatch announces block h, continuing block parent (0: none).
func chainedBatch(h, parent uint64) *Batch {
	e := BlockEvent{Kind: BlockStored, Hashes: []uint64{h}, Tokens: []uint32{1, 2}, BlockSize: 2, Parent: parent, HasParent: parent != 0}
	return &Batch{Timestamp: float64(h), Events: []BlockEvent{e}}
}

// TestListenRestartUnseen: in listen mode a publisher that restarts
// between two idle probes reconnects unseen, and the PUB socket drops its
// first batches, so the first batch seen from the new process can carry
// the next sequence number of the old one, or one already applied from a
// replay, and nothing in the numbers shows the restart. Its blocks then
// continue blocks the index never saw; that evidence makes the Subscriber
// check the history against the last batch it knows came from the old
// process, and rebuild the backend from the new history. The errors the
// restart explains are not reported. A stream whose history checks out
// keeps its backend and reports its errors, and checks are spaced by
// ProbeInterval.
func TestListenRestartUnseen(t *testing.T) {
	topic := Topic("pod-a", "m")
	// setup: process A published blocks 1..5, each continuing the one
	// before; the source has replayed 0..3 and received 4 live.
	setup := func(t *testing.T, probe time.Duration) (*Subscriber, *stream, *refIndex, *Publisher, *[]error) {
		pubA := startPublisher(t, PublisherOptions{Topic: topic})
		ref := newRefIndex()
		var errs []error
		s, err := New(Options{Index: ref, Listen: "tcp://127.0.0.1:0", ReplayTimeout: 5 * time.Second, ProbeInterval: probe,
			ListenSources: []Source{{Backend: "pod-a", Model: "m", ReplayEndpoint: pubA.ReplayEndpoint()}},
			OnError:       func(_ string, err error) { errs = append(errs, err) }})
		if err != nil {
			t.Fatal(err)
		}
		st := s.lis.byPod["pod-a"]
		for h := range uint64(4) {
			pubA.Publish(chainedBatch(1+h, h))
		}
		st.sync(t.Context())
		pubA.Publish(chainedBatch(5, 4))
		st.live(t.Context(), frames(topic, 4, chainedBatch(5, 4)))
		if got := engineHashes(ref); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5}) {
			t.Fatalf("before the restart the index holds %v", got)
		}
		return s, st, ref, pubA, &errs
	}
	// restart: process B publishes blocks 100, 101, ... from sequence 0.
	restart := func(t *testing.T, st *stream, n uint64) *Publisher {
		pubB := startPublisher(t, PublisherOptions{Topic: topic})
		for h := range n {
			pubB.Publish(chainedBatch(100+h, (99+h)*min(h, 1)))
		}
		st.src.ReplayEndpoint = pubB.ReplayEndpoint()
		return pubB
	}
	blocksOfB := func(n uint64) []uint64 {
		var out []uint64
		for h := range n {
			out = append(out, 100+h)
		}
		return out
	}

	t.Run("next sequence number", func(t *testing.T) {
		s, st, ref, _, errs := setup(t, time.Nanosecond)
		restart(t, st, 6)
		st.live(t.Context(), frames(topic, 5, chainedBatch(105, 104))) // 0..4 dropped
		if got, want := engineHashes(ref), blocksOfB(6); !reflect.DeepEqual(got, want) {
			t.Errorf("index holds %v, want %v", got, want)
		}
		if got := s.Stats(); got.Resets != 1 || got.ApplyErrors != 0 || got.Lost != 0 || len(*errs) != 0 {
			t.Errorf("stats %+v, errors %v: want 1 reset, no apply error, nothing lost or reported", got, *errs)
		}
	})

	t.Run("sequence numbers already applied", func(t *testing.T) {
		s, st, ref, pubA, errs := setup(t, time.Nanosecond)
		// A's 5 and 6 never arrive live; an idle probe replays them.
		pubA.Drop(chainedBatch(6, 5))
		pubA.Drop(chainedBatch(7, 6))
		if ok := st.probe(t.Context()); !ok || st.ahead.lo != 5 || st.ahead.hi != 6 || !st.ahead.ok || !st.ahead.probe {
			t.Fatalf("probe: ok %v, ahead of the connection %+v; want 5..6 found by the probe", ok, st.ahead)
		}
		restart(t, st, 8)
		for seq := uint64(5); seq < 8; seq++ { // 0..4 dropped; 5 and 6 look applied
			st.live(t.Context(), frames(topic, seq, chainedBatch(100+seq, 99+seq)))
		}
		if got, want := engineHashes(ref), blocksOfB(8); !reflect.DeepEqual(got, want) {
			t.Errorf("index holds %v, want %v", got, want)
		}
		if got := s.Stats(); got.Resets != 1 || got.ApplyErrors != 0 || got.Lost != 0 || len(*errs) != 0 {
			t.Errorf("stats %+v, errors %v: want 1 reset, no apply error, nothing lost or reported", got, *errs)
		}
	})

	t.Run("gap while the replay endpoint is down", func(t *testing.T) {
		s, st, ref, _, errs := setup(t, time.Nanosecond)
		pubB := restart(t, st, 8)
		up := st.src.ReplayEndpoint
		st.src.ReplayEndpoint = "tcp://127.0.0.1:1"
		st.live(t.Context(), frames(topic, 7, chainedBatch(107, 106))) // a gap; neither replay nor check answers
		if got := s.Stats(); got.Resets != 0 || got.ApplyErrors != 1 || got.ReplayErrors != 2 {
			t.Fatalf("endpoint down: stats %+v: want no reset, 1 apply error, 2 replay errors", got)
		}
		// The endpoint is back: the next block that cannot be placed
		// brings the check that finds the restart.
		st.src.ReplayEndpoint = up
		pubB.Publish(chainedBatch(108, 107))
		st.live(t.Context(), frames(topic, 8, chainedBatch(108, 107)))
		if got, want := engineHashes(ref), blocksOfB(9); !reflect.DeepEqual(got, want) {
			t.Errorf("index holds %v, want %v", got, want)
		}
		if got := s.Stats(); got.Resets != 1 || got.ApplyErrors != 1 {
			t.Errorf("stats %+v: want 1 reset, 1 apply error (the one seen while the endpoint was down)", got)
		}
		var apply int
		for _, err := range *errs {
			if errors.Is(err, prefixcache.ErrUnknownParent) {
				apply++
			} else if !errors.Is(err, ErrReplay) {
				t.Errorf("unexpected error %v", err)
			}
		}
		if apply != 1 {
			t.Errorf("%d unknown-parent errors reported, want 1: %v", apply, *errs)
		}
	})

	t.Run("same process", func(t *testing.T) {
		s, st, ref, pubA, errs := setup(t, time.Hour)
		before := s.Stats().Replays
		// Blocks whose parents the index never had (a capacity the engine
		// does not share, for instance): the history checks out.
		for seq, parent := range []uint64{998, 999} {
			pubA.Publish(chainedBatch(10+uint64(seq), parent))
			st.live(t.Context(), frames(topic, 5+uint64(seq), chainedBatch(10+uint64(seq), parent)))
		}
		if got, want := engineHashes(ref), []uint64{1, 2, 3, 4, 5}; !reflect.DeepEqual(got, want) {
			t.Errorf("index holds %v, want %v", got, want)
		}
		got := s.Stats()
		if got.Resets != 0 || got.ApplyErrors != 2 || len(*errs) != 2 {
			t.Errorf("stats %+v, errors %v: want no reset, 2 apply errors reported", got, *errs)
		}
		if got.Replays != before+1 {
			t.Errorf("%d replays for two batches with unknown parents within ProbeInterval, want 1", got.Replays-before)
		}
		if !st.hasAnchor || st.anchor.seq != 5 {
			t.Errorf("anchor %+v (valid %v), want the batch checked, 5", st.anchor, st.hasAnchor)
		}
	})
}

// engineHashes lists the engine hashes ref holds, in order.
func engineHashes(ref *refIndex) []uint64 {
	var out []uint64
	for h := range ref.engine {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// TestPublisherRestartOnSameEndpoint: a Publisher stopped the way a
// process stops (Run's context cancelled, then Close) has closed its
// ipc:// replay socket when Run returns, and nothing it does afterwards
// touches the endpoint: a Publisher started next on the same path is
// reachable. (zmq4 removes an ipc socket's file when it closes the socket;
// Run used to return while that close was still in progress, and Close
// closed the socket a second time, either of which could remove the file
// of the next Publisher, which every replay request then failed to reach.)
func TestPublisherRestartOnSameEndpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replay")
	ep := "ipc://" + path
	for i := range 20 {
		pub, err := NewPublisher(PublisherOptions{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: ep})
		if err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		pub.Publish(storedBatch(uint64(i)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); pub.Run(ctx) }()
		rec := newRecorder("pod-a")
		_, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: ep, Backend: "pod-a"})
		if ok, _ := st.sync(t.Context()); !ok {
			t.Fatalf("restart %d: the replay endpoint does not answer", i)
		}
		if got, want := rec.take(), []string{fmt.Sprintf("0 stored [%d]", i)}; !reflect.DeepEqual(got, want) {
			t.Fatalf("restart %d: replayed %q, want %q", i, got, want)
		}
		cancel()
		<-done
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("restart %d: Run returned before closing the replay socket (stat: %v)", i, err)
		}
		pub.Close()
	}
}
