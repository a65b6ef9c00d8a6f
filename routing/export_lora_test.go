package routing

// Hooks for the external tests of models and adapters (models_test.go).

// Sanitize is BackendState.sanitize: it drops out-of-range signals from s.Known and returns
// how many it dropped.
func Sanitize(s *BackendState) int { return s.sanitize() }

// AdapterInFlight returns r's count of its requests in flight for adapter on backend id.
func AdapterInFlight(r *Router, adapter string, id BackendID) int {
	return r.adapters.count(r.adapters.hash(adapter), id)
}
