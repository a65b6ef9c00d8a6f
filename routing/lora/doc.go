// Package lora scores backends for requests that need a LoRA adapter: a scorer for package
// routing, read from the adapters each server reports and the router's own count of the
// requests it sent.
//
// # Models and LoRA adapters
//
// A backend may list the models it serves ([routing.BackendState.Models]: base models and the
// adapters it can load); a request naming [routing.Request.Model] is routed by package routing
// only to backends that list it or list nothing, before the filters, and fails with
// [routing.ErrNoBackendForModel] when none does. A server with LoRA also reports the adapters of
// its running and waiting requests and its adapter slots ([routing.SignalAdapters], vLLM's
// vllm:lora_requests_info). A [routing.Router] interns every name into small ids per snapshot
// and sorts each backend's sets, so a pick resolves the request's model and adapter once and
// tests each backend with a binary search over a few integers. Because a scrape lags the burst
// that loads an adapter, the router counts its own in-flight requests per backend and adapter
// ([routing.Candidate.AdapterInFlight]) in a fixed table of atomic words.
//
// The scorer of [NewAffinity] turns both into a score: the adapter in use, then already
// loading, then a free slot, scaled down by adapters waiting for slots. Weighed against a load
// term (routing/profiles' UsherOptions.AdapterWeight) it cuts adapter loads without pinning
// adapters to servers; bench/README.md, "LoRA adapters", has the figures.
//
// # Concurrency
//
// The scorer is immutable and safe for concurrent use; [AffinityOptions] is a plain value.
package lora
