package openai

import (
	"strconv"
	"strings"
)

// API is one of the inference APIs usher schedules, each at its own endpoint: OpenAI's chat
// and text completions, Responses and embeddings, and Anthropic's Messages.
type API uint8

const (
	Chat        API = iota + 1 // POST /v1/chat/completions
	Completions                // POST /v1/completions
	Messages                   // POST /v1/messages (Anthropic's Messages API)
	Responses                  // POST /v1/responses (OpenAI's Responses API)
	Embeddings                 // POST /v1/embeddings
)

// Path returns the endpoint's path under the API's base URL, such as "/v1/chat/completions"
// or "/v1/messages"; "" for an unknown endpoint. O(1).
func (e API) Path() string {
	switch e {
	case Chat:
		return "/v1/chat/completions"
	case Completions:
		return "/v1/completions"
	case Messages:
		return "/v1/messages"
	case Responses:
		return "/v1/responses"
	case Embeddings:
		return "/v1/embeddings"
	}
	return ""
}

// String returns "chat", "completions", "messages", "responses" or "embeddings", or
// "API(n)" for an unknown API.
func (e API) String() string {
	switch e {
	case Chat:
		return "chat"
	case Completions:
		return "completions"
	case Messages:
		return "messages"
	case Responses:
		return "responses"
	case Embeddings:
		return "embeddings"
	}
	return "API(" + strconv.Itoa(int(e)) + ")"
}

// APIOf returns the endpoint a request path names, by its ending, so that a prefix
// ("/v1", "/openai/v1") does not matter: Chat for "/chat/completions", Completions for
// "/completions" otherwise, Messages for "/v1/messages", Responses for "/v1/responses",
// Embeddings for "/v1/embeddings". The last three need their "/v1/": other APIs have
// resources of those names deeper down (OpenAI's Assistants "/v1/threads/{id}/messages"),
// which must not be read as Anthropic's. It reports false for any other path (sub-resources
// such as "/v1/responses/{id}" or "/v1/messages/count_tokens" included). O(1).
func APIOf(path string) (API, bool) {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return Chat, true
	case strings.HasSuffix(path, "/completions"):
		return Completions, true
	case strings.HasSuffix(path, "/v1/messages"):
		return Messages, true
	case strings.HasSuffix(path, "/v1/responses"):
		return Responses, true
	case strings.HasSuffix(path, "/v1/embeddings"):
		return Embeddings, true
	}
	return 0, false
}
