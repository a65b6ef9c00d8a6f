package openaiwire

import (
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/usher-llm/usher/proxy/openai"
)

// AppendJSON appends e as an OpenAI error body, without a trailing newline. Strings are
// escaped as JSON requires; invalid UTF-8 in them is written as U+FFFD. It runs in
// O(len(Message)+len(Param)+len(Type)+len(Code)).
func AppendJSON(e *openai.Error, dst []byte) []byte {
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

// AppendEvent appends e as a server-sent event, "data: " + AppendJSON + "\n\n": the
// way to report an error once a stream's 200 status has been sent.
func AppendEvent(e *openai.Error, dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = AppendJSON(e, dst)
	return append(dst, "\n\n"...)
}

// WriteError writes e as the response: Content-Type application/json, status e.Status
// (500 when e.Status is not a valid HTTP status), and the body AppendJSON followed by a
// newline. It must be called before anything else is written to w.
func WriteError(w http.ResponseWriter, e *openai.Error) {
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	body := AppendJSON(e, make([]byte, 0, 128+len(e.Message)))
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
