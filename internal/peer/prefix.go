package peer

// PrefixIndex is installed by package prefixcache. It returns a *prefixcache.Index (passed as
// an any) as a value with the methods
//
//	InsertRemote(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
//	RemoveRemote(id prefixcache.HolderID, chain []prefixcache.BlockHash) error
//
// which apply a chain another replica's index learnt or forgot: the effect of Index.Insert and
// Index.Remove, with the same cost and errors, but not reported to the index's Feed, so that
// replicas applying each other's feeds do not echo them back. It does not allocate.
// internal/glue/prefixpeer gives the result its type.
var PrefixIndex func(index any) any
