package proxy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/proxy/openai"
)

// Identity is who a request belongs to, as far as admission is concerned: the tenant that
// pays for it, the conversation it continues, and the priority band the tenant was given.
// Every field comes from what the gateway trusts (configuration, a digest of the API key, a
// header set by a trusted proxy); nothing a client writes raises its band.
type Identity struct {
	// Tenant is the fairness principal: a trusted header's value, or "key-" and a keyed
	// digest of the API key. Never empty.
	Tenant string
	// Session identifies a conversation within the tenant ("" for none): it keys the flow
	// and the router's session placement.
	Session string
	// Band is the priority band, from configuration by tenant.
	Band int
}

// Flow returns the flow id of the identity: tenant and session.
func (id Identity) Flow() flowcontrol.FlowID {
	return flowcontrol.FlowID(id.Tenant + "/" + id.Session)
}

// A FlowKeyer derives a request's Identity. It runs once per request, after the body was
// parsed and before admission, and must be safe for concurrent use. An error rejects the
// request; return an *openai.Error to choose its status (for example 401), any other error
// is answered 400.
type FlowKeyer interface {
	Key(r *http.Request, req *openai.Request) (Identity, error)
}

// KeyerOptions configures a Keyer. Zero values are the documented defaults.
type KeyerOptions struct {
	// Secret keys the digest that turns an API key into a tenant (HMAC-SHA256), so tenant
	// names reveal nothing of the key and no one can construct a key that lands on a chosen
	// tenant. Set it to the same value on every replica, and keep it secret. Nil: a random
	// secret per process, so tenant names change on restart (fine for one replica without
	// per-tenant bands keyed by digest).
	Secret []byte
	// TenantHeader, if set, names a header that carries the tenant, set by a trusted proxy
	// in front of the gateway (one that also removes it from client requests). A request
	// without it falls back to the API key.
	TenantHeader string
	// SessionHeader names the header that carries the session id. Empty: "X-Session-Id".
	// The API's own field is the fallback (openai.Request.SessionKey: OpenAI's "user",
	// Anthropic's "metadata.user_id", the Responses API's "conversation" or
	// "prompt_cache_key").
	SessionHeader string
	// TenantBands maps tenants to priority bands; see TenantOfKey for the name of a key's
	// tenant. Tenants not listed get DefaultBand.
	TenantBands map[string]int
	// DefaultBand is the band of tenants not in TenantBands.
	DefaultBand int
	// MaxTenants bounds the tenants not in TenantBands that get a flow of their own at
	// once; beyond it, requests of new tenants share the "anonymous" tenant until a place
	// frees, so a client cannot mint API keys to escape per-flow limits. Zero:
	// DefaultMaxTenants; negative: no bound.
	MaxTenants int
	// TenantIdle is how long an unlisted tenant keeps its place after its last request.
	// Zero: 10 minutes.
	TenantIdle time.Duration
	// Now is the clock for TenantIdle. Nil: time.Now.
	Now func() time.Time
}

// DefaultMaxTenants is KeyerOptions.MaxTenants when it is zero.
const DefaultMaxTenants = 10000

// Anonymous is the tenant of requests without an API key or trusted tenant header, and of
// new tenants beyond KeyerOptions.MaxTenants.
const Anonymous = "anonymous"

// maxIDBytes bounds tenant and session ids; longer values are cut.
const maxIDBytes = 128

// Keyer is the default FlowKeyer: the tenant is a trusted header when one is configured,
// else a keyed digest of the bearer API key (TenantOfKey); the session is the session header
// or the API's own session field (openai.Request.SessionKey); the band comes from
// TenantBands. It is safe for concurrent use.
type Keyer struct {
	secret        []byte
	tenantHeader  string
	sessionHeader string
	bands         map[string]int
	defaultBand   int
	maxTenants    int
	idle          time.Duration
	now           func() time.Time

	mu        sync.Mutex
	seen      map[string]time.Time // unlisted tenants holding a place, by last request
	lastSweep time.Time
}

var _ FlowKeyer = (*Keyer)(nil)

// NewKeyer returns a Keyer. Bands must not be negative.
func NewKeyer(o KeyerOptions) (*Keyer, error) {
	k := &Keyer{
		secret:        o.Secret,
		tenantHeader:  o.TenantHeader,
		sessionHeader: o.SessionHeader,
		bands:         make(map[string]int, len(o.TenantBands)),
		defaultBand:   o.DefaultBand,
		maxTenants:    o.MaxTenants,
		idle:          o.TenantIdle,
		now:           o.Now,
		seen:          make(map[string]time.Time),
	}
	if k.sessionHeader == "" {
		k.sessionHeader = "X-Session-Id"
	}
	if k.maxTenants == 0 {
		k.maxTenants = DefaultMaxTenants
	}
	if k.idle == 0 {
		k.idle = 10 * time.Minute
	}
	if k.now == nil {
		k.now = time.Now
	}
	if o.DefaultBand < 0 || k.idle < 0 {
		return nil, fmt.Errorf("%w: negative DefaultBand or TenantIdle", ErrInvalidOptions)
	}
	for t, b := range o.TenantBands {
		if b < 0 {
			return nil, fmt.Errorf("%w: tenant %q: negative band %d", ErrInvalidOptions, t, b)
		}
		k.bands[t] = b
	}
	if k.secret == nil {
		k.secret = make([]byte, 32)
		_, _ = rand.Read(k.secret) // never fails (crypto/rand panics rather than fail)
	}
	return k, nil
}

// TenantOfKey returns the tenant name Keyer gives requests bearing apiKey under secret:
// "key-" and the first 16 bytes of HMAC-SHA256(secret, apiKey) in hex. Use it to list a
// key's tenant in KeyerOptions.TenantBands without storing the key itself.
func TenantOfKey(secret []byte, apiKey string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(apiKey))
	var sum [sha256.Size]byte
	return "key-" + hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// Key derives the identity of r. It never fails.
func (k *Keyer) Key(r *http.Request, req *openai.Request) (Identity, error) {
	var id Identity
	if k.tenantHeader != "" {
		id.Tenant = clip(r.Header.Get(k.tenantHeader))
	}
	if id.Tenant == "" {
		if key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && key != "" {
			id.Tenant = TenantOfKey(k.secret, key)
		} else {
			id.Tenant = Anonymous
		}
	}
	band, listed := k.bands[id.Tenant]
	if !listed {
		band = k.defaultBand
		if id.Tenant != Anonymous && !k.admitTenant(id.Tenant) {
			id.Tenant = Anonymous
		}
	}
	id.Band = band
	id.Session = r.Header.Get(k.sessionHeader)
	if id.Session == "" && req != nil {
		id.Session = req.SessionKey()
	}
	id.Session = clip(id.Session)
	return id, nil
}

// admitTenant reports whether an unlisted tenant has, or gets, a place of its own. O(1)
// amortised: a full table is swept of idle tenants at most once per TenantIdle/4.
func (k *Keyer) admitTenant(t string) bool {
	if k.maxTenants < 0 {
		return true
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[t]; ok {
		k.seen[t] = now
		return true
	}
	if len(k.seen) >= k.maxTenants && now.Sub(k.lastSweep) >= k.idle/4 {
		k.lastSweep = now
		for name, last := range k.seen {
			if now.Sub(last) >= k.idle {
				delete(k.seen, name)
			}
		}
	}
	if len(k.seen) >= k.maxTenants {
		return false
	}
	k.seen[t] = now
	return true
}

// clip cuts an id to maxIDBytes.
func clip(s string) string {
	if len(s) > maxIDBytes {
		return s[:maxIDBytes]
	}
	return s
}
