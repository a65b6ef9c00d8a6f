package session

import "github.com/usher-llm/usher/routing"

// What the external tests (package session_test) need of the package's internals.

// TableHash is the hash of a session id in a table built with opts.
func TableHash(opts AffinityOptions, id string) uint64 { return newSessionTable(opts).hash(id) }

// ScorerHash is the hash of a session id in the table of a scorer NewAffinity or NewAware
// returned.
func ScorerHash(s routing.Scorer, id string) uint64 {
	switch s := s.(type) {
	case *sessionAffinity:
		return s.t.hash(id)
	case *sessionAware:
		return s.t.hash(id)
	}
	panic("not a session scorer")
}
