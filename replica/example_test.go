package replica_test

import (
	"context"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/replica"
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
