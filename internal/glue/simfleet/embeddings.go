package simfleet

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"

	"github.com/cespare/xxhash/v2"
)

// This file serves POST /v1/embeddings: a deterministic unit vector per input, from a hash of
// its tokens, as floats or (encoding_format "base64", which the OpenAI SDKs ask for by
// default) as base64 of little-endian float32s, and the usage. It does not run the engine: an embedding costs no decode.

// defaultDimensions is the length of a vector when the request does not ask for one.
const defaultDimensions = 16

// maxDimensions bounds "dimensions".
const maxDimensions = 4096

// embeddingInputs turns an embeddings input (a string, strings, token ids, or lists of token
// ids) into one token list per input.
func embeddingInputs(raw json.RawMessage) ([][]uint32, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]uint32{Tokenize(s)}, true
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([][]uint32, len(ss))
		for i, s := range ss {
			out[i] = Tokenize(s)
		}
		return out, true
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, true
	}
	var lists [][]uint32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		return lists, true
	}
	return nil, false
}

// embed returns the simulated model's embedding of tokens: dims numbers drawn from a hash of
// the tokens, scaled to unit length. Equal inputs give equal vectors. O(len(tokens) + dims).
func embed(tokens []uint32, dims int) []float64 {
	var buf [4]byte
	d := xxhash.New()
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:], t)
		_, _ = d.Write(buf[:])
	}
	x := d.Sum64()
	v := make([]float64, dims)
	norm := 0.0
	for i := range v {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		v[i] = float64(int64(z>>11))/float64(1<<52) - 1
		norm += v[i] * v[i]
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] /= norm
		}
	}
	return v
}

// base64Floats encodes v as vLLM and OpenAI answer encoding_format "base64": the vector's
// float32 values, little-endian, in standard base64.
func base64Floats(v []float64) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat *string         `json:"encoding_format"`
	}
	if !s.decodeBody(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	inputs, ok := embeddingInputs(req.Input)
	if !ok {
		badRequest(w, "input must be a string, an array of strings, token ids, or arrays of token ids")
		return
	}
	dims := defaultDimensions
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > maxDimensions {
			badRequest(w, "dimensions must be between 1 and %d", maxDimensions)
			return
		}
		dims = *req.Dimensions
	}
	asBase64 := false
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			asBase64 = true
		default:
			badRequest(w, "encoding_format must be \"float\" or \"base64\", got %q", *f)
			return
		}
	}
	type datum struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]datum, len(inputs))
	tokens := 0
	for i, in := range inputs {
		var v any = embed(in, dims)
		if asBase64 {
			v = base64Floats(embed(in, dims))
		}
		data[i] = datum{Object: "embedding", Index: i, Embedding: v}
		tokens += len(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": s.model,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}
