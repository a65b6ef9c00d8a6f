package kvevents

import "time"

// Reconciling replays with the live stream.
//
// A replay exchange reads the publisher's history, which holds a batch as soon as it is
// published, while the live connection delivers it a moment later: a replay (an idle probe, a
// gap's recovery, the check made on connecting) can apply batches the connection is about to
// deliver. Such a batch is not missed, and counting it as missed is what made idle probes look
// stale. So a batch a replay applies is first "ahead": applied (the index does not wait), but
// counted neither as live nor as replay-only. The live connection then settles it, in order,
// since a connection delivers a publisher's batches in sequence order:
//
//   - it delivers the batch: live;
//   - it delivers a later batch first: the batches before it were missed, replay-only;
//   - it stays silent for the grace after the replay (a probe finds the batches still ahead
//     at least a ProbeInterval, and at least minGrace, later): missed, replay-only; or it
//     ends: replay-only.
//
// An idle probe whose batches are settled as missed is a stale probe. The first two rules
// are exact; the third is a grace, which in connect mode cannot be wrong (the silent
// connection is replaced, so nothing it held can arrive) and in listen mode counts a batch
// the connection delivers later than the grace as Late.

// minGrace is the least time a batch applied ahead of a silent live connection is given to
// arrive live before it counts as missed, whatever the ProbeInterval: a loaded gateway's
// live path can take more than a short probe interval to deliver.
const minGrace = time.Second

// seqRange is a run of sequence numbers lo..hi; ok is false when it is empty.
type seqRange struct {
	lo, hi uint64
	ok     bool
	// probe: an idle probe's replay found some of the run (so settling
	// any of it as missed makes the probe stale).
	probe bool
	// since is when a replay applied the run's first batch.
	since time.Time
}

func (r seqRange) has(seq uint64) bool { return r.ok && r.lo <= seq && seq <= r.hi }

// aheadAdd records that a replay applied batch seq ahead of the live connection. Replays
// apply in sequence order past the last applied batch, so seq extends the run; a hole (a
// batch the history no longer held, counted lost) first settles the run as replay-only.
func (st *stream) aheadAdd(seq uint64) {
	a := &st.ahead
	if a.ok && seq != a.hi+1 {
		st.settle(false)
	}
	if !a.ok {
		*a = seqRange{lo: seq, hi: seq, ok: true, since: time.Now()}
	}
	a.hi = seq
	a.probe = a.probe || st.probing
}

// reconcile settles the batches ahead of the live connection against the live batch seq it
// just delivered: seq itself is live, the ones before it were missed. It also counts a batch
// settled as missed on silence that arrives after all (Late). O(1).
func (st *stream) reconcile(seq uint64) {
	if st.missed.has(seq) {
		st.s.c.late.Add(1)
		st.late.Add(1)
	}
	a := &st.ahead
	if !a.ok || seq < a.lo {
		return
	}
	var missed uint64
	if seq <= a.hi {
		missed = seq - a.lo
		st.countLive()
		a.lo = seq + 1
		a.ok = a.lo <= a.hi
	} else {
		missed = a.hi - a.lo + 1
		a.ok = false
	}
	if missed > 0 {
		st.countReplayOnly(missed)
		if a.probe {
			st.countStale()
		}
		a.probe = false
	}
	if !a.ok {
		a.probe = false
	}
}

// settleSilent settles the batches ahead of a live connection that has been silent since a
// replay applied them, once the grace (ProbeInterval, at least minGrace) has passed; it
// reports whether that made an idle probe stale. O(1).
func (st *stream) settleSilent(now time.Time) (stale bool) {
	if !st.ahead.ok || now.Sub(st.ahead.since) < max(st.s.opts.ProbeInterval, minGrace) {
		return false
	}
	return st.settle(true)
}

// settle counts every batch still ahead of the live connection as replay-only: the
// connection ended, or stayed silent for a ProbeInterval after the replay that applied them
// (silent: then, in listen mode, the run is remembered to count Late arrivals). It reports
// whether an idle probe had found any of them: the probe was stale. O(1).
func (st *stream) settle(silent bool) (stale bool) {
	a := st.ahead
	if !a.ok {
		return false
	}
	st.ahead = seqRange{}
	st.countReplayOnly(a.hi - a.lo + 1)
	if silent && st.inbox != nil {
		st.missed = a
	}
	if a.probe {
		st.countStale()
	}
	return a.probe
}

func (st *stream) countLive() {
	st.s.c.live.Add(1)
	st.liveN.Add(1)
}

func (st *stream) countReplayOnly(n uint64) {
	st.s.c.replayOnly.Add(int64(n))
	st.replayOnly.Add(int64(n))
}

func (st *stream) countStale() {
	st.s.c.stale.Add(1)
	st.stale.Add(1)
}
