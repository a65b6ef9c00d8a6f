package kvevents

import (
	"math/rand/v2"
	"testing"

	"github.com/usher-llm/usher/prefixcache"
)

// TestModelAgainstEngine applies long random histories of a toy engine
// (stores with shared prefixes and adapters, evictions, clears, restarts
// with fresh engine hashes) in every wire encoding, without sockets, and
// checks after every batch that the index mirrors the engine exactly.
func TestModelAgainstEngine(t *testing.T) {
	for seed := range uint64(6) {
		enc := allEncodings()[seed%uint64(len(allEncodings()))]
		ix, err := prefixcache.New(prefixcache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ix.AddBackend("pod-a", 1<<14); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 11))
		n := &node{t: t, pod: "pod-a", eng: newEngine(seed, e2eBlockSize), rng: rng, prompts: prompts(rng, 30, e2eBlockSize, 10)}
		s, st := testSubscriber(t, ix, Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a", Model: e2eModel})
		ref := newRefIndex()
		_, rst := testSubscriber(t, ref, Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a", Model: e2eModel})
		var seq uint64
		for i := range 400 {
			var b *Batch
			switch r := rng.IntN(100); {
			case r < 2:
				b = &Batch{Events: []BlockEvent{n.eng.clear()}}
			case r < 4: // the engine restarts: new hashes, sequence from 0
				n.eng = newEngine(rng.Uint64(), e2eBlockSize)
				seq = 0
				st.liveOnConn, rst.liveOnConn = false, false
				b = n.step()
			default:
				b = n.step()
			}
			msg := [][]byte{[]byte(Topic("pod-a", e2eModel)), be64(seq), enc.Append(nil, b)}
			st.live(t.Context(), msg)
			rst.live(t.Context(), msg)
			seq++
			if len(ref.held) != len(n.eng.held) {
				t.Fatalf("seed %d, batch %d: the reference holds %d blocks, the engine %d", seed, i, len(ref.held), len(n.eng.held))
			}
			if i%8 != 7 && i != 399 {
				continue // the full comparison is costly; the reference is checked on every batch
			}
			if d := diff(ix, n); d != "" {
				t.Fatalf("seed %d, batch %d: %s; stats %+v; index %+v", seed, i, d, s.Stats(), ix.Stats())
			}
		}
		if st := s.Stats(); st.ApplyErrors != 0 || st.DecodeErrors != 0 {
			t.Errorf("seed %d: %+v", seed, st)
		}
	}
}

func be64(v uint64) []byte {
	return []byte{byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}
