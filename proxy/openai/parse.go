package openai

import (
	"math"
	"net/http"
	"unicode/utf8"
)

// Parse validates body as a request to ep and returns what usher reads of it. It refuses
// what a backend might read differently, and values of the fields it passes on that no
// engine takes (see the package documentation); every error is an
// *Error with Status 400, Type TypeInvalidRequest, a Code, and the offending field in
// Param. An ep other than Chat or Completions is the caller's mistake: Status 500,
// TypeServer.
//
// Parse is safe for concurrent use. After one utf8.Valid it reads the body in one pass,
// O(len(body)), and keeps spans into it rather than copies; a refused body is scanned a
// second time for syntax errors. It allocates the Request (for Chat, with room for 16
// messages), one string holding Model, User and CacheSalt, and, past 16 messages, the
// Messages slice.
func Parse(body []byte, ep API, lim ParseLimits) (*Request, error) {
	if ep < Chat || ep > Embeddings {
		return nil, &Error{
			Status:  http.StatusInternalServerError,
			Type:    TypeServer,
			Message: "openai.Parse called for unknown endpoint " + ep.String(),
		}
	}
	if !utf8.Valid(body) {
		return nil, utf8Error(body)
	}
	lim = lim.orDefaults()
	p := parser{b: body, maxDepth: lim.MaxDepth, lim: lim, ep: ep}
	var r *Request
	var err *Error
	if ep == Chat || ep == Completions {
		r, err = p.request(ep)
	} else {
		r, err = p.apiRequest(ep)
	}
	if err != nil {
		// A body that is not JSON is reported as such, even when the first thing wrong
		// with it was a field: check the syntax of the rest.
		if err.Code != codeInvalidJSON {
			if serr := (&parser{b: body, maxDepth: lim.MaxDepth}).document(); serr != nil {
				return nil, serr
			}
		}
		return nil, err
	}
	return r, nil
}

func utf8Error(body []byte) *Error {
	i := 0
	for i < len(body) {
		r, size := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	return invalid(codeInvalidUTF8, "", "the request body is not valid UTF-8 (at byte offset %d)", i)
}

// document validates the whole body as one JSON value, whitespace around it allowed.
func (p *parser) document() *Error {
	end, err := p.skip(p.ws(0))
	if err != nil {
		return err
	}
	if end = p.ws(end); end != len(p.b) {
		return p.unexpected(end, "after the top-level object")
	}
	return nil
}

// fields is what topLevel gathers of the top-level members of any body.
type fields struct {
	seen    uint64 // bit w: field w was given
	model   []byte // raw, between its quotes
	lastEnd int    // end of the last member's value; -1 for an empty object
}

// top is what request gathers about the top-level members before it builds the Request.
type top struct {
	fields
	user, salt     []byte // raw strings, between their quotes
	maxTokens      int    // 0: not given, or null
	maxCompletion  int
	streamOptions  byte // first byte of its value: 0 absent, 'n' null, '{' object
	options        span // the value of stream_options
	optionsMembers int
	includeUsage   byte // first byte of its value: 0 absent, 't', 'f', 'n'
	usage          span // the value of include_usage
}

// chatRequest is a chat Request with room for its messages, so that a typical chat body
// costs one allocation rather than two.
type chatRequest struct {
	Request
	inline [16]Message
}

// newRequest allocates the Request of a body to ep, in a chatRequest when withMessages.
func (p *parser) newRequest(ep API, withMessages bool) (*Request, *chatRequest) {
	var r *Request
	var chat *chatRequest
	if withMessages {
		chat = new(chatRequest)
		r = &chat.Request
	} else {
		r = new(Request)
	}
	r.API, r.Body, r.N = ep, p.b, 1
	return r, chat
}

// topLevel reads the top-level object of the body into r and f, member by member. A key
// that field maps to wOther is checked as passedCheck says (and skipped when it is not
// checked); a field given twice is refused; "model" is read into
// f, and required not empty; "priority" is read, and its cut recorded for appendUpstream;
// "kv_transfer_params" is refused. The value of every other field goes to member, which
// returns the index after it.
func (p *parser) topLevel(r *Request, f *fields, field func(word, API) word, member func(w word, i int) (int, *Error)) *Error {
	b := p.b
	i := p.ws(0)
	if i >= len(b) {
		return p.unexpected(i, "looking for the request object")
	}
	if b[i] != '{' {
		end, err := p.skip(i)
		if err != nil {
			return err
		}
		return syntaxError(i, "the request body must be a JSON object, got %s", describe(b, i, end))
	}
	f.lastEnd = -1
	cutOpen := false // priority came first: its cut ends at the next key
	i, done, err := p.openObject(i)
	if err != nil {
		return err
	}
	for !done {
		keyAt := i
		k, esc, v, err := p.key(i)
		if err != nil {
			return err
		}
		i = v
		if cutOpen {
			r.cut.to, cutOpen = keyAt, false
		}
		known := lookup(k, esc)
		w := field(known, r.API)
		if w != wOther {
			if f.seen&(1<<w) != 0 {
				return duplicate(names[w])
			}
			f.seen |= 1 << w
		}
		switch w {
		case wOther:
			i, err = p.passed(i, known)
		case wModel:
			i, f.model, _, err = p.stringValue(i, "model", false)
		case wPriority:
			i, _, err = p.integer(i, "priority", math.MinInt64, math.MaxInt64)
			r.HasPriority = true
			if f.lastEnd < 0 {
				r.cut, cutOpen = span{keyAt, i}, true
			} else {
				r.cut = span{f.lastEnd, i}
			}
		case wKVTransferParams:
			// The gateway sets it for disaggregated serving: from a client it would aim a
			// decode server's KV pull at any host.
			err = invalid(codeInvalidValue, "kv_transfer_params", "kv_transfer_params is set by the gateway for disaggregated serving; a client may not send it")
		default:
			i, err = member(w, i)
		}
		if err != nil {
			return err
		}
		f.lastEnd = i
		if i, done, err = p.next(i, '}'); err != nil {
			return err
		}
	}
	if end := p.ws(i); end != len(b) {
		return p.unexpected(end, "after the top-level object")
	}
	if f.seen&(1<<wModel) == 0 {
		return missing("model", "")
	}
	if len(f.model) == 0 {
		return invalid(codeInvalidValue, "model", `"model" must not be empty`)
	}
	return nil
}

// request parses the top-level object of a Chat or Completions body.
func (p *parser) request(ep API) (*Request, *Error) {
	r, chat := p.newRequest(ep, ep == Chat)
	var t top
	err := p.topLevel(r, &t.fields, topField, func(w word, i int) (int, *Error) {
		var err *Error
		switch w {
		case wMessages:
			from := i
			if i, err = p.messages(i, chat); err == nil {
				r.RawMessages = p.b[from:i]
			}
		case wPrompt:
			i, err = p.prompt(i, r)
		case wStream:
			i, r.Stream, _, err = p.boolean(i, "stream")
		case wStreamOptions:
			i, err = p.streamOptions(i, &t)
		case wN:
			var n int
			if i, n, err = p.count(i, "n", p.lim.MaxN); n > 0 {
				r.N = n
			}
		case wMaxTokens:
			i, t.maxTokens, err = p.count(i, "max_tokens", p.lim.MaxTokens)
		case wMaxCompletionTokens:
			i, t.maxCompletion, err = p.count(i, "max_completion_tokens", p.lim.MaxTokens)
		case wUser:
			i, t.user, _, err = p.stringValue(i, "user", true)
		case wCacheSalt:
			var null bool
			if i, t.salt, null, err = p.stringValue(i, "cache_salt", true); err == nil && !null && len(t.salt) == 0 {
				err = invalid(codeInvalidValue, "cache_salt", `"cache_salt" must be a non-empty string or null`)
			}
		}
		return i, err
	})
	if err != nil {
		return nil, err
	}
	if err := t.check(ep, r); err != nil {
		return nil, err
	}
	r.MaxTokens = t.maxTokens
	if t.maxCompletion > 0 {
		r.MaxTokens = t.maxCompletion
	}
	r.IncludeUsage = t.includeUsage == 't'
	if r.Stream && !r.IncludeUsage {
		r.splice, r.insert = t.usageSplice()
	}
	t.setStrings(r)
	return r, nil
}

// check reports a required field that is missing (but model, which topLevel checks), and
// stream_options without streaming.
func (t *top) check(ep API, r *Request) *Error {
	if ep == Chat && t.seen&(1<<wMessages) == 0 {
		return missing("messages", "")
	}
	if ep == Completions && t.seen&(1<<wPrompt) == 0 {
		return missing("prompt", "")
	}
	if t.streamOptions == '{' && !r.Stream {
		return invalid(codeInvalidValue, "stream_options", "stream_options is only allowed when stream is true")
	}
	return nil
}

// usageSplice returns what appendUpstream replaces, and with what, to set
// stream_options.include_usage to true.
func (t *top) usageSplice() (span, string) {
	switch {
	case t.streamOptions == 0:
		return span{t.lastEnd, t.lastEnd}, `,"stream_options":{"include_usage":true}`
	case t.streamOptions == 'n':
		return t.options, `{"include_usage":true}`
	case t.includeUsage != 0: // false or null
		return t.usage, "true"
	case t.optionsMembers == 0:
		at := t.options.from + 1
		return span{at, at}, `"include_usage":true`
	}
	at := t.options.from + 1
	return span{at, at}, `"include_usage":true,`
}

// setStrings sets Model, User and CacheSalt, decoded, as parts of one string.
func (t *top) setStrings(r *Request) {
	var stack [256]byte
	buf := stack[:0]
	if n := len(t.model) + len(t.user) + len(t.salt); n > len(stack) {
		buf = make([]byte, 0, n)
	}
	buf = appendUnescaped(buf, t.model)
	m := len(buf)
	buf = appendUnescaped(buf, t.user)
	u := len(buf)
	buf = appendUnescaped(buf, t.salt)
	s := string(buf)
	r.Model, r.User, r.CacheSalt = s[:m], s[m:u], s[u:]
}
