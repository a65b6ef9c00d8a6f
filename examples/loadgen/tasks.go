package main

import (
	"time"

	"github.com/usher-llm/usher/bench"
)

// TaskStats measures a run's sessions as tasks, as bench.TaskStats does in the simulator (the
// definitions are bench's, mirrored here over what a client sees; bench computes them inside
// its simulation, which a load generator cannot import): a session's task completion time
// runs from its first turn's send to its last turn's answer, think times included, and its
// sum of response times adds up each turn's send to answer (retries included).
//
// A session ends in one of three ways:
//
//   - completed: its last turn was answered;
//   - abandoned: one of its turns was shed (429 or 503 after the last retry) or failed, or
//     its next turn was not sent within IdleLimit of the previous answer (a think time longer
//     than the limit: the user left, and what follows is another task);
//   - censored: the run ended (an interrupt, or -limit reached) while it was still going — a
//     turn cut short, or its next turn not sent and its idle limit not yet passed at the
//     run's end.
//
// Censored sessions are left out of the times (which would otherwise count them as short) and
// counted apart; a session whose first turn was never sent is not counted. The times are in
// milliseconds, their quantiles loadgen's (Dist: interpolated, where bench takes the nearest
// rank).
type TaskStats struct {
	// Sessions is the number of sessions whose first turn was sent: Completed + Abandoned +
	// Censored.
	Sessions  int `json:"sessions"`
	Completed int `json:"completed"`
	Abandoned int `json:"abandoned"`
	Censored  int `json:"censored"`
	// AbandonedShare is Abandoned/(Completed + Abandoned), 0 when both are 0: censored
	// sessions may yet have been either.
	AbandonedShare float64 `json:"abandoned_share"`
	// Time is the completed sessions' task completion times, Response their sums of
	// response times.
	Time     Dist `json:"task_time"`
	Response Dist `json:"response_sum"`
	// IdleLimitMs is the idle limit the run used.
	IdleLimitMs float64 `json:"idle_limit_ms"`
}

// defaultIdle is the idle limit of sessions: bench.DefaultIdleFactor times the longest think
// time of any turn, as the simulator's default; 0 for sessions without a later turn (no limit
// is needed). O(turns).
func defaultIdle(sessions []Session) time.Duration {
	var longest time.Duration
	for i := range sessions {
		for _, t := range sessions[i].Turns[min(1, len(sessions[i].Turns)):] {
			longest = max(longest, t.Think)
		}
	}
	return bench.DefaultIdleFactor * longest
}

// taskStats computes the TaskStats of a run of sessions from its results (each naming its
// session and turn, cut ones included), with idle limit idle (≤ 0: no limit) and the run
// ending at end. O(results).
func taskStats(sessions []Session, results []result, idle time.Duration, end time.Time) TaskStats {
	ts := TaskStats{IdleLimitMs: millis(idle)}
	if idle <= 0 {
		idle = 1<<63 - 1
	}
	// byTurn[s][k] is the result of turn k of session s; nil: not sent.
	byTurn := make([][]*result, len(sessions))
	for i := range results {
		r := &results[i]
		if r.sess < 0 || int(r.sess) >= len(sessions) || r.pos < 0 || r.pos >= len(sessions[r.sess].Turns) {
			continue
		}
		if byTurn[r.sess] == nil {
			byTurn[r.sess] = make([]*result, len(sessions[r.sess].Turns))
		}
		byTurn[r.sess][r.pos] = r
	}
	var times, resps []float64
	for s, turns := range byTurn {
		if len(turns) == 0 || turns[0] == nil {
			continue // not started
		}
		ts.Sessions++
		first := turns[0]
		var resp time.Duration
		outcome := outcomeCensored
	walk:
		for k, r := range turns {
			if k > 0 {
				prev := turns[k-1]
				// When the turn was sent, or would have been: after its think time.
				sent := prev.finished.Add(sessions[s].Turns[k].Think)
				if r != nil {
					sent = r.sent
				}
				if sent.Sub(prev.finished) > idle {
					if !prev.finished.Add(idle).After(end) {
						outcome = outcomeAbandoned
					}
					break walk
				}
			}
			switch {
			case r == nil || r.cut: // not sent, or cut short, when the run ended
				break walk
			case !r.ok():
				outcome = outcomeAbandoned
				break walk
			}
			resp += r.finished.Sub(r.sent)
			if k == len(turns)-1 {
				outcome = outcomeCompleted
				times = append(times, millis(r.finished.Sub(first.sent)))
				resps = append(resps, millis(resp))
			}
		}
		switch outcome {
		case outcomeCompleted:
			ts.Completed++
		case outcomeAbandoned:
			ts.Abandoned++
		default:
			ts.Censored++
		}
	}
	if n := ts.Completed + ts.Abandoned; n > 0 {
		ts.AbandonedShare = float64(ts.Abandoned) / float64(n)
	}
	ts.Time, ts.Response = distOf(times), distOf(resps)
	return ts
}

// A session's outcome in taskStats.
const (
	outcomeCensored = iota
	outcomeCompleted
	outcomeAbandoned
)

// runEnd is when a run ended: its last result's end (a cut result's is when it was cut).
// O(results).
func runEnd(results []result) time.Time {
	var end time.Time
	for i := range results {
		if results[i].finished.After(end) {
			end = results[i].finished
		}
	}
	return end
}
