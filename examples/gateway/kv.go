package main

import (
	"context"
	"log"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// kvWiring follows the backends' KV events (vLLM --kv-events-config, SGLang's equivalent) and
// applies them to the prefix index's exact mode, so the router sees what each engine really
// caches, evictions included, instead of what the router guessed it routed there. It needs
// exact token ids at the gateway: -tokenizer endpoint (or local with the simulated fleet), and
// -block-size equal to the engine's block size.
type kvWiring struct {
	sub *kvevents.Subscriber
}

// newKVWiring returns nil when no backend publishes KV events.
func newKVWiring(ix *prefixcache.Index, backends []Backend) (*kvWiring, error) {
	var sources []kvevents.Source
	for _, b := range backends {
		if b.KVEvents == "" {
			continue
		}
		// The backend is registered in the index under its URL, the name the router gives it.
		sources = append(sources, kvevents.Source{Endpoint: b.KVEvents, ReplayEndpoint: b.Replay, Backend: b.URL})
	}
	if len(sources) == 0 {
		return nil, nil
	}
	sub, err := kvevents.New(ix, kvevents.Options{
		Sources: sources,
		OnError: func(backend string, err error) { log.Printf("kv events from %s: %v", backend, err) },
	})
	if err != nil {
		return nil, err
	}
	return &kvWiring{sub: sub}, nil
}

func (k *kvWiring) Run(ctx context.Context) error { return k.sub.Run(ctx) }

func (k *kvWiring) Close() { _ = k.sub.Close() }
