package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy"
)

// replicaRegistry is the built-ins and the "replica" extension.
func replicaRegistry(t *testing.T) *proxy.Registry {
	t.Helper()
	reg := new(proxy.Registry)
	if err := replicaext.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestReplicaConfig: -redis builds a Replica sharing its tenant secret through Redis (two
// configs, one API key, one tenant), refuses a malformed address, and starts — with a
// random secret and a warning — when Redis is unreachable.
func TestReplicaConfig(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprint("config-", time.Now().UnixNano())
	var tenants []string
	for i := range 2 {
		c := DefaultConfig()
		c.Registry = replicaRegistry(t)
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
		c.Registry = replicaRegistry(t)
		c.Redis = bad
		if _, err := c.Options(); !errors.Is(err, proxy.ErrInvalidOptions) {
			t.Errorf("-redis %q: err %v, want ErrInvalidOptions", bad, err)
		}
	}
	c := DefaultConfig()
	c.Registry = replicaRegistry(t)
	c.Redis = "127.0.0.1:1"
	start := time.Now()
	if _, err := c.Options(); err != nil || time.Since(start) > 3*time.Second {
		t.Errorf("unreachable Redis: err %v after %v, want a gateway that starts", err, time.Since(start))
	}
}

// TestExtensionNotRegistered: a setting that needs an extension the program did not register
// is refused, naming the setting, with ErrNoExtension and ErrInvalidOptions; nothing is
// refused for a setting the configuration leaves empty.
func TestExtensionNotRegistered(t *testing.T) {
	base := DefaultConfig()
	base.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
	for _, tc := range []struct {
		name    string
		set     func(*Config)
		setting string
	}{
		{"redis", func(c *Config) { c.Redis = "127.0.0.1:6379" }, "redis"},
		{"kv_listen", func(c *Config) { c.KVListen = "tcp://127.0.0.1:5557" }, "kv_listen"},
		{"kv_events", func(c *Config) {
			c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm", KVEvents: "tcp://127.0.0.1:5557"}}
		}, `backend "http://127.0.0.1:8000" kv_events`},
		{"kv_pod", func(c *Config) {
			c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm", KVPod: "pod-a"}}
		}, `backend "http://127.0.0.1:8000" kv_events or kv_pod`},
	} {
		c := base
		tc.set(&c)
		_, err := c.Options()
		if !errors.Is(err, ErrNoExtension) || !errors.Is(err, proxy.ErrInvalidOptions) || !strings.Contains(fmt.Sprint(err), tc.setting) {
			t.Errorf("%s without its extension: err %v, want ErrNoExtension and ErrInvalidOptions naming %s", tc.name, err, tc.setting)
		}
	}
	c := base
	c.Registry = replicaRegistry(t) // registered but not asked for: not built
	if o, err := c.Options(); err != nil || len(o.Extensions) != 0 {
		t.Errorf("no KV events, no redis: Extensions %v, err %v; want none, nil", o.Extensions, err)
	}
}
