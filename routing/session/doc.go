// Package session places a conversation's turns where its history is cached: session
// affinity ([NewAffinity]), usher's session-aware placement ([NewAware]) and llm-d's "sticky
// until saturated" filter ([NewSticky]). Each is a part of a [routing.Profile]; a Router made
// with one learns placements at Pick and Done.
//
// # Sessions and the shared opening prompt
//
// When every session starts with the same system prompt, a prefix scorer sends every new
// session to the first server that saw it. The session-aware scorer keeps a later turn where
// its history is cached — unless that server's load exceeds [AwareOptions].Overload (2 by
// default) times the pool's mean plus one request, or the history was evicted there and
// another server holds more of the prompt; then the turn has no home again. A turn without a
// home goes where most of its prompt is cached (at least KeptFraction of its blocks: a fork of
// another conversation, an agent's sub-task, a shared document) unless every such server is
// overloaded, and is placed for balance otherwise: a shared opening that is a small part of
// the prompt does not pull.
//
// Sessions live in a fixed-size, set-associative table of atomic words with a TTL: bounded
// memory whatever clients send, no lock on the pick path. A session is named by the request
// ([routing.Request].Session), never by what a client claims about its history. Placements
// can be shared with other gateway replicas through a [Feed] (package replica does).
//
// Every constructor validates its options and returns an error wrapping
// [routing.ErrInvalidOptions]; the parts are safe for concurrent use, and their Score and
// Filter allocate nothing.
package session
