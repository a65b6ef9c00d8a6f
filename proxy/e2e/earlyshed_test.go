package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// TestEarlyShed drives the gateway over a backlog it cannot serve within the TTL: with early
// shedding the excess is answered 429 with Retry-After on arrival — an OpenAI error naming the
// estimated wait — and far sooner than the TTL, while the requests that fit are served (and at
// most a few that the estimate let in expire).
func TestEarlyShed(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.MaxInFlight = 1
	opts.TTL = 3 * time.Second
	opts.EarlyShed = flowcontrol.EarlyShed{Enabled: true}
	_, base := startHandler(t, opts)

	send := func(i int) (status int, took time.Duration, retryAfter string, body []byte) {
		req := fmt.Sprintf(`{"model":%q,"max_tokens":24,"ignore_eos":true,"messages":[{"role":"user","content":"request %d"}]}`, model, i)
		start := time.Now()
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(req))
		if err != nil {
			t.Error(err)
			return 0, 0, "", nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, time.Since(start), resp.Header.Get("Retry-After"), b
	}
	// A steady backlog of four clients for two seconds teaches the queue its dispatch rate.
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				if st, _, _, b := send(c*1000 + i); st != http.StatusOK {
					t.Errorf("warm-up request: %d %s", st, b)
					return
				}
			}
		}()
	}
	wg.Wait()

	// Then a burst far beyond what the TTL allows.
	type answer struct {
		status int
		took   time.Duration
		retry  string
		body   []byte
	}
	answers := make([]answer, 200)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, took, ra, b := send(100000 + i)
			answers[i] = answer{st, took, ra, b}
		}()
	}
	wg.Wait()
	ok, shed, expired := 0, 0, 0
	var slowest time.Duration
	for _, a := range answers {
		switch a.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			shed++
			slowest = max(slowest, a.took)
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "estimated wait") {
				t.Fatalf("429 body %s", a.body)
			}
			if a.retry == "" {
				t.Fatal("429 without Retry-After")
			}
		case http.StatusServiceUnavailable:
			expired++ // admitted on an estimate that proved short (a busy machine slows the fleet)
		default:
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	}
	t.Logf("burst of %d: %d served, %d shed on arrival (slowest 429 after %v), %d expired", len(answers), ok, shed, slowest, expired)
	if ok == 0 || shed == 0 {
		t.Fatalf("%d served, %d shed: want both", ok, shed)
	}
	// Without early shedding every request beyond what the TTL allows would expire, after
	// waiting the whole TTL; with it, at most a few that the estimate let in do.
	if expired > shed/4 {
		t.Fatalf("%d expired against %d shed on arrival", expired, shed)
	}
	if slowest > opts.TTL/2 {
		t.Fatalf("a shed request waited %v for its 429 (TTL %v)", slowest, opts.TTL)
	}
}
