package openai

import (
	"bytes"

	"github.com/usher-llm/usher/internal/glue/openaiwire/hook"
)

// init installs the hook through which internal/glue/openaiwire writes the upstream body.
func init() {
	hook.AppendUpstream = func(req any, dst []byte) []byte { return req.(*Request).appendUpstream(dst) }
	hook.Upstream = func(req any) []byte { return req.(*Request).upstream() }
}

// Defaults for the zero fields of ParseLimits.
const (
	DefaultMaxTokens   = 1 << 20
	DefaultMaxDepth    = 64
	DefaultMaxMessages = 16384
	DefaultMaxLogprobs = 20
)

// ParseLimits bound what Parse accepts. A zero (or negative) field is its documented default.
type ParseLimits struct {
	MaxTokens   int // largest max_tokens / max_completion_tokens; 0: DefaultMaxTokens
	MaxN        int // largest n; 0: 1 (usher's accounting follows one choice)
	MaxDepth    int // deepest JSON nesting of the whole body, the top-level object being 1; 0: DefaultMaxDepth
	MaxMessages int // most chat messages; 0: DefaultMaxMessages
	// MaxLogprobs is the largest top_logprobs (Chat, Responses) and logprobs (Completions);
	// 0: DefaultMaxLogprobs, the most OpenAI's API and vLLM's default --max-logprobs allow.
	// Raise it with the fleet's --max-logprobs.
	MaxLogprobs int
}

func (l ParseLimits) orDefaults() ParseLimits {
	if l.MaxTokens <= 0 {
		l.MaxTokens = DefaultMaxTokens
	}
	if l.MaxN <= 0 {
		l.MaxN = 1
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = DefaultMaxMessages
	}
	if l.MaxLogprobs <= 0 {
		l.MaxLogprobs = DefaultMaxLogprobs
	}
	return l
}

// Message is one chat message as the body holds it. Role is one of "system", "user",
// "assistant", "tool", "developer", "function"; Content is the raw JSON value of
// "content" (a string, an array of content parts, or null), nil when absent, and aliases
// the body.
type Message struct {
	Role    string
	Content []byte
}

// AppendText appends the message's text: the content string unescaped, or the "text" of
// its parts of type "text", in order, concatenated; nothing for null or absent content.
// It never fails on a Message from Parse; on other content it does not panic, but what it
// appends is unspecified. It runs in O(len(Content)) and allocates only to grow dst.
func (m Message) AppendText(dst []byte) []byte {
	c := m.Content
	if len(c) < 2 {
		return dst
	}
	switch c[0] {
	case '"':
		if c[len(c)-1] == '"' {
			return appendUnescaped(dst, c[1:len(c)-1])
		}
	case '[':
		return appendPartsText(dst, c, false, false)
	}
	return dst
}

// Request is what usher reads of a body of any API.
//
// Messages holds the conversation of Chat and Messages and the input items of Responses
// (a message item as its role and content; any other item — a function call, its output,
// reasoning — with Role "" and Content the whole item). Raw fields are JSON values as
// received, nil when absent.
//
// Its fields alias the body passed to Parse: do not modify the body while the Request is
// in use. A Request is not mutated after Parse returns it, so any number of goroutines may
// read it and call its methods at once.
type Request struct {
	API          API
	Model        string
	Messages     []Message // Chat, Messages; Responses when "input" is an array
	RawMessages  []byte    // Chat, Messages: the raw JSON value of "messages", as received
	Prompt       []byte    // Completions: the raw JSON value of "prompt"
	Input        []byte    // Responses, Embeddings: the raw JSON value of "input"
	System       []byte    // Messages: the raw value of "system"; Responses: of "instructions" (a string)
	Tools        []byte    // Messages, Responses: the raw value of "tools" when it is an array
	Stream       bool
	IncludeUsage bool   // stream_options.include_usage was true
	MaxTokens    int    // Chat: max_completion_tokens if given, else max_tokens; Completions, Messages: max_tokens; Responses: max_output_tokens; 0 when not given
	N            int    // 1 when absent
	User         string // "user", or for Messages "metadata.user_id"; "" when absent
	CacheSalt    string // vLLM's cache_salt; "" when absent
	HasPriority  bool   // the body carries a top-level "priority" (vLLM's in-engine priority), which the gateway removes from the upstream body
	Body         []byte // the body Parse read

	// PreviousResponseID is a Responses request's "previous_response_id": the stored
	// response it continues, which only the server that stored it knows. "" when absent.
	PreviousResponseID string
	// ConversationKey is a Responses request's conversation: "conversation" (its id), else
	// "prompt_cache_key"; "" when neither is given.
	ConversationKey string
	// Store is a Responses request's "store" (true when absent or null): whether the
	// server keeps the response for a later previous_response_id. False for other endpoints.
	Store bool

	// BaseModel and Adapter are not read from the body: a gateway that knows Model to be a
	// LoRA adapter sets them (the adapter's base model, and Model) right after Parse, before
	// the Request is shared, so that its prompt is keyed as the engine keys it. "" otherwise.
	BaseModel, Adapter string

	promptText   []byte // Completions: the raw bytes of the prompt's only string, between its quotes
	promptIsText bool   // the prompt is a string or an array of one string
	cut          span   // what appendUpstream removes, when HasPriority
	splice       span   // what appendUpstream replaces with insert
	insert       string // "" when appendUpstream does not set include_usage
}

// span is a range [from, to) of byte offsets into the body.
type span struct{ from, to int }

// AppendPrompt appends the prompt rendered for byte hashing (prefix-cache affinity): for
// Chat, each message as its role, '\n', its text (Message.AppendText), '\n'; for
// Completions, the prompt's text when it is a string or an array of one string, else the
// raw JSON of the prompt value. Messages and Responses render as Chat does, in an order
// that makes a conversation's turn N+1 begin with turn N's rendering: first the system
// prompt (Messages' "system", Responses' "instructions") as a "system" message, then the
// tools as a "tools" message holding their raw JSON, then the messages or input items (a
// string input as a "user" message). A Messages content block other than text, and a
// Responses item other than a message, renders as its raw JSON. Embeddings render to
// nothing: they are routed by load. It runs in O(len(Body)) and allocates only to grow dst.
func (r *Request) AppendPrompt(dst []byte) []byte {
	switch r.API {
	case Messages, Responses:
		return r.appendConversation(dst)
	case Embeddings:
		return dst
	}
	if r.API != Chat {
		if r.promptIsText {
			return appendUnescaped(dst, r.promptText)
		}
		return append(dst, r.Prompt...)
	}
	for _, m := range r.Messages {
		dst = append(dst, m.Role...)
		dst = append(dst, '\n')
		dst = m.AppendText(dst)
		dst = append(dst, '\n')
	}
	return dst
}

// PromptText returns, for Completions, the prompt as a string when it is a string or an
// array of one string. It returns false for token ids, several prompts, and the other
// endpoints. It allocates the string, and a buffer as long when the prompt has escapes.
func (r *Request) PromptText() (string, bool) {
	if r.API != Completions || !r.promptIsText {
		return "", false
	}
	if bytes.IndexByte(r.promptText, '\\') < 0 {
		return string(r.promptText), true
	}
	// Unescaping never lengthens: one buffer, then the string.
	return string(appendUnescaped(make([]byte, 0, len(r.promptText)), r.promptText)), true
}

// appendUpstream appends the body to send to the backend (openaiwire.AppendUpstream says
// what changes). It runs in O(len(Body)) and allocates only to grow dst.
func (r *Request) appendUpstream(dst []byte) []byte {
	type edit struct {
		span
		text string
	}
	var edits [2]edit
	n := 0
	if r.HasPriority {
		edits[n] = edit{r.cut, ""}
		n++
	}
	if r.insert != "" {
		edits[n] = edit{r.splice, r.insert}
		n++
	}
	if n == 2 && edits[1].from < edits[0].from {
		edits[0], edits[1] = edits[1], edits[0]
	}
	pos := 0
	for _, e := range edits[:n] {
		dst = append(dst, r.Body[pos:e.from]...)
		dst = append(dst, e.text...)
		pos = e.to
	}
	return append(dst, r.Body[pos:]...)
}

// upstream returns the body to send to the backend: Body itself when appendUpstream would
// change nothing, else a new slice holding what appendUpstream appends. O(1) without a
// change, O(len(Body)) with one.
func (r *Request) upstream() []byte {
	if !r.HasPriority && r.insert == "" {
		return r.Body
	}
	return r.appendUpstream(make([]byte, 0, len(r.Body)+len(r.insert)))
}
