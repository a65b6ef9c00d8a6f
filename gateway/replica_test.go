package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy"
)

// TestReplicaConfig: -redis builds a Replica sharing its tenant secret through Redis (two
// configs, one API key, one tenant), refuses a malformed address, and starts — with a
// random secret and a warning — when Redis is unreachable.
func TestReplicaConfig(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprint("config-", time.Now().UnixNano())
	var tenants []string
	for i := range 2 {
		c := DefaultConfig()
		c.Redis, c.ReplicaID, c.Cluster = addr, fmt.Sprint("cfg", i), cluster
		o, err := c.Options()
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Extensions) != 1 {
			t.Fatalf("Options().Extensions = %v, want the replica", o.Extensions)
		}
		req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		req.Header.Set("Authorization", "Bearer sk-same-key")
		id, err := o.Keyer.Key(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, id.Tenant)
	}
	if tenants[0] != tenants[1] || !strings.HasPrefix(tenants[0], "key-") {
		t.Errorf("two replicas named one API key's tenant %q and %q", tenants[0], tenants[1])
	}
	for _, bad := range []string{"no-port", "redis://%zz"} {
		c := DefaultConfig()
		c.Redis = bad
		if _, err := c.Options(); !errors.Is(err, proxy.ErrInvalidOptions) {
			t.Errorf("-redis %q: err %v, want ErrInvalidOptions", bad, err)
		}
	}
	c := DefaultConfig()
	c.Redis = "127.0.0.1:1"
	start := time.Now()
	if _, err := c.Options(); err != nil || time.Since(start) > 3*time.Second {
		t.Errorf("unreachable Redis: err %v after %v, want a gateway that starts", err, time.Since(start))
	}
}
