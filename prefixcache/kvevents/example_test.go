package kvevents_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// A vLLM server publishes its cache changes; the Subscriber applies them to the index, and the
// gateway's own hash of a prompt then matches what the server holds.
func Example() {
	const model = "Qwen/Qwen3-32B"
	tokens := []uint32{101, 102, 103, 104, 105, 106, 107, 108} // two blocks of 4

	// The model server side (here in process, on loopback).
	pub, err := kvpub.New(kvpub.Options{
		Endpoint:       "tcp://127.0.0.1:0",
		Topic:          kvpub.Topic("pod-0", model),
		ReplayEndpoint: "tcp://127.0.0.1:0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pub.Run(ctx) // serves replay requests

	// The engine stored both blocks before anyone listened; the replay brings them.
	pub.Publish(&kvevents.Batch{Timestamp: 1, Events: []kvevents.BlockEvent{{
		Kind: kvevents.BlockStored, Hashes: []uint64{0xaaa, 0xbbb}, Tokens: tokens, BlockSize: 4, Medium: "GPU",
	}}})

	// The gateway side.
	ix, _ := prefixcache.New(prefixcache.Options{})
	ix.AddBackend("pod-0", 0)
	sub, err := kvevents.New(kvevents.Options{Index: ix, Sources: []kvevents.Source{{
		Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-0", Model: model,
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	go sub.Run(ctx)
	defer sub.Close()

	chain := prefixcache.HashTokens(nil, prefixcache.Seed(model, "", ""), tokens, 4)
	matched := func() int32 {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if m := ix.Match(nil, chain); len(m) > 0 && m[0] == int32(len(chain)) {
				return m[0]
			}
		}
		return ix.Match(nil, chain)[0]
	}
	fmt.Println("blocks matched:", matched())
	// Output: blocks matched: 2
}

// Listen mode: the gateway binds one endpoint and every model server connects to it, which is what
// vLLM does whenever its endpoint names a host:
//
//	--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
//	  "endpoint": "tcp://gateway:5557", "replay_endpoint": "tcp://*:5558",
//	  "topic": "kv@pod-0@Qwen/Qwen3-32B"}'
//
// The topic tells the servers apart; the gateway's configuration gives each one's replay endpoint.
func Example_listen() {
	const model = "Qwen/Qwen3-32B"
	tokens := []uint32{101, 102, 103, 104, 105, 106, 107, 108} // two blocks of 4
	dir, err := os.MkdirTemp("", "kvevents")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	replay := "ipc://" + filepath.Join(dir, "pod-0-replay") // pod-0's replay endpoint
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The gateway side.
	ix, _ := prefixcache.New(prefixcache.Options{})
	ix.AddBackend("pod-0", 0)
	sub, err := kvevents.New(kvevents.Options{
		Index:         ix,
		Listen:        "tcp://127.0.0.1:0", // "tcp://0.0.0.0:5557" in a deployment
		ListenSources: []kvevents.Source{{Backend: "pod-0", Model: model, ReplayEndpoint: replay}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go sub.Run(ctx)
	defer sub.Close()
	<-sub.Ready()

	// The model server side: it connects to the gateway.
	pub, err := kvpub.New(kvpub.Options{
		Endpoint: sub.ListenAddr(),
		Connect:  true, Topic: kvpub.Topic("pod-0", model), ReplayEndpoint: replay,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	go pub.Run(ctx)
	pub.Publish(&kvevents.Batch{Timestamp: 1, Events: []kvevents.BlockEvent{{
		Kind: kvevents.BlockStored, Hashes: []uint64{0xaaa, 0xbbb}, Tokens: tokens, BlockSize: 4, Medium: "GPU",
	}}})

	// A PUB socket drops what it publishes before the subscription reaches it; the first batch
	// that gets through brings the earlier ones by replay (the catch-up at start may bring them
	// sooner, before the source has been heard from). The engine keeps working (here: steps that
	// change nothing) until then.
	chain := prefixcache.HashTokens(nil, prefixcache.Seed(model, "", ""), tokens, 4)
	heard := func() bool { return ix.Match(nil, chain)[0] == 2 && sub.Sources()[0].Connected }
	for deadline := time.Now().Add(10 * time.Second); !heard() && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		pub.Publish(&kvevents.Batch{Timestamp: 2})
	}
	fmt.Println("blocks matched:", ix.Match(nil, chain)[0])
	ss := sub.Sources()[0]
	fmt.Println(ss.Backend, "connected:", ss.Connected, "lost:", ss.Lost)
	// Output:
	// blocks matched: 2
	// pod-0 connected: true lost: 0
}

// Decoding a batch in vLLM's legacy positional encoding, with sha256 block hashes.
func ExampleDecoder() {
	sha := make([]byte, 32)
	sha[31] = 0x2a // the last 8 bytes, big-endian, are the folded hash
	payload, _ := msgpack.Marshal([]any{
		1767225600.5, // ts
		[]any{
			[]any{"BlockStored", []any{sha}, nil, []any{1, 2, 3, 4}, 4, nil, "GPU"},
			[]any{"BlockRemoved", []any{sha}, "GPU"},
			[]any{"SomethingNew", 1},
		},
		0, // data_parallel_rank
	})

	d := new(kvevents.Decoder)
	var b kvevents.Batch
	if err := d.Decode(payload, &b); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range b.Events {
		fmt.Printf("%s %#x tokens=%v medium=%s\n", e.Kind, e.Hashes, e.Tokens, e.Medium)
	}
	fmt.Println("unknown events skipped:", b.Unknown)

	// Garbage yields an error that says what and where.
	err := d.Decode([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xa3, 'x', 'y', 'z'}, &b)
	fmt.Println(err)
	// Output:
	// BlockStored [0x2a] tokens=[1 2 3 4] medium=GPU
	// BlockRemoved [0x2a] tokens=[] medium=GPU
	// unknown events skipped: 1
	// kvevents: malformed payload: events: want array, got str (at byte 10)
}
