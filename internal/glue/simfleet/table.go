package simfleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/usher-llm/usher/proxy/openai"
)

// TokenTable maps requests to the token ids of their prompts, computed elsewhere (by a real
// tokenizer and chat template), for a Server that must tokenize as a real model does: with
// Options.Tokens set, a Chat, Messages or Responses request's prompt and /tokenize's messages
// are looked up by TableKey, in place of RenderChat and Tokenize, so the engine caches (and
// its KV events name) exactly the ids the real model server would. A request not in the table
// is a 400; /tokenize of a text prompt too. Completions prompts given as token ids are served
// as usual.
//
// The Server only reads a TokenTable: it must not change while a Server uses it. Reads are
// then safe for concurrent use.
type TokenTable map[string][]uint32

// errNotInTable is the 400 of a request the token table does not hold.
var errNotInTable = errors.New("simfleet: the request is not in the token table")

// promptFields are the top-level fields of each API's body that make its prompt.
var promptFields = map[openai.API][]string{
	openai.Chat:      {"messages", "tools"},
	openai.Messages:  {"system", "messages", "tools"},
	openai.Responses: {"instructions", "input", "tools"},
}

// TableKey returns the key of a request body of the Chat, Messages or Responses API in a
// TokenTable: the API's number and the compact JSON of the fields that make its prompt —
// messages and tools for Chat; system, messages and tools for Messages; instructions, input
// and tools for Responses — so that other fields (model, stream, sampling, what a gateway
// adds), the order of the top-level fields and white space do not change it. The order of
// keys inside those fields does, as it changes what a chat template renders (a tool's
// parameters are written as given). /tokenize's {"messages": ...} has the key of a Chat
// request of those messages without tools. O(len(body)).
func TableKey(api openai.API, body []byte) (string, error) {
	names, ok := promptFields[api]
	if !ok {
		return "", fmt.Errorf("simfleet: no token table key for API %d", api)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return "", err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d", api)
	for _, name := range names {
		raw, ok := fields[name]
		b.WriteByte('\x00')
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		if err := json.Compact(&b, raw); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// lookup returns the ids of body's prompt.
func (t TokenTable) lookup(api openai.API, body []byte) ([]uint32, error) {
	key, err := TableKey(api, body)
	if err != nil {
		return nil, err
	}
	ids, ok := t[key]
	if !ok {
		return nil, errNotInTable
	}
	return ids, nil
}

// promptOf returns the prompt tokens of a request of api with body data: looked up in
// Options.Tokens when set, else Tokenize of what render returns.
func (s *Server) promptOf(api openai.API, data []byte, render func() (string, error)) ([]uint32, error) {
	if s.table != nil {
		return s.table.lookup(api, data)
	}
	text, err := render()
	if err != nil {
		return nil, err
	}
	return Tokenize(text), nil
}
