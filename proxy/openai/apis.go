package openai

import (
	"math"
	"strconv"
)

// This file reads the bodies of Anthropic's Messages API, OpenAI's Responses API and the
// embeddings API, as strictly as request reads chat: known fields exact and typed, given
// once, the offending field named in errors.

// apiTop is what apiRequest gathers about the top-level members before it builds the Request.
type apiTop struct {
	seen          uint64 // bit w: field w was given
	model, user   []byte // raw strings, between their quotes
	prev, conv    []byte
	cacheKey      []byte
	maxTokens     int
	maxTokensNull bool
}

// apiField returns the top-level field of ep that w names, or wOther.
func apiField(w word, ep Endpoint) word {
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

// apiFieldNames are the names of apiRequest's top-level fields, for errors.
var apiFieldNames = map[word]string{
	wModel: "model", wPriority: "priority", wKVTransferParams: "kv_transfer_params", wUser: "user",
	wInput: "input", wStream: "stream", wTools: "tools", wMessages: "messages", wSystem: "system",
	wMaxTokens: "max_tokens", wMetadata: "metadata", wInstructions: "instructions",
	wPreviousResponseID: "previous_response_id", wStore: "store", wMaxOutputTokens: "max_output_tokens",
	wPromptCacheKey: "prompt_cache_key", wConversation: "conversation",
}

// apiRequest parses the top-level object of a Messages, Responses or Embeddings body.
func (p *parser) apiRequest(ep Endpoint) (*Request, *Error) {
	b := p.b
	i := p.ws(0)
	if i >= len(b) {
		return nil, p.unexpected(i, "looking for the request object")
	}
	if b[i] != '{' {
		end, err := p.skip(i)
		if err != nil {
			return nil, err
		}
		return nil, syntaxError(i, "the request body must be a JSON object, got %s", describe(b, i, end))
	}
	var r *Request
	var chat *chatRequest
	if ep == Embeddings {
		r = new(Request)
	} else {
		chat = new(chatRequest)
		r = &chat.Request
	}
	r.Endpoint, r.Body, r.N = ep, b, 1
	r.Store = ep == Responses

	var t apiTop
	prevEnd := -1
	cutOpen := false
	i, done, err := p.openObject(i)
	if err != nil {
		return nil, err
	}
	for !done {
		keyAt := i
		k, esc, v, err := p.key(i)
		if err != nil {
			return nil, err
		}
		i = v
		if cutOpen {
			r.cut.to, cutOpen = keyAt, false
		}
		w := apiField(lookup(k, esc), ep)
		if w != wOther {
			if t.seen&(1<<w) != 0 {
				return nil, duplicate(apiFieldNames[w])
			}
			t.seen |= 1 << w
		}
		switch w {
		case wModel:
			i, t.model, _, err = p.stringValue(i, "model", false)
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
			case b[i] == '"':
				i, _, err = p.str(i)
			case b[i] == '[':
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
			if i, err = p.tools(i); err == nil && b[from] == '[' {
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
			t.maxTokensNull = b[i] == 'n'
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
		case wPriority:
			i, _, err = p.integer(i, "priority", math.MinInt64, math.MaxInt64)
			r.HasPriority = true
			if prevEnd < 0 {
				r.cut, cutOpen = span{keyAt, i}, true
			} else {
				r.cut = span{prevEnd, i}
			}
		case wKVTransferParams:
			err = invalid(codeInvalidValue, "kv_transfer_params", "kv_transfer_params is set by the gateway for disaggregated serving; a client may not send it")
		default:
			i, err = p.skip(i)
		}
		if err != nil {
			return nil, err
		}
		prevEnd = i
		if i, done, err = p.next(i, '}'); err != nil {
			return nil, err
		}
	}
	if end := p.ws(i); end != len(b) {
		return nil, p.unexpected(end, "after the top-level object")
	}
	if err := t.check(ep); err != nil {
		return nil, err
	}
	r.MaxTokens = t.maxTokens
	t.setStrings(r)
	return r, nil
}

// check reports a required field that is missing, and fields that exclude each other.
func (t *apiTop) check(ep Endpoint) *Error {
	if t.seen&(1<<wModel) == 0 {
		return missing("model", "")
	}
	if len(t.model) == 0 {
		return invalid(codeInvalidValue, "model", `"model" must not be empty`)
	}
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

func itemParam(list string, m int, field string) string {
	p := list + "[" + strconv.Itoa(m) + "]"
	if field != "" {
		p += "." + field
	}
	return p
}

// anthropicMessage reads the m-th message of a Messages body: an object with a role, "user"
// or "assistant", and a content that is a string or an array of content blocks (objects
// with a string "type"; a "text" block needs a string "text"; other types pass unread).
func (p *parser) anthropicMessage(i, m int) (Message, int, *Error) {
	var msg Message
	if p.b[i] != '{' {
		i, err := p.wrongType(i, msgParam(m, ""), "an object")
		return msg, i, err
	}
	i, done, err := p.openObject(i)
	if err != nil {
		return msg, i, err
	}
	var seen uint32
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return msg, v, err
		}
		i = v
		switch w := lookup(k, esc); w {
		case wRole, wContent:
			name := "role"
			if w == wContent {
				name = "content"
			}
			if seen&(1<<w) != 0 {
				return msg, i, duplicate(msgParam(m, name))
			}
			seen |= 1 << w
			if w == wRole {
				msg.Role, i, err = p.roleOf(i, msgParam(m, "role"), wUser, wAssistant)
			} else if c := p.b[i]; c != '"' && c != '[' {
				i, err = p.wrongType(i, msgParam(m, "content"), "a string or an array of content blocks")
			} else {
				start := i
				i, err = p.content(i, m)
				msg.Content = p.b[start:i]
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
	if msg.Role == "" {
		return msg, i, missing(msgParam(m, "role"), "")
	}
	if msg.Content == nil {
		return msg, i, missing(msgParam(m, "content"), " (a string or an array of content blocks)")
	}
	return msg, i, nil
}

// roleOf reads a role that must be one of allowed.
func (p *parser) roleOf(i int, param string, allowed ...word) (string, int, *Error) {
	if p.b[i] != '"' {
		end, err := p.wrongType(i, param, "a string")
		return "", end, err
	}
	end, esc, err := p.str(i)
	if err != nil {
		return "", end, err
	}
	raw := p.b[i+1 : end-1]
	w := lookup(raw, esc)
	for _, a := range allowed {
		if w == a {
			return roles[w], end, nil
		}
	}
	list := ""
	for j, a := range allowed {
		if j > 0 {
			list += ", "
		}
		list += strconv.Quote(roles[a])
	}
	return "", end, invalid(codeInvalidValue, param, "%q must be one of %s, got %q", param, list, short(string(appendUnescaped(nil, raw))))
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
				from := i
				if i, err = p.skip(i); err == nil {
					msg.Role = string(p.b[from:i]) // raw for now
				}
			default:
				from := i
				msg.Content = p.b[from:i]
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
	if msg.Role == "" {
		return msg, i, missing(itemParam("input", m, "role"), "")
	}
	sub := parser{b: []byte(msg.Role), maxDepth: p.maxDepth, lim: p.lim, ep: p.ep}
	role, _, rerr := sub.roleOf(0, itemParam("input", m, "role"), wUser, wAssistant, wSystem, wDeveloper)
	if rerr != nil {
		return msg, i, rerr
	}
	msg.Role = role
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
	i, done, err := sub.openArray(0)
	for j := 0; err == nil && !done; j++ {
		if i, err = sub.part(i, "input", m, j); err == nil {
			i, done, err = sub.next(i, ']')
		}
	}
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
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	for j := 0; !done; j++ {
		if i, err = p.textBlock(i, "system["+strconv.Itoa(j)+"]"); err != nil {
			return i, err
		}
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	return i, nil
}

// textBlock reads an object with "type" "text" and a string "text".
func (p *parser) textBlock(i int, param string) (int, *Error) {
	if p.b[i] != '{' {
		return p.wrongType(i, param, "a text block (an object)")
	}
	i, done, err := p.openObject(i)
	if err != nil {
		return i, err
	}
	var sawType, sawText bool
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return v, err
		}
		i = v
		switch lookup(k, esc) {
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
		if err != nil {
			return i, err
		}
		if i, done, err = p.next(i, '}'); err != nil {
			return i, err
		}
	}
	switch {
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
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	for j := 0; !done; j++ {
		if p.b[i] != '{' {
			return p.wrongType(i, "tools["+strconv.Itoa(j)+"]", "an object")
		}
		if i, err = p.skip(i); err != nil {
			return i, err
		}
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	return i, nil
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
	i, done, err := p.openObject(i)
	if err != nil {
		return i, err
	}
	seen := false
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return v, err
		}
		i = v
		if lookup(k, esc) == wUserID {
			if seen {
				return i, duplicate("metadata.user_id")
			}
			seen = true
			i, t.user, _, err = p.stringValue(i, "metadata.user_id", true)
		} else {
			i, err = p.skip(i)
		}
		if err != nil {
			return i, err
		}
		if i, done, err = p.next(i, '}'); err != nil {
			return i, err
		}
	}
	return i, nil
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
	i, done, err := p.openObject(i)
	if err != nil {
		return i, err
	}
	seen := false
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return v, err
		}
		i = v
		if lookup(k, esc) == wID {
			if seen {
				return i, duplicate("conversation.id")
			}
			seen = true
			i, t.conv, _, err = p.stringValue(i, "conversation.id", false)
			if err == nil && len(t.conv) == 0 {
				err = invalid(codeInvalidValue, "conversation.id", `"conversation.id" must not be empty`)
			}
		} else {
			i, err = p.skip(i)
		}
		if err != nil {
			return i, err
		}
		if i, done, err = p.next(i, '}'); err != nil {
			return i, err
		}
	}
	if !seen {
		return i, missing("conversation.id", "")
	}
	return i, nil
}

// appendConversation renders a Messages or Responses request for AppendPrompt.
func (r *Request) appendConversation(dst []byte) []byte {
	if len(r.System) > 0 {
		dst = append(dst, "system\n"...)
		dst = appendSystem(dst, r.System)
		dst = append(dst, '\n')
	}
	if len(r.Tools) > 0 {
		dst = append(dst, "tools\n"...)
		dst = append(dst, r.Tools...)
		dst = append(dst, '\n')
	}
	if r.Endpoint == Responses && len(r.Input) > 1 && r.Input[0] == '"' {
		dst = append(dst, "user\n"...)
		dst = appendUnescaped(dst, r.Input[1:len(r.Input)-1])
		return append(dst, '\n')
	}
	for _, m := range r.Messages {
		switch {
		case m.Role == "":
			dst = append(dst, m.Content...)
		case r.Endpoint == Messages:
			dst = append(dst, m.Role...)
			dst = append(dst, '\n')
			dst = appendBlocks(dst, m.Content)
		default:
			dst = append(dst, m.Role...)
			dst = append(dst, '\n')
			c := m.Content
			if len(c) >= 2 && c[0] == '"' {
				dst = appendUnescaped(dst, c[1:len(c)-1])
			} else if len(c) >= 2 && c[0] == '[' {
				dst = appendPartsText(dst, c, true)
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// appendSystem appends the text of a system prompt: a string, or the texts of its blocks.
func appendSystem(dst, s []byte) []byte {
	switch {
	case len(s) >= 2 && s[0] == '"':
		return appendUnescaped(dst, s[1:len(s)-1])
	case len(s) >= 2 && s[0] == '[':
		return appendPartsText(dst, s, false)
	}
	return dst
}

// appendBlocks appends a Messages content: the string, or each block in order — a text
// block's text, any other block's raw JSON.
func appendBlocks(dst, c []byte) []byte {
	if len(c) < 2 {
		return dst
	}
	if c[0] == '"' {
		return appendUnescaped(dst, c[1:len(c)-1])
	}
	if c[0] != '[' {
		return dst
	}
	i := 1
	for {
		i = skipSpace(c, i)
		if i >= len(c) || c[i] == ']' {
			return dst
		}
		switch c[i] {
		case ',':
			i++
		case '{':
			start := i
			end, text, ok := partText(c, i, false)
			if ok {
				dst = appendUnescaped(dst, text)
			} else {
				dst = append(dst, c[start:end]...)
			}
			i = end
		default:
			i = skipLoose(c, i)
		}
	}
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
