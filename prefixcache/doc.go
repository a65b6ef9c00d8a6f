// Package prefixcache hashes prompts into chained block hashes and keeps a lock-striped index
// from block hash to the backends (model servers) holding that block in their KV cache, so a
// router can ask, for a new prompt, how many of its leading blocks each backend already holds.
//
// The full essay (hashing, striping, eviction, memory layout and rejected alternatives) is being
// written; see the doc comments of HashTokens, Index and Match meanwhile.
package prefixcache
