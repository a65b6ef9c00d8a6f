package openai

import "strconv"

// This file reads the bodies of Anthropic's Messages API, OpenAI's Responses API and the
// embeddings API, as strictly as request reads chat: known fields exact and typed, given
// once, the offending field named in errors.

// apiTop is what apiRequest gathers about the top-level members before it builds the Request.
type apiTop struct {
	fields
	user, prev    []byte // raw strings, between their quotes
	conv          []byte
	cacheKey      []byte
	maxTokens     int
	maxTokensNull bool
}

// apiField returns the top-level field of ep that w names, or wOther.
func apiField(w word, ep API) word {
	switch w {
	case wModel, wPriority, wKVTransferParams:
		return w
	case wUser:
		if ep != Messages {
			return w
		}
	case wInput:
		if ep != Messages {
			return w
		}
	case wStream, wTools:
		if ep != Embeddings {
			return w
		}
	case wMessages, wSystem, wMaxTokens, wMetadata:
		if ep == Messages {
			return w
		}
	case wInstructions, wPreviousResponseID, wStore, wMaxOutputTokens, wPromptCacheKey, wConversation:
		if ep == Responses {
			return w
		}
	}
	return wOther
}

// apiRequest parses the top-level object of a Messages, Responses or Embeddings body.
func (p *parser) apiRequest(ep API) (*Request, *Error) {
	r, chat := p.newRequest(ep, ep != Embeddings)
	r.Store = ep == Responses
	var t apiTop
	err := p.topLevel(r, &t.fields, apiField, func(w word, i int) (int, *Error) {
		var err *Error
		switch w {
		case wMessages:
			from := i
			if i, err = p.messages(i, chat); err == nil {
				r.RawMessages = p.b[from:i]
			}
		case wInput:
			from := i
			switch {
			case ep == Embeddings:
				i, err = p.prompt(i, r)
				r.Prompt, r.promptText, r.promptIsText = nil, nil, false
			case p.b[i] == '"':
				i, _, err = p.str(i)
			case p.b[i] == '[':
				i, err = p.messages(i, chat)
			default:
				i, err = p.wrongType(i, "input", "a string or an array of input items")
			}
			r.Input = p.b[from:i]
		case wSystem:
			from := i
			i, err = p.system(i)
			r.System = p.b[from:i]
		case wInstructions:
			from := i
			var null bool
			if i, _, null, err = p.stringValue(i, "instructions", true); err == nil && !null {
				r.System = p.b[from:i]
			}
		case wTools:
			from := i
			if i, err = p.tools(i); err == nil && p.b[from] == '[' {
				r.Tools = p.b[from:i]
			}
		case wStream:
			i, r.Stream, _, err = p.boolean(i, "stream")
		case wStore:
			var v, null bool
			if i, v, null, err = p.boolean(i, "store"); !null {
				r.Store = v
			}
		case wMaxTokens:
			t.maxTokensNull = p.b[i] == 'n'
			i, t.maxTokens, err = p.count(i, "max_tokens", p.lim.MaxTokens)
		case wMaxOutputTokens:
			i, t.maxTokens, err = p.count(i, "max_output_tokens", p.lim.MaxTokens)
		case wUser:
			i, t.user, _, err = p.stringValue(i, "user", true)
		case wMetadata:
			i, err = p.metadata(i, &t)
		case wPreviousResponseID:
			var null bool
			if i, t.prev, null, err = p.stringValue(i, "previous_response_id", true); err == nil && !null && len(t.prev) == 0 {
				err = invalid(codeInvalidValue, "previous_response_id", `"previous_response_id" must be a non-empty string or null`)
			}
		case wPromptCacheKey:
			i, t.cacheKey, _, err = p.stringValue(i, "prompt_cache_key", true)
		case wConversation:
			i, err = p.conversation(i, &t)
		}
		return i, err
	})
	if err != nil {
		return nil, err
	}
	if err := t.check(ep); err != nil {
		return nil, err
	}
	r.MaxTokens = t.maxTokens
	t.setStrings(r)
	return r, nil
}

// check reports a required field that is missing (but model, which topLevel checks), and
// fields that exclude each other.
func (t *apiTop) check(ep API) *Error {
	switch ep {
	case Messages:
		if t.seen&(1<<wMessages) == 0 {
			return missing("messages", "")
		}
		if t.seen&(1<<wMaxTokens) == 0 || t.maxTokensNull {
			return missing("max_tokens", " (a positive integer)")
		}
	case Responses, Embeddings:
		if t.seen&(1<<wInput) == 0 {
			return missing("input", "")
		}
	}
	if t.prev != nil && t.conv != nil {
		return invalid(codeInvalidValue, "previous_response_id", `"previous_response_id" and "conversation" cannot be given together`)
	}
	return nil
}

// setStrings sets Model, User, PreviousResponseID and ConversationKey, decoded.
func (t *apiTop) setStrings(r *Request) {
	r.Model = string(appendUnescaped(nil, t.model))
	if t.user != nil {
		r.User = string(appendUnescaped(nil, t.user))
	}
	if t.prev != nil {
		r.PreviousResponseID = string(appendUnescaped(nil, t.prev))
	}
	switch {
	case len(t.conv) > 0:
		r.ConversationKey = string(appendUnescaped(nil, t.conv))
	case len(t.cacheKey) > 0:
		r.ConversationKey = string(appendUnescaped(nil, t.cacheKey))
	}
}

// inputItem reads the m-th item of a Responses input array: an object with an optional
// string "type". A message ("type" absent or "message") has a role (user, assistant,
// system, developer) and a content that is a string or an array of parts; its Message is
// that role and content. Any other item passes unread, as a Message with no role whose
// Content is the whole item.
func (p *parser) inputItem(i, m int) (Message, int, *Error) {
	var msg Message
	if p.b[i] != '{' {
		i, err := p.wrongType(i, itemParam("input", m, ""), "an object")
		return msg, i, err
	}
	start := i
	i, done, err := p.openObject(i)
	if err != nil {
		return msg, i, err
	}
	var seen uint32
	isMessage := true
	roleAt := -1 // the role's value
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return msg, v, err
		}
		i = v
		switch w := lookup(k, esc); w {
		case wRole, wContent, wType:
			name := "role"
			switch w {
			case wContent:
				name = "content"
			case wType:
				name = "type"
			}
			if seen&(1<<w) != 0 {
				return msg, i, duplicate(itemParam("input", m, name))
			}
			seen |= 1 << w
			switch w {
			case wType:
				if p.b[i] != '"' {
					i, err = p.wrongType(i, itemParam("input", m, "type"), "a string")
					break
				}
				var tesc bool
				from := i
				if i, tesc, err = p.str(i); err == nil {
					isMessage = lookup(p.b[from+1:i-1], tesc) == wMessage
				}
			case wRole:
				// Checked once the type is known: other items may carry a role of their own.
				roleAt = i
				i, err = p.skip(i)
			default:
				from := i
				if i, err = p.skip(i); err == nil {
					msg.Content = p.b[from:i]
				}
			}
		default:
			i, err = p.skip(i)
		}
		if err != nil {
			return msg, i, err
		}
		if i, done, err = p.next(i, '}'); err != nil {
			return msg, i, err
		}
	}
	if !isMessage {
		return Message{Content: p.b[start:i]}, i, nil
	}
	// A message: check its role and content now.
	if roleAt < 0 {
		return msg, i, missing(itemParam("input", m, "role"), "")
	}
	var rerr *Error
	if msg.Role, _, rerr = p.role(roleAt, "input", m, inputRoles); rerr != nil {
		return msg, i, rerr
	}
	if msg.Content == nil || msg.Content[0] == 'n' {
		return msg, i, missing(itemParam("input", m, "content"), " (a string or an array of content parts)")
	}
	if err := p.itemContent(msg.Content, m); err != nil {
		return msg, i, err
	}
	return msg, i, nil
}

// itemContent checks the content c (a valid JSON value from the body) of the m-th input
// item: a string, or an array of parts.
func (p *parser) itemContent(c []byte, m int) *Error {
	switch c[0] {
	case '"':
		return nil
	case '[':
	default:
		return typeError(itemParam("input", m, "content"), "a string or an array of content parts", describe(c, 0, len(c)))
	}
	sub := parser{b: c, maxDepth: p.maxDepth, lim: p.lim, ep: p.ep}
	_, err := sub.elements(0, func(j, i int) (int, *Error) { return sub.part(i, "input", m, j) })
	return err
}

// system reads the system prompt of a Messages body: a string, or an array of text blocks.
func (p *parser) system(i int) (int, *Error) {
	switch p.b[i] {
	case '"':
		end, _, err := p.str(i)
		return end, err
	case '[':
	default:
		return p.wrongType(i, "system", "a string or an array of text blocks")
	}
	return p.elements(i, func(j, i int) (int, *Error) { return p.textBlock(i, "system["+strconv.Itoa(j)+"]") })
}

// textBlock reads an object with "type" "text" and a string "text".
func (p *parser) textBlock(i int, param string) (int, *Error) {
	if p.b[i] != '{' {
		return p.wrongType(i, param, "a text block (an object)")
	}
	var sawType, sawText bool
	i, err := p.members(i, func(w word, i int) (int, *Error) {
		var err *Error
		switch w {
		case wType:
			if sawType {
				return i, duplicate(param + ".type")
			}
			sawType = true
			var raw []byte
			if i, raw, _, err = p.stringValue(i, param+".type", false); err == nil && lookup(raw, true) != wText {
				err = invalid(codeInvalidValue, param+".type", `%q must be "text", got %q`, param+".type", short(string(appendUnescaped(nil, raw))))
			}
		case wText:
			if sawText {
				return i, duplicate(param + ".text")
			}
			sawText = true
			i, _, _, err = p.stringValue(i, param+".text", false)
		default:
			i, err = p.skip(i)
		}
		return i, err
	})
	switch {
	case err != nil:
		return i, err
	case !sawType:
		return i, missing(param+".type", "")
	case !sawText:
		return i, missing(param+".text", ` in a block of type "text"`)
	}
	return i, nil
}

// tools reads tools: null, or an array of objects (each tool's definition passes unread).
func (p *parser) tools(i int) (int, *Error) {
	switch p.b[i] {
	case 'n':
		return p.literal(i, "null")
	case '[':
	default:
		return p.wrongType(i, "tools", "an array of tools")
	}
	return p.elements(i, func(j, i int) (int, *Error) {
		if p.b[i] != '{' {
			return p.wrongType(i, "tools["+strconv.Itoa(j)+"]", "an object")
		}
		return p.skip(i)
	})
}

// metadata reads a Messages body's metadata: an object or null, whose user_id is a string
// or null.
func (p *parser) metadata(i int, t *apiTop) (int, *Error) {
	switch p.b[i] {
	case 'n':
		return p.literal(i, "null")
	case '{':
	default:
		return p.wrongType(i, "metadata", "an object or null")
	}
	seen := false
	return p.members(i, func(w word, i int) (int, *Error) {
		if w != wUserID {
			return p.skip(i)
		}
		if seen {
			return i, duplicate("metadata.user_id")
		}
		seen = true
		var err *Error
		i, t.user, _, err = p.stringValue(i, "metadata.user_id", true)
		return i, err
	})
}

// conversation reads a Responses body's conversation: a non-empty string id, an object
// with one, or null.
func (p *parser) conversation(i int, t *apiTop) (int, *Error) {
	switch p.b[i] {
	case 'n':
		return p.literal(i, "null")
	case '"':
		end, raw, _, err := p.stringValue(i, "conversation", false)
		if err == nil && len(raw) == 0 {
			err = invalid(codeInvalidValue, "conversation", `"conversation" must not be empty`)
		}
		t.conv = raw
		return end, err
	case '{':
	default:
		return p.wrongType(i, "conversation", "a string, an object with an id, or null")
	}
	seen := false
	i, err := p.members(i, func(w word, i int) (int, *Error) {
		if w != wID {
			return p.skip(i)
		}
		if seen {
			return i, duplicate("conversation.id")
		}
		seen = true
		var err *Error
		if i, t.conv, _, err = p.stringValue(i, "conversation.id", false); err == nil && len(t.conv) == 0 {
			err = invalid(codeInvalidValue, "conversation.id", `"conversation.id" must not be empty`)
		}
		return i, err
	})
	if err == nil && !seen {
		err = missing("conversation.id", "")
	}
	return i, err
}

// appendConversation renders a Messages or Responses request for AppendPrompt.
func (r *Request) appendConversation(dst []byte) []byte {
	if len(r.System) > 0 {
		dst = append(dst, "system\n"...)
		dst = appendContent(dst, r.System, r.API)
		dst = append(dst, '\n')
	}
	if len(r.Tools) > 0 {
		dst = append(dst, "tools\n"...)
		dst = append(dst, r.Tools...)
		dst = append(dst, '\n')
	}
	if r.API == Responses && len(r.Input) > 1 && r.Input[0] == '"' {
		dst = append(dst, "user\n"...)
		dst = appendUnescaped(dst, r.Input[1:len(r.Input)-1])
		return append(dst, '\n')
	}
	for _, m := range r.Messages {
		if m.Role == "" {
			dst = append(dst, m.Content...)
		} else {
			dst = append(dst, m.Role...)
			dst = append(dst, '\n')
			dst = appendContent(dst, m.Content, r.API)
		}
		dst = append(dst, '\n')
	}
	return dst
}

// appendContent appends the text of a Messages or Responses content (or system prompt): a
// string unescaped, or an array's parts as appendPartsText appends them — for Responses
// with "input_text" and "output_text" parts as text, for Messages with a block other than
// text as its raw JSON.
func appendContent(dst, c []byte, ep API) []byte {
	switch {
	case len(c) >= 2 && c[0] == '"':
		return appendUnescaped(dst, c[1:len(c)-1])
	case len(c) >= 2 && c[0] == '[':
		return appendPartsText(dst, c, ep == Responses, ep == Messages)
	}
	return dst
}

// SessionKey returns the conversation a request belongs to, by its own fields: for
// Responses, ConversationKey when given; else User ("user", or Messages'
// "metadata.user_id"). A gateway keys flows by it when no trusted header names the
// session. O(1).
func (r *Request) SessionKey() string {
	if r.ConversationKey != "" {
		return r.ConversationKey
	}
	return r.User
}
