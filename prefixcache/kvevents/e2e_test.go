package kvevents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

const (
	e2eModel     = "meta-llama/Llama-3.1-8B-Instruct"
	e2eBlockSize = 4
)

// node is one simulated model server: an engine cache and the publisher
// announcing its changes.
type node struct {
	t       *testing.T
	pod     string
	eng     *engine
	pub     *Publisher
	enc     Encoding
	rng     *rand.Rand
	prompts [][]uint32
	ts      float64
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// start binds a publisher (on fresh ports when ep and replay are
// "tcp://127.0.0.1:0", or the old ones after a restart) and serves replay.
func (n *node) start(ep, replay string, opts PublisherOptions) {
	n.t.Helper()
	opts.Endpoint, opts.Topic, opts.ReplayEndpoint, opts.Encoding = ep, Topic(n.pod, e2eModel), replay, n.enc
	var err error
	// A restarted publisher binds the ports its predecessor just released.
	for range 50 {
		if n.pub, err = NewPublisher(opts); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		n.t.Fatalf("%s: NewPublisher: %v", n.pod, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	n.wg.Go(func() { _ = n.pub.Run(ctx) })
}

func (n *node) shutdown() {
	n.stop()
	n.pub.Close()
	n.wg.Wait()
}

// step lets the engine store a few prompts and sometimes evict, and
// returns the batch announcing it.
func (n *node) step() *Batch {
	n.ts += 0.01
	b := &Batch{Timestamp: n.ts, DataParallelRank: 0, HasRank: true}
	for range 1 + n.rng.IntN(3) {
		lora := ""
		if n.rng.IntN(4) == 0 {
			lora = "sql-lora"
		}
		if ev, ok := n.eng.store(lora, n.prompts[n.rng.IntN(len(n.prompts))]); ok {
			b.Events = append(b.Events, ev)
		}
	}
	if n.rng.IntN(3) == 0 {
		if ev, ok := n.eng.evict(1 + n.rng.IntN(4)); ok {
			b.Events = append(b.Events, ev)
		}
	}
	return b
}

func (n *node) publish(count int) {
	n.t.Helper()
	for range count {
		if _, err := n.pub.Publish(n.step()); err != nil {
			n.t.Fatalf("%s: Publish: %v", n.pod, err)
		}
	}
}

// diff compares the index's view of backend pod with the engine's cache:
// for every prompt and adapter the matched prefix length, and the number
// of blocks held. It returns "" when they agree.
func diff(ix *prefixcache.Index, n *node) string {
	id, ok := ix.Lookup(n.pod)
	if !ok {
		return n.pod + " not registered"
	}
	var dst []int32
	for i, p := range n.prompts {
		for _, lora := range []string{"", "sql-lora"} {
			chain := prefixcache.HashTokens(nil, prefixcache.Seed(e2eModel, lora, ""), p, e2eBlockSize)
			dst = ix.Match(dst, chain)
			if got, want := int(dst[id]), n.eng.matched(lora, p); got != want {
				return fmt.Sprintf("%s: prompt %d (lora %q): index matches %d blocks, engine holds %d", n.pod, i, lora, got, want)
			}
		}
	}
	for _, b := range ix.Stats().Backends {
		if b.ID == id && b.Blocks != int64(len(n.eng.held)) {
			return fmt.Sprintf("%s: index holds %d blocks, engine %d", n.pod, b.Blocks, len(n.eng.held))
		}
	}
	return ""
}

// converge polls until the index mirrors every engine, failing after a
// generous deadline (the loopback normally converges in milliseconds).
func converge(t *testing.T, ix *prefixcache.Index, sub *Subscriber, nodes ...*node) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var d string
		for _, n := range nodes {
			if d = diff(ix, n); d != "" {
				break
			}
		}
		if d == "" {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Logf("goroutines:\n%s", buf)
			t.Fatalf("index did not converge: %s; stats %+v", d, sub.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestAgainstRealPublisher runs the Subscriber against in-process
// publishers on loopback TCP sockets speaking vLLM's exact wire format,
// through a late join, a sequence gap, a publisher restart and a cache
// clear, and checks after each that the index holds exactly the engines'
// caches.
func TestAgainstRealPublisher(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shared := prompts(rng, 40, e2eBlockSize, 12)
	var nodes []*node
	for i, pod := range []string{"pod-a", "pod-b"} {
		if _, err := ix.AddBackend(pod, 1<<14); err != nil {
			t.Fatal(err)
		}
		n := &node{t: t, pod: pod, eng: newEngine(uint64(i+1), e2eBlockSize), rng: rand.New(rand.NewPCG(uint64(i), 9)), prompts: shared}
		if i == 1 {
			n.enc = Encoding{MapEvents: true, Hashes: HashAsInt}
		}
		n.start("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", PublisherOptions{})
		defer n.shutdown()
		nodes = append(nodes, n)
	}
	a, b := nodes[0], nodes[1]

	// Events published before anyone subscribes are recovered by replay:
	// for pod-a, named in its Source, as soon as the Subscriber connects;
	// for pod-b, known only from its topic, when its first live batch
	// arrives.
	a.publish(5)
	b.publish(5)

	sources := []Source{
		{Endpoint: a.pub.Endpoint(), ReplayEndpoint: a.pub.ReplayEndpoint(), Backend: a.pod, Model: e2eModel},
		{Endpoint: b.pub.Endpoint(), ReplayEndpoint: b.pub.ReplayEndpoint(), Topic: "kv@"},
	}
	sub, err := New(Options{Index: ix, Sources: sources, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ProbeInterval: 100 * time.Millisecond,
		OnError: func(backend string, err error) {
			// A replay endpoint is briefly unreachable while a
			// publisher restarts; anything else is a bug.
			if !errors.Is(err, ErrReplay) {
				t.Errorf("%s: %v", backend, err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(context.Background()) }()
	defer func() {
		sub.Close()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	converge(t, ix, sub, a)

	// Live traffic. pod-b's events cannot be attributed before its topic
	// is seen live, and a PUB socket drops what it publishes before the
	// subscription reaches it, so pod-b behaves as a busy engine does:
	// it keeps publishing until the first batch gets through; the replay
	// that triggers brings everything before it.
	a.publish(20)
	b.publish(20)
	for deadline := time.Now().Add(20 * time.Second); sub.Stats().Batches <= 25; {
		if time.Now().After(deadline) {
			t.Fatalf("no batch of pod-b ever arrived: %+v", sub.Stats())
		}
		b.publish(1)
		time.Sleep(2 * time.Millisecond)
	}
	converge(t, ix, sub, a, b)

	// A gap: the PUB socket drops a batch; the next one reveals it (or,
	// if the connection stays idle long enough in between, the probe).
	before := sub.Stats()
	if _, err := a.pub.Drop(a.step()); err != nil {
		t.Fatal(err)
	}
	a.publish(1)
	converge(t, ix, sub, a, b)
	eventually(t, func() bool { st := sub.Stats(); return st.Gaps+st.Stale > before.Gaps+before.Stale },
		"a dropped batch counted neither as a gap nor as a stale connection")

	// pod-b restarts: a new process with an empty cache, new engine hashes,
	// sequence numbers from 0 again, the tagged-map encoding with 32-byte
	// hashes, and replay replies that carry the topic.
	pubEP, replayEP := b.pub.Endpoint(), b.pub.ReplayEndpoint()
	b.shutdown()
	b.eng = newEngine(99, e2eBlockSize)
	b.enc = Encoding{MapBatch: true, MapEvents: true, Hashes: HashAsBytes}
	b.start(pubEP, replayEP, PublisherOptions{ReplayWithTopic: true})
	b.publish(8)
	converge(t, ix, sub, a, b)
	// The index can converge before the reconnect is counted: an idle probe may find the new
	// history through the replay endpoint first, and only then replace the dead connection.
	eventually(t, func() bool { st := sub.Stats(); return st.Resets >= 1 && st.Reconnects >= 1 },
		"after a restart: want Resets and Reconnects both >= 1")

	// The restarted publisher keeps going, and pod-a drops its whole cache.
	b.publish(10)
	if _, err := a.pub.Publish(&Batch{Timestamp: 9, Events: []BlockEvent{a.eng.clear()}}); err != nil {
		t.Fatal(err)
	}
	a.publish(5)
	converge(t, ix, sub, a, b)

	// Both sources are connected, pod-b's name learnt from its topic, and
	// each has applied the last batch its publisher sent.
	eventually(t, func() bool {
		ss := sub.Sources()
		return ss[0].Connected && ss[1].Connected && ss[0].Backend == "pod-a" && ss[1].Backend == "pod-b" &&
			ss[0].HasApplied && ss[0].Applied == a.pub.Sequence()-1 && ss[1].HasApplied && ss[1].Applied == b.pub.Sequence()-1
	}, "Sources() never showed both sources connected and caught up")
	// Each source counts its own share of Stats: pod-b's publisher
	// restarted, pod-a's did not. The two are read one after the other
	// while idle probes may still replace connections, hence the polling.
	eventually(t, func() bool {
		ss := sub.Sources()
		return perSource(ss...) == sharedCounters(sub.Stats()) && ss[0].Batches > 0 && ss[0].Resets == 0 &&
			ss[1].Batches > 0 && ss[1].Resets >= 1 && ss[1].Reconnects >= 1
	}, "Sources() counters never split Stats as expected (pod-a: batches, no reset; pod-b: batches, reset, reconnect)")

	st := sub.Stats()
	if st.DecodeErrors != 0 || st.ApplyErrors != 0 || st.Lost != 0 || st.Unregistered != 0 {
		t.Errorf("stats %+v: want no decode, apply, lost or unregistered", st)
	}
	if st.Events == 0 || st.Replays == 0 || st.Replayed == 0 {
		t.Errorf("stats %+v: want events, replays and replayed batches", st)
	}
}

// TestProbeRecoversSilentLoss: batches the PUB socket never delivers, with
// no later batch to reveal the gap, are recovered by the idle probe, and
// the silent connection is replaced.
func TestProbeRecoversSilentLoss(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.AddBackend("pod-a", 1<<14); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	n := &node{t: t, pod: "pod-a", eng: newEngine(5, e2eBlockSize), rng: rng, prompts: prompts(rng, 20, e2eBlockSize, 8)}
	n.start("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", PublisherOptions{})
	defer n.shutdown()
	sub, err := New(Options{
		Index:         ix,
		Sources:       []Source{{Endpoint: n.pub.Endpoint(), ReplayEndpoint: n.pub.ReplayEndpoint(), Backend: "pod-a", Model: e2eModel}},
		ProbeInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sub.Run(context.Background()) }()
	defer func() { sub.Close(); <-done }()

	for range 3 {
		if _, err := n.pub.Drop(n.step()); err != nil {
			t.Fatal(err)
		}
	}
	converge(t, ix, sub, n)
	// The replay made on connecting recovers whatever was dropped before
	// it; then the connection is idle and only the probe can notice.
	for range 2 {
		if _, err := n.pub.Drop(n.step()); err != nil {
			t.Fatal(err)
		}
	}
	converge(t, ix, sub, n)
	// The counter is bumped once the probe's replay is over, just after
	// the index converged.
	eventually(t, func() bool { return sub.Stats().Stale >= 1 }, "no stale connection counted")
	if st := sub.Stats(); st.Lost != 0 || st.Batches != 5 {
		t.Errorf("stats %+v: want 5 batches applied, none lost", st)
	}
}

// eventually polls cond until it holds, failing after a generous deadline.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}

// TestCloseLeavesNoGoroutines: after Close, the goroutines Run started
// (per source, per connection, and the zmq4 sockets' own) are gone.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.AddBackend("pod-a", 0); err != nil {
		t.Fatal(err)
	}
	pub := startPublisher(t, PublisherOptions{Topic: Topic("pod-a", "m")})
	pub.Publish(storedBatch(1))
	baseline := runtime.NumGoroutine()

	sub, err := New(Options{Index: ix, Sources: []Source{
		{Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a"},
		{Endpoint: "tcp://127.0.0.1:1"}, // never reachable: retried with backoff
	}, MinBackoff: time.Millisecond, ProbeInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sub.Run(context.Background()) }()
	// Batches may reach 2: Publish only queues the batch for the PUB socket's writer, which,
	// on a loaded machine, can send it after the subscription is in place. The live copy names
	// the model the replayed one could not, so the backend is rebuilt from it (Resets 1).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		st := sub.Stats()
		if st.Batches >= 1 && st.Replays >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no batch replayed and probed: %+v %+v", st, sub.Sources())
		}
	}
	sub.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	eventually(t, func() bool { return runtime.NumGoroutine() <= baseline }, "goroutines left behind after Close")
}
