// Package profiles holds usher's default routing profile ([Usher]) and the peers' algorithms
// as configurations of the same parts: llm-d's default blend ([LLMDDefault]), its precise
// prefix profile ([LLMDPrecise]) and its sticky profile ([LLMDSticky]), SGLang's cache-aware
// policy ([SGLang]), NVIDIA Dynamo's KV cost ([Dynamo]), AIBrix's prefix gate ([AIBrix]),
// round-robin ([RoundRobin]) and least-request ([LeastRequest]). Each is a [routing.Profile]
// — filters, weighted scorers and a picker — with its formulas and defaults stated on its
// constructor, so that a profile can be read, compared and extended ([routing.Profile.With]).
// bench/README.md compares them on the cluster simulator and on processes.
//
// A profile is a value: build one, pass it in [routing.Options].Profile. The scorers that only
// a peer's algorithm uses are exported for composing profiles of one's own ([NewDynamoCost],
// [NewSGLangCacheAware], [AIBrixPrefixGate]).
package profiles
