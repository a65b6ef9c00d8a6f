package simfleet

import (
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// KVPublisher sends batches of KV events, each a *kvevents.Batch; *kvpub.Publisher (vLLM's
// ZMQ wire format) is one. The hook made by PublishKVEvents calls Publish from one server's Run goroutine, one batch at
// a time; a publisher shared by several servers must be safe for concurrent use.
type KVPublisher interface {
	Publish(b any) (uint64, error)
}

// AppendKVBatch converts engine KV events into the events of a vLLM KV-event batch, appending
// to b.Events (stored blocks on medium "GPU", as vLLM reports them). Hashes are the engine's
// own block hashes: opaque to a router, which maps them through the token ids, as with vLLM.
func AppendKVBatch(b *kvevents.Batch, evs []engine.KVEvent) {
	for _, ev := range evs {
		out := kvevents.BlockEvent{BlockSize: ev.BlockSize}
		switch ev.Kind {
		case engine.KVBlockStored:
			out.Kind = kvevents.BlockStored
			out.Parent, out.HasParent = uint64(ev.Parent), ev.HasParent
			out.Tokens = ev.Tokens
			out.Medium = "GPU"
			out.LoRAName = ev.LoRA
		case engine.KVBlockRemoved:
			out.Kind = kvevents.BlockRemoved
			out.Medium = "GPU"
		case engine.KVAllBlocksCleared:
			out.Kind = kvevents.AllBlocksCleared
		default:
			continue
		}
		out.Hashes = make([]uint64, len(ev.Hashes))
		for i, h := range ev.Hashes {
			out.Hashes[i] = uint64(h)
		}
		b.Events = append(b.Events, out)
	}
}

// PublishKVEvents returns an Options.OnKVEvents hook that publishes each step's KV events as
// one batch, stamped with the wall clock, as a vLLM server with
// --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}' does. Publish
// errors are passed to onErr when it is non-nil (the engine does not wait for subscribers).
// The hook reuses one batch between calls, so it is not safe for concurrent use: give each
// server its own.
func PublishKVEvents(p KVPublisher, onErr func(error)) func([]engine.KVEvent) {
	var b kvevents.Batch
	return func(evs []engine.KVEvent) {
		b = kvevents.Batch{Timestamp: float64(time.Now().UnixNano()) / 1e9, Events: b.Events[:0]}
		AppendKVBatch(&b, evs)
		if len(b.Events) == 0 {
			return
		}
		if _, err := p.Publish(&b); err != nil && onErr != nil {
			onErr(err)
		}
	}
}
