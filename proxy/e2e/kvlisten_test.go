package e2e_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/proxy"
)

// latePublisher forwards to a publisher made after the server that publishes through it.
type latePublisher struct {
	p atomic.Pointer[kvpub.Publisher]
}

func (l *latePublisher) Publish(b any) (uint64, error) {
	if p := l.p.Load(); p != nil {
		return p.Publish(b)
	}
	return 0, nil
}

// Servers whose KV-event publishers connect to the gateway (vLLM with a concrete host in its
// endpoint, llm-d's pattern) are heard through the Handler's listening socket, each told apart
// by the pod in its topics and applied to its backend.
func TestKVListenMode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := "tcp://" + ln.Addr().String()
	ln.Close()

	late := []*latePublisher{{}, {}}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers:   2,
		Configure: func(i int, o *simfleet.Options) { o.OnKVEvents = simfleet.PublishKVEvents(late[i], nil) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	var backends []proxy.Backend
	for i, u := range fleet.URLs() {
		backends = append(backends, proxy.Backend{URL: u, KVPod: fmt.Sprintf("engine-%d", i)})
	}
	opts := testOptions(backends)
	feed := withKV(&opts, listen)
	h, base := startHandler(t, opts)
	<-feed.Subscriber().Ready()
	if got := feed.Subscriber().ListenAddr(); got != listen {
		t.Fatalf("KVListenAddr = %q, want %q", got, listen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, l := range late {
		pub, err := kvpub.New(kvpub.Options{Endpoint: listen, Connect: true, Topic: kvpub.Topic(fmt.Sprintf("engine-%d", i), model)})
		if err != nil {
			t.Fatal(err)
		}
		l.p.Store(pub)
		wg.Go(func() { _ = pub.Run(ctx) })
		t.Cleanup(func() { _ = pub.Close() })
	}

	c := client(base)
	// A publisher drops what it sends before the subscription reaches it: ask until both
	// servers' events have been heard.
	round := 0
	eventually(t, "KV events from both servers", func() bool {
		// Fresh prompts each round: a chain whose first blocks were dropped before the
		// subscription could never be continued (no replay endpoint here).
		round++
		for i := range 2 {
			_, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{
				Model: model, MaxTokens: oa.Int(4),
				Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(fmt.Sprintf("round %d: %s%d", round, strings.Repeat("a shared opening ", 30), i))},
			}, option.WithHeader("X-Session-Id", fmt.Sprint("s", i)))
			if err != nil {
				t.Fatal(err)
			}
		}
		heard := 0
		for _, s := range feed.Subscriber().Sources() {
			if s.Batches > 0 {
				heard++
			}
		}
		return heard == 2
	})
	for _, s := range feed.Subscriber().Sources() {
		// (Apply errors are possible: without a replay endpoint, continuations of a batch
		// dropped before the subscription arrived have no parent.)
		if s.Backend != s.Source.Backend || !strings.HasPrefix(s.Backend, "http://") || s.DecodeErrors != 0 {
			t.Errorf("source %+v: want events applied to the backend named by its URL, decoded without errors", s)
		}
	}
	for _, b := range h.Index().Stats().Backends {
		if b.Blocks == 0 {
			t.Errorf("index backend %+v holds nothing", b)
		}
	}
	if st := feed.Subscriber().Stats(); st.Rejected != 0 {
		t.Errorf("subscriber stats %+v: messages rejected", st)
	}
}
