package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

// recorder is a fake index that logs what it is asked to do.
type recorder struct {
	mu    sync.Mutex
	names map[string]prefixcache.HolderID
	log   []string
}

func newRecorder(names ...string) *recorder {
	r := &recorder{names: map[string]prefixcache.HolderID{}}
	for i, n := range names {
		r.names[n] = prefixcache.HolderID(i)
	}
	return r
}

func (r *recorder) Lookup(name string) (prefixcache.HolderID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.names[name]
	return id, ok
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *recorder) ApplyStored(id prefixcache.HolderID, ev prefixcache.StoredBlocks) error {
	r.add("%d stored %v", id, ev.EngineHashes)
	return nil
}

func (r *recorder) ApplyRemovedFrom(id prefixcache.HolderID, medium string, hs []uint64) error {
	r.add("%d removed %s %v", id, medium, hs)
	return nil
}

func (r *recorder) ApplyCleared(id prefixcache.HolderID) error {
	r.add("%d cleared", id)
	return nil
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.log
	r.log = nil
	return out
}

// storedBatch announces one stored block whose engine hash is h.
func storedBatch(h uint64) *Batch {
	return &Batch{Timestamp: float64(h), Events: []BlockEvent{{Kind: BlockStored, Hashes: []uint64{h}, Tokens: []uint32{1, 2}, BlockSize: 2}}}
}

func frames(topic string, seq uint64, b *Batch) [][]byte {
	return [][]byte{[]byte(topic), binary.BigEndian.AppendUint64(nil, seq), Encoding{}.Append(nil, b)}
}

// perSource is the part of Stats that SourceStatus also counts, summed
// over ss.
func perSource(ss ...SourceStatus) Stats {
	var sum Stats
	for _, st := range ss {
		sum.Batches += st.Batches
		sum.Events += st.Events
		sum.Lost += st.Lost
		sum.Resets += st.Resets
		sum.Reconnects += st.Reconnects
		sum.Stale += st.Stale
		sum.Live += st.Live
		sum.ReplayOnly += st.ReplayOnly
		sum.Late += st.Late
		sum.DecodeErrors += st.DecodeErrors
		sum.ApplyErrors += st.ApplyErrors
	}
	return sum
}

// sharedCounters keeps the counters of s that SourceStatus splits by
// source.
func sharedCounters(s Stats) Stats {
	return Stats{Batches: s.Batches, Events: s.Events, Lost: s.Lost, Resets: s.Resets, Reconnects: s.Reconnects,
		Stale: s.Stale, Live: s.Live, ReplayOnly: s.ReplayOnly, Late: s.Late, DecodeErrors: s.DecodeErrors, ApplyErrors: s.ApplyErrors}
}

func testSubscriber(t *testing.T, ix Applier, src Source) (*Subscriber, *stream) {
	t.Helper()
	s, err := New(Options{Index: ix, Sources: []Source{src}, ReplayTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s, s.streams[0]
}

// TestStreamWithoutReplay steps the sequence logic of one source that has
// no replay endpoint: gaps are lost, a sequence that goes back is a
// restart.
func TestStreamWithoutReplay(t *testing.T) {
	rec := newRecorder("other", "pod-a")
	s, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1"})
	ctx := context.Background()
	topic := Topic("pod-a", "m")
	type step struct {
		name    string
		newConn bool     // the connection dropped before this message
		frames  [][]byte // the message
		want    []string // calls on the index
	}
	steps := []step{
		{name: "join mid-stream", frames: frames(topic, 5, storedBatch(5)), want: []string{"1 stored [5]"}},
		{name: "next", frames: frames(topic, 6, storedBatch(6)), want: []string{"1 stored [6]"}},
		{name: "gap of two", frames: frames(topic, 9, storedBatch(9)), want: []string{"1 stored [9]"}},
		{name: "garbage payload consumes its sequence number", frames: [][]byte{[]byte(topic), binary.BigEndian.AppendUint64(nil, 10), []byte{0xc1}}},
		{name: "two frames", frames: [][]byte{[]byte(topic), {1}}},
		{name: "short sequence frame", frames: [][]byte{[]byte(topic), {0, 1}, {0x90}}},
		{name: "topic without pod", frames: frames("kv-events", 11, storedBatch(11))},
		{name: "unregistered pod", frames: frames(Topic("pod-z", "m"), 11, storedBatch(11))},
		{name: "sequence goes back on the same connection: restart", frames: frames(topic, 0, storedBatch(100)), want: []string{"1 cleared", "1 stored [100]"}},
		{name: "reconnect, continues", newConn: true, frames: frames(topic, 1, storedBatch(101)), want: []string{"1 stored [101]"}},
		{name: "reconnect, sequence went back: restart", newConn: true, frames: frames(topic, 0, storedBatch(200)), want: []string{"1 cleared", "1 stored [200]"}},
	}
	for _, tt := range steps {
		if tt.newConn {
			st.liveOnConn = false
		}
		st.live(ctx, tt.frames)
		if got := rec.take(); !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("%s: index calls %q, want %q", tt.name, got, tt.want)
		}
	}
	got := s.Stats()
	// Live counts the sequence numbers the connection delivered, the garbage
	// payload's and the unregistered pod's included.
	want := Stats{Batches: 6, Events: 6, Gaps: 1, Lost: 2, Resets: 2, DecodeErrors: 4, Unregistered: 1, Live: 8}
	if got != want {
		t.Errorf("Stats() = %+v\nwant       %+v", got, want)
	}
	// The only source has all of them.
	if got, want := perSource(s.Sources()...), sharedCounters(want); got != want {
		t.Errorf("Sources() counters %+v, want %+v", got, want)
	}
}

// TestStreamReplay steps a source with a replay endpoint served by a real
// Publisher's ROUTER socket.
func TestStreamReplay(t *testing.T) {
	for _, withTopic := range []bool{false, true} {
		t.Run(fmt.Sprintf("replyWithTopic=%v", withTopic), func(t *testing.T) {
			pub := startPublisher(t, PublisherOptions{ReplayWithTopic: withTopic, Topic: Topic("pod-a", "m")})
			for h := range uint64(5) {
				pub.Publish(storedBatch(h))
			}
			rec := newRecorder("pod-a")
			s, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a", Model: "m"})
			ctx := context.Background()

			// Connecting replays the whole history.
			st.sync(ctx)
			want := []string{"0 stored [0]", "0 stored [1]", "0 stored [2]", "0 stored [3]", "0 stored [4]"}
			if got := rec.take(); !reflect.DeepEqual(got, want) {
				t.Fatalf("sync: %q, want %q", got, want)
			}
			// Live batches the replay already delivered are skipped.
			st.live(ctx, frames("", 4, storedBatch(4)))
			if got := rec.take(); len(got) != 0 {
				t.Fatalf("duplicate applied: %q", got)
			}
			// A gap: 5 and 6 were dropped by the PUB socket, 7 arrives.
			pub.Drop(storedBatch(5))
			pub.Drop(storedBatch(6))
			pub.Publish(storedBatch(7))
			st.live(ctx, frames("", 7, storedBatch(7)))
			want = []string{"0 stored [5]", "0 stored [6]", "0 stored [7]"}
			if got := rec.take(); !reflect.DeepEqual(got, want) {
				t.Fatalf("gap: %q, want %q", got, want)
			}
			// Reconnecting to the same publisher: the check passes,
			// nothing is cleared, missed batches are applied.
			pub.Publish(storedBatch(8))
			st.liveOnConn = false
			st.sync(ctx)
			if got, want := rec.take(), []string{"0 stored [8]"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("reconnect: %q, want %q", got, want)
			}
			// Reconnecting to a restarted publisher that already
			// published past our position: the check fails, the backend
			// is cleared and the new history replayed.
			pub2 := startPublisher(t, PublisherOptions{ReplayWithTopic: withTopic})
			for h := range uint64(10) {
				pub2.Publish(storedBatch(1000 + h))
			}
			st.src.ReplayEndpoint = pub2.ReplayEndpoint()
			st.liveOnConn = false
			st.sync(ctx)
			got := rec.take()
			if len(got) != 11 || got[0] != "0 cleared" || got[1] != "0 stored [1000]" || got[10] != "0 stored [1009]" {
				t.Fatalf("restart: %q", got)
			}
			stats := s.Stats()
			if stats.Resets != 1 || stats.Gaps != 1 || stats.Lost != 0 || stats.Replays != 5 || stats.Replayed != 19 {
				t.Errorf("stats %+v: want 1 reset, 1 gap, 0 lost, 5 replays, 19 replayed", stats)
			}
			// Every batch came from a replay and counts in the source's
			// Batches. Live 4 and 7 arrived after their replay: live, and the
			// ones before them missed (0-3, 5, 6). 8, applied ahead of the
			// connection when the restart was found, was cleared uncounted;
			// the new process's 0-9 are still ahead of the live connection,
			// neither live nor replay-only yet.
			if got, want := perSource(s.Sources()...), (Stats{Batches: 19, Events: 19, Resets: 1, Live: 2, ReplayOnly: 6}); got != want || sharedCounters(stats) != want {
				t.Errorf("Sources() counters %+v, Stats %+v; want %+v for both", got, sharedCounters(stats), want)
			}
		})
	}
}

func startPublisher(t *testing.T, opts PublisherOptions) *Publisher {
	t.Helper()
	if opts.ReplayEndpoint == "" {
		opts.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	opts.Endpoint = "tcp://127.0.0.1:0"
	pub, err := NewPublisher(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(ctx) }()
	t.Cleanup(func() { cancel(); pub.Close(); <-done })
	return pub
}

// TestSourceCounters: with two sources, each SourceStatus counts its own
// batches, losses and resets, and together they make up Stats.
func TestSourceCounters(t *testing.T) {
	rec := newRecorder("pod-a", "pod-b")
	s, err := New(Options{Index: rec, Sources: []Source{
		{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a"},
		{Endpoint: "tcp://127.0.0.1:2", Backend: "pod-b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.streams[0], s.streams[1]
	ctx := t.Context()
	for _, seq := range []uint64{0, 1, 4, 5} { // 2 and 3 lost
		a.live(ctx, frames("", seq, storedBatch(seq)))
	}
	for _, seq := range []uint64{0, 1, 0, 1, 2} { // back to 0: a restart
		b.live(ctx, frames("", seq, storedBatch(100+seq)))
	}
	ss := s.Sources()
	for i, want := range []Stats{{Batches: 4, Events: 4, Lost: 2, Live: 4}, {Batches: 5, Events: 5, Resets: 1, Live: 5}} {
		if got := perSource(ss[i]); got != want {
			t.Errorf("source %d: counters %+v, want %+v", i, got, want)
		}
	}
	if got, want := perSource(ss...), sharedCounters(s.Stats()); got != want {
		t.Errorf("sources add up to %+v, Stats has %+v", got, want)
	}
}

// TestReplayHistoryIsBounded: a source joins a publisher whose history
// no longer holds its first batches, and later falls further behind than
// the history reaches. Joining, the first batch replayed is where the
// source starts: nothing is lost. Behind, the history no longer holds the
// last batch applied, so the backend's state is unknown: it is cleared
// and rebuilt from what the history holds, as after a restart.
func TestReplayHistoryIsBounded(t *testing.T) {
	pub := startPublisher(t, PublisherOptions{History: 3})
	for h := range uint64(6) {
		pub.Publish(storedBatch(h))
	}
	rec := newRecorder("pod-a")
	s, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a"})
	st.sync(t.Context())
	want := []string{"0 stored [3]", "0 stored [4]", "0 stored [5]"}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("join: got %q, want %q", got, want)
	}
	if got := s.Stats(); got.Lost != 0 || got.Resets != 0 {
		t.Errorf("join: Lost %d, Resets %d; want 0, 0 (the first batch seen is the start)", got.Lost, got.Resets)
	}

	for h := range uint64(4) { // 6..9 never delivered
		pub.Drop(storedBatch(6 + h))
	}
	pub.Publish(storedBatch(10))
	st.live(t.Context(), frames("", 10, storedBatch(10)))
	want = []string{"0 cleared", "0 stored [8]", "0 stored [9]", "0 stored [10]"}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("behind: got %q, want %q", got, want)
	}
	if got := s.Stats(); got.Lost != 0 || got.Resets != 1 || got.Gaps != 1 {
		t.Errorf("behind: stats %+v; want 1 gap, 1 reset, none lost", got)
	}
	if got, want := perSource(s.Sources()...), sharedCounters(s.Stats()); got != want {
		t.Errorf("Sources() counters %+v, Stats %+v", got, want)
	}
}

func TestReplayEndpointDown(t *testing.T) {
	rec := newRecorder("pod-a")
	var errs []error
	s, err := New(Options{Index: rec, Sources: []Source{{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "tcp://127.0.0.1:1", Backend: "pod-a"}},
		ReplayTimeout: time.Second, OnError: func(_ string, err error) { errs = append(errs, err) }})
	if err != nil {
		t.Fatal(err)
	}
	st := s.streams[0]
	st.live(context.Background(), frames("", 3, storedBatch(3)))
	if got, want := rec.take(), []string{"0 stored [3]"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if s.Stats().ReplayErrors != 1 || len(errs) != 1 || !errors.Is(errs[0], ErrReplay) || !strings.Contains(errs[0].Error(), "replay from tcp://127.0.0.1:1") {
		t.Errorf("ReplayErrors = %d, reported %v; want one replay error", s.Stats().ReplayErrors, errs)
	}
}

func TestNewValidates(t *testing.T) {
	ok := Source{Endpoint: "tcp://127.0.0.1:5557"}
	tests := []struct {
		name string
		ix   Applier
		opts Options
	}{
		{"nil index", nil, Options{Sources: []Source{ok}}},
		{"no sources", newRecorder(), Options{}},
		{"no endpoint", newRecorder(), Options{Sources: []Source{ok, {}}}},
		{"negative backoff", newRecorder(), Options{Sources: []Source{ok}, MinBackoff: -1}},
		{"negative MaxSources", newRecorder(), Options{Listen: "tcp://*:5557", AcceptUnknown: true, MaxSources: -1}},
		{"listen sources without Listen", newRecorder(), Options{Sources: []Source{ok}, ListenSources: []Source{{Backend: "p"}}}},
		{"AcceptUnknown without Listen", newRecorder(), Options{Sources: []Source{ok}, AcceptUnknown: true}},
		{"Listen accepting nothing", newRecorder(), Options{Listen: "tcp://*:5557"}},
		{"Listen not an endpoint", newRecorder(), Options{Listen: "0.0.0.0:5557", AcceptUnknown: true}},
		{"listen source without pod", newRecorder(), Options{Listen: "tcp://*:5557", ListenSources: []Source{{}}}},
		{"listen source with an endpoint", newRecorder(), Options{Listen: "tcp://*:5557", ListenSources: []Source{{Backend: "p", Endpoint: "tcp://p:5557"}}}},
		{"listen source with a topic", newRecorder(), Options{Listen: "tcp://*:5557", ListenSources: []Source{{Backend: "p", Topic: "kv@p@"}}}},
		{"pod with @", newRecorder(), Options{Listen: "tcp://*:5557", ListenSources: []Source{{Backend: "p@m"}}}},
		{"pod twice", newRecorder(), Options{Listen: "tcp://*:5557", ListenSources: []Source{{Backend: "p"}, {Backend: "p"}}}},
	}
	for _, tt := range tests {
		tt.opts.Index = tt.ix
		if _, err := New(tt.opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: New error %v, want ErrInvalidOptions", tt.name, err)
		}
	}
	for _, opts := range []Options{
		{Listen: "tcp://*:5557", AcceptUnknown: true},
		{Listen: "ipc:///tmp/kv", ListenSources: []Source{{Backend: "p", ReplayEndpoint: "tcp://p:5558"}}},
		{Sources: []Source{ok}, Listen: "tcp://*:5557", ListenSources: []Source{{Backend: "p"}, {Backend: "q"}}},
	} {
		opts.Index = newRecorder()
		if _, err := New(opts); err != nil {
			t.Errorf("New(%+v) = %v, want it accepted", opts, err)
		}
	}
	if _, err := NewPublisher(PublisherOptions{Endpoint: "tcp://127.0.0.1:0", History: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("NewPublisher(History -1) error %v, want ErrInvalidOptions", err)
	}
	if _, err := NewPublisher(PublisherOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("NewPublisher(no Endpoint) error %v, want ErrInvalidOptions", err)
	}
}

// TestRunAndClose: Run keeps retrying an absent publisher until Close,
// then Run refuses to start again.
func TestRunAndClose(t *testing.T) {
	s, err := New(Options{Index: newRecorder(), Sources: []Source{{Endpoint: "tcp://127.0.0.1:1"}}, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second concurrent Run = %v, want ErrRunning", err)
	}
	if got, want := s.Sources(), []SourceStatus{{Source: Source{Endpoint: "tcp://127.0.0.1:1"}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Sources() = %+v, want %+v", got, want)
	}
	s.Close()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after Close", err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
	if s.Stats().Reconnects != 0 {
		t.Errorf("Reconnects = %d with no publisher ever reached", s.Stats().Reconnects)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	s, err := New(Options{Index: newRecorder(), Sources: []Source{{Endpoint: "tcp://127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestPublisherClosed(t *testing.T) {
	pub, err := NewPublisher(PublisherOptions{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if pub.ReplayEndpoint() != "" {
		t.Errorf("ReplayEndpoint = %q without one", pub.ReplayEndpoint())
	}
	if seq, err := pub.Publish(storedBatch(1)); seq != 0 || err != nil {
		t.Errorf("first Publish = %d, %v; want 0, nil", seq, err)
	}
	if got := pub.Sequence(); got != 1 {
		t.Errorf("Sequence = %d, want 1", got)
	}
	pub.Close()
	pub.Close()
	if _, err := pub.Publish(storedBatch(2)); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

// FuzzStreamSequence drives one source without a replay endpoint with
// arbitrary sequence numbers and connection drops, and checks: every
// message is applied exactly once; between two clears the applied
// sequence numbers strictly increase; a clear happens only when the
// sequence did not move forward.
func FuzzStreamSequence(f *testing.F) {
	f.Add([]byte{0x28, 0x28, 0x30, 0x08, 0x20, 0x00, 0x18, 0x40})
	f.Add([]byte{0x21, 0x21, 0x00, 0x19, 0x21, 0x1a})
	f.Fuzz(func(t *testing.T, ops []byte) {
		rec := newRecorder("pod-a")
		s, st := testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a"})
		var seq uint64
		var prev uint64
		var havePrev bool
		sent := 0
		for _, op := range ops {
			if op&7 == 0 {
				st.liveOnConn = false
				continue
			}
			d := int64(op>>3) - 8
			if int64(seq)+d < 0 {
				d = -int64(seq)
			}
			seq = uint64(int64(seq) + d)
			st.live(t.Context(), frames("", seq, storedBatch(seq)))
			sent++
			log := rec.take()
			want := fmt.Sprintf("0 stored [%d]", seq)
			switch {
			case len(log) == 1 && log[0] == want:
				if havePrev && seq <= prev {
					t.Fatalf("seq %d applied after %d without a clear", seq, prev)
				}
			case len(log) == 2 && log[0] == "0 cleared" && log[1] == want:
				if havePrev && seq > prev {
					t.Fatalf("cleared although seq %d followed %d", seq, prev)
				}
			default:
				t.Fatalf("seq %d: index calls %q", seq, log)
			}
			prev, havePrev = seq, true
		}
		if got := s.Stats().Batches; got != int64(sent) {
			t.Fatalf("Batches = %d, want %d", got, sent)
		}
	})
}

// TestSeeds: blocks are indexed under the seed the gateway computes for
// the same model and adapter; an adapter known only by id never matches
// base-model requests.
func TestSeeds(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ix.AddBackend("pod-a", 0)
	s, st := testSubscriber(t, ix, Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a", Model: "m"})
	tokens := []uint32{1, 2, 3, 4}
	batch := &Batch{Events: []BlockEvent{
		{Kind: BlockStored, Hashes: []uint64{1}, Tokens: tokens, BlockSize: 4},
		{Kind: BlockStored, Hashes: []uint64{2}, Tokens: tokens, BlockSize: 4, LoRAID: 7, LoRAName: "sql"},
		{Kind: BlockStored, Hashes: []uint64{3}, Tokens: tokens, BlockSize: 4, LoRAID: 8},
		{Kind: BlockStored, Hashes: []uint64{4}, Tokens: tokens, BlockSize: 4, LoRAName: "sql", Salt: "t1"},
		{Kind: BlockStored, Hashes: []uint64{5}, Tokens: tokens, BlockSize: 4, Salt: "t2"},
	}}
	st.live(t.Context(), frames("", 0, batch))
	tests := []struct {
		lora, salt string
		want       int32
	}{
		{"", "", 1}, {"sql", "", 1}, {"lora_id:8", "", 1}, {"other", "", 0},
		{"sql", "t1", 1}, {"", "t2", 1}, {"", "t1", 0}, {"sql", "t2", 0},
	}
	for _, tt := range tests {
		chain := prefixcache.HashTokens(nil, prefixcache.Seed("m", tt.lora, tt.salt), tokens, 4)
		if got := ix.Match(nil, chain)[id]; got != tt.want {
			t.Errorf("lora %q salt %q: matched %d blocks, want %d", tt.lora, tt.salt, got, tt.want)
		}
	}
	if got := s.Stats().Events; got != 5 {
		t.Errorf("Events = %d, want 5", got)
	}
	// Five pairs: the id-only adapter did not land under the base seed.
	if got := ix.Stats().Blocks; got != 5 {
		t.Errorf("index holds %d blocks, want 5", got)
	}
}

// TestModelLearnedAfterReplay: a source that names its backend but not its model replays the
// history on connect, from replies without a topic frame, before any live message has named the
// model. The first live topic does; the blocks applied under the unknown model must then be
// rebuilt under the right seed, or they (and every block chained to them) could never match.
func TestModelLearnedAfterReplay(t *testing.T) {
	pub := startPublisher(t, PublisherOptions{Topic: Topic("pod-a", "m")})
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	pub.Publish(&Batch{Events: []BlockEvent{{Kind: BlockStored, Hashes: []uint64{10}, Tokens: tokens[:4], BlockSize: 4}}})
	second := &Batch{Events: []BlockEvent{{Kind: BlockStored, Hashes: []uint64{11}, Parent: 10, HasParent: true, Tokens: tokens[4:], BlockSize: 4}}}
	pub.Publish(second)

	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ix.AddBackend("pod-a", 0)
	s, st := testSubscriber(t, ix, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a"})
	st.sync(t.Context()) // both batches, model unknown
	st.live(t.Context(), frames(Topic("pod-a", "m"), 1, second))

	chain := prefixcache.HashTokens(nil, prefixcache.Seed("m", "", ""), tokens, 4)
	if got := ix.Match(nil, chain)[id]; got != 2 {
		t.Errorf("matched %d blocks under model m, want 2", got)
	}
	if got := ix.Stats().Blocks; got != 2 {
		t.Errorf("index holds %d blocks, want 2 (nothing left under the unknown model)", got)
	}
	if st := s.Stats(); st.ApplyErrors != 0 {
		t.Errorf("stats %+v: want no apply errors", st)
	}
}

// One publisher for several data-parallel ranks (SGLang's attn_dp_rank): each batch goes to
// its rank's backend, a batch without a rank to the source's, and a restart clears them all.
func TestRankBackends(t *testing.T) {
	rec := newRecorder("srv", "srv#dp=0", "srv#dp=1")
	s, err := New(Options{Index: rec, Sources: []Source{{Endpoint: "tcp://127.0.0.1:1", Backend: "srv", RankBackends: []string{"srv#dp=0", "srv#dp=1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st := newStream(s, s.opts.Sources[0])
	for i, rank := range []int{1, 0, -1, 7} {
		b := storedBatch(uint64(10 + i))
		if rank >= 0 {
			b.DataParallelRank, b.HasRank = rank, true
		}
		st.apply(uint64(i), Encoding{MapBatch: i%2 == 0}.Append(nil, b), false)
	}
	st.reset()
	got := strings.Join(rec.take(), "; ")
	want := "2 stored [10]; 1 stored [11]; 0 stored [12]; 0 stored [13]; 0 cleared; 1 cleared; 2 cleared"
	if got != want {
		t.Errorf("applied: %s\nwant:    %s", got, want)
	}
}
