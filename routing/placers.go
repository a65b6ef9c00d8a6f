package routing

import "time"

// sessionPlacer is a session scorer that applies placements other gateway replicas learnt:
// routing/session's NewAffinity and NewAware scorers. Profile.sessionScorers finds them in a built profile.
type sessionPlacer interface {
	// LearnPlacement applies a placement another replica learnt (see SessionAware's).
	LearnPlacement(session uint64, id BackendID, blocks int, expires time.Time) bool
}

// sessionScorers returns the filters, scorers and picker of p that are session scorers
// (implement sessionPlacer), each once, in that order: how a replication layer reaches the
// session table of a profile built by a constructor, such as routing/profiles' Usher. With
// sharing, build the profile with the same session seed on every replica and a feed. O(filters + scorers); it allocates the result.
func (p Profile) sessionScorers() []sessionPlacer {
	var out []sessionPlacer
	add := func(x any) {
		if sp, ok := x.(sessionPlacer); ok && !hooked(out, sp) {
			out = append(out, sp)
		}
	}
	for _, f := range p.Filters {
		add(f)
	}
	for _, w := range p.Scorers {
		add(w.Scorer)
	}
	add(p.Picker)
	return out
}
