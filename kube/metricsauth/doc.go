// Package metricsauth judges the bearer tokens of a metrics scrape through the Kubernetes API,
// as the reference endpoint picker's metrics endpoint does (controller-runtime's
// filters.WithAuthenticationAndAuthorization): a TokenReview says who the token is, then a
// SubjectAccessReview says whether that user may get the non-resource URL /metrics. A
// [Reviewer]'s Authenticate method is the judge of metrics.ExporterOptions.Authenticate, so
// the gateway (examples/gateway) and the endpoint picker (examples/epp) share it, behind the
// one metrics listener they share.
//
// The scraper needs a ClusterRole granting get on the nonResourceURL /metrics, bound to its
// service account; the process that judges needs create on tokenreviews
// (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io). kube/deploy has
// both.
//
// # The model
//
// A scrape brings a token; its SHA-256 digest (never the token) keys a cache of judgments. A
// judgment found and not expired answers at once. Otherwise one look-up runs, whichever
// number of scrapes brought the same token at once: the first asks the API server (two calls,
// each bounded by Options.Timeout, on a context that the scraper's leaving does not cancel, so
// the others waiting on it are not failed by it), the others wait for its answer or for their
// own request's end. An allowed token is then trusted for Options.AllowTTL, a refused one
// (unauthenticated, or not authorised) for Options.DenyTTL; a failed call is not cached, so
// the next scrape asks again. The cache holds at most Options.MaxEntries judgments and evicts
// the least recently used.
//
// What the Exporter answers: allowed, 200; unauthenticated or not authorised, 401 (the
// Exporter's judge says yes or no, so a user the API server knows but RBAC refuses gets 401,
// where controller-runtime answers 403); the API server unreachable or failing, 503.
//
// Rejected: k8s.io/apiserver's delegating authenticator and authorizer (what
// controller-runtime uses; a large dependency for two calls and a cache) and
// golang.org/x/sync/singleflight (its caller-cancellation story is DoChan plus a goroutine
// per call; the look-up here runs on the first caller's goroutine).
//
// The TTLs: controller-runtime trusts a TokenReview for a minute and a SubjectAccessReview
// that allows for five minutes, one that denies for 30 s. A judgment here is both at once,
// so it lasts no longer than the shorter of them when it allows (one minute); a refusal lasts
// 10 s, so that a binding just created counts soon.
package metricsauth
