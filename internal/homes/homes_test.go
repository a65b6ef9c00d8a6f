package homes

import (
	"strings"
	"testing"
)

func TestStore(t *testing.T) {
	m := New(4) // two generations of two
	for _, id := range []string{"a", "b", "c"} {
		m.Put(id, Home{Backend: "B-" + id})
	}
	if _, ok := m.Get("a"); !ok { // in the older generation: found and refreshed
		t.Fatal("a forgotten too early")
	}
	m.Put("d", Home{Backend: "B-d"}) // the current generation (c, a) is full: b goes
	if _, ok := m.Get("b"); ok {
		t.Error("b still remembered past the bound")
	}
	for _, id := range []string{"a", "c", "d"} {
		if h, ok := m.Get(id); !ok || h.Backend != "B-"+id {
			t.Errorf("get(%q) = %+v, %v; want B-%s", id, h, ok, id)
		}
	}
	if n := len(m.cur) + len(m.old); n > 4 {
		t.Errorf("%d entries held, want at most 4", n)
	}
	long := Key("t", strings.Repeat("x", MaxIDBytes+1))
	m.Put(long, Home{Backend: "B"})
	if _, ok := m.Get(long); ok {
		t.Error("an overlong id was remembered")
	}
	var none *Store = New(-1)
	none.Put("a", Home{})
	if _, ok := none.Get("a"); ok {
		t.Error("a disabled store remembered an id")
	}
}
