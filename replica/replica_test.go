package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

func init() { redistest.QuietLog() }

var backends = []string{"http://a:8000", "http://b:8000", "http://c:8000", "http://d:8000"}

// node is one gateway replica in process: its index, router and Replica.
type node struct {
	rep    *Replica
	ix     *prefixcache.Index
	rt     *routing.Router
	cancel context.CancelFunc
	done   chan struct{}
}

func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true,
	})
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newNode(t *testing.T, addr, id string, o Options) *node {
	t.Helper()
	c := client(addr)
	t.Cleanup(func() { c.Close() })
	o.ID, o.Client = id, c
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = quiet()
	}
	rep, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := prefixcache.New(prefixcache.Options{Feed: rep.prefix})
	if err != nil {
		t.Fatal(err)
	}
	profile := profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{
		AffinityOptions: session.AffinityOptions{Seed: 42, Feed: &rep.places},
	}})
	rt, err := routing.New(routing.Options{Profile: profile, Index: ix, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var states []routing.BackendState
	for _, b := range backends {
		states = append(states, routing.BackendState{Name: b, Health: routing.Healthy})
	}
	if err := rt.Update(states); err != nil {
		t.Fatal(err)
	}
	if err := rep.attach(replicapeer.Parts{Index: ix, Router: rt}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{rep: rep, ix: ix, rt: rt, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); rep.Run(ctx) }()
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	n.cancel()
	<-n.done
}

// eventually polls cond every 5 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func chainOf(seed uint64, n int) []prefixcache.BlockHash {
	c := make([]prefixcache.BlockHash, n)
	for i := range c {
		c[i] = prefixcache.BlockHash(seed<<20 | uint64(i+1))
	}
	return c
}

// holds reports how many leading blocks of chain the index says backend holds.
func holds(ix *prefixcache.Index, backend string, chain []prefixcache.BlockHash) int32 {
	id, ok := ix.Lookup(backend)
	if !ok {
		return 0
	}
	m := ix.Match(nil, chain)
	if int(id) >= len(m) {
		return 0
	}
	return m[id]
}

// TestShare: what one replica learns from its picks — the prefix it sent, the session's
// home, its in-flight load — reaches the other, which routes the session's next turn to the
// same backend without having seen it.
func TestShare(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, srv.Addr, "a", Options{})
	b := newNode(t, srv.Addr, "b", Options{})
	eventually(t, "both replicas to see each other", func() bool {
		return a.rep.Stats().Peers == 1 && b.rep.Stats().Peers == 1
	})

	chain := chainOf(1, 64)
	res, err := a.rt.Pick(&routing.Request{Chain: chain, PromptTokens: 64 * 16, Session: "conv-1"})
	if err != nil {
		t.Fatal(err)
	}
	home := res.Backend.Name
	eventually(t, "b's index to hold a's chain", func() bool { return holds(b.ix, home, chain) == 64 })
	eventually(t, "a's in-flight request to count on b", func() bool { return peer.PeerLoad(b.rt, home).Requests == 1 })
	if own, _ := b.rt.InFlight(home); own.Requests != 0 {
		t.Errorf("b's own in-flight on %s = %d, want 0", home, own.Requests)
	}

	// The turn ends; the next arrives at b: same session, a longer prompt.
	res.Done(routing.DoneInfo{})
	eventually(t, "a's request to leave b's peer counts", func() bool { return peer.PeerLoad(b.rt, home).Requests == 0 })
	next := append(chain[:64:64], chainOf(2, 16)...)
	res2, err := b.rt.Pick(&routing.Request{Chain: next, PromptTokens: 80 * 16, Session: "conv-1"})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Backend.Name != home {
		t.Errorf("b placed the session's next turn on %s, want its home %s", res2.Backend.Name, home)
	}
	res2.Done(routing.DoneInfo{})
	// b counts what it sent once its round trip returns, which may be after a applied it.
	eventually(t, "b's pick to reach a", func() bool { return a.rep.Stats().Applied > 0 && b.rep.Stats().Sent > 0 })

	for name, n := range map[string]*node{"a": a, "b": b} {
		st := n.rep.Stats()
		if !st.Connected || st.Sent == 0 || st.Applied == 0 || st.Rejected != 0 || st.Unknown != 0 || st.Errors != 0 {
			t.Errorf("%s: stats %+v", name, st)
		}
	}
}

// TestWarmStart: a replica that starts later reads what its peers learnt from the stream.
func TestWarmStart(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, srv.Addr, "a", Options{})
	chain := chainOf(3, 32)
	res, err := a.rt.Pick(&routing.Request{Chain: chain, PromptTokens: 32 * 16, Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Done(routing.DoneInfo{})
	eventually(t, "a to flush", func() bool { return a.rep.Stats().Sent >= 2 })
	c := newNode(t, srv.Addr, "c", Options{})
	eventually(t, "c to learn a's chain at start", func() bool { return holds(c.ix, res.Backend.Name, chain) == 32 })
}

// TestRedisOutage: Redis killed while replicas route — no pick fails or waits, the peers'
// counts expire so each goes on alone, and after Redis returns (empty) they share again.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	var blog lines
	a := newNode(t, srv.Addr, "a", Options{PeerTTL: 200 * time.Millisecond})
	b := newNode(t, srv.Addr, "b", Options{PeerTTL: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&blog, nil))})
	eventually(t, "peers", func() bool { return a.rep.Stats().Peers == 1 && b.rep.Stats().Peers == 1 })
	held, err := a.rt.Pick(&routing.Request{Chain: chainOf(4, 8), PromptTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's load on b", func() bool { return peer.PeerLoad(b.rt, held.Backend.Name).Requests == 1 })

	srv.Kill()
	// Picks go on at full speed while Redis is gone.
	var slowest time.Duration
	for i := range 2000 {
		start := time.Now()
		res, err := b.rt.Pick(&routing.Request{Chain: chainOf(uint64(100+i%50), 16), PromptTokens: 256, Session: fmt.Sprint("s", i%20)})
		if err != nil {
			t.Fatalf("pick %d with Redis down: %v", i, err)
		}
		res.Done(routing.DoneInfo{})
		slowest = max(slowest, time.Since(start))
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if slowest > 50*time.Millisecond {
		t.Errorf("slowest pick with Redis down took %v", slowest)
	}
	eventually(t, "b to notice", func() bool { return !b.rep.Stats().Connected && b.rep.Stats().Errors > 0 })
	eventually(t, "a's counts to expire on b", func() bool {
		return peer.PeerLoad(b.rt, held.Backend.Name).Requests == 0 && b.rep.Stats().Peers == 0
	})

	srv.Restart()
	eventually(t, "both to reconnect", func() bool {
		sa, sb := a.rep.Stats(), b.rep.Stats()
		return sa.Connected && sb.Connected && sa.Resyncs >= 1 && sb.Resyncs >= 1 && sa.Peers == 1 && sb.Peers == 1
	})
	eventually(t, "a's load on b again", func() bool { return peer.PeerLoad(b.rt, held.Backend.Name).Requests == 1 })
	chain := chainOf(5, 24)
	res, err := a.rt.Pick(&routing.Request{Chain: chain, PromptTokens: 24 * 16})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new chain to reach b after the restart", func() bool { return holds(b.ix, res.Backend.Name, chain) == 24 })
	res.Done(routing.DoneInfo{})
	held.Done(routing.DoneInfo{})
	// One line for the outage and one for the recovery, however many round trips failed.
	time.Sleep(recoveryHold + 100*time.Millisecond)
	if down, up := blog.count("Redis unreachable"), blog.count("Redis reachable again"); down != 1 || up != 1 {
		t.Errorf("b logged %d outage and %d recovery lines, want 1 and 1 (%d errors):\n%s", down, up, b.rep.Stats().Errors, blog.String())
	}
}

// TestRecoveryHold: a failure right after Redis came back (a broken pooled connection) does
// not make a new outage; one a second later does.
func TestRecoveryHold(t *testing.T) {
	var log lines
	r, err := New(Options{ID: "r", Client: client("127.0.0.1:1"), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection reset")
	steps := []struct {
		err      error
		wait     time.Duration
		down, up int
	}{
		{boom, 0, 1, 0},
		{boom, 0, 1, 0}, // the same outage
		{nil, 0, 1, 1},
		{boom, 0, 1, 1}, // within the hold: the recovery stands
		{nil, 0, 1, 1},
		{boom, recoveryHold + 50*time.Millisecond, 2, 1},
	}
	for i, st := range steps {
		time.Sleep(st.wait)
		r.outcome(st.err)
		if down, up := log.count("Redis unreachable"), log.count("Redis reachable again"); down != st.down || up != st.up {
			t.Fatalf("step %d: %d outage and %d recovery lines, want %d and %d", i, down, up, st.down, st.up)
		}
	}
}

// lines is a log sink safe for concurrent use.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lines) count(s string) int { return strings.Count(l.String(), s) }

// TestForeignData: entries and load keys that are not a replica's, or are corrupt, are
// counted and never applied; records naming unknown backends are skipped.
func TestForeignData(t *testing.T) {
	srv := redistest.Start(t)
	b := newNode(t, srv.Addr, "b", Options{})
	c := client(srv.Addr)
	defer c.Close()
	ctx := context.Background()
	k := b.rep.keys
	eventually(t, "b to start", func() bool { return b.rep.Stats().Connected })

	mustXAdd := func(values ...any) {
		t.Helper()
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k.changes, Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mustXAdd("r", "mallory", "d", "not a payload")                        // foreign bytes
	mustXAdd("x", "y")                                                    // no replica fields
	mustXAdd("r", "bad id!", "d", string(appendHeader(nil, kindChanges))) // invalid id
	unknown, _ := appendChain(appendHeader(nil, kindChanges), recInsert, "http://nobody:1", chainOf(6, 4))
	mustXAdd("r", "peer", "d", string(unknown))
	c.ZAdd(ctx, k.replicas, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "peer"})
	c.Set(ctx, k.loadPrefix+"peer", "garbage", time.Hour)

	eventually(t, "the bad data to be counted", func() bool {
		st := b.rep.Stats()
		return st.Rejected >= 4 && st.Unknown >= 1
	})
	for _, name := range backends {
		if l := peer.PeerLoad(b.rt, name); l != (peer.Load{Backend: name}) {
			t.Errorf("%s: peer load %+v from garbage", name, l)
		}
	}
	if m := b.ix.Match(nil, chainOf(6, 4)); len(m) > 0 {
		for id, v := range m {
			if v != 0 {
				t.Errorf("backend %d holds %d blocks of a chain for an unknown backend", id, v)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []Options{
		{},
		{Client: c, ID: "has space"},
		{Client: c, ID: strings.Repeat("x", 129)},
		{Client: c, Cluster: "a/b"},
		{Client: c, Interval: -1},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v): err %v, want ErrInvalidOptions", o, err)
		}
	}
	r, err := New(Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if checkName("ID", r.ID()) != nil {
		t.Errorf("default id %q is not valid", r.ID())
	}
	var asked []int
	if err := r.attach(replicapeer.Parts{Share: func(n int) int { asked = append(asked, n); return 5 }}); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Share != 5 || len(asked) != 1 || asked[0] != 1 {
		t.Errorf("after Attach: share %d, Share asked for %v; want 5 and [1]", st.Share, asked)
	}
}

func TestSharedSecret(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprintf("secret-%d", time.Now().UnixNano())
	var got [][]byte
	for i := range 3 {
		c := client(addr)
		defer c.Close()
		r, err := New(Options{ID: fmt.Sprint("r", i), Cluster: cluster, Client: c})
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.sharedSecret(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if len(got[0]) != 32 || string(got[0]) != string(got[1]) || string(got[1]) != string(got[2]) {
		t.Errorf("replicas got different secrets: %x", got)
	}
	// Something else under the key is refused.
	c := client(addr)
	defer c.Close()
	r, _ := New(Options{Cluster: cluster + "-x", Client: c})
	c.Set(context.Background(), "usher:{"+cluster+"-x}:tenant-secret", "short", 0)
	if _, err := r.sharedSecret(context.Background()); !errors.Is(err, ErrBadPayload) {
		t.Errorf("a foreign value: err %v, want ErrBadPayload", err)
	}
	// Redis unreachable: an error, at once.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	r, _ = New(Options{Client: dead})
	start := time.Now()
	if _, err := r.sharedSecret(context.Background()); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("unreachable Redis: err %v after %v", err, time.Since(start))
	}
}
