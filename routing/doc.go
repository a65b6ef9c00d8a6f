// Package routing picks a backend (a model server) for each LLM request: filters narrow the
// candidates, weighted scorers rate them, a picker chooses one. The essay on the model and its
// alternatives is being written; see Router, BackendState and Scorer.
package routing
