package replica_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/replica"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

// A gateway replica: the proxy builds its index and router with the Replica's feeds and runs
// it. Start the same program on every replica, with the same backends and cluster. (No
// Output: it needs a Redis server and model servers.)
func Example() {
	rep, err := replica.New(replica.Options{
		ID:      "gw-1",   // unique per replica; empty: host, pid and a random suffix
		Cluster: "prod-a", // the replicas that share state
		Client:  redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true}),
	})
	if err != nil {
		log.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{
		Backends: []proxy.Backend{{URL: "http://10.0.0.7:8000"}, {URL: "http://10.0.0.8:8000"}},
		// Run runs it; /metrics exports usher_replica_sync_*
		Extensions: []proxy.Extension{replicaext.Wrap(rep)},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h.Start(ctx)
	go h.Run(ctx)
	log.Fatal(http.ListenAndServe(":8080", h))
}

// Wiring the parts by hand, without the proxy: the index and the session scorer are built with
// the Replica's feeds, then attached with the queue whose usage and concurrency limit are
// shared. (No Output: it needs a Redis server.)
func ExampleReplica_Attach() {
	rep, err := replica.New(replica.Options{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})})
	if err != nil {
		log.Fatal(err)
	}
	ix, _ := prefixcache.New(prefixcache.Options{Feed: rep.PrefixFeed()})
	profile := profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{
		AffinityOptions: session.AffinityOptions{Seed: rep.SessionSeed(), Feed: rep.SessionFeed()},
	}})
	rt, _ := routing.New(routing.Options{Profile: profile, Index: ix})
	if err := rep.Attach(replica.Parts{Index: ix, Router: rt}); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go rep.Run(ctx) // off the request path; Redis down means each replica goes on alone

	// ... serve requests with rt.Pick, as a single gateway does.
}
