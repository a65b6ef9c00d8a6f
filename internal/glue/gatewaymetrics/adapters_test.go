package gatewaymetrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/promtest"
)

// TestAdapters steps the adapters gauge: configured adapters and "other" are label values from the start,
// readings add the names they list up to MaxAdapterLabels per backend and count the rest as
// "other", a later reading zeroes what it no longer lists, and unknown backends are ignored.
func TestAdapters(t *testing.T) {
	a, err := NewAdapters([]string{"b0", "b1"}, map[string][]string{"b0": {"sql"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := func(b, adapter, state string, v int) string {
		return fmt.Sprintf(`usher_backend_lora_adapters{adapter=%q,backend=%q,state=%q} %d`, adapter, b, state, v)
	}
	text := func() string { return promtest.Text(t, a, "usher_backend_lora_adapters") }
	if got := text(); !strings.Contains(got, line("b0", "sql", "running", 0)) || !strings.Contains(got, line("b1", "other", "waiting", 0)) ||
		strings.Count(got, `backend="b1"`) != 2 {
		t.Errorf("before any reading:\n%s\nwant b0's configured sql at 0 and only the other series of b1, at 0", got)
	}
	a.Set("b0", []string{"sql", "chat"}, []string{"tax"})
	a.Set("zz", []string{"x"}, nil) // not a configured backend
	got := text()
	for _, want := range []string{line("b0", "sql", "running", 1), line("b0", "chat", "running", 1), line("b0", "tax", "waiting", 1),
		line("b0", "tax", "running", 0), line("b0", "other", "running", 0)} {
		if !strings.Contains(got, want) {
			t.Errorf("after a reading, exposition lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, `backend="zz"`) {
		t.Errorf("an unknown backend got series:\n%s", got)
	}
	a.Set("b0", nil, []string{"chat"})
	got = text()
	for _, want := range []string{line("b0", "sql", "running", 0), line("b0", "chat", "running", 0), line("b0", "chat", "waiting", 1), line("b0", "tax", "waiting", 0)} {
		if !strings.Contains(got, want) {
			t.Errorf("after a second reading, exposition lacks %s:\n%s", want, got)
		}
	}
	// The bound: MaxAdapterLabels names of b1, the rest under other.
	var many []string
	for i := range MaxAdapterLabels + 5 {
		many = append(many, fmt.Sprint("lora-", i))
	}
	a.Set("b1", many, nil)
	got = text()
	if n := strings.Count(got, `backend="b1",state="running"`); n != MaxAdapterLabels+1 {
		t.Errorf("b1 has %d running series, want %d (the bound and other)", n, MaxAdapterLabels+1)
	}
	if !strings.Contains(got, line("b1", "other", "running", 5)) {
		t.Errorf("exposition lacks b1's other = 5:\n%s", got)
	}
	var nilA *Adapters
	nilA.Set("b0", []string{"x"}, nil) // no-op
	if _, err := NewAdapters([]string{"b0", "b0"}, nil, nil); err == nil {
		t.Error("NewAdapters accepted a repeated backend")
	}
}
