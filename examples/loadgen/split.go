package main

import "time"

// SplitStats divides a run at a moment (-split), so that a policy that learns as it runs can
// be seen doing so: the turns sent before the split against those sent from it on, and how
// many sessions a gateway could have known to be over at the split. A Gittins policy leaves
// its prior (first come, first served) once enough sessions have ended; a session has ended
// for it once it has been idle for its idle limit (-gittins-idle), or sooner, provisionally.
// So with loadgen's -session-idle equal to the gateway's -gittins-idle, Ended is a lower bound
// on the sessions the policy had counted by the split: when it is at least the gateway's
// -gittins-min-sessions, the turns after the split were ordered by the learned index.
type SplitStats struct {
	// AtMs is the split, in milliseconds from the start of the run.
	AtMs float64 `json:"at_ms"`
	// Ended is the number of sessions whose last turn sent before the split had been
	// answered (or refused) at least the idle limit before it.
	Ended int `json:"ended"`
	// Before and After are the turns sent before the split and from it on.
	Before Phase `json:"before"`
	After  Phase `json:"after"`
}

// Phase is the figures of the turns sent in one part of a run: first turns (newcomers) and
// later turns, how many were sent, how many 429 and 503 answers they got (with -retries 0, the turns shed)
// and the TTFT of those answered.
type Phase struct {
	FirstSent int  `json:"first_sent"`
	FirstShed int  `json:"first_shed"`
	FirstTTFT Dist `json:"first_ttft"`
	LaterSent int  `json:"later_sent"`
	LaterShed int  `json:"later_shed"`
	LaterTTFT Dist `json:"later_ttft"`
}

// splitStats computes the SplitStats of results (cut ones are left out of the phases) for a
// run that started at start, split at start+at, with idle limit idle (≤ 0: none, so that no
// session counts as ended). O(results log results).
func splitStats(results []result, start time.Time, at, idle time.Duration) SplitStats {
	split := start.Add(at)
	st := SplitStats{AtMs: millis(at)}
	var ttft [2][2][]float64      // [after][later]
	last := map[int32]time.Time{} // a session's latest answer among the turns sent before the split
	for i := range results {
		r := &results[i]
		after := !r.sent.Before(split)
		if !after && r.sess >= 0 && r.finished.After(last[r.sess]) {
			last[r.sess] = r.finished
		}
		if r.cut {
			continue
		}
		ph := &st.Before
		if after {
			ph = &st.After
		}
		a, l := 0, 0
		if after {
			a = 1
		}
		sent, shed := &ph.FirstSent, &ph.FirstShed
		if r.turn > 0 {
			sent, shed, l = &ph.LaterSent, &ph.LaterShed, 1
		}
		*sent++
		*shed += r.rej429 + r.rej503
		if r.ok() {
			ttft[a][l] = append(ttft[a][l], millis(r.ttft))
		}
	}
	if idle > 0 {
		for _, t := range last {
			if !t.Add(idle).After(split) {
				st.Ended++
			}
		}
	}
	st.Before.FirstTTFT, st.Before.LaterTTFT = distOf(ttft[0][0]), distOf(ttft[0][1])
	st.After.FirstTTFT, st.After.LaterTTFT = distOf(ttft[1][0]), distOf(ttft[1][1])
	return st
}
