package kvfeed_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache/kvevents"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
)

// latePublisher forwards to a publisher made after the server that publishes through it: the
// publisher connects to the feed's listening socket, bound only once the Handler runs.
type latePublisher struct {
	p atomic.Pointer[kvpub.Publisher]
}

func (l *latePublisher) Publish(b any) (uint64, error) {
	if p := l.p.Load(); p != nil {
		return p.Publish(b)
	}
	return 0, nil
}

// TestListenModeLive: simulated servers publish their KV events as vLLM does with an endpoint
// naming the gateway (they connect to the feed's listening socket), one batch per engine step
// that changed the cache, while clients keep them busy with pauses around the probe interval,
// so that idle probes keep asking the replay endpoint for batches the live connection is
// about to deliver. At least 99.9% of the batches are counted as delivered live, no batch
// counted as replay-only arrives live afterwards, and the /metrics series say the same.
func TestListenModeLive(t *testing.T) {
	const (
		servers = 4
		batches = 1500 // published after the warm-up
		probe   = 100 * time.Millisecond
	)
	dir := t.TempDir()
	late := make([]*latePublisher, servers)
	for i := range late {
		late[i] = new(latePublisher)
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: servers, Configure: func(i int, o *simfleet.Options) {
		o.OnKVEvents = simfleet.PublishKVEvents(late[i], nil)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	var backends []proxy.Backend
	for i, u := range fleet.URLs() {
		backends = append(backends, proxy.Backend{URL: u, KVPod: fmt.Sprintf("sim-%d", i), Replay: "ipc://" + filepath.Join(dir, fmt.Sprint(i))})
	}
	var errs atomic.Int64
	feed, err := kvfeed.New(kvfeed.Options{Listen: "tcp://127.0.0.1:0", Subscriber: func(o *kvevents.Options) {
		o.ProbeInterval = probe
		o.OnError = func(backend string, err error) {
			errs.Add(1)
			t.Logf("%s: %v", backend, err) // replay endpoints are down until the publishers start
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{Backends: backends, Tokenizer: simfleet.Tokenizer{}, Extensions: []proxy.Extension{feed}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); h.Close() })
	h.Start(ctx) // the index knows the backends before their first batch
	wg.Go(func() { _ = h.Run(ctx) })
	sub := feed.Subscriber()
	select {
	case <-sub.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the feed never bound its listening socket")
	}
	pubs := make([]*kvpub.Publisher, servers)
	for i := range pubs {
		pub, err := kvpub.New(kvpub.Options{Endpoint: sub.ListenAddr(), Connect: true,
			Topic: kvpub.Topic(fmt.Sprintf("sim-%d", i), "usher/demo"), ReplayEndpoint: backends[i].Replay})
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = pub
		late[i].p.Store(pub)
		wg.Go(func() { _ = pub.Run(ctx) })
		t.Cleanup(func() { _ = pub.Close() })
	}

	// Load: two clients per server, each pausing 0-2 probe intervals between requests.
	total := func() (n uint64) {
		for _, p := range pubs {
			n += p.Sequence()
		}
		return n
	}
	load := func(stop func() bool) {
		var lw sync.WaitGroup
		for c := range 2 * servers {
			lw.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 42))
				url := fleet.URLs()[c%servers] + "/v1/completions"
				for !stop() {
					body := fmt.Sprintf(`{"model":"usher/demo","max_tokens":%d,"prompt":"%s %d"}`,
						8+rng.IntN(48), strings.Repeat("a shared opening ", 4+rng.IntN(40)), rng.Uint64())
					resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					time.Sleep(time.Duration(rng.Int64N(int64(2 * probe))))
				}
			})
		}
		lw.Wait()
	}
	// Warm-up: until every source has delivered a batch live. What a publisher sends before
	// its connection's subscription reaches it is dropped and recovered by replay.
	deadline := time.Now().Add(30 * time.Second)
	load(func() bool {
		if time.Now().After(deadline) {
			return true
		}
		for _, s := range sub.Sources() {
			if s.Live == 0 {
				return false
			}
		}
		return true
	})
	if time.Now().After(deadline) {
		t.Fatalf("warm-up: not every source delivered live within 30 s: %+v", sub.Sources())
	}
	settled := func() (live, replayOnly int64, ok bool) {
		for i, s := range sub.Sources() {
			live, replayOnly = live+s.Live, replayOnly+s.ReplayOnly
			if !s.HasApplied || s.Applied+1 != pubs[i].Sequence() {
				return 0, 0, false
			}
		}
		return live, replayOnly, live+replayOnly == int64(total())
	}
	var live0, replay0 int64
	waitSettled := func() {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var ok bool
			if live0, replay0, ok = settled(); ok {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("sources never settled: %+v, published %d", sub.Sources(), total())
			}
		}
	}
	waitSettled()
	before, stats0 := total(), sub.Stats()

	deadline = time.Now().Add(90 * time.Second)
	load(func() bool { return total()-before >= batches || time.Now().After(deadline) })
	if n := total() - before; n < batches {
		t.Fatalf("only %d batches published in 90 s", n)
	}
	liveW, replayW := live0, replay0
	waitSettled()
	live, replayOnly := live0-liveW, replay0-replayW
	st := sub.Stats()
	raced := (st.Replayed - stats0.Replayed) - replayOnly // applied by a replay, then delivered live
	t.Logf("published %d batches: %d live, %d replay-only, %d applied by a replay before they arrived live; %d probes stale; stats %+v",
		total()-before, live, replayOnly, raced, st.Stale-stats0.Stale, st)
	if n := int64(total() - before); live+replayOnly != n {
		t.Fatalf("live %d + replay-only %d, want the %d batches published", live, replayOnly, n)
	}
	if live*1000 < 999*(live+replayOnly) {
		t.Errorf("%d of %d batches delivered live, want at least 99.9%%", live, live+replayOnly)
	}
	if st.Late != 0 || st.Lost != 0 || st.ApplyErrors != 0 || st.DecodeErrors != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v: want no batch counted replay-only that arrived live later (Late), none lost, no error", st)
	}

	// /metrics says the same, per source.
	mfs, err := h.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "usher_kvevents_delivered_batches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var source, via string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "source":
					source = l.GetValue()
				case "via":
					via = l.GetValue()
				}
			}
			got[source+" "+via] = m.GetCounter().GetValue()
		}
	}
	for _, s := range sub.Sources() {
		if got[s.Backend+" live"] != float64(s.Live) || got[s.Backend+" replay"] != float64(s.ReplayOnly) {
			t.Errorf("/metrics for %s: live %v, replay %v; want %d, %d", s.Backend, got[s.Backend+" live"], got[s.Backend+" replay"], s.Live, s.ReplayOnly)
		}
	}
	if _, ok := got["other live"]; !ok || len(got) != 2*(servers+1) {
		t.Errorf("/metrics series %v: want live and replay for each source and other", got)
	}
}
