// Package hook is the seam between package proxy/openai and internal/glue/openaiwire for what
// the pipeline needs of an *openai.Request that its fields do not hold: the byte ranges Parse
// recorded for the upstream body. Package openai installs the functions at init; they take the
// *openai.Request as an any (hook cannot import openai, which imports it) and panic on
// anything else, a bug in the module.
package hook

// Installed by package proxy/openai.
var (
	// AppendUpstream appends the body to send to the backend (openaiwire.AppendUpstream).
	AppendUpstream func(req any, dst []byte) []byte
	// Upstream returns the body to send to the backend (openaiwire.Upstream).
	Upstream func(req any) []byte
)
