package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// RunOptions bounds a run.
type RunOptions struct {
	// Concurrency caps the requests in flight; a turn due while the cap is reached waits for
	// a slot (its latency is measured from when it is sent). 0 means 64.
	Concurrency int
	// Limit, if > 0, stops after sending this many requests (retries not counted); the
	// requests in flight then finish.
	Limit int
	// Progress, if not nil, receives a progress line every ProgressEvery (0 means 1 s).
	Progress      io.Writer
	ProgressEvery time.Duration
	// ProgressCR ends progress lines with a carriage return (a terminal) instead of a newline.
	ProgressCR bool
}

// counters are the live figures of a run, for the progress line.
type counters struct {
	sent, done, errors, rejected, inflight atomic.Int64
}

// run drives the sessions against the target and returns every request's result and the
// run's wall time (start to the last request's end); the requests an interrupt cut short are
// among the results, marked cut (summarize leaves them out, taskStats counts their sessions
// as censored). Each session runs on its own goroutine
// from its start time; turns of a session follow each other, the next one after the previous
// answer and its think time. A failed turn ends its session (there is no answer to continue
// from). run returns when every session has ended or been stopped.
func run(ctx context.Context, t *Target, sessions []Session, opts RunOptions) ([]result, time.Duration) {
	conc := opts.Concurrency
	if conc <= 0 {
		conc = 64
	}
	t0 := time.Now()
	// Cancelling ctx (an interrupt) stops everything, requests in flight included; the report
	// then covers what finished.
	// startCtx also ends when the limit is reached: nothing new starts, but the requests
	// already counted against the limit are still sent.
	startCtx, stopStarting := context.WithCancel(ctx)
	defer stopStarting()

	var c counters
	var mu sync.Mutex
	results := make([]result, 0, len(sessions))
	sem := make(chan struct{}, conc)
	var reserved atomic.Int64

	// send runs turn of session si; false means stop the session.
	send := func(si int, turn int, answers []string) (string, bool) {
		s := &sessions[si]
		if opts.Limit > 0 {
			n := reserved.Add(1)
			if n >= int64(opts.Limit) {
				stopStarting()
			}
			if n > int64(opts.Limit) {
				return "", false
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return "", false
		}
		c.sent.Add(1)
		c.inflight.Add(1)
		tr := &s.Turns[turn]
		res := result{turn: tr.Index, sess: int32(si), pos: turn, sent: time.Now()}
		t.do(ctx, s, s.messages(turn, answers), tr.Model, tr.MaxTokens, &res)
		<-sem
		c.inflight.Add(-1)
		if !res.ok() && ctx.Err() != nil {
			// Cut short by the interrupt: not a failure of the endpoint, kept only for the
			// sessions' accounting (a censored session).
			res.cut, res.finished, res.answer = true, time.Now(), ""
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
			return "", false
		}
		c.done.Add(1)
		if !res.ok() {
			c.errors.Add(1)
		}
		if res.rej429+res.rej503 > 0 {
			c.rejected.Add(int64(res.rej429 + res.rej503))
		}
		answer := res.answer
		res.answer = ""
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
		return answer, res.ok()
	}

	var wg sync.WaitGroup
	runSession := func(si int) {
		defer wg.Done()
		s := &sessions[si]
		var answers []string
		for i := range s.Turns {
			if i > 0 && s.Turns[i].Think > 0 && !sleep(startCtx, s.Turns[i].Think) {
				return
			}
			if startCtx.Err() != nil {
				return
			}
			a, ok := send(si, i, answers)
			if !ok {
				return
			}
			if s.Chain {
				answers = append(answers, a)
			}
		}
	}

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	if opts.Progress != nil {
		go func() {
			defer close(progressDone)
			progress(opts, t0, &c, stopProgress)
		}()
	} else {
		close(progressDone)
	}

	for i := range sessions {
		s := &sessions[i]
		if !sleep(startCtx, time.Until(t0.Add(s.Start))) {
			break
		}
		wg.Add(1)
		go runSession(i)
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone

	elapsed := time.Since(t0)
	if len(results) > 0 {
		last := t0
		for i := range results {
			if results[i].finished.After(last) {
				last = results[i].finished
			}
		}
		elapsed = last.Sub(t0)
	}
	return results, elapsed
}

// sleep waits for d or ctx, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// progress writes "elapsed sent done errors rejected inflight rate" lines until stop closes,
// and a final line.
func progress(opts RunOptions, t0 time.Time, c *counters, stop <-chan struct{}) {
	every := opts.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	end := "\n"
	if opts.ProgressCR {
		end = "\r"
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastDone, lastAt := int64(0), t0
	line := func() {
		now := time.Now()
		done := c.done.Load()
		rate := float64(done-lastDone) / now.Sub(lastAt).Seconds()
		lastDone, lastAt = done, now
		fmt.Fprintf(opts.Progress, "[%6.1fs] sent %d  done %d  errors %d  rejected %d  in flight %d  rate %.1f req/s   %s",
			now.Sub(t0).Seconds(), c.sent.Load(), done, c.errors.Load(), c.rejected.Load(), c.inflight.Load(), rate, end)
	}
	for {
		select {
		case <-stop:
			line()
			if opts.ProgressCR {
				fmt.Fprintln(opts.Progress)
			}
			return
		case <-tick.C:
			line()
		}
	}
}
