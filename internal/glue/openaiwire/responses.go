package openaiwire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/usher-llm/usher/proxy/openai"
)

// This file writes the end of a Responses stream that failed, as OpenAI ends one: an "error"
// event, then "response.failed" carrying the response object with status "failed" and its
// error, each with the sequence_number that follows the last one the stream carried.

// maxSequence bounds a sequence_number read from a stream, so that adding to it cannot
// overflow.
const maxSequence = 1 << 53

// SequenceNumber returns the top-level "sequence_number" of a Responses stream event's data,
// found by its bytes without decoding the event (a string holding the words has its quotes
// escaped, so it does not match); false when there is none or it is not a non-negative
// integer. O(len(data)), allocation-free.
func SequenceNumber(data []byte) (int64, bool) {
	const key = `"sequence_number"`
	// Find the key by its 'q', rare in JSON, with IndexByte: bytes.Index stumbles on every
	// '"' of the event.
	i := -1
	for from := 0; ; {
		j := bytes.IndexByte(data[from:], 'q')
		if j < 0 {
			return 0, false
		}
		k := from + j - 3 // the key's opening quote
		if k >= 0 && k+len(key) <= len(data) && string(data[k:k+len(key)]) == key {
			i = k
			break
		}
		from += j + 1
	}
	v := bytes.TrimLeft(data[i+len(key):], " \t\r\n")
	if len(v) == 0 || v[0] != ':' {
		return 0, false
	}
	v = bytes.TrimLeft(v[1:], " \t\r\n")
	var n int64
	j := 0
	for ; j < len(v) && v[j] >= '0' && v[j] <= '9'; j++ {
		if n = n*10 + int64(v[j]-'0'); n > maxSequence {
			return 0, false
		}
	}
	if j == 0 || (j < len(v) && (v[j] == '.' || v[j] == 'e' || v[j] == 'E')) {
		return 0, false
	}
	return n, true
}

// AppendResponsesError appends e as the Responses API's "error" stream event,
//
//	event: error
//	data: {"type":"error","code":...,"message":...,"param":...,"sequence_number":seq}
//
// its code e.Code (else e.Type), its param e.Param (null when ""). O(len(Message)).
func AppendResponsesError(dst []byte, e *openai.Error, seq int64) []byte {
	dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
	code := e.Code
	if code == "" {
		code = e.Type
	}
	dst = appendNullable(dst, code)
	dst = append(dst, `,"message":`...)
	dst = appendQuoted(dst, e.Message)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	return append(dst, "}\n\n"...)
}

// responseErrorCode is the code of a failed response's error: OpenAI's own when e has one
// of them, else rate_limit_exceeded for a 429 and server_error for anything else.
func responseErrorCode(e *openai.Error) string {
	switch e.Code {
	case "server_error", "rate_limit_exceeded", "invalid_prompt":
		return e.Code
	}
	if e.Status == http.StatusTooManyRequests {
		return "rate_limit_exceeded"
	}
	return "server_error"
}

// FailedResponse is what a response.failed event says of the response when the stream
// showed no response object to start from.
type FailedResponse struct {
	ID, Model string
	CreatedAt int64 // Unix seconds
}

// AppendResponseFailed appends the "response.failed" event that ends a failed Responses
// stream, with sequence_number seq: the response object of started — the data of the
// stream's response.created or response.in_progress event, nil if it showed none — with
// "status" "failed" and "error" {"code","message"} (the code OpenAI's: server_error,
// rate_limit_exceeded or invalid_prompt); without a usable started, a minimal response
// object of stub's id, model and created_at. It allocates what encoding/json does:
// it runs once, at the end of a stream.
func AppendResponseFailed(dst []byte, e *openai.Error, seq int64, started []byte, stub FailedResponse) []byte {
	var errObj []byte
	errObj = append(errObj, `{"code":`...)
	errObj = appendQuoted(errObj, responseErrorCode(e))
	errObj = append(errObj, `,"message":`...)
	errObj = appendQuoted(errObj, e.Message)
	errObj = append(errObj, '}')

	var resp []byte
	var ev struct {
		Response map[string]json.RawMessage `json:"response"`
	}
	if len(started) > 0 && json.Unmarshal(started, &ev) == nil && ev.Response != nil {
		ev.Response["status"] = json.RawMessage(`"failed"`)
		ev.Response["error"] = errObj
		resp, _ = json.Marshal(ev.Response)
	}
	if resp == nil {
		resp = append(resp, `{"id":`...)
		resp = appendQuoted(resp, stub.ID)
		resp = append(resp, `,"object":"response","created_at":`...)
		resp = strconv.AppendInt(resp, stub.CreatedAt, 10)
		resp = append(resp, `,"status":"failed","error":`...)
		resp = append(resp, errObj...)
		resp = append(resp, `,"incomplete_details":null,"model":`...)
		resp = appendQuoted(resp, stub.Model)
		resp = append(resp, `,"output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}`...)
	}
	dst = append(dst, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":"...)
	dst = append(dst, resp...)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	return append(dst, "}\n\n"...)
}

// ResponsesErrorEvent reads a Responses stream's "error" event (its data): the error it
// reports, in OpenAI's vocabulary (code, message, param; status 500, or 429 for
// rate_limit_exceeded; the message's addresses redacted as BackendError does), and its
// sequence_number if it has one. O(len(data)).
func ResponsesErrorEvent(data []byte, redact ...string) (e *openai.Error, seq int64, hasSeq bool) {
	var ev struct {
		Code    json.RawMessage `json:"code"`
		Message json.RawMessage `json:"message"`
		Param   json.RawMessage `json:"param"`
	}
	_ = json.Unmarshal(data, &ev)
	e = &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer}
	if c := jsonString(ev.Code); validCode(c) {
		e.Code = c
	}
	if e.Code == "rate_limit_exceeded" {
		e.Status, e.Type = http.StatusTooManyRequests, openai.TypeRateLimit
	}
	e.Message = clipString(redactAddresses(jsonString(ev.Message), redact), maxErrMessage)
	if e.Message == "" {
		e.Message = "the model server reported an error"
	}
	e.Param = clipString(jsonString(ev.Param), maxErrParam)
	seq, hasSeq = SequenceNumber(data)
	return e, seq, hasSeq
}
