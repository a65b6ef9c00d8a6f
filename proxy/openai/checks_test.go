package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// checkCase is a body whose passed-on fields Parse checks: refused with code and param, or
// (code "") accepted and passed on unchanged.
type checkCase struct {
	name  string
	ep    openai.API
	lim   openai.ParseLimits
	body  string
	code  string
	param string
}

func completionsWith(members string) string { return completions(`"prompt":"p",` + members) }
func embeddingsWith(members string) string {
	return `{"model":"e","input":"x",` + members + `}`
}

// chatParts returns a chat body whose only message's content is the given parts, after a
// text part.
func chatParts(parts string) string {
	return `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"see"},` + parts + `]}]}`
}

func inputParts(parts string) string {
	return `{"model":"gpt","input":[{"role":"user","content":[{"type":"input_text","text":"see"},` + parts + `]}]}`
}

func anthropicBlocks(blocks string) string {
	return `{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text","text":"see"},` + blocks + `]}]}`
}

var checkCases = []checkCase{
	// Refused: what no engine takes. The values users found reaching the backend first.
	{name: "temperature NaN string", body: chat(`"temperature":"NaN"`), code: "invalid_type", param: "temperature"},
	{name: "temperature -1", body: chat(`"temperature":-1`), code: "invalid_value", param: "temperature"},
	{name: "temperature 1e309", body: chat(`"temperature":1e309`), code: "invalid_value", param: "temperature"},
	{name: "logprobs yes", body: chat(`"logprobs":"yes"`), code: "invalid_type", param: "logprobs"},
	{name: "seed 1e999999999", body: chat(`"seed":1e999999999`), code: "invalid_type", param: "seed"},
	{name: "image_url 5", body: chatParts(`{"type":"image_url","image_url":5}`), code: "invalid_type", param: "messages[0].content[1].image_url"},

	{name: "temperature -1e309", body: chat(`"temperature":-1e309`), code: "invalid_value", param: "temperature"},
	{name: "temperature a 400-digit integer", body: chat(`"temperature":1` + strings.Repeat("0", 400)), code: "invalid_value", param: "temperature"},
	{name: "temperature -0.001", body: chat(`"temperature":-0.001`), code: "invalid_value", param: "temperature"},
	{name: "temperature Infinity string", body: chat(`"temperature":"Infinity"`), code: "invalid_type", param: "temperature"},
	{name: "temperature true", body: chat(`"temperature":true`), code: "invalid_type", param: "temperature"},
	{name: "temperature array", body: chat(`"temperature":[0.5]`), code: "invalid_type", param: "temperature"},
	{name: "top_p 0", body: chat(`"top_p":0`), code: "invalid_value", param: "top_p"},
	{name: "top_p -0.5", body: chat(`"top_p":-0.5`), code: "invalid_value", param: "top_p"},
	{name: "top_p 1.01", body: chat(`"top_p":1.01`), code: "invalid_value", param: "top_p"},
	{name: "top_p 1e-400 is 0", body: chat(`"top_p":1e-400`), code: "invalid_value", param: "top_p"},
	{name: "top_p a string", body: chat(`"top_p":"0.9"`), code: "invalid_type", param: "top_p"},
	{name: "top_k -2", body: chat(`"top_k":-2`), code: "invalid_value", param: "top_k"},
	{name: "top_k 1.5", body: chat(`"top_k":1.5`), code: "invalid_type", param: "top_k"},
	{name: "top_k a string", body: chat(`"top_k":"50"`), code: "invalid_type", param: "top_k"},
	{name: "top_k beyond int64", body: chat(`"top_k":9223372036854775808`), code: "invalid_value", param: "top_k"},
	{name: "n 0", body: chat(`"n":0`), code: "invalid_value", param: "n"},
	{name: "max_tokens 0", body: chat(`"max_tokens":0`), code: "invalid_value", param: "max_tokens"},
	{name: "max_completion_tokens -1", body: chat(`"max_completion_tokens":-1`), code: "invalid_value", param: "max_completion_tokens"},
	{name: "logprobs an integer on chat", body: chat(`"logprobs":1`), code: "invalid_type", param: "logprobs"},
	{name: "top_logprobs 21", body: chat(`"logprobs":true,"top_logprobs":21`), code: "invalid_value", param: "top_logprobs"},
	{name: "top_logprobs -1", body: chat(`"logprobs":true,"top_logprobs":-1`), code: "invalid_value", param: "top_logprobs"},
	{name: "top_logprobs a string", body: chat(`"logprobs":true,"top_logprobs":"5"`), code: "invalid_type", param: "top_logprobs"},
	{name: "top_logprobs above a set limit", lim: openai.ParseLimits{MaxLogprobs: 64}, body: chat(`"logprobs":true,"top_logprobs":65`), code: "invalid_value", param: "top_logprobs"},
	{name: "seed 2^63", body: chat(`"seed":9223372036854775808`), code: "invalid_value", param: "seed"},
	{name: "seed -2^63-1", body: chat(`"seed":-9223372036854775809`), code: "invalid_value", param: "seed"},
	{name: "seed a string", body: chat(`"seed":"42"`), code: "invalid_type", param: "seed"},
	{name: "seed 1.0", body: chat(`"seed":1.0`), code: "invalid_type", param: "seed"},
	{name: "frequency_penalty a string", body: chat(`"frequency_penalty":"0.5"`), code: "invalid_type", param: "frequency_penalty"},
	{name: "presence_penalty 1e400", body: chat(`"presence_penalty":1e400`), code: "invalid_value", param: "presence_penalty"},
	{name: "min_p a string", body: chat(`"min_p":"0.1"`), code: "invalid_type", param: "min_p"},
	{name: "repetition_penalty NaN string", body: chat(`"repetition_penalty":"NaN"`), code: "invalid_type", param: "repetition_penalty"},
	{name: "length_penalty an object", body: chat(`"length_penalty":{}`), code: "invalid_type", param: "length_penalty"},
	{name: "best_of a fraction", body: chat(`"best_of":2.5`), code: "invalid_type", param: "best_of"},
	{name: "min_tokens a string", body: chat(`"min_tokens":"1"`), code: "invalid_type", param: "min_tokens"},
	{name: "stop a number", body: chat(`"stop":5`), code: "invalid_type", param: "stop"},
	{name: "stop element a number", body: chat(`"stop":["a",5]`), code: "invalid_type", param: "stop[1]"},
	{name: "stop element null", body: chat(`"stop":[null]`), code: "invalid_type", param: "stop[0]"},
	{name: "logit_bias an array", body: chat(`"logit_bias":[1]`), code: "invalid_type", param: "logit_bias"},
	{name: "logit_bias value a string", body: chat(`"logit_bias":{"50256":"-100"}`), code: "invalid_type", param: "logit_bias.50256"},
	{name: "logit_bias value infinite", body: chat(`"logit_bias":{"1":5,"2":-1e999}`), code: "invalid_value", param: "logit_bias.2"},
	{name: "stop_token_ids a fraction", body: chat(`"stop_token_ids":[2,0.5]`), code: "invalid_type", param: "stop_token_ids[1]"},
	{name: "allowed_token_ids a number", body: chat(`"allowed_token_ids":7`), code: "invalid_type", param: "allowed_token_ids"},
	{name: "bad_words element an array", body: chat(`"bad_words":[["x"]]`), code: "invalid_type", param: "bad_words[0]"},
	{name: "ignore_eos a string", body: chat(`"ignore_eos":"yes"`), code: "invalid_type", param: "ignore_eos"},
	{name: "skip_special_tokens a number", body: chat(`"skip_special_tokens":0`), code: "invalid_type", param: "skip_special_tokens"},
	{name: "echo a string", body: chat(`"echo":"no"`), code: "invalid_type", param: "echo"},
	{name: "add_generation_prompt a number", body: chat(`"add_generation_prompt":1`), code: "invalid_type", param: "add_generation_prompt"},
	{name: "truncate_prompt_tokens a string", body: chat(`"truncate_prompt_tokens":"8"`), code: "invalid_type", param: "truncate_prompt_tokens"},
	{name: "prompt_logprobs a boolean", body: chat(`"prompt_logprobs":true`), code: "invalid_type", param: "prompt_logprobs"},
	{name: "tools an object", body: chat(`"tools":{}`), code: "invalid_type", param: "tools"},
	{name: "tool a string", body: chat(`"tools":[{"type":"function","function":{"name":"f"}},"g"]`), code: "invalid_type", param: "tools[1]"},
	{name: "tool_choice a number", body: chat(`"tool_choice":1`), code: "invalid_type", param: "tool_choice"},
	{name: "response_format a string", body: chat(`"response_format":"json"`), code: "invalid_type", param: "response_format"},
	{name: "parallel_tool_calls a string", body: chat(`"parallel_tool_calls":"true"`), code: "invalid_type", param: "parallel_tool_calls"},
	{name: "reasoning_effort a number", body: chat(`"reasoning_effort":2`), code: "invalid_type", param: "reasoning_effort"},
	{name: "a bad value given twice", body: chat(`"temperature":0.5,"temperature":-1`), code: "invalid_value", param: "temperature"},
	{name: "a bad value given first", body: chat(`"temperature":-1,"temperature":0.5`), code: "invalid_value", param: "temperature"},
	{name: "syntax beats a bad value", body: chat(`"temperature":-1,"x":[1,]`), code: "invalid_json"},

	// Chat content parts.
	{name: "image_url a string", body: chatParts(`{"type":"image_url","image_url":"https://example.com/cat.png"}`), code: "invalid_type", param: "messages[0].content[1].image_url"},
	{name: "image_url null", body: chatParts(`{"type":"image_url","image_url":null}`), code: "invalid_type", param: "messages[0].content[1].image_url"},
	{name: "image_url missing", body: chatParts(`{"type":"image_url","url":"u"}`), code: "missing_field", param: "messages[0].content[1].image_url"},
	{name: "image_url without url", body: chatParts(`{"type":"image_url","image_url":{"detail":"high"}}`), code: "missing_field", param: "messages[0].content[1].image_url.url"},
	{name: "image_url url a number", body: chatParts(`{"image_url":{"url":5},"type":"image_url"}`), code: "invalid_type", param: "messages[0].content[1].image_url.url"},
	{name: "image_url url twice", body: chatParts(`{"type":"image_url","image_url":{"url":"a","url":"b"}}`), code: "duplicate_field", param: "messages[0].content[1].image_url.url"},
	{name: "image_url detail a number", body: chatParts(`{"type":"image_url","image_url":{"url":"u","detail":1}}`), code: "invalid_type", param: "messages[0].content[1].image_url.detail"},
	{name: "image_url twice", body: chatParts(`{"type":"image_url","image_url":{"url":"u"},"image_url":{"url":"v"}}`), code: "duplicate_field", param: "messages[0].content[1].image_url"},
	{name: "input_audio a string", body: chatParts(`{"type":"input_audio","input_audio":"AAA"}`), code: "invalid_type", param: "messages[0].content[1].input_audio"},
	{name: "audio_url url null", body: chatParts(`{"type":"audio_url","audio_url":{"url":null}}`), code: "invalid_type", param: "messages[0].content[1].audio_url.url"},
	{name: "video_url missing", body: chatParts(`{"type":"video_url"}`), code: "missing_field", param: "messages[0].content[1].video_url"},
	{name: "refusal a number", body: chatParts(`{"type":"refusal","refusal":5}`), code: "invalid_type", param: "messages[0].content[1].refusal"},
	{name: "file a string", body: chatParts(`{"type":"file","file":"f"}`), code: "invalid_type", param: "messages[0].content[1].file"},
	{name: "text part text an object", body: chatParts(`{"type":"text","text":{"value":"x"}}`), code: "invalid_type", param: "messages[0].content[1].text"},

	// Completions.
	{name: "completions logprobs a boolean", ep: openai.Completions, body: completionsWith(`"logprobs":true`), code: "invalid_type", param: "logprobs"},
	{name: "completions logprobs 21", ep: openai.Completions, body: completionsWith(`"logprobs":21`), code: "invalid_value", param: "logprobs"},
	{name: "completions logprobs -1", ep: openai.Completions, body: completionsWith(`"logprobs":-1`), code: "invalid_value", param: "logprobs"},
	{name: "completions temperature -0.5", ep: openai.Completions, body: completionsWith(`"temperature":-0.5`), code: "invalid_value", param: "temperature"},
	{name: "completions top_p 2", ep: openai.Completions, body: completionsWith(`"top_p":2`), code: "invalid_value", param: "top_p"},
	{name: "completions top_k -5", ep: openai.Completions, body: completionsWith(`"top_k":-5`), code: "invalid_value", param: "top_k"},
	{name: "completions seed 1e999999999", ep: openai.Completions, body: completionsWith(`"seed":1e999999999`), code: "invalid_type", param: "seed"},
	{name: "completions echo a string", ep: openai.Completions, body: completionsWith(`"echo":"yes"`), code: "invalid_type", param: "echo"},
	{name: "completions suffix a number", ep: openai.Completions, body: completionsWith(`"suffix":1`), code: "invalid_type", param: "suffix"},
	{name: "completions max_tokens 0", ep: openai.Completions, body: completionsWith(`"max_tokens":0`), code: "invalid_value", param: "max_tokens"},
	{name: "completions n 0", ep: openai.Completions, body: completionsWith(`"n":0`), code: "invalid_value", param: "n"},

	// Responses.
	{name: "responses temperature NaN string", ep: openai.Responses, body: responses(`"temperature":"NaN"`), code: "invalid_type", param: "temperature"},
	{name: "responses temperature -1", ep: openai.Responses, body: responses(`"temperature":-1`), code: "invalid_value", param: "temperature"},
	{name: "responses top_p 0", ep: openai.Responses, body: responses(`"top_p":0`), code: "invalid_value", param: "top_p"},
	{name: "responses top_logprobs 21", ep: openai.Responses, body: responses(`"top_logprobs":21`), code: "invalid_value", param: "top_logprobs"},
	{name: "responses max_output_tokens 0", ep: openai.Responses, body: responses(`"max_output_tokens":0`), code: "invalid_value", param: "max_output_tokens"},
	{name: "responses parallel_tool_calls a string", ep: openai.Responses, body: responses(`"parallel_tool_calls":"no"`), code: "invalid_type", param: "parallel_tool_calls"},
	{name: "responses max_tool_calls a fraction", ep: openai.Responses, body: responses(`"max_tool_calls":1.5`), code: "invalid_type", param: "max_tool_calls"},
	{name: "responses include a string", ep: openai.Responses, body: responses(`"include":"reasoning.encrypted_content"`), code: "invalid_type", param: "include"},
	{name: "responses text a string", ep: openai.Responses, body: responses(`"text":"json"`), code: "invalid_type", param: "text"},
	{name: "responses reasoning a string", ep: openai.Responses, body: responses(`"reasoning":"high"`), code: "invalid_type", param: "reasoning"},
	{name: "responses input_image image_url 5", ep: openai.Responses, body: inputParts(`{"type":"input_image","image_url":5}`), code: "invalid_type", param: "input[0].content[1].image_url"},
	{name: "responses input_image image_url an object", ep: openai.Responses, body: inputParts(`{"type":"input_image","image_url":{"url":"u"}}`), code: "invalid_type", param: "input[0].content[1].image_url"},
	{name: "responses input_file file_id a number", ep: openai.Responses, body: inputParts(`{"type":"input_file","file_id":1}`), code: "invalid_type", param: "input[0].content[1].file_id"},
	{name: "responses text part without text", ep: openai.Responses, body: inputParts(`{"type":"text"}`), code: "missing_field", param: "input[0].content[1].text"},

	// Messages (Anthropic).
	{name: "messages temperature -1", ep: openai.Messages, body: anthropic(`"temperature":-1`), code: "invalid_value", param: "temperature"},
	{name: "messages temperature NaN string", ep: openai.Messages, body: anthropic(`"temperature":"NaN"`), code: "invalid_type", param: "temperature"},
	{name: "messages top_p 1.5", ep: openai.Messages, body: anthropic(`"top_p":1.5`), code: "invalid_value", param: "top_p"},
	{name: "messages top_k -2", ep: openai.Messages, body: anthropic(`"top_k":-2`), code: "invalid_value", param: "top_k"},
	{name: "messages stop_sequences a string", ep: openai.Messages, body: anthropic(`"stop_sequences":"\n"`), code: "invalid_type", param: "stop_sequences"},
	{name: "messages stop_sequences element a number", ep: openai.Messages, body: anthropic(`"stop_sequences":["a",1]`), code: "invalid_type", param: "stop_sequences[1]"},
	{name: "messages tool_choice a string", ep: openai.Messages, body: anthropic(`"tool_choice":"auto"`), code: "invalid_type", param: "tool_choice"},
	{name: "messages thinking a boolean", ep: openai.Messages, body: anthropic(`"thinking":true`), code: "invalid_type", param: "thinking"},
	{name: "messages max_tokens 0", ep: openai.Messages, body: `{"model":"c","max_tokens":0,` + anthropicHi + `}`, code: "invalid_value", param: "max_tokens"},
	{name: "messages image source a string", ep: openai.Messages, body: anthropicBlocks(`{"type":"image","source":"https://example.com/cat.png"}`), code: "invalid_type", param: "messages[0].content[1].source"},
	{name: "messages tool_use input a string", ep: openai.Messages, body: anthropicBlocks(`{"type":"tool_use","id":"t","name":"ls","input":"{}"}`), code: "invalid_type", param: "messages[0].content[1].input"},
	{name: "messages tool_result content a number", ep: openai.Messages, body: anthropicBlocks(`{"type":"tool_result","tool_use_id":"t","content":5}`), code: "invalid_type", param: "messages[0].content[1].content"},
	{name: "messages thinking block thinking a number", ep: openai.Messages, body: anthropicBlocks(`{"type":"thinking","thinking":1}`), code: "invalid_type", param: "messages[0].content[1].thinking"},

	// Embeddings.
	{name: "embeddings dimensions a string", ep: openai.Embeddings, body: embeddingsWith(`"dimensions":"256"`), code: "invalid_type", param: "dimensions"},
	{name: "embeddings dimensions a fraction", ep: openai.Embeddings, body: embeddingsWith(`"dimensions":256.5`), code: "invalid_type", param: "dimensions"},
	{name: "embeddings encoding_format a number", ep: openai.Embeddings, body: embeddingsWith(`"encoding_format":1`), code: "invalid_type", param: "encoding_format"},

	// Accepted: what some engine takes. vLLM's values first.
	{name: "temperature 2.5", body: chat(`"temperature":2.5`)},
	{name: "temperature 100", body: chat(`"temperature":100`)},
	{name: "top_k -1", body: chat(`"top_k":-1`)},
	{name: "top_k 0", body: chat(`"top_k":0`)},
	{name: "top_k 50", body: chat(`"top_k":50`)},
	{name: "min_p", body: chat(`"min_p":0.05`)},
	{name: "repetition_penalty", body: chat(`"repetition_penalty":1.2`)},
	{name: "logprobs with top_logprobs 5", body: chat(`"logprobs":true,"top_logprobs":5`)},
	{name: "vLLM sampling parameters", body: chat(`"top_k":40,"min_p":0.1,"repetition_penalty":1.05,"length_penalty":1,"min_tokens":2,"best_of":1,` +
		`"use_beam_search":false,"ignore_eos":true,"include_stop_str_in_output":false,"skip_special_tokens":false,"spaces_between_special_tokens":true,` +
		`"stop_token_ids":[2,32000],"allowed_token_ids":[1,2,3],"bad_words":["x"],"truncate_prompt_tokens":512,"prompt_logprobs":0,"echo":false,` +
		`"add_generation_prompt":true,"continue_final_message":false,"add_special_tokens":false,"guided_json":{"type":"object"},"vllm_xargs":{"a":1}`)},
	{name: "OpenAI's chat parameters", body: chat(samplingFields + `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto",` +
		`"parallel_tool_calls":true,"reasoning_effort":"low","store":false,"metadata":{"k":"v"},"service_tier":"auto","modalities":["text"]`)},
	{name: "tool_choice an object", body: chat(`"tool_choice":{"type":"function","function":{"name":"f"}}`)},
	{name: "nulls", body: chat(`"temperature":null,"top_p":null,"top_k":null,"seed":null,"stop":null,"logprobs":null,"top_logprobs":null,` +
		`"logit_bias":null,"tools":null,"tool_choice":null,"response_format":null,"ignore_eos":null,"stop_token_ids":null`)},
	{name: "temperature 0", body: chat(`"temperature":0`)},
	{name: "temperature -0", body: chat(`"temperature":-0.0`)},
	{name: "temperature 1e-400", body: chat(`"temperature":1e-400`)},
	{name: "temperature near the largest float64", body: chat(`"temperature":1.7976931348623157e308`)},
	{name: "top_p 1", body: chat(`"top_p":1`)},
	{name: "top_p 1e-300", body: chat(`"top_p":1e-300`)},
	{name: "top_logprobs 0", body: chat(`"top_logprobs":0`)},
	{name: "top_logprobs 20", body: chat(`"logprobs":true,"top_logprobs":20`)},
	{name: "top_logprobs within a set limit", lim: openai.ParseLimits{MaxLogprobs: 64}, body: chat(`"logprobs":true,"top_logprobs":64`)},
	{name: "seed -2^63", body: chat(`"seed":-9223372036854775808`)},
	{name: "seed 2^63-1", body: chat(`"seed":9223372036854775807`)},
	{name: "stop a string", body: chat(`"stop":"\n"`)},
	{name: "stop empty", body: chat(`"stop":[]`)},
	{name: "logit_bias", body: chat(`"logit_bias":{"1":-100,"2":100,"3":0.5}`)},
	{name: "good values given twice", body: chat(`"temperature":0.5,"temperature":0.7`)},
	{name: "Temperature is not temperature", body: chat(`"Temperature":"hot","TOP_P":7`)},
	{name: "top_logprobs is not a completions field", ep: openai.Completions, body: completionsWith(`"top_logprobs":"x"`)},
	{name: "completions logprobs 5", ep: openai.Completions, body: completionsWith(`"logprobs":5,"echo":true,"best_of":2,"suffix":"s","temperature":1.5`)},
	{name: "completions logprobs 0", ep: openai.Completions, body: completionsWith(`"logprobs":0`)},
	{name: "add_generation_prompt is not a completions field", ep: openai.Completions, body: completionsWith(`"add_generation_prompt":"x"`)},
	{name: "image_url parts", body: chatParts(`{"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"high"}},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA","detail":null,"x":1}},` +
		`{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}},{"type":"audio_url","audio_url":{"url":"a"}},` +
		`{"type":"video_url","video_url":{"url":"v"}},{"type":"file","file":{"file_id":"f"}},{"type":"refusal","refusal":"no"}`)},
	{name: "a part of an unknown type passes unread", body: chatParts(`{"type":"future","image_url":5,"text":7}`)},
	{name: "a Responses part on chat passes unread", body: chatParts(`{"type":"input_image","image_url":5}`)},
	{name: "responses parameters", ep: openai.Responses, body: responses(`"temperature":1.5,"top_p":0.9,"top_logprobs":3,"parallel_tool_calls":false,` +
		`"background":false,"max_tool_calls":4,"truncation":"auto","service_tier":"auto","reasoning":{"effort":"low"},"text":{"format":{"type":"text"}},` +
		`"tool_choice":"auto","include":["message.output_text.logprobs"],"metadata":{"k":"v"}`)},
	{name: "responses input_image parts", ep: openai.Responses, body: inputParts(`{"type":"input_image","image_url":"https://example.com/cat.png","detail":"auto"},` +
		`{"type":"input_image","file_id":"f","image_url":null},{"type":"input_file","file_data":"AAA","filename":"a.pdf"}`)},
	{name: "messages parameters", ep: openai.Messages, body: anthropic(`"temperature":1,"top_p":0.9,"top_k":40,"stop_sequences":["\n\nHuman:"],` +
		`"tool_choice":{"type":"auto"},"thinking":{"type":"enabled","budget_tokens":1024},"service_tier":"auto"`)},
	{name: "messages blocks", ep: openai.Messages, body: anthropicBlocks(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}},` +
		`{"type":"document","source":{"type":"text","data":"d"}},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]},` +
		`{"type":"tool_result","tool_use_id":"t"},{"type":"thinking","thinking":"hm","signature":"s"},{"type":"redacted_thinking","data":"x"}`)},
	{name: "embeddings parameters", ep: openai.Embeddings, body: embeddingsWith(`"dimensions":256,"encoding_format":"base64"`)},
	{name: "temperature is not an embeddings field", ep: openai.Embeddings, body: embeddingsWith(`"temperature":"x"`)},
}

func TestParseChecks(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.ep
			if ep == 0 {
				ep = openai.Chat
			}
			r, err := openai.Parse([]byte(tc.body), ep, tc.lim)
			// The fuzzers' reference agrees with the table (for the default limits, on the
			// top-level fields it knows; a duplicate it reads as the last).
			if tc.lim == (openai.ParseLimits{}) && tc.code != "invalid_json" && !strings.Contains(tc.name, "twice") && !strings.Contains(tc.name, "first") {
				want, _, _ := strings.Cut(tc.param, ".")
				want, _, _ = strings.Cut(want, "[")
				switch want {
				case "n", "max_tokens", "max_completion_tokens", "max_output_tokens", "messages", "input":
					want = "" // read by Parse itself, not checked in passing
				}
				if ep == openai.Chat && (strings.HasSuffix(tc.param, "].image_url") || strings.HasSuffix(tc.param, "].image_url.url")) {
					want = "image_url"
				}
				if got := refChecks(ep, decode(t, []byte(tc.body))); got != want {
					t.Errorf("refChecks = %q, want %q", got, want)
				}
			}
			if tc.code != "" {
				checkError(t, err, tc.code, tc.param)
				return
			}
			if err != nil {
				t.Fatalf("Parse(%s): %v", tc.body, err)
			}
			if ep != openai.Chat && ep != openai.Completions && string(openaiwire.Upstream(r)) != tc.body {
				t.Errorf("Upstream = %s, want the body unchanged", openaiwire.Upstream(r))
			}
		})
	}
}

// The messages of the refusals users first met: the field, what it must be, what came.
func TestParseCheckMessages(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{chat(`"temperature":"NaN"`), `"temperature" must be a number, got a string`},
		{chat(`"temperature":-1`), `"temperature" must be at least 0, got -1`},
		{chat(`"temperature":1e309`), `"temperature" must be a finite number (within ±1.8e308), got 1e309`},
		{chat(`"top_p":0`), `"top_p" must be greater than 0 and at most 1, got 0`},
		{chat(`"top_k":-2`), `"top_k" must be an integer from -1 to 2^63-1, got -2`},
		{chat(`"logprobs":"yes"`), `"logprobs" must be a boolean, got a string`},
		{chat(`"top_logprobs":21`), `"top_logprobs" must be between 0 and 20, got 21`},
		{chat(`"seed":1e999999999`), `"seed" must be an integer, got the number 1e999999999`},
		{chat(`"seed":9223372036854775808`), `"seed" must fit in a signed 64-bit integer, got 9223372036854775808`},
		{chatParts(`{"type":"image_url","image_url":5}`), `"messages[0].content[1].image_url" must be an object with a string "url", got a number`},
		{chatParts(`{"type":"image_url"}`), `"messages[0].content[1].image_url" is required in a part of type "image_url"`},
		{chat(`"logit_bias":{"\u0031\u0032":"x"}`), `"logit_bias.12" must be a number, got a string`},
	} {
		_, err := openai.Parse([]byte(tc.body), openai.Chat, openai.ParseLimits{})
		var e *openai.Error
		if !errors.As(err, &e) || e.Message != tc.want {
			t.Errorf("Parse(%s) error = %v, want message %q", tc.body, err, tc.want)
		}
	}
}
