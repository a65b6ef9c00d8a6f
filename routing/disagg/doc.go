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
// prefill or both — and shares the servers out by a work balance: the prefill work it
// measures (uncached prompt tokens a second, over a server's prefill rate) against the decode
// work it sees (the answers running and their context, over what one server decodes within
// the TPOT target), each in servers, with the servers decode does not need twice over waiting
// in prefill; a server also moves into prefill while the predicted prefill queue passes a
// third of the TTFT target. No server changes role more than once per dwell (30 s), its first
// change out of the all-both start and a move the queue calls for excepted, and no request in
// flight is moved; its Plan is a tick the host calls after each scrape (no goroutine of its own),
// and the Router reads the current plan with one atomic load per pick. The Planner is also
// the Decider for those servers: while there is a prefill pool, every prefill goes to it.
//
// Rejected for the planner (measured in bench/README): sizing the pool to fill it to 70% of
// its rate (it outgrew the decode side on long prompts and the dwell held the mistake), a
// dwell on the first move out of the all-both start, a 10 s average of the prefill queue, and
// a decider that prefills locally when the decode server is idle, when the pool's queue would
// miss the TTFT target, or when the stall is short: a local prefill of a long prompt stalls
// the answers on that server past a 25 ms TPOT target (one 8,192-token chunk is about 400 ms).
//
// Rejected: a decode role for kv_both servers. With a prefill pool, a server in both already
// takes no prefill for others, which is all a decode role would add; and a server moved from
// both to decode when the pool opens could not move into prefill for the dwell, exactly when
// the pool may have to grow. A planner whose ticks run inside Pick was rejected too: the pick
// would pay for the planner's O(backends) work.
package disagg
