// Package routerstats is the seam through which the gateway's metrics (internal/glue's
// gatewaymetrics) read what a routing.Router counts beyond its public Stats, kept off the
// Router's API: the scores it clamped, per scorer. Package routing installs the function at
// init; it takes the *routing.Router as an any (routerstats cannot import routing, which
// imports it) and panics on anything else, a bug in the module.
package routerstats

// Clamped is one scorer's count of clamped scores: Scorer is its label (the name of its Go type
// without the package, with "#2", "#3", ... after a type's second and later scorers in the
// profile, so every scorer has its own), Count the scores it gave that were NaN or outside
// [0, 1] since the Router was made.
type Clamped struct {
	Scorer string
	Count  uint64
}

// AppendClamped appends one Clamped for each scorer of the router's profile with a non-zero
// weight, in the profile's order. O(scorers). Installed by package routing.
var AppendClamped func(router any, dst []Clamped) []Clamped
