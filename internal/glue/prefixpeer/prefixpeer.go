// Package prefixpeer is prefixcache's replication seam, kept off prefixcache's API: Buffer, the
// bounded prefixcache.Feed a replication layer builds an Index with and drains, and
// InsertRemote and RemoveRemote, which apply the chains another replica's index reported
// without reporting them again. Its users are package replica and the bench simulator's
// replicas.
package prefixpeer

import (
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/prefixcache"
)

// remote is what peer.PrefixIndex returns for a *prefixcache.Index.
type remote interface {
	InsertRemote(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
	RemoveRemote(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
}

// InsertRemote is ix.Insert for a chain another gateway replica learnt (its index's Feed
// reported it): the same effect on ix, but not reported to ix's Feed, so that replicas applying
// each other's feeds do not echo them back. Same cost and errors as Insert; no allocation.
func InsertRemote(ix *prefixcache.Index, id prefixcache.HolderID, chain []prefixcache.BlockHash) error {
	return peer.PrefixIndex(ix).(remote).InsertRemote(id, chain)
}

// RemoveRemote is ix.Remove for a chain another gateway replica forgot: the same effect, not
// reported to ix's Feed. Same cost and errors as Remove; no allocation.
func RemoveRemote(ix *prefixcache.Index, id prefixcache.HolderID, chain []prefixcache.BlockHash) error {
	return peer.PrefixIndex(ix).(remote).RemoveRemote(id, chain)
}
