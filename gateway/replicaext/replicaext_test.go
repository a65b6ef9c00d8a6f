package replicaext_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/replica"
	"github.com/usher-llm/usher/routing/session"
)

// TestPrepare: Prepare gives the defaults the replica's feeds and, to a keyer without a
// secret, the cluster's secret (the same for two replicas); a keyer's own secret stays, and
// no keyer (Options.Keyer set) is no round trip to make.
func TestPrepare(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprint("replicaext-", time.Now().UnixNano())
	var secrets [][]byte
	for i := range 2 {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r, err := replica.New(replica.Options{ID: fmt.Sprint("gw", i), Cluster: cluster, Client: c})
		if err != nil {
			t.Fatal(err)
		}
		ext := replicaext.Wrap(r)
		var io prefixcache.Options
		var sess session.AffinityOptions
		var ko proxy.KeyerOptions
		if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Keyer: &ko}); err != nil {
			t.Fatal(err)
		}
		if io.Feed == nil || sess.Feed == nil || sess.Seed != replicapeer.Of(r).SessionSeed() {
			t.Errorf("replica %d: index feed %v, session feed %v, seed %x; want the replica's", i, io.Feed, sess.Feed, sess.Seed)
		}
		secrets = append(secrets, ko.Secret)
		own := proxy.KeyerOptions{Secret: []byte("this replica's own secret")}
		if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Keyer: &own}); err != nil || string(own.Secret) != "this replica's own secret" {
			t.Errorf("a keyer with a secret: %q, err %v; want it kept", own.Secret, err)
		}
		if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess}); err != nil {
			t.Errorf("no keyer: err %v", err)
		}
	}
	// Quota options get the replica's store, unless they have one.
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	r, err := replica.New(replica.Options{ID: "gw-q", Cluster: cluster, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ext := replicaext.Wrap(r)
	var io prefixcache.Options
	var sess session.AffinityOptions
	qo := quota.Options{Limits: []quota.Limit{{Window: time.Minute, Tokens: 1000}}}
	if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Quota: &qo}); err != nil || qo.Shared == nil {
		t.Errorf("quota options: Shared %v, err %v; want the replica's store", qo.Shared, err)
	}
	own := replicaext.Quota(r)
	qo.Shared = own
	if err := ext.Prepare(&proxy.Defaults{Index: &io, Session: &sess, Quota: &qo}); err != nil || qo.Shared != own {
		t.Errorf("quota options with a store: Shared %v, err %v; want it kept", qo.Shared, err)
	}
	if len(secrets[0]) != 32 || !bytes.Equal(secrets[0], secrets[1]) {
		t.Errorf("the replicas' keyer secrets %x and %x, want one 32-byte secret", secrets[0], secrets[1])
	}
}

// TestQuota: two replicas' Quota stores add up in one counter, as a quota.Shared.
func TestQuota(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprint("replicaext-quota-", time.Now().UnixNano())
	var stores []quota.Shared
	for i := range 2 {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r, err := replica.New(replica.Options{ID: fmt.Sprint("gw", i), Cluster: cluster, Client: c})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, replicaext.Quota(r))
	}
	w := time.Now().Truncate(time.Minute).UnixMilli()
	d := quota.Delta{Key: "tenant/model/min", Window: w, Span: time.Minute, Requests: 1, Tokens: 100}
	want := []quota.Totals{{Requests: 1, Tokens: 100}, {Requests: 2, Tokens: 200}}
	for i, s := range stores {
		got, err := s.Sync(context.Background(), []quota.Delta{d})
		if err != nil || len(got) != 1 || got[0] != want[i] {
			t.Errorf("replica %d: Sync = %v, %v; want [%v]", i, got, err, want[i])
		}
		if s.Live() != 1 {
			t.Errorf("replica %d not running: Live = %d, want 1", i, s.Live())
		}
	}
}
