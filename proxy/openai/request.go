package openai

import "bytes"

// Defaults for the zero fields of Limits.
const (
	DefaultMaxTokens   = 1 << 20
	DefaultMaxDepth    = 64
	DefaultMaxMessages = 16384
)

// Limits bound what Parse accepts. A zero (or negative) field is its documented default.
type Limits struct {
	MaxTokens   int // largest max_tokens / max_completion_tokens; 0: DefaultMaxTokens
	MaxN        int // largest n; 0: 1 (usher's accounting follows one choice)
	MaxDepth    int // deepest JSON nesting of the whole body, the top-level object being 1; 0: DefaultMaxDepth
	MaxMessages int // most chat messages; 0: DefaultMaxMessages
}

func (l Limits) orDefaults() Limits {
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
		return appendPartsText(dst, c)
	}
	return dst
}

// Request is what usher reads of a chat or completions body.
//
// Its fields alias the body passed to Parse: do not modify the body while the Request is
// in use. A Request is not mutated after Parse returns it, so any number of goroutines may
// read it and call its methods at once.
type Request struct {
	Endpoint     Endpoint
	Model        string
	Messages     []Message // Chat
	RawMessages  []byte    // Chat: the raw JSON value of "messages", as received
	Prompt       []byte    // Completions: the raw JSON value of "prompt"
	Stream       bool
	IncludeUsage bool   // stream_options.include_usage was true
	MaxTokens    int    // Chat: max_completion_tokens if given, else max_tokens; Completions: max_tokens; 0 when not given
	N            int    // 1 when absent
	User         string // "" when absent
	CacheSalt    string // vLLM's cache_salt; "" when absent
	HasPriority  bool   // the body carries a top-level "priority" (vLLM's in-engine priority), which AppendUpstream removes
	Body         []byte // the body Parse read

	promptText   []byte // Completions: the raw bytes of the prompt's only string, between its quotes
	promptIsText bool   // the prompt is a string or an array of one string
	cut          span   // what AppendUpstream removes, when HasPriority
	splice       span   // what AppendUpstream replaces with insert
	insert       string // "" when AppendUpstream does not set include_usage
}

// span is a range [from, to) of byte offsets into the body.
type span struct{ from, to int }

// AppendPrompt appends the prompt rendered for byte hashing (prefix-cache affinity): for
// Chat, each message as its role, '\n', its text (Message.AppendText), '\n'; for
// Completions, the prompt's text when it is a string or an array of one string, else the
// raw JSON of the prompt value. It runs in O(len(Body)) and allocates only to grow dst.
func (r *Request) AppendPrompt(dst []byte) []byte {
	if r.Endpoint != Chat {
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
// array of one string. It returns false for token ids, several prompts, and Chat. It
// allocates the string.
func (r *Request) PromptText() (string, bool) {
	if r.Endpoint != Completions || !r.promptIsText {
		return "", false
	}
	if bytes.IndexByte(r.promptText, '\\') < 0 {
		return string(r.promptText), true
	}
	return string(appendUnescaped(nil, r.promptText)), true
}

// AppendUpstream appends the body to send to the backend. Two things change, by splicing
// byte ranges Parse recorded; the body is never re-encoded:
//
//   - the top-level "priority" member is removed, with the comma that separated it:
//     clients may not reorder requests inside the engine, usher's band decides;
//   - when Stream is true and IncludeUsage false, stream_options.include_usage is set to
//     true (inserted, or replacing false or null), so that the proxy learns the usage;
//     the proxy then drops that extra chunk from the client's stream.
//
// Everything else is byte-for-byte as received; when nothing changes, it appends Body
// unchanged. It runs in O(len(Body)) and allocates only to grow dst.
func (r *Request) AppendUpstream(dst []byte) []byte {
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

// Upstream returns the body to send to the backend: Body itself when AppendUpstream would
// change nothing, else a new slice holding what AppendUpstream appends. O(1) without a
// change, O(len(Body)) with one.
func (r *Request) Upstream() []byte {
	if !r.HasPriority && r.insert == "" {
		return r.Body
	}
	return r.AppendUpstream(make([]byte, 0, len(r.Body)+len(r.insert)))
}
