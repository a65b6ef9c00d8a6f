package kvevents

import (
	"testing"
	"time"
)

// TestReconcile steps what the live connection makes of the batches a replay applied ahead of
// it: a probe that raced the publisher (the batch then arrives live) is not stale and the
// batch counts as live; a probe whose batch the connection passes, or does not deliver within
// another probe interval, is stale and the batch replay-only. In listen mode a batch settled
// on silence that arrives after all counts as Late.
func TestReconcile(t *testing.T) {
	counts := func(st *stream) Stats {
		ss := st.status()
		return Stats{Live: ss.Live, ReplayOnly: ss.ReplayOnly, Late: ss.Late, Stale: ss.Stale}
	}
	for _, mode := range []string{"connect", "listen"} {
		t.Run(mode, func(t *testing.T) {
			pub := startPublisher(t, PublisherOptions{Topic: Topic("pod-a", "m")})
			rec := newRecorder("pod-a")
			var st *stream
			if mode == "connect" {
				_, st = testSubscriber(t, rec, Source{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: pub.ReplayEndpoint(), Backend: "pod-a", Model: "m"})
			} else {
				s, err := New(Options{Index: rec, Listen: "tcp://127.0.0.1:0",
					ListenSources: []Source{{Backend: "pod-a", Model: "m", ReplayEndpoint: pub.ReplayEndpoint()}}})
				if err != nil {
					t.Fatal(err)
				}
				st = (*s.listening.Load())[0]
			}
			ctx := t.Context()
			live := func(seq uint64) { st.live(ctx, frames(Topic("pod-a", "m"), seq, storedBatch(seq))) }
			type step struct {
				name string
				do   func()
				want Stats
			}
			steps := []step{
				{"connecting replays 0-2, which then arrive live", func() {
					for h := range uint64(3) {
						pub.Publish(storedBatch(h))
					}
					st.sync(ctx)
					live(0)
					live(1)
					live(2)
				}, Stats{Live: 3}},
				{"the probe replays 3 just before it arrives live: a race, not stale", func() {
					pub.Publish(storedBatch(3))
					st.probe(ctx)
					live(3)
				}, Stats{Live: 4}},
				{"the probe replays 4, which never arrives; 5 does: 4 was missed", func() {
					pub.Drop(storedBatch(4))
					st.probe(ctx)
					pub.Publish(storedBatch(5))
					live(5)
				}, Stats{Live: 5, ReplayOnly: 1, Stale: 1}},
				{"the probe replays 6; after the grace the connection has not delivered it", func() {
					pub.Drop(storedBatch(6))
					st.probe(ctx)
					if st.settleSilent(time.Now()) {
						t.Error("settled within the grace")
					}
					if stale := st.settleSilent(time.Now().Add(minGrace)); !stale {
						t.Error("settleSilent after the grace = false, want a stale probe")
					}
				}, Stats{Live: 5, ReplayOnly: 2, Stale: 2}},
			}
			var late int64
			if mode == "listen" {
				// (In connect mode the silent connection is replaced: 6 cannot arrive.)
				late = 1
				steps = append(steps, step{"6, settled on silence, arrives after all: late", func() { live(6) },
					Stats{Live: 5, ReplayOnly: 2, Stale: 2, Late: 1}})
			}
			steps = append(steps, step{"a gap's replay brings 7 (missed), 8 (arrives live) and 9 (published after 8)", func() {
				pub.Drop(storedBatch(7))
				pub.Publish(storedBatch(8))
				pub.Publish(storedBatch(9))
				live(8)
				live(9)
			}, Stats{Live: 7, ReplayOnly: 3, Stale: 2, Late: late}})
			for _, s := range steps {
				s.do()
				if got := counts(st); got != s.want {
					t.Fatalf("%s: %+v, want %+v", s.name, got, s.want)
				}
			}
			if got := rec.take(); len(got) != 10 {
				t.Errorf("index calls %q, want 0-9 stored once each", got)
			}
		})
	}
}
