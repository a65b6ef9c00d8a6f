package kvfeed_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
)

// A Handler whose prefix index follows the KV events of its backends: here one simulated
// server that publishes vLLM's events on a ZMQ endpoint it binds, which the feed connects to.
func Example() {
	pub, err := kvpub.New(kvpub.Options{Endpoint: "tcp://127.0.0.1:0", Topic: kvpub.Topic("pod-a", "usher/demo")})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	endpoint := pub.Endpoint() // the port it was given
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 1, Configure: func(_ int, o *simfleet.Options) {
		o.OnKVEvents = simfleet.PublishKVEvents(pub, nil)
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Close()

	feed, err := kvfeed.New(kvfeed.Options{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{
		Backends:   []proxy.Backend{{URL: fleet.URLs()[0], KVEvents: endpoint}},
		Tokenizer:  simfleet.Tokenizer{},
		Extensions: []proxy.Extension{feed},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go h.Run(ctx)
	for _, s := range feed.Subscriber().Sources() {
		fmt.Println(s.Source.Backend == fleet.URLs()[0], s.Source.Endpoint == endpoint)
	}
	// Output: true true
}

// A configuration asks for the feed by name: the program registers it, and builds it only
// when the configuration names KV events (as package gateway does for kv_listen and the
// backends' kv_events).
func ExampleRegister() {
	reg := new(proxy.Registry)
	if err := kvfeed.Register(reg); err != nil {
		log.Fatal(err)
	}
	ext, err := proxy.Build[proxy.Extension](reg, proxy.PartSpec{Name: "kv-events", Params: []byte(`{"listen": "tcp://127.0.0.1:5557"}`)})
	if err != nil {
		log.Fatal(err)
	}
	_, feed := ext.(*kvfeed.Follower)
	fmt.Println(reg.Names("extension"), feed)
	// Output: [kv-events] true
}
