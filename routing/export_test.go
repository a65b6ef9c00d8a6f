package routing

// What the external tests (package routing_test) need of the package's internals: the
// standard idiom, compiled only into the package's test binary, so the API does not grow.

// UnitScorer is the built-in scorers' column interface (see unitScorer).
type UnitScorer = unitScorer

// SessionPlacer is a session scorer's LearnPlacement (see sessionPlacer).
type SessionPlacer = sessionPlacer

// BackendInFlight is one backend's in-flight counts by name (see backendInFlight).
type BackendInFlight = backendInFlight

// MaxUnknownPeerNames is maxUnknownPeerNames.
const MaxUnknownPeerNames = maxUnknownPeerNames

// ColsFrom fills the columns in need from cands (colsFrom).
func ColsFrom(c *cols, cands []Candidate, need colMask) { colsFrom(c, cands, need) }

// Fast reports whether r takes the columnar fast path.
func Fast(r *Router) bool { return r.fast }

// SetPeerInFlight is r.setPeerInFlight.
func SetPeerInFlight(r *Router, peers []BackendInFlight) { r.setPeerInFlight(peers) }

// PeerInFlight is r.peerInFlight.
func PeerInFlight(r *Router, name string) InFlight { return r.peerInFlight(name) }

// AppendInFlight is r.appendInFlight.
func AppendInFlight(r *Router, dst []BackendInFlight) []BackendInFlight { return r.appendInFlight(dst) }

// ProfileSessionScorers is p.sessionScorers.
func ProfileSessionScorers(p Profile) []SessionPlacer { return p.sessionScorers() }

// RouterSessionScorers is r.sessionScorers.
func RouterSessionScorers(r *Router) []SessionPlacer { return r.sessionScorers() }

// Serves is r.serves(want).
func Serves(r, want Role) bool { return r.serves(want) }

// SetSlot sets a candidate's slot (1 + its index in the snapshot; 0 for one built outside a
// Router).
func SetSlot(c *Candidate, slot uint32) { c.slot = slot }

// SetIndexSlot sets a candidate's prefix index id as a Router would (1 + the id; 0 unknown).
func SetIndexSlot(c *Candidate, ix int32) { c.ix = ix }
