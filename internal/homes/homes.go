// Package homes remembers where stored state lives: for the Responses API's
// previous_response_id, which backend stored each response, so that a continuation reaches
// the one server that knows it. The gateway (proxy) and the endpoint picker (proxy/extproc)
// share it.
package homes

import "sync"

// MaxIDBytes bounds a remembered response id; a longer one (no server mints such) is not
// remembered.
const MaxIDBytes = 256

// Default is the number of entries a Store keeps when asked for 0.
const Default = 100000

// Home is where a stored response lives, and the session its conversation runs under.
type Home struct {
	Backend string // the backend's name
	Session string // the conversation's session, for the flow and the router
}

// Store remembers homes by key. It holds at most 2×half entries in two generations: a lookup
// moves an entry to the current generation, and when the current one is full the older is
// dropped whole — an approximate LRU in O(1) per operation, without a list to keep. A nil
// *Store remembers nothing. It is safe for concurrent use.
type Store struct {
	half int // immutable

	mu       sync.Mutex
	cur, old map[string]Home
}

// New returns a store of about n entries, nil (remembering nothing) for n < 0, Default
// entries for n == 0.
func New(n int) *Store {
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = Default
	}
	half := max(1, n/2)
	return &Store{half: half, cur: make(map[string]Home), old: make(map[string]Home)}
}

// Key is the key of a response's home: the tenant's own, so that one tenant's ids never
// steer (or reveal the placement of) another's requests. "" (never remembered) for an id
// longer than MaxIDBytes.
func Key(tenant, id string) string {
	if len(id) > MaxIDBytes || id == "" {
		return ""
	}
	return tenant + "\x00" + id
}

// Put remembers key's home; an empty key is ignored. O(1) amortised.
func (m *Store) Put(key string, h Home) {
	if m == nil || key == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(key, h)
}

func (m *Store) putLocked(key string, h Home) {
	if _, ok := m.cur[key]; !ok && len(m.cur) >= m.half {
		m.old, m.cur = m.cur, make(map[string]Home, m.half)
	}
	m.cur[key] = h
}

// Get returns key's home, if remembered, and refreshes it. O(1) amortised.
func (m *Store) Get(key string) (Home, bool) {
	if m == nil || key == "" {
		return Home{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.cur[key]; ok {
		return h, true
	}
	h, ok := m.old[key]
	if ok {
		delete(m.old, key)
		m.putLocked(key, h)
	}
	return h, ok
}
