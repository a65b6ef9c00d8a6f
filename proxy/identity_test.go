package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

func keyRequest(header http.Header) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://gateway/v1/chat/completions", nil)
	r.Header = header
	return r
}

func TestKeyer(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	k, err := proxy.NewKeyer(proxy.KeyerOptions{
		Secret: secret, TenantHeader: "X-Tenant",
		TenantBands: map[string]int{"vip": 0, proxy.TenantOfKey(secret, "gold"): 1}, DefaultBand: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("s", 500)
	tests := []struct {
		name   string
		header http.Header
		user   string
		want   proxy.Identity
	}{
		{"no key", http.Header{}, "", proxy.Identity{Tenant: proxy.Anonymous, Band: 2}},
		{"trusted header", http.Header{"X-Tenant": {"vip"}}, "", proxy.Identity{Tenant: "vip", Band: 0}},
		{"trusted header wins over the key", http.Header{"X-Tenant": {"vip"}, "Authorization": {"Bearer gold"}}, "", proxy.Identity{Tenant: "vip", Band: 0}},
		{"listed key", http.Header{"Authorization": {"Bearer gold"}}, "", proxy.Identity{Tenant: proxy.TenantOfKey(secret, "gold"), Band: 1}},
		{"unlisted key", http.Header{"Authorization": {"Bearer tin"}}, "", proxy.Identity{Tenant: proxy.TenantOfKey(secret, "tin"), Band: 2}},
		{"not a bearer key", http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}}, "", proxy.Identity{Tenant: proxy.Anonymous, Band: 2}},
		{"session header", http.Header{"X-Session-Id": {"s1"}}, "u1", proxy.Identity{Tenant: proxy.Anonymous, Session: "s1", Band: 2}},
		{"user field", http.Header{}, "u1", proxy.Identity{Tenant: proxy.Anonymous, Session: "u1", Band: 2}},
		{"long session cut", http.Header{"X-Session-Id": {long}}, "", proxy.Identity{Tenant: proxy.Anonymous, Session: long[:128], Band: 2}},
	}
	for _, tt := range tests {
		got, err := k.Key(keyRequest(tt.header), &openai.Request{User: tt.user})
		if err != nil || got != tt.want {
			t.Errorf("%s: Key = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	// The digest is keyed: another secret gives another tenant, and neither holds the key.
	a, b := proxy.TenantOfKey(secret, "gold"), proxy.TenantOfKey([]byte("another secret, also 32 bytes.."), "gold")
	if a == b || strings.Contains(a, "gold") || len(a) != len("key-")+32 {
		t.Errorf("TenantOfKey = %q and %q: want distinct keyed digests of 16 bytes", a, b)
	}
	if _, err := proxy.NewKeyer(proxy.KeyerOptions{TenantBands: map[string]int{"x": -1}}); err == nil {
		t.Error("NewKeyer accepted a negative band")
	}
}

// Unlisted tenants beyond MaxTenants share the anonymous tenant until an idle one frees its
// place; listed tenants are never affected.
func TestKeyerBoundsTenants(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	secret := []byte("0123456789abcdef")
	k, err := proxy.NewKeyer(proxy.KeyerOptions{
		Secret: secret, MaxTenants: 3, TenantIdle: time.Minute, Now: func() time.Time { return now },
		TenantBands: map[string]int{proxy.TenantOfKey(secret, "listed"): 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	tenant := func(key string) string {
		id, _ := k.Key(keyRequest(http.Header{"Authorization": {"Bearer " + key}}), &openai.Request{})
		return id.Tenant
	}
	for i := range 3 {
		if got := tenant(fmt.Sprint("k", i)); got == proxy.Anonymous {
			t.Fatalf("tenant %d within the bound is anonymous", i)
		}
	}
	if got := tenant("k3"); got != proxy.Anonymous {
		t.Errorf("fourth unlisted tenant = %q, want %q", got, proxy.Anonymous)
	}
	if got := tenant("k0"); got == proxy.Anonymous {
		t.Error("a tenant holding a place lost it")
	}
	if got := tenant("listed"); got != proxy.TenantOfKey(secret, "listed") {
		t.Errorf("listed tenant = %q, want its own", got)
	}
	now = now.Add(2 * time.Minute) // every place is idle now
	if got := tenant("k3"); got == proxy.Anonymous {
		t.Error("after the idle time a new tenant still has no place")
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []proxy.Options{
		{Backends: []proxy.Backend{{URL: "ftp://x"}}},
		{Backends: []proxy.Backend{{URL: "http://a:1"}, {URL: "http://a:1"}}},
		{Backends: []proxy.Backend{{URL: "http://a:1", Replay: "tcp://a:2"}}},
		{MaxBodyBytes: -1},
		{Saturation: -1},
	} {
		if _, err := proxy.New(o); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", o)
		}
	}
}
