// Package refpolicy is the seam through which package fairness hands out its reference
// policies — peers' algorithms reproduced exactly, kept to compare usher's own against — without
// exporting them: internal/glue/builtin names them ("las-reference"), for the gateway's
// and the bench simulator's policy tables. Package fairness installs the constructors at init;
// they return a flowcontrol.Policy as an any, since this package cannot import flowcontrol.
package refpolicy

// LAS, installed by package fairness, returns a new instance of llm-d's least-attained-service
// policy with llm-d's defaults, reproduced exactly: each completed request costs prompt
// tokens + 2 × completion tokens; a flow's service decays with a 60 s half-life; the waiting
// flow with the highest 0.8 · (1 − normalised service) + 0.2 · normalised head wait goes next,
// both terms min-max normalised over the flows waiting in the band. It scans every waiting
// flow of the band on each pick: O(flows) per dispatch.
var LAS func() any
