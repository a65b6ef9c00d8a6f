package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/replica"
)

// longChat is a prompt of several blocks, which the index records.
var longChat = chatOf("")

// chatOf is a long chat whose prompt starts with who.
func chatOf(who string) string {
	return `{"model":"m","stream":true,"messages":[{"role":"system","content":"` + who + strings.Repeat(" You are a careful assistant who answers in full sentences.", 12) + `"},{"role":"user","content":"Hello there."}]}`
}

// chainFeed records the chains an index reports.
type chainFeed struct{ inserted atomic.Int64 }

func (f *chainFeed) Inserted(string, []prefixcache.BlockHash) { f.inserted.Add(1) }
func (f *chainFeed) Removed(string, []prefixcache.BlockHash)  {}

// recorder is an Extension that records what the Server does with it.
type recorder struct {
	feed     chainFeed
	secret   []byte
	attached proxy.Core
	share    proxyseam.LimitShare
	runs     atomic.Int32
	closes   atomic.Int32
}

func (r *recorder) Prepare(d *proxy.Defaults) error {
	d.Index.Feed = &r.feed
	if d.Keyer != nil {
		d.Keyer.Secret = r.secret
	}
	return nil
}

func (r *recorder) Attach(c proxy.Core) error {
	r.attached, r.share = c, proxyseam.LimitSharer(c)
	return nil
}

func (r *recorder) Run(ctx context.Context) error {
	r.runs.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (r *recorder) Close() error { r.closes.Add(1); return nil }

// TestExtensions: an extension's Prepare shapes the default index (its feed hears what the
// picks insert), Attach gets the Server itself and its limit to share, Run runs while Run
// does, Close once however often the Server is closed.
func TestExtensions(t *testing.T) {
	ext := &recorder{secret: []byte("the pickers' shared secret")}
	s := newServer(t, Options{MaxInFlight: 5, Extensions: []proxy.Extension{ext}})
	if ext.attached != proxy.Core(s) {
		t.Fatalf("Attach got %v, want the Server", ext.attached)
	}
	if ext.share == nil {
		t.Fatal("no limit to share for a Server with the default queue")
	}
	for _, c := range []struct{ replicas, want int }{{1, 5}, {2, 3}, {5, 1}, {1, 5}} {
		if got := ext.share(c.replicas); got != c.want || s.gate.share() != int64(c.want) {
			t.Errorf("share(%d) = %d (gate %d), want %d", c.replicas, got, s.gate.share(), c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	st, _ := open(t, serve(t, s))
	r := exchangeRequest(t, st, longChat, nil)
	if r.GetImmediateResponse() != nil {
		t.Fatalf("refused: %s", immediateBody(r))
	}
	h, _ := destinationOf(t, r)
	send(t, st, respHeaders("200", "text/event-stream", false, servedBy(h)))
	recv(t, st)
	send(t, st, respBody("data: [DONE]\n\n", true))
	recv(t, st)
	if ext.feed.inserted.Load() == 0 {
		t.Error("the extension's index feed heard no insert after a pick")
	}
	for deadline := time.Now().Add(5 * time.Second); ext.runs.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if ext.runs.Load() != 1 {
		t.Errorf("extension Run called %d times, want 1", ext.runs.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	s.Close()
	s.Close()
	if ext.closes.Load() != 1 {
		t.Errorf("extension closed %d times, want 1", ext.closes.Load())
	}

	// A Queue of one's own has no limit of the Server's to share; nil extensions and ones that
	// refuse a picker are errors.
	own := &recorder{}
	q := newServer(t, Options{})
	if _, err := New(Options{Endpoints: fleet, NoScrape: true, Queue: q.Queue(), Extensions: []proxy.Extension{own}}); err != nil {
		t.Fatal(err)
	}
	if own.share != nil {
		t.Error("a limit to share with a Queue given in Options")
	}
	if _, err := New(Options{Endpoints: fleet, NoScrape: true, Extensions: []proxy.Extension{nil}}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("a nil extension: %v, want ErrInvalidOptions", err)
	}
	kv, err := kvfeed.New(kvfeed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Endpoints: fleet, NoScrape: true, Extensions: []proxy.Extension{kv}}); !errors.Is(err, proxy.ErrInvalidOptions) {
		t.Errorf("kvfeed on a picker: %v, want proxy.ErrInvalidOptions", err)
	}
}

// TestPickersShareOverRedis: two pickers with replicaext over a real Redis. A session placed
// by one picker is placed alike by the other, the prompt it sent is matched there, and the
// limit on requests in flight is split between them.
func TestPickersShareOverRedis(t *testing.T) {
	addr := redistest.Shared(t)
	cluster := fmt.Sprint("pickers-", time.Now().UnixNano())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var pickers []*Server
	var reps []*replica.Replica
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range 2 {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		r, err := replica.New(replica.Options{ID: fmt.Sprint("picker", i), Cluster: cluster, Client: c,
			Interval: 20 * time.Millisecond, PeerTTL: 400 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		s := newServer(t, Options{MaxInFlight: 8, NoHealthChecks: true, Extensions: []proxy.Extension{replicaext.Wrap(r)}})
		wg.Go(func() { _ = s.Run(ctx) })
		pickers, reps = append(pickers, s), append(reps, r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if reps[0].Stats().Peers == 1 && reps[1].Stats().Peers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pickers do not see each other: %+v, %+v", reps[0].Stats(), reps[1].Stats())
		}
	}
	for i, r := range reps {
		if got := r.Stats().Share; got != 4 || pickers[i].gate.share() != 4 {
			t.Errorf("picker %d: share %d (gate %d), want 4 of 8", i, got, pickers[i].gate.share())
		}
	}

	a, b := serve(t, pickers[0]), serve(t, pickers[1])
	// Each session's first turn goes to picker 0, its second to picker 1.
	const sessions = 12
	homes, spread := map[string]string{}, map[string]bool{}
	for i := range sessions {
		st, _ := open(t, a)
		sess := fmt.Sprint("conversation-", i)
		r := exchangeRequest(t, st, chatOf(sess), nil, "x-session-id", sess)
		h, _ := destinationOf(t, r)
		homes[sess], spread[h] = h, true
		send(t, st, respHeaders("200", "text/event-stream", false, servedBy(h)))
		recv(t, st)
		send(t, st, respBody("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", true))
		recv(t, st)
	}
	// Picker 0 sends a chain and a placement per session.
	for deadline := time.Now().Add(10 * time.Second); reps[0].Stats().Sent < 2*sessions || reps[1].Stats().Applied < reps[0].Stats().Sent; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("picker 0 sent %+v, picker 1 applied %+v", reps[0].Stats(), reps[1].Stats())
		}
	}
	// A user's think time: picker 0's in-flight counts, which picker 1 reads every 20 ms,
	// show its last request done (a next turn sent within one interval of the last answer
	// may see the home still busy with it, and go elsewhere).
	time.Sleep(100 * time.Millisecond)
	moved := 0
	for sess, home := range homes {
		st, _ := open(t, b)
		h, _ := destinationOf(t, exchangeRequest(t, st, chatOf(sess), nil, "x-session-id", sess))
		if h != home {
			moved++
		}
		send(t, st, respHeaders("200", "text/event-stream", false, servedBy(h)))
		recv(t, st)
		send(t, st, respBody("data: [DONE]\n\n", true))
		recv(t, st)
	}
	if len(spread) < 2 {
		t.Errorf("picker 0 placed every session on %v: want them spread, for the test to tell", spread)
	}
	if moved != 0 {
		t.Errorf("%d of %d sessions placed by picker 0 went elsewhere on picker 1", moved, sessions)
	}
	if m := pickers[1].Index().Stats(); m.Blocks == 0 {
		t.Errorf("picker 1's index holds no block of picker 0's prompts: %+v", m)
	}
	for i, r := range reps {
		if st := r.Stats(); st.Rejected != 0 || st.Unknown != 0 {
			t.Errorf("picker %d: %+v", i, st)
		}
	}
}
