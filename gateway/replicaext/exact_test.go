package replicaext_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/quotaseam"
	"github.com/usher-llm/usher/internal/redistest"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/replica"
)

// The exactness runs: 3 replicas, each a quota Limiter synced through its replica's store
// over one real redis-server, each admitting 200 requests a second of one tenant to a stub
// backend (the request reserves its prompt and max_tokens, holds 20–60 ms, and settles to
// its real output), with a token limit of half the tokens the three offer in a window. The
// figure is the over-grant: the tokens the admitted requests of one window used beyond the
// limit, as a share of it. The quota's Limiters are driven through the seam a Handler uses
// (internal/glue/quotaseam), the gateway wiring being elsewhere.
const (
	exactReplicas = 3
	exactRate     = 200 // requests per second per replica
	exactPrompt   = 100 // prompt tokens
	exactMax      = 100 // max_tokens: output tokens reserved
	exactMinOut   = 20  // output tokens used: uniform in [exactMinOut, exactMax]
)

// exactRun is one run's setup and figures.
type exactRun struct {
	span       time.Duration // the window
	killAt     time.Duration // Redis is killed this far into the window (0: never)
	killFor    time.Duration // and restarted after
	limit      int64
	used       atomic.Int64 // tokens used by the requests admitted in the window
	offered    atomic.Int64 // requests offered in the window
	admitted   atomic.Int64
	syncErrors uint64
	evalsha    int64 // EVALSHA calls in the window
	quotaOps   int64 // commands of the quota store (EVALSHA, SCRIPT and the script's own)
	allOps     int64 // every command but INFO, the replicas' own exchange included
}

func (e *exactRun) overGrant() float64 { return float64(e.used.Load()-e.limit) / float64(e.limit) }

func (e *exactRun) String() string {
	n := float64(e.offered.Load())
	return fmt.Sprintf("window %v, Redis down %v from %v: limit %d tokens, used %d (over-grant %+.3f%%), %d of %d requests admitted; per request offered: %.3f EVALSHA, %.3f quota commands, %.3f Redis commands in all; %d failed syncs",
		e.span, e.killFor, e.killAt, e.limit, e.used.Load(), 100*e.overGrant(), e.admitted.Load(), e.offered.Load(),
		float64(e.evalsha)/n, float64(e.quotaOps)/n, float64(e.allOps)/n, e.syncErrors)
}

// TestExactness: the over-grant of 3 replicas over Redis is within 1% of the limit, and
// within 10% with Redis killed (SIGKILL, restarted empty) for a quarter of the window. The
// runs here are short (8 s windows, Redis killed for 2 s); USHER_QUOTA_LONG=1 runs the
// issue's 60 s window with Redis killed for 15 s. The over-grant is a few reservations
// whatever the window (the requests admitted on totals up to an Interval old), so the
// shorter the window, the larger its share of the limit: 0.3–1.2% at 4 s on a loaded
// machine, 0.07% at 60 s.
func TestExactness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds of real time")
	}
	runs := []*exactRun{
		{span: 8 * time.Second},
		{span: 8 * time.Second, killAt: 2 * time.Second, killFor: 2 * time.Second},
	}
	if os.Getenv("USHER_QUOTA_LONG") != "" {
		runs = []*exactRun{
			{span: 60 * time.Second},
			{span: 60 * time.Second, killAt: 15 * time.Second, killFor: 15 * time.Second},
		}
	}
	for _, e := range runs {
		t.Run(fmt.Sprintf("%v-down-%v", e.span, e.killFor), func(t *testing.T) {
			exactness(t, e)
			t.Log(e)
			bound := 0.01
			if e.killFor > 0 {
				bound = 0.10
			}
			if e.overGrant() > bound {
				t.Errorf("over-grant %.3f%% of the limit, want ≤ %.0f%%", 100*e.overGrant(), 100*bound)
			}
			// Half the offered tokens: the limit must have bitten.
			if a, o := e.admitted.Load(), e.offered.Load(); a >= o || a == 0 {
				t.Errorf("%d of %d requests admitted: the limit did not bite", a, o)
			}
		})
	}
}

func exactness(t *testing.T, e *exactRun) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Half the tokens offered in a window, at the mean use of a request.
	meanUsed := float64(exactPrompt) + float64(exactMinOut+exactMax)/2
	e.limit = int64(0.5 * exactReplicas * exactRate * e.span.Seconds() * meanUsed)
	// The Limiters' clock is shifted so that a window starts 300 ms after the load does.
	spanMs := e.span.Milliseconds()
	start := time.Now().Add(300 * time.Millisecond)
	shift := time.Duration(spanMs-start.UnixMilli()%spanMs) * time.Millisecond
	now := func() time.Time { return time.Now().Add(shift) }
	win := start.Add(shift).UnixMilli()
	win -= win % spanMs
	windowStart, windowEnd := time.UnixMilli(win), time.UnixMilli(win+spanMs)

	var reps []*replica.Replica
	var lims []*quota.Limiter
	for i := range exactReplicas {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
			MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r, err := replica.New(replica.Options{ID: fmt.Sprint("gw", i), Client: c, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		l, err := quota.New(quota.Options{Shared: replicaext.Quota(r), Now: now,
			Limits: []quota.Limit{{Tenant: "t", Window: e.span, Tokens: e.limit}}})
		if err != nil {
			t.Fatal(err)
		}
		reps, lims = append(reps, r), append(lims, l)
		wg.Add(2)
		go func() { defer wg.Done(); r.Run(ctx) }()
		go func() { defer wg.Done(); l.Run(ctx) }()
	}
	for deadline := time.Now().Add(5 * time.Second); replicaext.Quota(reps[0]).Live() != exactReplicas; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replicas did not see each other")
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	var before map[string]int64

	var load sync.WaitGroup
	for i, l := range lims {
		load.Add(1)
		go func() {
			defer load.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 47))
			tick := time.NewTicker(time.Second / exactRate)
			defer tick.Stop()
			for {
				<-tick.C
				at := now()
				if !at.Before(windowEnd) {
					return
				}
				g := new(quotaseam.Grant)
				quotaseam.Reserve(l, &quotaseam.Ask{Tenant: "t", Model: "m", PromptTokens: exactPrompt, OutputTokens: exactMax, Now: at}, g)
				in := !at.Before(windowStart)
				if in {
					e.offered.Add(1)
				}
				if g.Refused {
					continue
				}
				out := int64(exactMinOut + rng.IntN(exactMax-exactMinOut+1))
				if in {
					e.admitted.Add(1)
					e.used.Add(exactPrompt + out)
				}
				hold := time.Duration(20+rng.IntN(41)) * time.Millisecond
				load.Add(1)
				time.AfterFunc(hold, func() {
					defer load.Done()
					quotaseam.Settle(g, quotaseam.Usage{Prompt: exactPrompt, Output: out})
				})
			}
		}()
	}
	// Count the window's commands: INFO commandstats when it starts and when it ends (less
	// what was counted before a kill, which restarts the counts).
	sleepUntil(now, windowStart)
	before = commandStats(t, admin)
	var counted map[string]int64
	if e.killFor > 0 {
		sleepUntil(now, windowStart.Add(e.killAt))
		counted = diffStats(commandStats(t, admin), before)
		srv.Kill()
		time.Sleep(e.killFor)
		srv.Restart()
		before = map[string]int64{}
	}
	sleepUntil(now, windowEnd)
	after := diffStats(commandStats(t, admin), before)
	load.Wait()
	for k, v := range counted {
		after[k] += v
	}
	for cmd, n := range after {
		switch {
		case cmd == "info":
			continue
		case cmd == "evalsha":
			e.evalsha += n
			e.quotaOps += n
		case cmd == "script|load", cmd == "hmget", cmd == "hset", cmd == "hincrby", cmd == "pexpireat":
			e.quotaOps += n
		}
		e.allOps += n
	}
	for _, r := range reps {
		e.syncErrors += r.Stats().Errors
	}
}

// sleepUntil sleeps until the shifted clock now reads at.
func sleepUntil(now func() time.Time, at time.Time) { time.Sleep(at.Sub(now())) }

// commandStats is INFO commandstats: calls per command.
func commandStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	var s string
	var err error
	for range 50 { // right after a restart, the first dials may fail
		if s, err = c.Info(context.Background(), "commandstats").Result(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		m[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return m
}

func diffStats(after, before map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func init() { redistest.QuietLog() }
