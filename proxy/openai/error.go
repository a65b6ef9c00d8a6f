package openai

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"
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

// AppendJSON appends the OpenAI error body, without a trailing newline. Strings are
// escaped as JSON requires; invalid UTF-8 in them is written as U+FFFD. It runs in
// O(len(Message)+len(Param)+len(Type)+len(Code)).
func (e *Error) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendQuoted(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = appendQuoted(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	return append(dst, "}}"...)
}

// AppendEvent appends the error as a server-sent event, "data: " + AppendJSON + "\n\n": the
// way to report an error once a stream's 200 status has been sent.
func (e *Error) AppendEvent(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = e.AppendJSON(dst)
	return append(dst, "\n\n"...)
}

// WriteError writes e as the response: Content-Type application/json, status e.Status
// (500 when e.Status is not a valid HTTP status), and the body AppendJSON followed by a
// newline. It must be called before anything else is written to w.
func WriteError(w http.ResponseWriter, e *Error) {
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	body := e.AppendJSON(make([]byte, 0, 128+len(e.Message)))
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // if the client went away there is no one left to tell
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendQuoted(dst, s)
}

// appendQuoted appends s as a JSON string. Control characters, '"' and '\\' are escaped,
// U+2028 and U+2029 too (as encoding/json does, for JavaScript), and each byte of invalid
// UTF-8 becomes U+FFFD.
func appendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, `\n`...)
			case '\r':
				dst = append(dst, `\r`...)
			case '\t':
				dst = append(dst, `\t`...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			if r == utf8.RuneError {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Constructors of the errors Parse returns. They run only on the error path.

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
