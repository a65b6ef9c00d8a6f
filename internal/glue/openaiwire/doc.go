// Package openaiwire is what the request pipeline (proxy, proxy/extproc, the simulator and
// the load generator) reads and writes on the wire beside a parsed openai.Request, kept off
// package openai's API, which holds only the request model a tokenizer or a flow keyer
// reads.
//
// # Other APIs' answers and errors
//
// ParseAnswer and ParseEvent read an answer's usage in OpenAI's terms whatever the API:
// Anthropic's input_tokens, cache_read_input_tokens and cache_creation_input_tokens add up
// to the prompt tokens, the cache reads being the cached ones; the Responses API's
// input_tokens and input_tokens_details.cached_tokens map directly. They also tell a stream's
// first token, its last event (those streams have no [DONE]) and, for Responses, the id of
// the stored response. AppendJSONFor, AppendEventFor and WriteErrorFor write an error as the
// endpoint's API does: Anthropic's {"type":"error","error":{"type","message"}} for
// Messages, OpenAI's otherwise. BackendError reads a backend's error answer, whatever its
// shape, into that one error (OpenAI's types, no addresses); AppendResponsesError and
// AppendResponseFailed end a failed Responses stream as OpenAI does, numbered on from
// SequenceNumber.
//
// # The body sent upstream
//
// AppendUpstream writes the body for the backend by splicing the byte ranges Parse
// recorded: the top-level "priority" is removed (the engine must not reorder what usher's
// bands ordered), and a streaming chat or completions request is made to report its usage
// (Messages and Responses streams always do). Nothing is re-encoded, so numbers, escapes,
// key order and unknown fields reach the engine as the client wrote them. PrefillBody,
// TransferParams and AppendDecode write the two steps of disaggregated serving in vLLM's
// KV-transfer protocol. AppendUpstream reaches the ranges through package hook, which
// package openai fills at init.
package openaiwire
