// Package openai reads the API requests usher schedules — OpenAI's POST
// /v1/chat/completions, /v1/completions, /v1/responses and /v1/embeddings, and Anthropic's
// POST /v1/messages, all of which vLLM serves — exactly as the model server behind usher
// will read them, into a [Request] that package proxy's Tokenizer hashes and its FlowKeyer
// keys, and refuses the others with an [*Error] that names the field. Reading the answers
// and writing the body sent upstream are the gateway's own business, kept off this API.
//
// # Two parsers, one body
//
// usher decides on what a body says: the model routes it, "stream" decides how the answer
// is relayed, max_tokens and n feed the admission accounting, the messages are hashed for
// prefix-cache affinity. Then the backend (vLLM, SGLang: Python, json and pydantic) parses
// the same bytes again. Wherever the two parsers can disagree, a client can make usher
// believe one thing and the engine do another. encoding/json was such a parser: it matches
// field names case-insensitively, so {"model":"m","STREAM":true,...} was streaming to the
// gateway and not to vLLM, which ignores the unknown "STREAM"; the client got a JSON body
// where it expected events. Its errors also leaked Go type names ("cannot unmarshal string
// into Go struct field .stream of type bool").
//
// So Parse reads the body the way the backend does, and where backends might differ among
// themselves, it refuses rather than guess:
//
//   - Field names are exact and case-sensitive, with JSON escapes decoded first:
//     "\u0073tream" is stream, as Python reads it. "STREAM" is an unknown field.
//   - Unknown fields are not interpreted and pass to the backend byte for byte.
//   - A field Parse reads given twice (at the top level, in a message, a content part, or
//     stream_options) is refused: Python keeps the last, a hand-written reader might keep
//     the first, and usher must not take the side the backend does not.
//   - Values are typed strictly. pydantic's lax mode would take "10" or 10.0 for 10, and
//     "true" or 1 for true; Parse accepts only the JSON type itself (or null where the
//     field is optional), so there is no coercion to get wrong.
//   - The body is strict RFC 8259 JSON: valid UTF-8, one object and only whitespace around
//     it, no NaN or Infinity (which Python would accept), no comments, no trailing commas,
//     no raw control characters in strings, nesting at most ParseLimits.MaxDepth deep.
//
// # What it refuses
//
// Every refusal is an *Error with Status 400, Type "invalid_request_error", a Code
// ("invalid_utf8", "invalid_json", "invalid_type", "invalid_value", "missing_field",
// "duplicate_field"), the field in Param ("max_tokens", "messages[2].role",
// "messages[3].content[1].text", "prompt[0][4]") and a message that names the field and
// what it must be, such as `"stream" must be a boolean, got a string`. When a body has both a field error and a
// syntax error, the syntax error is reported. Beyond the JSON rules above:
//
//   - model must be a non-empty string.
//   - Chat: messages must be a non-empty array of at most ParseLimits.MaxMessages objects; each
//     has a role (system, user, assistant, tool, developer, function) and a content that
//     is a string, an array of parts each with a string "type" (a "text" part needs a
//     string "text"), or — for the assistant only — null or absent.
//   - Completions: prompt must be a string, or a non-empty array of strings, of token ids
//     (non-negative integers), or of non-empty arrays of token ids.
//   - stream is a boolean or null; stream_options an object or null, allowed only when
//     stream is true, with include_usage a boolean or null.
//   - n, max_tokens and max_completion_tokens (chat only; the completions API has no such
//     field) are integers or null: no fraction, no exponent, within [1, limit].
//   - user and cache_salt are strings or null, cache_salt non-empty; priority is an
//     integer or null.
//   - Messages (Anthropic): model, messages and max_tokens are required; messages are
//     objects with a role, "user" or "assistant", and a content that is a string or an array
//     of blocks each with a string "type" (a "text" block needs a string "text"; other
//     types — image, tool_use, tool_result, thinking, and types yet to come — pass unread);
//     system is a string or an array of text blocks; metadata an object or null whose
//     user_id is a string or null; tools an array of objects or null.
//   - Responses: model and input are required; input is a string or a non-empty array of
//     items, each an object with an optional string "type": a message (no type, or
//     "message") has a role (user, assistant, system, developer) and a content that is a
//     string or an array of parts (input_text and output_text need a string "text"); other
//     items (function calls and their outputs, reasoning, ...) pass unread. instructions,
//     previous_response_id (non-empty), user and prompt_cache_key are strings or null, store
//     a boolean or null, max_output_tokens an integer in [1, limit] or null, conversation a
//     non-empty string or an object with one as "id"; previous_response_id and conversation
//     exclude each other.
//   - Embeddings: model and input are required; input is as a completions prompt.
//   - kv_transfer_params is refused on every endpoint: only the gateway sets it.
//
// # What it checks and passes on
//
// The other fields each API documents — the sampling parameters above all — Parse does not
// read, but it checks them, so that a value no engine takes is refused here, naming the
// field, rather than reaching the backend. It refuses only that: the engine judges the
// rest, so vLLM's clients keep working (vLLM takes temperatures above OpenAI's 2, top_k,
// min_p, repetition_penalty and the like). Every such field may be null, and may be given
// more than once, each value then checked.
//
//   - Types, as each API documents them: a boolean, a string, a number, an integer, an
//     object, or an array of them (stop: a string or an array of strings; logit_bias: an
//     object of numbers). "logprobs" is a boolean to chat and an integer to completions.
//   - Numbers: a number must be a finite float64 (JSON has no NaN, and 1e309 overflows to
//     infinity as Python reads it); an integer has no fraction or exponent and fits in an
//     int64 (seed: 1e999999999 is neither).
//   - Ranges every engine enforces: temperature at least 0; top_p in (0, 1] (1e-400 reads
//     as 0); top_k at least -1; top_logprobs (chat, Responses) and completions' logprobs in
//     [0, ParseLimits.MaxLogprobs], 20 by default as in vLLM; n and the max_tokens fields
//     at least 1, as above.
//   - Content parts by their type: a chat image_url, audio_url or video_url part needs an
//     object with a string "url"; input_audio an object; a refusal a string; a Responses
//     input_image's image_url is a string; Anthropic's image and document sources are
//     objects, a tool_use's input an object, a tool_result's content a string or an array.
//     Parts of other types pass unread, as parts of types yet to come must.
//
// Which fields are checked: on chat and completions, OpenAI's (temperature, top_p, n,
// logprobs, top_logprobs, seed, stop, frequency_penalty, presence_penalty, logit_bias,
// response_format, tools, tool_choice, ...) and vLLM's sampling parameters (top_k, min_p,
// repetition_penalty, length_penalty, min_tokens, best_of, stop_token_ids, ...); on
// Responses temperature, top_p, top_logprobs, reasoning, text, include and the like; on
// Messages temperature, top_p, top_k, stop_sequences, tool_choice and thinking; on
// embeddings encoding_format and dimensions. Unknown fields are not checked.
//
// # The body sent upstream
//
// The gateway writes the body for the backend by splicing byte ranges Parse records in the
// Request: the top-level "priority" is removed (the engine must not reorder what usher's
// bands ordered), and a streaming chat or completions request is made to report its usage
// (Messages and Responses streams always do). Nothing is re-encoded, so numbers, escapes,
// key order and unknown fields reach the engine as the client wrote them.
//
// # Cost
//
// Parse checks the body with one utf8.Valid, then reads it in one pass, O(len(body)), with
// recursion only as deep as the nesting: plain string bytes are skipped eight at a time,
// and what it keeps are spans into the body, not copies.
// A chat body costs two allocations — the Request, with room for 16 messages, and one
// string holding Model, User and CacheSalt — and a third past 16 messages, for Messages
// (collected meanwhile in a pooled scratch slice). Checking the fields passed on allocates
// nothing (a number literal longer than 32 bytes excepted). A refused body is scanned a second time
// to check its syntax. Message.AppendText and Request.AppendPrompt are O(len(body)) and
// allocate only to grow the caller's buffer.
//
// # Concurrency
//
// Parse is safe for concurrent use. A Request is not mutated after Parse returns it: any
// number of goroutines may read its fields and call its methods at once, provided no one
// modifies the body, which the Request aliases.
//
// # Rejected alternatives
//
//   - encoding/json into tagged structs: case-insensitive names, duplicate keys resolved
//     silently (the last wins), Go type names in errors, and an allocation per string.
//   - encoding/json/v2, which is case-sensitive and rejects duplicate names, is still
//     behind GOEXPERIMENT=jsonv2 in Go 1.26, and reflection would still allocate.
//   - Decoding into map[string]any: allocates the whole tree, message texts included, to
//     read a dozen fields.
//   - Re-encoding a modified body: changes bytes the client chose (number formatting,
//     escapes, key order) and can lose precision in values usher does not read.
package openai
