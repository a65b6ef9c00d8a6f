package kvevents

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// listener is the listen mode of a Subscriber: one SUB socket that many
// publishers connect to, and the sources on it, told apart by the pod in
// their topics. One goroutine reads the socket and hands each message to
// its source's goroutine through the source's inbox, without waiting: a
// source busy with a slow replay does not hold up the others (what its
// full inbox drops, it later sees as a gap).
type listener struct {
	s *Subscriber

	// Owned by the reading goroutine (and by New before it).
	byPod  map[string]*stream
	learnt int
	errs   int64 // messages no source took, for throttling their reports
	wg     *sync.WaitGroup
	quiet  silence

	lastRecv atomic.Int64 // UnixNano of the last message received
}

func newListener(s *Subscriber) *listener {
	l := &listener{s: s, byPod: make(map[string]*stream, len(s.opts.ListenSources))}
	list := make([]*stream, 0, len(s.opts.ListenSources))
	for _, src := range s.opts.ListenSources {
		st := newStream(s, src)
		st.inbox, st.watched = make(chan [][]byte, inboxSize), true
		l.byPod[src.pod()] = st
		list = append(list, st)
	}
	s.listening.Store(&list)
	return l
}

// bind binds the listening socket: Options.Listen the first time, the
// address it got afterwards.
func (s *Subscriber) bind(ctx context.Context) (zmq4.Socket, error) {
	s.mu.Lock()
	ep := s.rebind
	s.mu.Unlock()
	sock := zmq4.NewSub(ctx, zmq4.WithLogger(quiet))
	if err := sock.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: listen: %w", err)
	}
	if err := sock.Listen(ep); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: listen: %w", err)
	}
	addr, rebind := ep, ep
	if a := sock.Addr(); a != nil {
		scheme, rest, _ := strings.Cut(ep, "://")
		addr = scheme + "://" + a.String()
		// Keep the host as configured (a wildcard stays a wildcard), fix
		// the port.
		if host, _, err := net.SplitHostPort(rest); err == nil {
			if _, port, err := net.SplitHostPort(a.String()); err == nil {
				rebind = scheme + "://" + net.JoinHostPort(host, port)
			}
		}
	}
	s.mu.Lock()
	s.addr, s.rebind = addr, rebind
	s.mu.Unlock()
	return sock, nil
}

// run starts the goroutines of listen mode on wg: one per source known so
// far and one reading sock, which it closes when ctx is done. If silence
// warnings are on, it then watches the socket itself on the caller's
// goroutine until ctx is done.
func (l *listener) run(ctx context.Context, sock zmq4.Socket, wg *sync.WaitGroup) {
	l.wg = wg
	for _, st := range *l.s.listening.Load() {
		l.spawn(ctx, st)
	}
	wg.Go(func() { l.read(ctx, sock) })
	l.watch(ctx)
}

// spawn starts the goroutine of a listen-mode source, with a context of
// its own so that a learnt source can be forgotten.
func (l *listener) spawn(ctx context.Context, st *stream) {
	ctx, cancel := context.WithCancel(ctx)
	st.cancel = cancel
	l.wg.Go(func() {
		defer cancel()
		st.listen(ctx)
	})
}

// read receives from the listening socket until ctx is done.
func (l *listener) read(ctx context.Context, sock zmq4.Socket) {
	defer sock.Close()
	for {
		msg, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// One publisher's connection ended: zmq4 reports it through
			// the socket's Recv. The others carry on.
			continue
		}
		l.dispatch(ctx, msg.Frames, time.Now())
	}
}

// dispatch hands one message to its source, learning the source if
// allowed. It does not block. O(1), or O(MaxSources) when a new pod
// arrives at the bound.
func (l *listener) dispatch(ctx context.Context, frames [][]byte, now time.Time) {
	s := l.s
	l.lastRecv.Store(now.UnixNano())
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.c.decodeErrors.Add(1)
		if l.throttle() {
			l.report("", fmt.Errorf("%w: message of %d frames, want topic, 8-byte sequence, payload", ErrMalformed, len(frames)))
		}
		return
	}
	pod, _, ok := cutTopic(frames[0])
	if !ok {
		s.c.decodeErrors.Add(1)
		if l.throttle() {
			l.report("", fmt.Errorf("%w: %q on the listening socket, which tells sources apart by kv@<pod>@<model>", ErrTopic, frames[0]))
		}
		return
	}
	st := l.byPod[string(pod)] // no allocation
	if st == nil {
		if st = l.learn(ctx, pod, now); st == nil {
			return
		}
	}
	st.lastMsg = now
	select {
	case st.inbox <- frames:
	default:
		s.c.dropped.Add(1)
	}
}

// learn makes a source of a pod seen for the first time, or reports why
// it cannot. A rejected message costs no allocation unless it is
// reported.
func (l *listener) learn(ctx context.Context, podBytes []byte, now time.Time) *stream {
	s := l.s
	if !s.opts.AcceptUnknown {
		s.c.rejected.Add(1)
		if l.throttle() {
			l.report(string(podBytes), fmt.Errorf("%w: pod %q is not in ListenSources", ErrUnknownSource, podBytes))
		}
		return nil
	}
	if l.learnt >= s.opts.MaxSources && !l.forgetOne(now) {
		s.c.rejected.Add(1)
		if l.throttle() {
			l.report(string(podBytes), fmt.Errorf("%w: pod %q: %d pods learnt already (MaxSources), none silent for SilentAfter",
				ErrUnknownSource, podBytes, l.learnt))
		}
		return nil
	}
	pod := string(podBytes)
	st := newStream(s, Source{Backend: pod})
	st.inbox, st.learnt = make(chan [][]byte, inboxSize), true
	l.byPod[pod] = st
	l.learnt++
	old := *s.listening.Load()
	list := append(old[:len(old):len(old)], st)
	s.listening.Store(&list)
	l.spawn(ctx, st)
	return st
}

// forgetOne forgets the learnt source that has been silent the longest,
// if it has been for SilentAfter. O(sources).
func (l *listener) forgetOne(now time.Time) bool {
	after := l.s.opts.SilentAfter
	if after <= 0 {
		after = DefaultSilentAfter
	}
	old := *l.s.listening.Load()
	victim := -1
	for i, st := range old {
		if st.learnt && (victim < 0 || st.lastMsg.Before(old[victim].lastMsg)) {
			victim = i
		}
	}
	if victim < 0 || now.Sub(old[victim].lastMsg) < after {
		return false
	}
	st := old[victim]
	st.cancel()
	delete(l.byPod, st.src.pod())
	l.learnt--
	list := make([]*stream, 0, len(old)-1)
	list = append(append(list, old[:victim]...), old[victim+1:]...)
	l.s.listening.Store(&list)
	return true
}

// throttle counts a message no source took and reports whether to report
// it. Such messages can come from anyone who connects, so only the 1st,
// 2nd, 4th, 8th... are reported, with the count.
func (l *listener) throttle() bool {
	l.errs++
	return l.errs&(l.errs-1) == 0 && l.s.opts.OnError != nil
}

func (l *listener) report(backend string, err error) {
	l.s.opts.OnError(backend, fmt.Errorf("%w (%d such messages so far)", err, l.errs))
}

// watch warns, once per silence, when the listening socket has received
// nothing for SilentAfter, until ctx is done.
func (l *listener) watch(ctx context.Context) {
	after := l.s.opts.SilentAfter
	if after <= 0 {
		return
	}
	l.s.mu.Lock()
	l.quiet = silence{after: after, since: l.s.runStart}
	l.s.mu.Unlock()
	t := time.NewTimer(after)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var last time.Time
			if n := l.lastRecv.Load(); n != 0 {
				last = time.Unix(0, n)
			}
			warn, idle, wait := l.quiet.check(now, last)
			t.Reset(wait)
			if warn && l.s.opts.OnError != nil {
				l.s.opts.OnError("", fmt.Errorf("%w: nothing received on the listening socket %s for %v: are publishers configured to connect to it?",
					ErrSilent, l.s.ListenAddr(), idle.Round(time.Millisecond)))
			}
		}
	}
}

// listen is the goroutine of a listen-mode source: it catches up through
// the replay endpoint, then applies what the listening socket hands it,
// probing the replay endpoint when the source goes quiet, until ctx is
// done. The first message after the source was found gone (and the first
// of this Run) is treated as a new connection: sync checks the
// publisher's history before the message is applied.
func (st *stream) listen(ctx context.Context) {
	st.watch()
	defer st.stopWatch()
	defer st.connected.Store(false)
	replay := st.src.ReplayEndpoint != ""
	if replay {
		// An idle engine may publish nothing for a long time: what it
		// holds is brought in now.
		st.sync(ctx)
	}
	interval := st.s.opts.ProbeInterval
	var timer *time.Timer
	var probe <-chan time.Time
	if replay && interval > 0 {
		timer = time.NewTimer(interval)
		timer.Stop() // armed once the source is heard from
		defer timer.Stop()
		probe = timer.C
	}
	heard := false
	hear := func(frames [][]byte) {
		if !st.connected.Load() {
			if heard {
				st.s.c.reconnects.Add(1)
				st.reconnects.Add(1)
			}
			heard = true
			st.connected.Store(true)
			st.liveOnConn = false
			st.sync(ctx)
		}
		st.live(ctx, frames)
		if timer != nil {
			timer.Reset(interval)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case frames := <-st.inbox:
			hear(frames)
		case now := <-st.silent():
			st.checkSilence(now)
		case <-probe:
			select {
			case frames := <-st.inbox:
				hear(frames)
				continue
			default:
			}
			// Batches a replay applied longer ago than the grace that the
			// connection has not delivered since were missed (counted;
			// the publisher owns the connection, so nothing is replaced).
			st.settleSilent(time.Now())
			if !st.probe(ctx) {
				// The replay endpoint is gone, and so, probably, is the
				// publisher: its next message is a new connection.
				st.connected.Store(false)
				continue
			}
			timer.Reset(interval)
		}
	}
}
