package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/quotaseam"
)

var t0 = time.UnixMilli(1_800_000_000_000) // a minute boundary

func TestReserveSettle(t *testing.T) {
	now := t0
	l, err := New(Options{Limits: []Limit{
		{Window: time.Minute, Requests: 3, Tokens: 1000},
		{Tenant: "big", Window: time.Minute, Tokens: 5000},
		{Tenant: "big", Model: "m2", Window: time.Second, Requests: 1},
	}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		tenant, model       string
		prompt, out         int64
		at                  time.Duration
		refused             bool
		settle              quotaseam.Usage // settled at once when admitted
		wantReq, wantTokRem int64           // remaining requests and tokens in the headers (-1: no cap)
	}
	steps := []step{
		{tenant: "a", prompt: 100, out: 200, settle: quotaseam.Usage{Prompt: 100, Output: 50}, wantReq: 2, wantTokRem: 700},
		{tenant: "a", prompt: 100, out: 600, settle: quotaseam.Usage{Prompt: 100, Output: 600}, wantReq: 1, wantTokRem: 150},
		{tenant: "a", prompt: 100, out: 200, refused: true, wantReq: 1, wantTokRem: 150},
		{tenant: "b", prompt: 100, out: 200, wantReq: 2, wantTokRem: 700}, // b has its own default counter
		{tenant: "a", prompt: 10, out: 10, settle: quotaseam.Usage{Prompt: 10, Output: 10}, wantReq: 0, wantTokRem: 130},
		{tenant: "a", prompt: 1, out: 1, refused: true, wantReq: 0, wantTokRem: 130},   // requests spent
		{tenant: "a", prompt: 1, out: 1, at: time.Minute, wantReq: 2, wantTokRem: 998}, // the next window
		{tenant: "big", model: "m1", prompt: 4000, out: 500, at: time.Minute, wantReq: -1, wantTokRem: 500},
		{tenant: "big", model: "m2", prompt: 100, out: 100, at: time.Minute, wantReq: 0, wantTokRem: 300},
		{tenant: "big", model: "m2", prompt: 1, out: 1, at: time.Minute + 10*time.Millisecond, refused: true, wantReq: 0, wantTokRem: 300},
		{tenant: "big", model: "m2", prompt: 1, out: 1, at: time.Minute + time.Second, wantReq: 0, wantTokRem: 298},
	}
	for i, s := range steps {
		now = t0.Add(s.at)
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: s.tenant, Model: s.model, PromptTokens: s.prompt, OutputTokens: s.out, Now: now}, &g)
		if g.Refused != s.refused {
			t.Fatalf("step %d: refused %v, want %v (%s)", i, g.Refused, s.refused, g.Message)
		}
		gotReq := int64(-1)
		if g.Requests.Limit > 0 {
			gotReq = g.Requests.Remaining
		}
		if gotReq != s.wantReq || g.Tokens.Remaining != s.wantTokRem {
			t.Fatalf("step %d: remaining requests %d, tokens %d; want %d, %d", i, gotReq, g.Tokens.Remaining, s.wantReq, s.wantTokRem)
		}
		if g.Refused {
			if g.RetryAfter <= 0 || !strings.Contains(g.Message, "Rate limit reached") {
				t.Fatalf("step %d: retry after %v, message %q", i, g.RetryAfter, g.Message)
			}
			continue
		}
		if s.settle != (quotaseam.Usage{}) {
			l.settle(&g, s.settle)
		}
	}
}

func TestRetryAfterIsWindowEnd(t *testing.T) {
	l, _ := New(Options{Limits: []Limit{{Window: time.Minute, Requests: 1}}})
	var g quotaseam.Grant
	now := t0.Add(15 * time.Second)
	l.reserve(&quotaseam.Ask{Tenant: "x", Now: now}, &g)
	l.reserve(&quotaseam.Ask{Tenant: "x", Now: now}, &g)
	if !g.Refused || g.RetryAfter != 45*time.Second || g.Requests.Reset != 45*time.Second {
		t.Fatalf("refused %v, retry after %v, reset %v; want true, 45s, 45s", g.Refused, g.RetryAfter, g.Requests.Reset)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Options{
		{Limits: []Limit{{Window: 0, Requests: 1}}},
		{Limits: []Limit{{Window: time.Minute}}},
		{Limits: []Limit{{Window: time.Minute, Tokens: -1}}},
		{Limits: []Limit{{Window: time.Minute, Requests: 1, Bands: []int{64}}}},
		{Limits: []Limit{{Window: time.Minute, Requests: 1}, {Window: time.Minute, Tokens: 1}}},
		{InputCost: -1},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

// fakeShared is a cluster store in memory, with a switch to fail.
type fakeShared struct {
	mu   sync.Mutex
	c    map[string]Totals
	fail bool
	live int
}

func (f *fakeShared) Sync(_ context.Context, ds []Delta) ([]Totals, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("down")
	}
	out := make([]Totals, len(ds))
	for i, d := range ds {
		k := fmt.Sprint(d.Key, "@", d.Window)
		t := f.c[k]
		t.Requests += d.Requests
		t.Tokens += d.Tokens
		f.c[k] = t
		out[i] = t
	}
	return out, nil
}

func (f *fakeShared) Live() int { return f.live }

// twoLimiters returns two replicas' Limiters of 10 requests a minute sharing store, on the
// clock *now, and admit, which reserves one request of tenant t on one of them and settles it
// at once, reporting whether it was admitted.
func twoLimiters(store *fakeShared, now *time.Time) ([2]*Limiter, func(*Limiter) bool) {
	var ls [2]*Limiter
	for i := range ls {
		ls[i], _ = New(Options{Limits: []Limit{{Window: time.Minute, Requests: 10}}, Shared: store, Now: func() time.Time { return *now }})
	}
	admit := func(l *Limiter) bool {
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: "t", Now: *now}, &g)
		if !g.Refused {
			l.settle(&g, quotaseam.Usage{})
		}
		return !g.Refused
	}
	return ls, admit
}

func TestSharedAndDegraded(t *testing.T) {
	now := t0
	store := &fakeShared{c: map[string]Totals{}, live: 2}
	ls, admit := twoLimiters(store, &now)
	for range 4 {
		admit(ls[0])
	}
	ls[0].sync(context.Background())
	ls[1].sync(context.Background()) // nothing used there yet: no totals
	for range 4 {
		admit(ls[1])
	}
	ls[1].sync(context.Background()) // 8 in the cluster
	got := 0
	for admit(ls[1]) {
		got++
	}
	if got != 2 {
		t.Fatalf("replica 1 admitted %d more after the cluster's 8 of 10, want 2", got)
	}
	// The store fails: each replica enforces 10 ÷ 2 on its own use (replica 1 has used 6).
	store.fail = true
	ls[0].sync(context.Background())
	got = 0
	for admit(ls[0]) {
		got++
	}
	if got != 1 {
		t.Fatalf("degraded replica 0 (4 used) admitted %d, want 1 (its share is 5)", got)
	}
	store.fail = false
	ls[0].sync(context.Background()) // pushes the 1 that accrued
	if tot := store.c[fmt.Sprint(ls[0].shards[fnv("t")%shardCount].m["t"].keys[0][0], "@", t0.UnixMilli())]; tot.Requests != 9 {
		t.Fatalf("the cluster counted %d requests, want 9 (4 + 4 synced before, 1 pushed on recovery; replica 1's last 2 are not synced yet)", tot.Requests)
	}
}

func TestSweepBoundsTenants(t *testing.T) {
	l, _ := New(Options{Limits: []Limit{{Window: time.Second, Requests: 5}}})
	var held quotaseam.Grant
	for i := range 1000 {
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: fmt.Sprint("t", i), Now: t0}, &g)
		if i == 0 {
			held = g
		} else {
			l.settle(&g, quotaseam.Usage{})
		}
	}
	l.sweep(t0.Add(500 * time.Millisecond))
	if n := l.tenantCount(); n != 1000 {
		t.Fatalf("%d tenants within the window, want 1000", n)
	}
	l.sweep(t0.Add(2 * time.Second))
	if n := l.tenantCount(); n != 1 {
		t.Fatalf("%d tenants after the window, want 1 (the one holding a reservation)", n)
	}
	l.settle(&held, quotaseam.Usage{})
	l.sweep(t0.Add(3 * time.Second))
	if n := l.tenantCount(); n != 0 {
		t.Fatalf("%d tenants, want 0", n)
	}
}

func TestReserveAllocs(t *testing.T) {
	l, _ := New(Options{Limits: []Limit{{Window: time.Minute, Requests: 1 << 40, Tokens: 1 << 50}, {Window: 24 * time.Hour, Tokens: 1 << 60}}})
	a := quotaseam.Ask{Tenant: "t", PromptTokens: 100, OutputTokens: 100, Now: t0}
	var g quotaseam.Grant
	l.reserve(&a, &g)
	l.settle(&g, quotaseam.Usage{Prompt: 100, Output: 10})
	if n := testing.AllocsPerRun(1000, func() {
		l.reserve(&a, &g)
		l.settle(&g, quotaseam.Usage{Prompt: 100, Output: 10})
	}); n != 0 {
		t.Fatalf("%v allocations per reservation, want 0", n)
	}
}

// Thousands of named tenants, each with its own limits, index their limits correctly.
func TestManyNamedTenants(t *testing.T) {
	var limits []Limit
	for i := range 1000 {
		limits = append(limits, Limit{Tenant: fmt.Sprint("t", i), Window: time.Minute, Requests: int64(i + 1)})
	}
	l, err := New(Options{Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 255, 256, 999} {
		var g quotaseam.Grant
		l.reserve(&quotaseam.Ask{Tenant: fmt.Sprint("t", i), Now: t0}, &g)
		if g.Requests.Limit != int64(i+1) {
			t.Errorf("tenant t%d: limit %d, want %d", i, g.Requests.Limit, i+1)
		}
	}
}

// While the store is down, a replica that used little of a limit its peers nearly spent is
// held by the cluster's use as last seen, not only by its share.
func TestDegradedKeepsClusterView(t *testing.T) {
	now := t0
	store := &fakeShared{c: map[string]Totals{}, live: 2}
	ls, admit := twoLimiters(store, &now)
	for range 8 {
		admit(ls[1])
	}
	ls[1].sync(context.Background())
	admit(ls[0])
	ls[0].sync(context.Background()) // the cluster: 9 of 10
	store.fail = true
	ls[0].sync(context.Background())
	got := 0
	for admit(ls[0]) {
		got++
	}
	if got != 1 {
		t.Fatalf("degraded replica 0 (1 used, cluster 9 of 10) admitted %d, want 1, not the 4 its share of 5 allows", got)
	}
}
