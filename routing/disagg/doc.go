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
//
// Servers whose KV connector sends and receives (vLLM's kv_role kv_both;
// [routing.BackendState].KVBoth) need not have a fixed role. A [Planner] keeps one for each —
// prefill or both — and moves servers between them as the prefill demand it measures and the
// prefill queue it predicts change, no server more than once per dwell (30 s), never moving a
// request in flight; its Plan is a tick the host calls after each scrape (no goroutine of its
// own), and the Router reads the current plan with one atomic load per pick. The Planner is
// also the Decider for those servers: a long prefill goes to a server in prefill while the
// decode server is producing answers a local prefill would stall, unless the prefill servers'
// queue would make it miss the TTFT target a local prefill could meet.
//
// Rejected: a decode role for kv_both servers. With a prefill pool, a server in both already
// takes no prefill for others, which is all a decode role would add; and a server moved from
// both to decode when the pool opens could not move into prefill for the dwell, exactly when
// the pool may have to grow. A planner whose ticks run inside Pick was rejected too: the pick
// would pay for the planner's O(backends) work.
package disagg
