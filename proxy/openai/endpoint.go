package openai

import (
	"strconv"
	"strings"
)

// Endpoint is an OpenAI API endpoint usher schedules.
type Endpoint uint8

const (
	Chat        Endpoint = iota + 1 // POST /v1/chat/completions
	Completions                     // POST /v1/completions
)

// Path returns the endpoint's path under the OpenAI base URL: "/v1/chat/completions" or
// "/v1/completions"; "" for an unknown endpoint.
func (e Endpoint) Path() string {
	switch e {
	case Chat:
		return "/v1/chat/completions"
	case Completions:
		return "/v1/completions"
	}
	return ""
}

// String returns "chat" or "completions", or "Endpoint(n)" for an unknown endpoint.
func (e Endpoint) String() string {
	switch e {
	case Chat:
		return "chat"
	case Completions:
		return "completions"
	}
	return "Endpoint(" + strconv.Itoa(int(e)) + ")"
}

// EndpointOf returns the endpoint a request path names: Chat when the path ends with
// "/chat/completions", Completions when it ends with "/completions" otherwise, so that a
// prefix ("/v1", "/openai/v1") does not matter. It reports false for any other path.
func EndpointOf(path string) (Endpoint, bool) {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return Chat, true
	case strings.HasSuffix(path, "/completions"):
		return Completions, true
	}
	return 0, false
}
