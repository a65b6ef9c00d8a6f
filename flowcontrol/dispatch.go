package flowcontrol

import (
	"fmt"
	"time"
)

// Dispatch: keying flows, choosing what runs next, completing it, and telling the observer.
// Methods whose names end in Locked expect q.mu held.

// setHeadLocked refreshes f's head fields from its item heap.
func (q *Queue) setHeadLocked(f *flow) {
	if len(f.items) == 0 {
		f.st.Head, f.st.HeadKey, f.st.HeadSeq = nil, Key{}, 0
		return
	}
	h := f.items[0]
	f.st.Head, f.st.HeadKey, f.st.HeadSeq = &h.req, h.key, h.seq
}

// keyFlowLocked places the non-empty flow f in its band's order after its head or the
// policy's state changed; an empty flow is taken out (and forgotten if idle).
func (q *Queue) keyFlowLocked(f *flow, bd *band, now time.Time) {
	if f.st.Queued == 0 {
		q.unlistLocked(f, bd)
		q.forgetIfIdleLocked(f, bd)
		return
	}
	if q.picker != nil {
		if f.bandIdx < 0 {
			f.bandIdx = len(bd.list)
			bd.list = append(bd.list, f)
			bd.states = append(bd.states, &f.st)
		}
		return
	}
	k, until := q.policy.FlowKey(&f.st, now)
	k = k.sanitize()
	switch {
	case f.bandIdx < 0:
		bd.heap.push(f, k, f.st.HeadSeq)
	case k != f.key || f.st.HeadSeq != f.keySeq:
		bd.heap.set(f.bandIdx, k, f.st.HeadSeq)
	}
	// An unchanged key (a completion under a policy that does not charge, say) leaves
	// the heap alone: its entry is likely out of the cache.
	f.key, f.keySeq = k, f.st.HeadSeq
	// Most keys have no limit: that case only clears a timer, which is not set (Clear is
	// inlined to a test).
	if until.After(now) {
		q.rekey.Set(&f.rekey, until, f)
	} else {
		q.rekey.Clear(&f.rekey)
	}
}

// unlistLocked takes f out of its band's order and the re-key heap.
func (q *Queue) unlistLocked(f *flow, bd *band) {
	q.rekey.Clear(&f.rekey)
	if f.bandIdx < 0 {
		return
	}
	if q.picker == nil {
		bd.heap.remove(f.bandIdx)
		return
	}
	i, n := f.bandIdx, len(bd.list)-1
	if i != n {
		bd.list[i], bd.states[i] = bd.list[n], bd.states[n]
		bd.list[i].bandIdx = i
	}
	bd.list[n], bd.states[n] = nil, nil
	bd.list, bd.states = bd.list[:n], bd.states[:n]
	f.bandIdx = -1
}

func (q *Queue) forgetIfIdleLocked(f *flow, bd *band) {
	if f.st.Queued != 0 || f.st.InFlight != 0 {
		return
	}
	bd.flows.remove(f)
	q.flows--
	if len(q.freeF) < maxFreeFlows {
		f.st = FlowState{}
		q.freeF = append(q.freeF, f)
	}
}

// recycleLocked returns a finished waiter to the free list; its Tickets go stale.
func (q *Queue) recycleLocked(w *waiter) {
	w.gen++
	w.state = stateFree
	w.req = Request{}
	w.flow = nil
	w.blocking, w.owned = false, false
	w.outcome, w.err = 0, nil
	if len(q.freeW) < maxFreeWaiters {
		q.freeW = append(q.freeW, w)
	}
}

// observeLocked tells the policy about an event.
func (q *Queue) observeLocked(k EventKind, f *flow, w *waiter, now time.Time) {
	ev := &q.ev
	ev.Kind, ev.Now, ev.Flow, ev.Request, ev.Usage = k, now, &f.st, &w.req, Usage{}
	q.policy.Observe(ev)
}

// takeLocked removes a queued w from its flow and the deadline heap and updates the
// counters; it reports whether w was its flow's head.
func (q *Queue) takeLocked(w *waiter) bool {
	f := w.flow
	bd := &q.bands[f.st.Band]
	wasHead := w.itemIdx == 0
	f.items.remove(w.itemIdx)
	q.deadlines.Stale() // w's entry; see dlLive
	b := w.req.Bytes
	f.st.Queued--
	f.st.QueuedBytes -= b
	bd.queued--
	bd.bytes -= b
	if w.class > 0 {
		bd.cls[w.class-1].queued--
	}
	q.queued--
	q.bytes -= b
	if wasHead {
		q.setHeadLocked(f)
	}
	return wasHead
}

// runLocked brings the queue up to date at now: expiry, re-keying, dispatch.
func (q *Queue) runLocked(now time.Time) {
	q.expireLocked(now)
	ns := now.UnixNano()
	if q.rekey.Len() > 0 { // no call when no key has a limit
		for f, ok := q.rekey.Due(now); ok; f, ok = q.rekey.Due(now) {
			q.keyFlowLocked(f, &q.bands[f.st.Band], now)
		}
	}
	if q.queued > 0 {
		q.dispatchLocked(now)
	}
	q.markLocked(ns)
}

// dispatchLocked dispatches as much as the limits and the gate allow, band by band.
func (q *Queue) dispatchLocked(now time.Time) {
	for b := range q.bands {
		bd := &q.bands[b]
		for bd.queued > 0 {
			// Limits closed to the whole band are found out before the policy is asked: no
			// PickFlow (possibly a scan of the band) for a dispatch that cannot happen.
			if !q.bandOpenLocked(b, Load{InFlight: q.inFlight, BandInFlight: bd.inFlight}) {
				break
			}
			var f *flow
			if q.picker == nil {
				f = bd.heap[0].f
			} else {
				id, ok := q.picker.PickFlow(b, bd.states, now)
				if !ok {
					break
				}
				f = bd.flows.get(id, flowHash(q.seed, id))
				if f == nil || f.bandIdx < 0 {
					panic(fmt.Sprintf("flowcontrol: PickFlow returned flow %q, which has nothing waiting in band %d", id, b))
				}
			}
			w := f.items[0]
			if q.gate != nil && !q.gate.Open(&w.req, Load{InFlight: q.inFlight, BandInFlight: bd.inFlight}) {
				break
			}
			q.takeLocked(w)
			w.state = stateDispatched
			f.st.InFlight++
			bd.inFlight++
			q.inFlight++
			q.observeLocked(EventDispatch, f, w, now)
			q.keyFlowLocked(f, bd, now)
			q.rateTickLocked(now.UnixNano())
			q.rateCount++
			if w.seq <= q.seqMark { // it waited: a dispatch the gate paced
				bd.hist.served++
				if w.class > 0 {
					bd.cls[w.class-1].hist.served++
				}
			}
			q.endLocked(w, Dispatched, nil, now)
		}
	}
}

// doneLocked completes a dispatched request.
func (q *Queue) doneLocked(w *waiter, u Usage, now time.Time) {
	f := w.flow
	bd := &q.bands[f.st.Band]
	w.state = stateEnded
	f.st.InFlight--
	bd.inFlight--
	q.inFlight--
	q.stats.Completed++
	ev := &q.ev
	ev.Kind, ev.Now, ev.Flow, ev.Request, ev.Usage = EventDone, now, &f.st, &w.req, u
	q.policy.Observe(ev)
	if f.st.Queued > 0 {
		q.keyFlowLocked(f, bd, now)
	} else {
		q.forgetIfIdleLocked(f, bd)
	}
	if q.observed && q.observer.Done != nil {
		q.noteLocked(true, Record{Outcome: Dispatched, Request: w.req, Wait: now.Sub(w.req.Arrival), Usage: u})
	}
	q.recycleLocked(w)
}

// noteLocked queues a record for the observer.
func (q *Queue) noteLocked(done bool, r Record) {
	if !q.observed {
		return
	}
	if q.notes == nil {
		q.notes = q.notePool.Get().(*noteBuf)
	}
	q.notes.n = append(q.notes.n, note{done, r})
}

// unlock releases q.mu and then delivers the noted records to the observer.
func (q *Queue) unlock() {
	nb := q.notes
	q.notes = nil
	q.mu.Unlock()
	if nb == nil {
		return
	}
	for i := range nb.n {
		n := &nb.n[i]
		if n.done {
			if q.observer.Done != nil {
				q.observer.Done(n.r)
			}
		} else if q.observer.Outcome != nil {
			q.observer.Outcome(n.r)
		}
		*n = note{}
	}
	nb.n = nb.n[:0]
	q.notePool.Put(nb)
}
