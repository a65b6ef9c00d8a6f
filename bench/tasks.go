package bench

import (
	"slices"
	"time"
)

// DefaultIdleFactor is Config.SessionIdle's default as a multiple of the workload's longest
// think time (see Workload.LongestThink): a session is over when no turn of it arrives within
// twice the longest pause its workload ever makes between an answer and the next turn.
const DefaultIdleFactor = 2

// TaskStats measures the sessions of a run as tasks: a session is what its user wants done, and
// its task completion time runs from its first turn's arrival to its last turn's answer, think
// times included. At equal offered load the think times are the same under every policy, so the
// differences between policies are the differences in the sum of the session's response times
// (Response), which is reported too.
//
// A session ends in one of three ways:
//
//   - completed: its last turn was answered;
//   - abandoned: one of its turns was shed or failed (the session ends there, even with
//     Config.ContinueAfterShed, which keeps sending its later turns: the task was not done as
//     asked), or no turn of it arrived within Config.SessionIdle of its previous answer;
//   - censored: the run ended (Config.MaxTime) while it was still going — a turn waiting or
//     running, or not yet arrived and its idle limit not passed.
//
// Censored sessions are right-censored observations: they are left out of the completion-time
// figures (which would otherwise count them as short) and counted in Censored. Sessions whose
// first turn had not arrived by the end of the run are not counted at all.
type TaskStats struct {
	// Sessions is the number of sessions whose first turn arrived: Completed + Abandoned +
	// Censored.
	Sessions, Completed, Abandoned, Censored int
	// TimeMean and Time are the completed sessions' task completion times, first arrival to
	// last answer.
	TimeMean time.Duration
	Time     Percentiles
	// TimeMeanAll is the mean task completion time over the completed and the abandoned
	// sessions, an abandoned session counted from its first arrival to the end of the run, as
	// if its task were done then: a lower bound on the time its user waits for it. Unlike
	// TimeMean it does not fall when a policy abandons the longest tasks, so it compares
	// policies that abandon different shares.
	TimeMeanAll time.Duration
	// ResponseMean and Response are the completed sessions' sums of their turns' response
	// times (arrival to last token of each turn: queue wait, prefill and decode).
	ResponseMean time.Duration
	Response     Percentiles
	// IdleLimit is the idle limit the run used (Config.SessionIdle after its default).
	IdleLimit time.Duration
}

// AbandonedShare is Abandoned/(Completed + Abandoned): the share of the sessions whose
// outcome is known that were abandoned; 0 when none is known. Censored sessions are left out,
// since a censored session may yet have been completed or abandoned.
func (t TaskStats) AbandonedShare() float64 {
	if n := t.Completed + t.Abandoned; n > 0 {
		return float64(t.Abandoned) / float64(n)
	}
	return 0
}

// LongestThink returns the longest pause between consecutive turns of a session: the think
// time At of a closed-loop turn, or for an open-loop turn of a session the gap between its
// arrival and the previous turn's. Zero for a workload without multi-turn sessions.
// O(requests).
func (w *Workload) LongestThink() time.Duration {
	last := make(map[int32]time.Duration)
	var longest time.Duration
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Prev >= 0 {
			longest = max(longest, r.At)
			continue
		}
		if r.Session < 0 {
			continue
		}
		if at, ok := last[r.Session]; ok {
			longest = max(longest, r.At-at)
		}
		last[r.Session] = r.At
	}
	return longest
}

// tasks computes the run's TaskStats (see there) with idle limit idle, the run ending at its
// last event or Config.MaxTime, whichever is later. O(requests log requests).
func (s *sim) tasks(idle time.Duration) TaskStats {
	ts := TaskStats{IdleLimit: idle}
	end := max(s.now, s.cfg.MaxTime)
	bySession := make([][]int32, s.w.Sessions)
	for i := range s.reqs {
		if sess := s.reqs[i].w.Session; sess >= 0 {
			bySession[sess] = append(bySession[sess], int32(i))
		}
	}
	var times, resps []time.Duration
	var timeSum, respSum, abandonedSum time.Duration
	for _, turns := range bySession {
		if len(turns) == 0 {
			continue
		}
		slices.SortStableFunc(turns, func(a, b int32) int { return int(s.reqs[a].w.Turn - s.reqs[b].w.Turn) })
		first := &s.reqs[turns[0]]
		if first.state == rsNone || first.state == rsAbandoned {
			continue // not started
		}
		ts.Sessions++
		var resp time.Duration
		outcome := rsQueued // censored until shown otherwise
	walk:
		for k, i := range turns {
			r := &s.reqs[i]
			if k > 0 {
				prev := &s.reqs[turns[k-1]]
				arrival := r.arrival
				if r.state == rsNone || r.state == rsAbandoned {
					arrival = r.w.At // open loop
					if r.w.Prev >= 0 {
						arrival = prev.finish + r.w.At
					}
				}
				if arrival-prev.finish > idle {
					if prev.finish+idle <= end {
						outcome = rsAbandoned
					}
					break walk
				}
			}
			switch r.state {
			case rsDone:
				resp += r.finish - r.arrival
				if k == len(turns)-1 {
					outcome = rsDone
					times = append(times, r.finish-first.arrival)
					resps = append(resps, resp)
					timeSum += r.finish - first.arrival
					respSum += resp
				}
			case rsShed, rsFailed:
				outcome = rsAbandoned
				break walk
			default: // waiting, running or not yet arrived at the end of the run
				break walk
			}
		}
		switch outcome {
		case rsDone:
			ts.Completed++
		case rsAbandoned:
			ts.Abandoned++
			abandonedSum += end - first.arrival
		default:
			ts.Censored++
		}
	}
	if n := time.Duration(len(times)); n > 0 {
		ts.TimeMean, ts.ResponseMean = timeSum/n, respSum/n
	}
	if n := time.Duration(ts.Completed + ts.Abandoned); n > 0 {
		ts.TimeMeanAll = (timeSum + abandonedSum) / n
	}
	ts.Time, ts.Response = percentiles(times), percentiles(resps)
	return ts
}
