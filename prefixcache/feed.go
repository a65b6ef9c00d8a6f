package prefixcache

import "github.com/usher-llm/usher/internal/peer"

// Feed receives the chains an Index learns through [Index.Insert] and forgets through
// [Index.Remove], so that a replication layer (package replica) can send them to other gateway
// replicas, whose indexes apply them without reporting them to their own Feed, so that
// replicas do not echo each other. Backends are named, not numbered: ids differ between
// indexes.
//
// Calls happen after the change, outside the index's locks, from the goroutine that called
// Insert or Remove (for a Router, often a request's goroutine inside Pick or Done). An
// implementation must therefore be safe for concurrent use, must not block, must copy what it
// keeps (chain is the caller's and is valid only during the call) and must not call back into
// the Index. Changes made concurrently to one backend may be reported in another order than
// the index applied them; both are hints that the next insert or the engine's own events
// correct.
type Feed interface {
	// Inserted reports that backend now holds the blocks of chain.
	Inserted(backend string, chain []BlockHash)
	// Removed reports that backend no longer holds the blocks of chain.
	Removed(backend string, chain []BlockHash)
}

// peerIndex is an Index as a replication layer sees it, through internal/peer.PrefixIndex:
// Insert and Remove for the chains another gateway replica's Feed reported, not reported to
// this index's Feed. A conversion of *Index, so handing it out allocates nothing.
type peerIndex Index

// InsertRemote is Insert for a chain another gateway replica learnt (its Feed reported it):
// the same effect on the index, but not reported to this index's Feed, so that replicas
// applying each other's feeds do not echo them back. Same cost and errors as Insert.
func (p *peerIndex) InsertRemote(id HolderID, chain []BlockHash) error {
	return (*Index)(p).insert(id, chain, GPU)
}

// RemoveRemote is Remove for a chain another gateway replica forgot: the same effect, not
// reported to this index's Feed. Same cost and errors as Remove.
func (p *peerIndex) RemoveRemote(id HolderID, chain []BlockHash) error {
	return (*Index)(p).remove(id, chain, GPU)
}

// The replication seam (internal/peer), kept off the API.
func init() {
	peer.PrefixIndex = func(index any) any { return (*peerIndex)(index.(*Index)) }
}
