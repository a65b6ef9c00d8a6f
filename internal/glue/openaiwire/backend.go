package openaiwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/usher-llm/usher/proxy/openai"
)

// This file reads a backend's error answer — vLLM's, SGLang's, OpenAI's, Anthropic's,
// FastAPI's, TGI's or anything else — into the one error value the gateway writes in each
// API's own shape (AppendJSONFor, WriteErrorFor).

// MaxBackendError bounds the bytes of a backend's error answer a gateway reads: what lies
// beyond is not read (the connection is dropped rather than drained).
const MaxBackendError = 64 << 10

// Bounds of what a translated error keeps of the backend's strings.
const (
	maxErrMessage = 1024
	maxErrParam   = 256
	maxErrCode    = 64
)

// openAITypes are the error types kept as the backend wrote them: OpenAI's own and the
// gateway's (openai.Type*). Any other type (vLLM's "BadRequestError", Anthropic's
// "overloaded_error", ...) is replaced by the one OpenAI sends for the status.
var openAITypes = map[string]bool{
	openai.TypeInvalidRequest: true, openai.TypeRateLimit: true, openai.TypeServer: true,
	openai.TypeUnavailable: true, openai.TypeUpstream: true, openai.TypeTimeout: true,
	openai.TypeNotFound: true, "insufficient_quota": true,
}

// openAIType is the OpenAI error type of a status: 429 rate_limit_error, 503
// service_unavailable, 504 timeout_error, another 5xx server_error, any other
// invalid_request_error (OpenAI answers 401, 403 and 404 with it too).
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return openai.TypeRateLimit
	case status == http.StatusServiceUnavailable:
		return openai.TypeUnavailable
	case status == http.StatusGatewayTimeout:
		return openai.TypeTimeout
	case status >= 500:
		return openai.TypeServer
	}
	return openai.TypeInvalidRequest
}

// BackendError translates a backend's error answer — its status and at most
// MaxBackendError bytes of its body — into an error in OpenAI's vocabulary, which
// AppendJSONFor and WriteErrorFor then write in each API's shape. It reads:
//
//   - OpenAI's and vLLM's {"error":{"message","type","param","code"}} (vLLM's code is the
//     status, a number), vLLM's and SGLang's older top-level {"object":"error","message",
//     "type","param","code"}, Anthropic's {"type":"error","error":{"type","message"}},
//     FastAPI's {"detail":"..."} and {"detail":[{"loc":[...],"msg":"..."}]} (the loc
//     without "body" becomes the param), and TGI's {"error":"...","error_type":"..."};
//   - the status, kept when it is 400 to 599 (any other becomes 502); 0, for an error a
//     stream carries, takes the body's numeric code when it is 400 to 599 (vLLM writes the
//     status there), else 500;
//   - the message, at most 1 KiB, with every address in it — URLs, IPv4 addresses with
//     or without a port, bracketed IPv6 ones, and the hosts named in redact — replaced by
//     "[address]"; a body that is not one of the shapes above (HTML, plain text, empty,
//     compressed, cut) gets a generic message for its status;
//   - the type when it is OpenAI's (invalid_request_error, rate_limit_error, server_error,
//     insufficient_quota, or one of the gateway's own), else the one OpenAI sends for the
//     status (vLLM's "BadRequestError" becomes invalid_request_error, "InternalServerError"
//     server_error, see openAIType);
//   - the param (at most 256 bytes) and a code that is a string (at most 64 bytes, letters,
//     digits, '_', '-' and '.'); vLLM's numeric code is dropped.
//
// For Messages, whose errors have no param, a param the message does not name is put in
// front of it ("max_tokens: ..."), as Anthropic writes its messages. It never fails and
// never panics. O(len(body)); it allocates what encoding/json does.
func BackendError(ep openai.API, status int, body []byte, redact ...string) *openai.Error {
	if len(body) > MaxBackendError {
		body = body[:MaxBackendError]
	}
	msg, typ, param, code, num := readBackendError(body)
	switch {
	case status == 0 && num >= 400 && num <= 599:
		status = num
	case status == 0:
		status = http.StatusInternalServerError
	case status < 400 || status > 599:
		status = http.StatusBadGateway
	}
	e := &openai.Error{Status: status}
	e.Message = redactAddresses(msg, redact)
	e.Message = clipString(strings.TrimSpace(e.Message), maxErrMessage)
	if e.Message == "" {
		e.Message = genericMessage(status)
	}
	e.Type = openAIType(status)
	if openAITypes[typ] {
		e.Type = typ
	}
	e.Param = clipString(redactAddresses(param, redact), maxErrParam)
	if validCode(code) {
		e.Code = code
	}
	if ep == openai.Messages && e.Param != "" && !strings.Contains(e.Message, e.Param) {
		e.Message = clipString(e.Param+": "+e.Message, maxErrMessage)
	}
	return e
}

// genericMessage is the message of an error answer whose body says nothing readable.
func genericMessage(status int) string {
	text := http.StatusText(status)
	if text == "" {
		text = "error"
	}
	if status >= 500 {
		return fmt.Sprintf("the model server failed: %d %s", status, text)
	}
	return fmt.Sprintf("the model server refused the request: %d %s", status, text)
}

// readBackendError returns what a body in one of the known shapes says; empty strings for
// the parts it does not say, num the code when it is a number (else 0).
func readBackendError(body []byte) (msg, typ, param, code string, num int) {
	var b struct {
		Error     json.RawMessage `json:"error"`
		Message   json.RawMessage `json:"message"`
		Type      json.RawMessage `json:"type"`
		Param     json.RawMessage `json:"param"`
		Code      json.RawMessage `json:"code"`
		Detail    json.RawMessage `json:"detail"`
		ErrorType json.RawMessage `json:"error_type"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &b) != nil {
		return "", "", "", "", 0
	}
	switch {
	case isObject(b.Error):
		var inner struct {
			Message json.RawMessage `json:"message"`
			Type    json.RawMessage `json:"type"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(b.Error, &inner) != nil {
			return "", "", "", "", 0
		}
		return jsonString(inner.Message), jsonString(inner.Type), jsonString(inner.Param), jsonString(inner.Code), jsonInt(inner.Code)
	case jsonString(b.Error) != "": // TGI
		return jsonString(b.Error), jsonString(b.ErrorType), "", "", 0
	case jsonString(b.Message) != "": // vLLM's and SGLang's top-level ErrorResponse
		return jsonString(b.Message), jsonString(b.Type), jsonString(b.Param), jsonString(b.Code), jsonInt(b.Code)
	case len(b.Detail) > 0:
		msg, param = fastAPIDetail(b.Detail)
		return msg, "", param, "", 0
	}
	return "", "", "", "", 0
}

// jsonInt returns raw's value when it is a JSON integer of at most three digits, else 0.
func jsonInt(raw json.RawMessage) int {
	if len(raw) == 0 || len(raw) > 3 {
		return 0
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		return 0
	}
	return n
}

// fastAPIDetail reads FastAPI's "detail": a string, or a list of validation errors of
// which the first gives the message and, from its loc, the param.
func fastAPIDetail(raw json.RawMessage) (msg, param string) {
	if s := jsonString(raw); s != "" {
		return s, ""
	}
	var list []struct {
		Loc []json.RawMessage `json:"loc"`
		Msg string            `json:"msg"`
	}
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return "", ""
	}
	var p strings.Builder
	for i, l := range list[0].Loc {
		if n, err := strconv.Atoi(string(l)); err == nil {
			p.WriteString("[" + strconv.Itoa(n) + "]")
			continue
		}
		s := jsonString(l)
		if s == "" || (i == 0 && s == "body") {
			continue
		}
		if p.Len() > 0 {
			p.WriteByte('.')
		}
		p.WriteString(s)
	}
	param = p.String()
	msg = list[0].Msg
	if param != "" && msg != "" {
		msg = param + ": " + msg
	}
	return msg, param
}

func isObject(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }

// jsonString returns raw's value when it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// validCode reports whether a backend's code may be handed on: a short token of letters,
// digits, '_', '-' and '.'.
func validCode(c string) bool {
	if c == "" || len(c) > maxErrCode {
		return false
	}
	for i := 0; i < len(c); i++ {
		switch b := c[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '_', b == '-', b == '.':
		default:
			return false
		}
	}
	return true
}

// clipString cuts s to at most n bytes, at a rune boundary, marking the cut with "…".
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// minRedactHost is the shortest host name redacted by name: a shorter one would blank out
// ordinary words.
const minRedactHost = 3

// addressMark stands for an address removed from a message.
const addressMark = "[address]"

// redactAddresses replaces in s every URL (scheme://...), IPv4 address (with its port, if
// any), bracketed IPv6 address and each of hosts (non-empty; "host" or "host:port") by
// addressMark (hosts shorter than minRedactHost are left to the patterns).
// O(len(s) · (1 + len(hosts))).
func redactAddresses(s string, hosts []string) string {
	if s == "" {
		return s
	}
	s = redactPatterns(s)
	for _, h := range hosts {
		if len(h) >= minRedactHost {
			s = strings.ReplaceAll(s, h, addressMark)
		}
	}
	return s
}

// redactPatterns replaces the URLs and IP addresses in s by addressMark.
func redactPatterns(s string) string {
	var b strings.Builder
	start, i := 0, 0
	for i < len(s) {
		if n := addressAt(s, i); n > 0 {
			b.WriteString(s[start:i])
			b.WriteString(addressMark)
			i += n
			start = i
			continue
		}
		i++
	}
	if start == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

// addressAt returns the length of the address that begins at s[i], or 0.
func addressAt(s string, i int) int {
	if i > 0 && (isWordByte(s[i-1]) || s[i-1] == '.') {
		return 0 // inside a word or a number: not an address's start
	}
	c := s[i]
	switch {
	case isLetter(c):
		// scheme://rest
		j := i
		for j < len(s) && (isLetter(s[j]) || isDigit(s[j]) || s[j] == '+' || s[j] == '-' || s[j] == '.') {
			j++
		}
		if !strings.HasPrefix(s[j:], "://") {
			return 0
		}
		j += 3
		for j < len(s) && !isURLEnd(s[j]) {
			j++
		}
		return j - i
	case isDigit(c):
		return ipv4At(s, i)
	case c == '[':
		j := i + 1
		colons := 0
		for j < len(s) && (isHex(s[j]) || s[j] == ':' || s[j] == '.' || s[j] == '%') {
			if s[j] == ':' {
				colons++
			}
			j++
		}
		if j >= len(s) || s[j] != ']' || colons < 2 {
			return 0
		}
		return j + 1 + portAt(s, j+1) - i
	}
	return 0
}

// ipv4At returns the length of a dotted quad (and its port) at s[i], or 0.
func ipv4At(s string, i int) int {
	j := i
	for part := 0; part < 4; part++ {
		if part > 0 {
			if j >= len(s) || s[j] != '.' {
				return 0
			}
			j++
		}
		k := j
		for j < len(s) && isDigit(s[j]) && j-k < 3 {
			j++
		}
		if j == k {
			return 0
		}
	}
	if j < len(s) && (isDigit(s[j]) || (s[j] == '.' && j+1 < len(s) && isDigit(s[j+1]))) {
		return 0 // a longer number (a version, say), not an address
	}
	return j + portAt(s, j) - i
}

// portAt returns the length of ":digits" at s[j], or 0.
func portAt(s string, j int) int {
	if j >= len(s) || s[j] != ':' {
		return 0
	}
	k := j + 1
	for k < len(s) && isDigit(s[k]) && k-j <= 5 {
		k++
	}
	if k == j+1 {
		return 0
	}
	return k - j
}

func isLetter(c byte) bool   { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isHex(c byte) bool      { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
func isWordByte(c byte) bool { return isLetter(c) || isDigit(c) || c == '_' }

// isURLEnd reports whether c ends a URL in running text.
func isURLEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>', ')', ']', '}', ',':
		return true
	}
	return false
}
