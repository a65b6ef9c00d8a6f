package replica

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/internal/redistest"
)

var _ replicapeer.Quota = (*quotaStore)(nil)

// syncOK is Sync with a test's failure on error.
func syncOK(t *testing.T, s replicapeer.Quota, deltas ...replicapeer.QuotaDelta) []replicapeer.QuotaTotals {
	t.Helper()
	got, err := s.Sync(context.Background(), deltas)
	if err != nil {
		t.Fatalf("Sync(%v): %v", deltas, err)
	}
	if len(got) != len(deltas) {
		t.Fatalf("Sync(%d deltas) returned %d totals", len(deltas), len(got))
	}
	return got
}

func tt(requests, tokens int64) replicapeer.QuotaTotals {
	return replicapeer.QuotaTotals{Requests: requests, Tokens: tokens}
}

func wantTotals(t *testing.T, what string, got []replicapeer.QuotaTotals, want ...replicapeer.QuotaTotals) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: totals[%d] = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestQuotaSync: replicas' deltas add up per counter and window, step by step; a counter
// named twice in one Sync is counted once with both deltas; an empty Sync reads nothing.
func TestQuotaSync(t *testing.T) {
	addr := redistest.Shared(t)
	a := newNode(t, addr, "a", Options{Cluster: "quota-sync"})
	b := newNode(t, addr, "b", Options{Cluster: "quota-sync"})
	w := time.Now().Truncate(time.Minute).UnixMilli()
	d := func(key string, window int64, req, tok int64) replicapeer.QuotaDelta {
		return replicapeer.QuotaDelta{Key: key, Window: window, Span: time.Minute, Requests: req, Tokens: tok}
	}
	steps := []struct {
		on     *node
		deltas []replicapeer.QuotaDelta
		want   []replicapeer.QuotaTotals
	}{
		{a, []replicapeer.QuotaDelta{d("t1/m/min", w, 1, 100)}, []replicapeer.QuotaTotals{tt(1, 100)}},
		{b, []replicapeer.QuotaDelta{d("t1/m/min", w, 2, 50), d("t2/m/min", w, 1, 7)}, []replicapeer.QuotaTotals{tt(3, 150), tt(1, 7)}},
		// A settlement returns part of a reservation.
		{a, []replicapeer.QuotaDelta{d("t1/m/min", w, 0, -30)}, []replicapeer.QuotaTotals{tt(3, 120)}},
		// A zero delta reads the totals.
		{a, []replicapeer.QuotaDelta{d("t2/m/min", w, 0, 0)}, []replicapeer.QuotaTotals{tt(1, 7)}},
		// The next window is another counter.
		{b, []replicapeer.QuotaDelta{d("t1/m/min", w+60_000, 1, 10)}, []replicapeer.QuotaTotals{tt(1, 10)}},
		// The same counter twice in one call: both deltas, one total.
		{a, []replicapeer.QuotaDelta{d("t2/m/min", w, 1, 1), d("t2/m/min", w, 1, 2)}, []replicapeer.QuotaTotals{tt(3, 10), tt(3, 10)}},
		// Keys with the separator and braces are opaque.
		{b, []replicapeer.QuotaDelta{d("a:b{c}", w, 1, 1), d("a", w, 5, 5)}, []replicapeer.QuotaTotals{tt(1, 1), tt(5, 5)}},
	}
	for i, s := range steps {
		wantTotals(t, "step "+string(rune('0'+i)), syncOK(t, s.on.rep.quota, s.deltas...), s.want...)
	}
	if got, err := a.rep.quota.Sync(context.Background(), nil); got != nil || err != nil {
		t.Errorf("Sync(nil) = %v, %v; want nil, nil", got, err)
	}
	if seam := replicapeer.Of(a.rep); seam.Quota() != seam.Quota() {
		t.Error("Quota returned two stores")
	}
	// Every key sits under the cluster's hash tag, so one script's keys share a slot.
	keys, err := client(addr).Keys(context.Background(), "*quota-sync*").Result()
	if err != nil {
		t.Fatal(err)
	}
	counters := 0
	for _, k := range keys {
		if strings.Contains(k, ":quota:") {
			counters++
			if !strings.HasPrefix(k, "usher:{quota-sync}:quota:") {
				t.Errorf("key %q is not under usher:{quota-sync}:quota:", k)
			}
		}
	}
	if counters != 5 {
		t.Errorf("%d counters in Redis (%q), want 5", counters, keys)
	}
}

// TestQuotaExpiry: a counter's key expires a grace after its window's end (the span, up to a
// minute: here 1 s + 1 s), and then counts from zero.
func TestQuotaExpiry(t *testing.T) {
	addr := redistest.Shared(t)
	a := newNode(t, addr, "a", Options{Cluster: "quota-expiry"})
	w := time.Now().UnixMilli()
	d := replicapeer.QuotaDelta{Key: "t", Window: w, Span: time.Second, Requests: 1, Tokens: 10}
	wantTotals(t, "first", syncOK(t, a.rep.quota, d), replicapeer.QuotaTotals{Requests: 1, Tokens: 10})
	c := client(addr)
	defer c.Close()
	key := "usher:{quota-expiry}:quota:t:" + strconv.FormatInt(w, 10)
	at, err := c.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if want := w + 2000; at != want {
		t.Errorf("PEXPIRETIME = %d, want the window's start + 2 s = %d", at, want)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := c.Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the counter did not expire")
		}
	}
}

// TestQuotaNoScript: after SCRIPT FLUSH the store loads its script again, and the sums go on.
func TestQuotaNoScript(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, srv.Addr, "a", Options{})
	w := time.Now().Truncate(time.Minute).UnixMilli()
	d := replicapeer.QuotaDelta{Key: "t", Window: w, Span: time.Minute, Requests: 1, Tokens: 10}
	syncOK(t, a.rep.quota, d)
	c := client(srv.Addr)
	defer c.Close()
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wantTotals(t, "after SCRIPT FLUSH", syncOK(t, a.rep.quota, d), tt(2, 20))

	// More counters than one script takes: several scripts in one round trip, after another
	// flush; each delta counted once.
	many := make([]replicapeer.QuotaDelta, 3*quotaBatch/2)
	for i := range many {
		many[i] = replicapeer.QuotaDelta{Key: "k" + strconv.Itoa(i), Window: w, Span: time.Minute, Requests: 1, Tokens: int64(i)}
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	syncOK(t, a.rep.quota, many...)
	got := syncOK(t, a.rep.quota, many...)
	for i, g := range got {
		if g != tt(2, int64(2*i)) {
			t.Fatalf("counter %d of %d: %+v, want %+v", i, len(many), g, tt(2, int64(2*i)))
		}
	}
}

// TestQuotaOutage: with Redis down Sync fails and Live keeps the last count of replicas; the
// caller sends the failed deltas again with the next Sync. Redis comes back empty, and the
// totals are whole again: each replica restores its part.
func TestQuotaOutage(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, srv.Addr, "a", Options{PeerTTL: 200 * time.Millisecond})
	b := newNode(t, srv.Addr, "b", Options{PeerTTL: 200 * time.Millisecond})
	c := newNode(t, srv.Addr, "c", Options{PeerTTL: 200 * time.Millisecond})
	eventually(t, "3 live replicas", func() bool {
		return a.rep.quota.Live() == 3 && b.rep.quota.Live() == 3 && c.rep.quota.Live() == 3
	})
	w := time.Now().Truncate(time.Minute).UnixMilli()
	d := func(req, tok int64) replicapeer.QuotaDelta {
		return replicapeer.QuotaDelta{Key: "t", Window: w, Span: time.Minute, Requests: req, Tokens: tok}
	}
	syncOK(t, a.rep.quota, d(1, 100))
	wantTotals(t, "before", syncOK(t, b.rep.quota, d(2, 200)), replicapeer.QuotaTotals{Requests: 3, Tokens: 300})

	srv.Kill()
	if _, err := a.rep.quota.Sync(context.Background(), []replicapeer.QuotaDelta{d(1, 10)}); err == nil {
		t.Fatal("Sync with Redis down: no error")
	}
	eventually(t, "the peers to expire", func() bool { return a.rep.Stats().Peers == 0 })
	if got := a.rep.quota.Live(); got != 3 {
		t.Errorf("Live with Redis down = %d, want the last count, 3", got)
	}

	srv.Restart()
	// a sends the delta that failed with its new one; b's part comes back with its next Sync.
	var got []replicapeer.QuotaTotals
	eventually(t, "Sync to succeed again", func() bool {
		var err error
		got, err = a.rep.quota.Sync(context.Background(), []replicapeer.QuotaDelta{d(1, 10), d(1, 5)})
		return err == nil
	})
	wantTotals(t, "a after the restart", got, replicapeer.QuotaTotals{Requests: 3, Tokens: 115}, replicapeer.QuotaTotals{Requests: 3, Tokens: 115})
	// (go-redis fails fast for up to a second after failed dials: retried as a Limiter would.)
	eventually(t, "b's Sync to succeed again", func() bool {
		var err error
		got, err = b.rep.quota.Sync(context.Background(), []replicapeer.QuotaDelta{d(0, 0)})
		return err == nil
	})
	wantTotals(t, "b after the restart", got, replicapeer.QuotaTotals{Requests: 5, Tokens: 315})
	if a.rep.Stats().Errors == 0 {
		t.Error("the failed Sync was not counted in Stats.Errors")
	}
}

// TestQuotaIdempotent: a Sync whose answer is lost (here: cancelled after Redis ran it) is
// sent again without counting twice; a replica restarted under the same id adds to its
// predecessor's count.
func TestQuotaIdempotent(t *testing.T) {
	addr := redistest.Shared(t)
	a := newNode(t, addr, "a", Options{Cluster: "quota-idem"})
	w := time.Now().Truncate(time.Minute).UnixMilli()
	d := replicapeer.QuotaDelta{Key: "t", Window: w, Span: time.Minute, Requests: 1, Tokens: 10}
	q := a.rep.quota
	// Simulate a lost answer: Redis acknowledged, but the store did not commit.
	syncOK(t, q, d)
	q.mu.Lock()
	clear(q.cum)
	q.mu.Unlock()
	wantTotals(t, "resent", syncOK(t, q, d), replicapeer.QuotaTotals{Requests: 1, Tokens: 10})

	a.stop()
	a2 := newNode(t, addr, "a", Options{Cluster: "quota-idem"})
	wantTotals(t, "restarted", syncOK(t, a2.rep.quota, d), replicapeer.QuotaTotals{Requests: 2, Tokens: 20})
}

// TestQuotaTimeout: a Sync is bounded by its context.
func TestQuotaTimeout(t *testing.T) {
	addr := redistest.Shared(t)
	a := newNode(t, addr, "a", Options{Cluster: "quota-timeout"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.rep.quota.Sync(ctx, []replicapeer.QuotaDelta{{Key: "t", Window: 1, Span: time.Minute, Requests: 1}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a cancelled context: %v, want context.Canceled", err)
	}
}

// BenchmarkQuotaSync is one Sync (one EVALSHA round trip to a loopback redis-server) of n
// counters, each with a change, as a Limiter's Run sends every Interval.
func BenchmarkQuotaSync(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 5 * time.Second, ContextTimeoutEnabled: true})
	defer c.Close()
	for _, n := range []int{1, 16, 256, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			r, err := New(Options{ID: "bench", Cluster: "bench-" + strconv.Itoa(n), Client: c, IOTimeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			w := time.Now().Truncate(time.Minute).UnixMilli()
			deltas := make([]replicapeer.QuotaDelta, n)
			for i := range deltas {
				deltas[i] = replicapeer.QuotaDelta{Key: "tenant-" + strconv.Itoa(i) + "|model|0|60000", Window: w, Span: time.Minute, Requests: 1, Tokens: 200}
			}
			b.ReportAllocs()
			usec := evalshaMicros(b, c)
			for b.Loop() {
				if _, err := r.quota.Sync(context.Background(), deltas); err != nil {
					b.Fatal(err)
				}
			}
			usec = evalshaMicros(b, c) - usec
			b.ReportMetric(float64(n), "deltas/flush")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/flush")
			b.ReportMetric(float64(usec)/float64(b.N), "redis-µs/flush")
		})
	}
}

// evalshaMicros is the time Redis spent in EVALSHA so far (INFO commandstats), µs.
func evalshaMicros(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_evalsha:")
	if !ok {
		return 0
	}
	_, rest, _ = strings.Cut(rest, "usec=")
	n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	return n
}
