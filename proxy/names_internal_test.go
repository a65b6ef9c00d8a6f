package proxy

import "testing"

// A named backend is known by its name (its ranks by name#dp=rank) and reached at its URL,
// its ranks pinned; an unnamed one keeps its URL as its name.
func TestBackendNameTargets(t *testing.T) {
	h, err := New(Options{Backends: []Backend{
		{URL: "http://10.0.0.7:8000/", Name: "qwen-a", Ranks: 2},
		{URL: "http://10.0.0.8:8000", Name: "qwen-b"},
		{URL: "http://10.0.0.9:8000"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct{ name, host, rank string }{
		{"qwen-a#dp=0", "10.0.0.7:8000", "0"},
		{"qwen-a#dp=1", "10.0.0.7:8000", "1"},
		{"qwen-b", "10.0.0.8:8000", ""},
		{"http://10.0.0.9:8000", "10.0.0.9:8000", ""},
	} {
		if _, ok := h.memberIndex[tc.name]; !ok {
			t.Errorf("no member named %q", tc.name)
		}
		got := h.backendURL(tc.name)
		if got == nil || got.Host != tc.host || got.rank != tc.rank || got.Path != "" || got.Fragment != "" {
			t.Errorf("backendURL(%q) = %+v, want host %s, rank %q, no path or fragment", tc.name, got, tc.host, tc.rank)
		}
	}
	if h.backendURL("qwen-c") != nil {
		t.Error("an unknown name has a target")
	}
}
