package prefixpeer_test

import (
	"fmt"

	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/prefixcache"
)

// Two gateway replicas share what they learn: replica A's index reports its inserts to a
// Buffer, a replication goroutine drains it (here, into replica B directly; across
// processes, onto the wire), and B applies each chain with InsertRemote, by backend name, since
// the two indexes number their backends differently. B does not report what it applies, so
// nothing echoes back.
func ExampleBuffer() {
	feed := prefixpeer.NewBuffer(0)
	a, _ := prefixcache.New(prefixcache.Options{Feed: feed})
	b, _ := prefixcache.New(prefixcache.Options{})
	for _, name := range []string{"vllm-0", "vllm-1"} {
		_, _ = a.AddBackend(name, 0)
	}
	for _, name := range []string{"vllm-1", "vllm-0"} { // another order: other ids
		_, _ = b.AddBackend(name, 0)
	}

	seed := prefixcache.Seed("qwen3-32b", "", "")
	chain := prefixcache.HashTokens(nil, seed, make([]uint32, 64), 16)
	id, _ := a.Lookup("vllm-1")
	_ = a.Insert(id, chain) // replica A routed a request to vllm-1

	n := feed.Drain(func(backend string, chain []prefixcache.BlockHash, removed bool) {
		id, ok := b.Lookup(backend)
		if !ok {
			return // a backend replica B does not know yet
		}
		if removed {
			_ = prefixpeer.RemoveRemote(b, id, chain)
		} else {
			_ = prefixpeer.InsertRemote(b, id, chain)
		}
	})
	id, _ = b.Lookup("vllm-1")
	fmt.Printf("%d change replicated; on B, vllm-1 holds %d of %d blocks\n", n, b.Match(nil, chain)[id], len(chain))
	fmt.Println("dropped:", feed.Dropped())
	// Output:
	// 1 change replicated; on B, vllm-1 holds 4 of 4 blocks
	// dropped: 0
}
