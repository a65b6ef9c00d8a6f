package openai

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrBadRequest is what an *Error for a client's mistake (Status 4xx, Type
// TypeInvalidRequest) unwraps to, so that errors.Is(err, ErrBadRequest) tells a bad
// request from a failure of usher or of a backend.
var ErrBadRequest = errors.New("openai: invalid request")

// Error types, the "type" of an OpenAI error body.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
	TypeUpstream       = "upstream_error"
	TypeTimeout        = "timeout_error"
	TypeNotFound       = "not_found_error"
)

// Codes Parse sets. They are part of the API clients see, so they never change.
const (
	codeInvalidUTF8    = "invalid_utf8"
	codeInvalidJSON    = "invalid_json"
	codeInvalidType    = "invalid_type"
	codeInvalidValue   = "invalid_value"
	codeMissingField   = "missing_field"
	codeDuplicateField = "duplicate_field"
)

// Error is an OpenAI API error: the HTTP status and the body
//
//	{"error":{"message":"...","type":"...","param":"..."|null,"code":"..."|null}}
//
// Parse returns one for every request it refuses, with Status 400, Type TypeInvalidRequest,
// Param the offending field ("max_tokens", "messages[2].content[0].text"; "" when the body
// as a whole is at fault) and Code one of "invalid_utf8", "invalid_json", "invalid_type",
// "invalid_value", "missing_field" or "duplicate_field". Other layers of the gateway build
// their own with the other types ("rate_limit_error", 429, ...).
//
// An Error is a plain value: it is safe for concurrent use as long as no one modifies it.
type Error struct {
	Status  int    // HTTP status
	Type    string // TypeInvalidRequest, TypeRateLimit, ...: written as given
	Code    string // machine-readable, e.g. "invalid_type", "model_not_found"; "" is written as null
	Param   string // the field at fault, e.g. "messages[2].role", "max_tokens"; "" is written as null
	Message string // for humans; names JSON fields and values, never Go types
}

// Error returns "openai: " followed by the message and, when there is one, the param.
func (e *Error) Error() string {
	if e.Param == "" {
		return "openai: " + e.Message
	}
	return "openai: " + e.Message + " (param " + e.Param + ")"
}

// Unwrap returns ErrBadRequest when the error is the client's (Status 400–499 and Type
// TypeInvalidRequest), and nil otherwise.
func (e *Error) Unwrap() error {
	if e.Status >= 400 && e.Status <= 499 && e.Type == TypeInvalidRequest {
		return ErrBadRequest
	}
	return nil
}

func invalid(code, param, format string, args ...any) *Error {
	return &Error{
		Status:  http.StatusBadRequest,
		Type:    TypeInvalidRequest,
		Code:    code,
		Param:   param,
		Message: fmt.Sprintf(format, args...),
	}
}

// syntaxError reports that the body is not one JSON object, at byte offset off.
func syntaxError(off int, format string, args ...any) *Error {
	return invalid(codeInvalidJSON, "", "invalid JSON at byte offset %d: %s", off, fmt.Sprintf(format, args...))
}

func typeError(param, want, got string) *Error {
	return invalid(codeInvalidType, param, "%q must be %s, got %s", param, want, got)
}

func missing(param, why string) *Error {
	return invalid(codeMissingField, param, "%q is required%s", param, why)
}

func duplicate(param string) *Error {
	return invalid(codeDuplicateField, param, "%q is given more than once", param)
}
