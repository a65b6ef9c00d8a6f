// Package inferencepool follows a Gateway API Inference Extension InferencePool on
// Kubernetes as an extproc.EndpointSource: the endpoint picker's endpoints are the pool's ready pods
// on its target ports, kept current with client-go informers.
//
// It and kube/metricsauth are the packages of usher that link the Kubernetes client; only
// the mains (examples/epp; examples/gateway imports kube/metricsauth alone) import them, so
// an embedder that never runs on Kubernetes never links client-go. The InferencePool types
// (v1, and the older v1alpha2) are written here from the CRD schemas, with a strict Decode
// for manifests.
//
// # The model
//
// Two informers feed one goroutine (Run's): one over the pool by name (dynamic client), one
// over the pods of the pool's namespace that its selector matches (typed client, replaced
// when the selector changes). Their event handlers only signal; Run gathers signals for
// Options.Debounce, recomputes the set from the informers' caches (O(pods × ports)), and
// reports it when it differs from the last. The caches survive watch failures, so an API
// server outage keeps the last set; the list and watch calls are wrapped to count failures
// and mark the connection up or down (Stats), and an outage is logged once.
//
// Objectives follows the pool's InferenceObjectives (v1alpha2, dynamic client, one informer
// over the namespace, objectives naming another pool ignored, each decoded strictly) and
// maps their priorities onto a picker's bands in order; the picker's main reads
// ObjectiveHeader through it only when the proxy in front is trusted to set the header.
//
// Rejected: an EndpointSlice watch (it lags readiness through the endpoints controller and
// drops the pod's labels, which carry the role); a controller-runtime manager (a large
// dependency for two informers).
package inferencepool
