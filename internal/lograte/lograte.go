// Package lograte says each kind of recurring problem once per interval, with a count, instead
// of once per occurrence: a stream of KV events that fail the same way, or a backend that
// keeps refusing connections, must not flood the log while its counters already give the
// exact numbers.
//
// A kind is a message, a source (a backend's name) and the error's class: the innermost error
// it wraps, which for usher's errors is the package's sentinel ("prefixcache: unknown parent
// block"), so occurrences that differ only in detail (a hash, an address) are one kind. The
// first occurrence of a kind is logged at once, in full; the ones that follow within the
// interval are counted, and when the interval ends one line gives their count and the last
// one's detail. A kind quiet for a whole interval starts over.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// maxKinds bounds the kinds remembered at once; past it, new kinds share one entry.
const maxKinds = 1024

// Logger rate-limits warnings by kind. The zero Logger is not usable; call New. It is safe for
// concurrent use; its timers run the summary lines on their own goroutines.
type Logger struct {
	log   *slog.Logger
	every time.Duration

	mu    sync.Mutex
	kinds map[key]*window
}

type key struct{ msg, source, class string }

// window is the current interval of one kind.
type window struct {
	count int   // occurrences after the first
	last  error // the latest of those
}

// New returns a Logger writing to log (nil: slog.Default()) at most one line per kind per
// every (0: 10 s) after the first.
func New(log *slog.Logger, every time.Duration) *Logger {
	if log == nil {
		log = slog.Default()
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	return &Logger{log: log, every: every, kinds: make(map[key]*window)}
}

// Warn reports err from source under msg: logged now if it is the first of its kind in the
// interval, counted otherwise. O(depth of err's wrapping).
func (l *Logger) Warn(msg, source string, err error) {
	k := key{msg, source, class(err)}
	l.mu.Lock()
	if w, ok := l.kinds[k]; ok {
		w.count++
		w.last = err
		l.mu.Unlock()
		return
	}
	if len(l.kinds) >= maxKinds {
		k = key{msg, "", "other"}
		if w, ok := l.kinds[k]; ok {
			w.count++
			w.last = err
			l.mu.Unlock()
			return
		}
	}
	l.kinds[k] = &window{}
	l.mu.Unlock()
	l.log.Warn(msg, "source", source, "err", err)
	time.AfterFunc(l.every, func() { l.close(k) })
}

// close ends k's interval: one line with the count of what it held back, if anything.
func (l *Logger) close(k key) {
	l.mu.Lock()
	w := l.kinds[k]
	if w.count == 0 {
		delete(l.kinds, k)
		l.mu.Unlock()
		return
	}
	n, last := w.count, w.last
	w.count, w.last = 0, nil
	l.mu.Unlock()
	l.log.Warn(msg(k), "source", k.source, "count", n, "interval", l.every, "last_err", last)
	time.AfterFunc(l.every, func() { l.close(k) })
}

func msg(k key) string { return k.msg + " (repeated)" }

// class is the innermost error err wraps: its sentinel, for errors built with %w.
func class(err error) string {
	if err == nil {
		return ""
	}
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if es := u.Unwrap(); len(es) > 0 {
				next = es[0]
			}
		}
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
