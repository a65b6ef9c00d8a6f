package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/routing/profiles"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
)

// benchGateway is a router over 100 backends with usher's profile and a prefix index, with
// every replication seam on (the prefix feed, the session feed, peers' in-flight counts)
// when rep is set. Nothing talks to Redis: the benchmark measures the request path.
func benchGateway(b testing.TB, rep *Replica) (*routing.Router, []routing.Request) {
	b.Helper()
	var io prefixcache.Options
	var uo profiles.UsherOptions
	if rep != nil {
		io.Feed = rep.prefix
		uo.Session.Seed, uo.Session.Feed = rep.sessionSeed(), &rep.places
	}
	ix, err := prefixcache.New(io)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := routing.New(routing.Options{Profile: profiles.Usher(uo), Index: ix, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var states []routing.BackendState
	var peers []peer.Load
	for i := range 100 {
		name := fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250)
		states = append(states, routing.BackendState{Name: name, Health: routing.Healthy, Known: routing.AllSignals,
			Running: i % 7, Queued: i % 3, KVUtilization: float64(i%10) / 10, KVCapacityBlocks: 4096, BlockSize: 16, UpdatedAt: time.Now()})
		peers = append(peers, peer.Load{Backend: name, Requests: int64(i % 4), PrefillTokens: int64(i * 100), Blocks: int64(i)})
	}
	if err := rt.Update(states); err != nil {
		b.Fatal(err)
	}
	if rep != nil {
		peer.SetPeerLoads(rt, peers)
	}
	// 64 conversations of 128-block prompts, picked in turn, so that sessions have homes and
	// the index holds their prefixes.
	reqs := make([]routing.Request, 64)
	for i := range reqs {
		reqs[i] = routing.Request{Chain: chainOf(uint64(i+1), 128), PromptTokens: 128 * 16, Session: fmt.Sprint("s", i)}
	}
	return rt, reqs
}

// BenchmarkPickReplicated is Pick+Done at 100 backends with a 128-block chain and a session,
// without replication and with every seam on; the buffers are drained every 256 picks, as a
// flush every 50 ms would at ~5,000 picks/s.
func BenchmarkPickReplicated(b *testing.B) {
	for _, replicated := range []bool{false, true} {
		b.Run(fmt.Sprintf("replicated=%v", replicated), func(b *testing.B) {
			var rep *Replica
			if replicated {
				c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
				defer c.Close()
				var err error
				if rep, err = New(Options{Client: c, ID: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			rt, reqs := benchGateway(b, rep)
			var w writer
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				res, err := rt.Pick(&reqs[i%len(reqs)])
				if err != nil {
					b.Fatal(err)
				}
				res.Done(routing.DoneInfo{})
				if i++; rep != nil && i%256 == 0 {
					b.StopTimer()
					rep.encodeChanges(&w)
					b.StartTimer()
				}
			}
		})
	}
}

// raceEnabled is set under the race detector (race_test.go), whose instrumentation allocates.
var raceEnabled bool

// TestPickReplicatedAllocs: with every replication seam on, Pick and Done allocate nothing
// once the buffers have grown.
func TestPickReplicatedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	rep, err := New(Options{Client: c, ID: "allocs"})
	if err != nil {
		t.Fatal(err)
	}
	rt, reqs := benchGateway(t, rep)
	var w writer
	i := 0
	pick := func() {
		res, err := rt.Pick(&reqs[i%len(reqs)])
		if err != nil {
			t.Fatal(err)
		}
		res.Done(routing.DoneInfo{})
		i++
	}
	for range 1000 { // grow the buffers
		pick()
	}
	rep.encodeChanges(&w)
	if n := testing.AllocsPerRun(200, pick); n != 0 {
		t.Errorf("Pick+Done with replication: %v allocs, want 0", n)
	}
}
