package kvevents

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

// benchBatch builds the batch an engine step publishes. "prefill": four
// prompts of 32 new blocks of 16 tokens stored, two evictions of 16
// blocks. "decode": 32 sequences each filling one block, one eviction of
// 32 blocks.
func benchBatch(shape string) *Batch {
	rng := rand.New(rand.NewPCG(3, 4))
	b := &Batch{Timestamp: 1767225600.5, HasRank: true}
	stored, blocks, removed, perRemove := 4, 32, 2, 16
	if shape == "decode" {
		stored, blocks, removed, perRemove = 32, 1, 1, 32
	}
	for range stored {
		e := BlockEvent{Kind: BlockStored, BlockSize: 16, Medium: "GPU", Parent: rng.Uint64(), HasParent: true}
		for range blocks {
			e.Hashes = append(e.Hashes, rng.Uint64())
			for range 16 {
				e.Tokens = append(e.Tokens, uint32(rng.IntN(150000)))
			}
		}
		b.Events = append(b.Events, e)
	}
	for range removed {
		e := BlockEvent{Kind: BlockRemoved, Medium: "GPU"}
		for range perRemove {
			e.Hashes = append(e.Hashes, rng.Uint64())
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// perEvent reports events and blocks per second and heap allocations per
// event for a loop that handled that many events carrying that many block
// hashes in total.
func perEvent(b *testing.B, before *runtime.MemStats, events, blocks int) {
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
}

func countBlocks(b *Batch) int {
	n := 0
	for _, e := range b.Events {
		n += len(e.Hashes)
	}
	return n
}

func BenchmarkDecode(b *testing.B) {
	encodings := []struct {
		name string
		enc  Encoding
	}{
		{"legacy-array-int", Encoding{}},
		{"tagged-map-sha256", Encoding{MapBatch: true, MapEvents: true, Hashes: HashAsBytes}},
	}
	for _, shape := range []string{"prefill", "decode"} {
		batch := benchBatch(shape)
		for _, e := range encodings {
			payload := e.enc.Append(nil, batch)
			b.Run(shape+"/"+e.name, func(b *testing.B) {
				d := new(Decoder)
				var out Batch
				b.ReportAllocs()
				b.SetBytes(int64(len(payload)))
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				n, blocks := 0, 0
				for b.Loop() {
					if err := d.Decode(payload, &out); err != nil {
						b.Fatal(err)
					}
					n += len(out.Events)
					blocks += countBlocks(&out)
				}
				perEvent(b, &ms, n, blocks)
			})
		}
	}
}

// BenchmarkApplyEvents measures what the Subscriber does per received
// batch once the bytes are off the socket: decode, then apply every event
// to a prefixcache.Index in exact mode (usher chain hashes recomputed from
// the tokens, engine→usher map updated, blocks inserted or removed). The
// batches come from the toy engine: prompts of up to 32 blocks of 16
// tokens sharing prefixes, random evictions, and a cache clear closing
// each cycle so that the loop runs in steady state.
func BenchmarkApplyEvents(b *testing.B) {
	payloads, blocksIn := engineCycle()
	cycle := len(payloads)

	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ix.AddBackend("pod-0", 1<<16); err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Index: ix, Sources: []Source{{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-0", Model: "m"}}})
	if err != nil {
		b.Fatal(err)
	}
	st := s.streams[0]
	for i, p := range payloads { // warm the index's tables and maps
		st.apply(uint64(i), p, false)
	}
	if e := s.Stats().ApplyErrors + s.Stats().DecodeErrors; e != 0 {
		b.Fatalf("%d errors applying the cycle", e)
	}
	before := s.Stats().Events
	b.ReportAllocs()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	i, blocks := 0, 0
	for b.Loop() {
		st.apply(uint64(i), payloads[i%cycle], false)
		blocks += blocksIn[i%cycle]
		i++
	}
	perEvent(b, &ms, int(s.Stats().Events-before), blocks)
	if e := s.Stats().ApplyErrors; e != 0 {
		b.Fatalf("%d apply errors", e)
	}
}

// engineCycle returns the encoded batches of one cycle of the toy engine
// and the number of block hashes in each; the cycle ends with a clear, so
// it can be applied over and over.
func engineCycle() (payloads [][]byte, blocksIn []int) {
	const blockSize, cycle = 16, 256
	rng := rand.New(rand.NewPCG(5, 6))
	ps := prompts(rng, 200, blockSize, 32)
	eng := newEngine(1, blockSize)
	for i := range cycle {
		batch := &Batch{Timestamp: float64(i)}
		for range 1 + rng.IntN(4) {
			if ev, ok := eng.store("", ps[rng.IntN(len(ps))]); ok {
				batch.Events = append(batch.Events, ev)
			}
		}
		if len(eng.held) > 2000 {
			ev, _ := eng.evict(len(eng.held) - 1500)
			batch.Events = append(batch.Events, ev)
		}
		if i == cycle-1 {
			batch.Events = append(batch.Events, eng.clear())
		}
		payloads = append(payloads, Encoding{}.Append(nil, batch))
		blocksIn = append(blocksIn, countBlocks(batch))
	}

	return payloads, blocksIn
}

// BenchmarkSubscriberLoopback measures the whole path through real
// sockets: a Publisher on loopback TCP, the Subscriber's ZMQ connection,
// decoding and applying to the index. Each op publishes one batch of the
// engine cycle; the timer stops once all of them are applied. Allocations
// count both ends and the zmq4 library (a fresh buffer per frame received).
func BenchmarkSubscriberLoopback(b *testing.B) {
	payloads, blocksIn := engineCycle()
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ix.AddBackend("pod-0", 1<<16); err != nil {
		b.Fatal(err)
	}
	pub, err := NewPublisher(PublisherOptions{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: Topic("pod-0", "m")})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer pub.Close()
	go pub.Run(ctx)
	// No idle probe: the publisher may run far ahead of the subscriber
	// (the PUB connection queues without bound), and a probe then finds
	// the subscriber's position gone from the replay history.
	s, err := New(Options{Index: ix, Sources: []Source{{Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-0", Model: "m"}},
		ProbeInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	go s.Run(ctx)
	defer s.Close()
	// Warm up with whole cycles until everything published has been
	// applied: the PUB socket drops what it sends before the subscription
	// reaches it, and only a later live batch reveals that gap.
	warm := 0
	for deadline := time.Now().Add(time.Minute); ; {
		pub.PublishPayload(payloads[warm%len(payloads)])
		warm++
		if warm%len(payloads) != 0 {
			continue
		}
		// Wait while the subscriber makes progress; a stall means a
		// gap that the next cycle's first live batch will reveal.
		for last := int64(-1); ; {
			time.Sleep(5 * time.Millisecond)
			n := s.Stats().Batches
			if n == int64(warm) || n == last {
				break
			}
			last = n
		}
		if s.Stats().Batches == int64(warm) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("warm-up: %+v", s.Stats())
		}
	}
	before := s.Stats()
	b.ReportAllocs()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// b.N rather than b.Loop: the timed region must include waiting for
	// the last batch to be applied.
	blocks := 0
	b.ResetTimer()
	for i := range b.N {
		pub.PublishPayload(payloads[i%len(payloads)])
		blocks += blocksIn[i%len(payloads)]
	}
	waitBatches(b, s, int64(warm+b.N))
	b.StopTimer()
	after := s.Stats()
	perEvent(b, &ms, int(after.Events-before.Events), blocks)
	if e := after.ApplyErrors + after.DecodeErrors; e != 0 {
		b.Fatalf("%d errors", e)
	}
}

func waitBatches(b *testing.B, s *Subscriber, n int64) {
	for deadline := time.Now().Add(time.Minute); s.Stats().Batches < n; time.Sleep(50 * time.Microsecond) {
		if st := s.Stats(); st.Lost > 0 || st.Resets > 0 || time.Now().After(deadline) {
			b.Fatalf("only %d of %d batches applied: %+v", s.Stats().Batches, n, s.Stats())
		}
	}
}
