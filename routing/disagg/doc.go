// Package disagg decides, per request, whether disaggregated serving is worth it: whether a
// prompt is prefilled on a prefill server and its KV cache sent to the decode server a
// [routing.Router] chose, or prefilled by the decode server itself.
//
// Disaggregated serving is two picks from one Router: the decode pick first
// ([routing.Request].Role [routing.RoleDecode]), whose [routing.Result] says how much of the
// prompt the decode server is believed to hold; then, when a [Decider] says so, the prefill
// pick ([routing.RolePrefill]). [NewPrefix]'s decider disaggregates when enough of the prompt
// is uncached on the decode server; [NewPoolAware]'s also weighs the prefill pool's load, so a
// saturated pool sends the work back to the decode servers.
package disagg
