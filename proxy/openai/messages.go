package openai

import (
	"fmt"
	"strconv"
	"sync"
)

// This file reads the messages of a chat body.

// scratch holds the messages of bodies with more than the 16 a chatRequest has room for,
// while they are counted.
var scratch = sync.Pool{New: func() any { s := make([]Message, 0, 256); return &s }}

// maxScratch is the largest scratch slice given back to the pool (640 KiB): larger ones
// come from ParseLimits above the default and are left to the garbage collector.
const maxScratch = DefaultMaxMessages

// itemParam names field of element m of the list named list ("messages", "input"), or the
// element itself when field is "".
func itemParam(list string, m int, field string) string {
	p := list + "[" + strconv.Itoa(m) + "]"
	if field != "" {
		p += "." + field
	}
	return p
}

// partParam names field of content part j of element m of the list named list, or the
// part itself when field is "".
func partParam(list string, m, j int, field string) string {
	p := itemParam(list, m, "content") + "[" + strconv.Itoa(j) + "]"
	if field != "" {
		p += "." + field
	}
	return p
}

// messages reads the messages array into chat.Messages.
func (p *parser) messages(i int, chat *chatRequest) (int, *Error) {
	list := "messages"
	if p.ep == Responses {
		list = "input"
	}
	if p.b[i] != '[' {
		return p.wrongType(i, list, "an array of messages")
	}
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	if done {
		return i, invalid(codeInvalidValue, list, "%q must not be empty", list)
	}
	msgs := chat.inline[:0]
	var spill *[]Message // from scratch, once msgs outgrows inline
	for !done {
		if len(msgs) == p.lim.MaxMessages {
			return i, invalid(codeInvalidValue, list, "%q must hold at most %d items", list, p.lim.MaxMessages)
		}
		var m Message
		if p.ep == Responses {
			m, i, err = p.inputItem(i, len(msgs))
		} else {
			m, i, err = p.message(i, len(msgs))
		}
		if err != nil {
			return i, err
		}
		if len(msgs) == cap(msgs) && spill == nil {
			spill = scratch.Get().(*[]Message)
			msgs = append((*spill)[:0], msgs...)
		}
		msgs = append(msgs, m)
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	if spill == nil {
		chat.Messages = msgs
		return i, nil
	}
	chat.Messages = append([]Message(nil), msgs...)
	if cap(msgs) <= maxScratch {
		clear(msgs) // they alias the body
		*spill = msgs[:0]
		scratch.Put(spill)
	}
	return i, nil
}

// The roles each list's messages may have.
var (
	chatRoles      = []word{wSystem, wUser, wAssistant, wTool, wDeveloper, wFunction}
	anthropicRoles = []word{wUser, wAssistant}
	inputRoles     = []word{wUser, wAssistant, wSystem, wDeveloper}
)

// message reads the message at i, the m-th of a Chat or Messages body: an object with a
// role and a content; other members pass unread. A chat message's role is one of chatRoles,
// its content a string, an array of content parts, or null, and required unless the role is
// "assistant". A Messages message's role is "user" or "assistant", its content a string or
// an array of content blocks (objects with a string "type"; a "text" block needs a string
// "text"; other types pass unread), and required.
func (p *parser) message(i, m int) (Message, int, *Error) {
	var msg Message
	if p.b[i] != '{' {
		i, err := p.wrongType(i, itemParam("messages", m, ""), "an object")
		return msg, i, err
	}
	allowed := chatRoles
	if p.ep == Messages {
		allowed = anthropicRoles
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
			if seen&(1<<w) != 0 {
				name := "role"
				if w == wContent {
					name = "content"
				}
				return msg, i, duplicate(itemParam("messages", m, name))
			}
			seen |= 1 << w
			if w == wRole {
				msg.Role, i, err = p.role(i, "messages", m, allowed)
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
		return msg, i, missing(itemParam("messages", m, "role"), "")
	}
	if msg.Content == nil || msg.Content[0] == 'n' {
		switch {
		case p.ep == Messages:
			return msg, i, missing(itemParam("messages", m, "content"), " (a string or an array of content blocks)")
		case msg.Role != "assistant":
			return msg, i, missing(itemParam("messages", m, "content"), fmt.Sprintf(" (a string or an array of content parts) for role %q", msg.Role))
		}
	}
	return msg, i, nil
}

// role reads the role of element m of list, which must be one of allowed.
// O(len(allowed)).
func (p *parser) role(i int, list string, m int, allowed []word) (string, int, *Error) {
	if p.b[i] != '"' {
		end, err := p.wrongType(i, itemParam(list, m, "role"), "a string")
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
			return names[w], end, nil
		}
	}
	want := ""
	for j, a := range allowed {
		if j > 0 {
			want += ", "
		}
		want += strconv.Quote(names[a])
	}
	param := itemParam(list, m, "role")
	return "", end, invalid(codeInvalidValue, param, "%q must be one of %s, got %q", param, want, short(string(appendUnescaped(nil, raw))))
}

// content reads the content of the m-th message: a string or an array of parts (of
// content blocks, for Messages), or for Chat null.
func (p *parser) content(i, m int) (int, *Error) {
	switch c := p.b[i]; {
	case c == '"':
		end, _, err := p.str(i)
		return end, err
	case c == 'n' && p.ep != Messages:
		return p.literal(i, "null")
	case c == '[':
	case p.ep == Messages:
		return p.wrongType(i, itemParam("messages", m, "content"), "a string or an array of content blocks")
	default:
		return p.wrongType(i, itemParam("messages", m, "content"), "a string, an array of content parts, or null")
	}
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	for j := 0; !done; j++ {
		if i, err = p.part(i, "messages", m, j); err != nil {
			return i, err
		}
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	return i, nil
}

// describeStart names a JSON value by its first byte.
func describeStart(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
