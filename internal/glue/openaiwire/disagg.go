package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/usher-llm/usher/proxy/openai"
)

// prefillParams is what the prefill step asks of its server: compute the prompt's KV and keep
// it for a decode server to pull (vLLM's NIXL connector reads these keys).
const prefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// PrefillBody returns the body of the prefill step of disaggregated serving, in vLLM's
// KV-transfer protocol (as vLLM's disaggregated proxy and llm-d's routing sidecar send it):
// the body Upstream sends with max_tokens 1 (and max_completion_tokens 1 when given),
// min_tokens at most 1, stream false, no stream_options, and kv_transfer_params asking the
// server to keep the prompt's KV for a remote decode. Members are re-encoded (their order is
// not kept; their values are). O(len(Body)); it allocates.
func PrefillBody(r *openai.Request) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(Upstream(r), &m); err != nil {
		return nil, err
	}
	one := json.RawMessage("1")
	m["max_tokens"] = one
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = one
	}
	if v, ok := m["min_tokens"]; ok {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err != nil || n > 1 {
			m["min_tokens"] = one
		}
	}
	m["stream"] = json.RawMessage("false")
	delete(m, "stream_options")
	m["kv_transfer_params"] = json.RawMessage(prefillParams)
	return json.Marshal(m)
}

// ErrNoTransferParams is returned by TransferParams for an answer without them.
var ErrNoTransferParams = errors.New("openai: the prefill answer carries no kv_transfer_params object")

// maxTransferParams bounds the kv_transfer_params a prefill server may answer (block ids of a
// long prompt run to a few thousand numbers).
const maxTransferParams = 1 << 20

// TransferParams returns the kv_transfer_params object of a prefill server's whole answer,
// as raw JSON, to hand to the decode step (AppendDecode). The parameters are the connector's
// (NIXL: remote_engine_id, remote_block_ids, remote_host, remote_port, tp_size, ...) and
// opaque to usher; it only requires a JSON object of at most 1 MiB.
func TransferParams(answer []byte) (json.RawMessage, error) {
	var a struct {
		Params json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, err
	}
	p := bytes.TrimSpace(a.Params)
	if len(p) == 0 || p[0] != '{' {
		return nil, ErrNoTransferParams
	}
	if len(p) > maxTransferParams {
		return nil, errors.New("openai: the prefill answer's kv_transfer_params exceed 1 MiB")
	}
	return p, nil
}

// AppendDecode appends the body of the decode step of disaggregated serving: the body
// Upstream sends with "kv_transfer_params" set to params, the object the prefill server
// answered (TransferParams; it says do_remote_prefill), so that the decode server pulls the
// prompt's KV instead of computing it. Parse rejects a client's own kv_transfer_params, so
// the member is appended, never replaced; the rest is byte for byte. O(len(Body)).
func AppendDecode(r *openai.Request, dst []byte, params []byte) []byte {
	up := Upstream(r)
	end := bytes.LastIndexByte(up, '}')
	if end < 0 { // Parse accepts only objects
		return append(dst, up...)
	}
	dst = append(dst, up[:end]...)
	dst = append(dst, `,"kv_transfer_params":`...)
	dst = append(dst, params...)
	return append(dst, up[end:]...)
}
