package openai

import "fmt"

// This file reads the content parts of chat messages and Responses input items, and the
// content blocks of Anthropic messages.

// shape is what a content part requires of one of its members.
type shape uint8

const (
	sString        shape = iota + 1 // a string
	sObject                         // an object
	sURL                            // an object with a string "url", and "detail" a string when given
	sStringOrArray                  // a string or an array
)

// partRule is what a content part of some type requires of one member. A member that is
// not required may also be null, or absent.
type partRule struct {
	member   word
	shape    shape
	required bool
}

// The members of each part type, as the APIs define them: OpenAI's chat content parts (with
// vLLM's audio_url and video_url), the Responses API's input content, Anthropic's content
// blocks. Only what no engine accepts is refused: a payload an engine cannot do without
// (the text of a text part, the image of an image_url part) missing or of the wrong type,
// or another member of the wrong type. A type not listed passes unread: parts of types yet
// to come must reach the engine.
var (
	textPart  = []partRule{{wText, sString, true}}
	chatParts = [...][]partRule{
		wText:       textPart,
		wImageURL:   {{wImageURL, sURL, true}},
		wInputAudio: {{wInputAudio, sObject, true}},
		wAudioURL:   {{wAudioURL, sURL, true}},
		wVideoURL:   {{wVideoURL, sURL, true}},
		wRefusal:    {{wRefusal, sString, false}},
		wFile:       {{wFile, sObject, false}},
	}
	inputParts = [...][]partRule{
		wText:       textPart,
		wInputText:  textPart,
		wOutputText: textPart,
		wInputImage: {{wImageURL, sString, false}, {wFileID, sString, false}, {wDetail, sString, false}},
		wInputFile:  {{wFileID, sString, false}, {wFileData, sString, false}, {wFilename, sString, false}, {wFileURL, sString, false}},
		wRefusal:    {{wRefusal, sString, false}},
	}
	anthropicBlocks = [...][]partRule{
		wText:             textPart,
		wImage:            {{wSource, sObject, false}},
		wDocument:         {{wSource, sObject, false}},
		wToolUse:          {{wID, sString, false}, {wName, sString, false}, {wInput, sObject, false}},
		wToolResult:       {{wToolUseID, sString, false}, {wContent, sStringOrArray, false}},
		wThinking:         {{wThinking, sString, false}, {wSignature, sString, false}},
		wRedactedThinking: {{wData, sString, false}},
	}
)

// partRules returns the rules of a part of type typ on ep's endpoint; nil when it has none.
func partRules(ep API, typ word) []partRule {
	var table [][]partRule
	switch ep {
	case Chat:
		table = chatParts[:]
	case Responses:
		table = inputParts[:]
	case Messages:
		table = anthropicBlocks[:]
	}
	if int(typ) < len(table) {
		return table[typ]
	}
	return nil
}

// partSlot numbers the members some part type has a rule for (0: none), so that part can
// note where their values are while it looks for the part's type.
var partSlot = func() (s [nWords]uint8) {
	n := uint8(0)
	for _, table := range [][][]partRule{chatParts[:], inputParts[:], anthropicBlocks[:]} {
		for _, rules := range table {
			for _, r := range rules {
				if s[r.member] == 0 {
					n++
					s[r.member] = n
				}
			}
		}
	}
	if n >= maxPartSlots {
		panic("openai: more part members than maxPartSlots")
	}
	return s
}()

// maxPartSlots bounds the number of members part notes.
const maxPartSlots = 24

// part reads the j-th content part of the m-th element of list ("messages", "input"): an
// object with a string "type", whose members are checked against the rules of its type
// (partRules). Members of no rule pass unread; so does a part of a type with no rules. A
// member with a rule given twice is refused. O(len(part)).
func (p *parser) part(i int, list string, m, j int) (int, *Error) {
	if p.b[i] != '{' {
		return p.wrongType(i, partParam(list, m, j, ""), "an object")
	}
	i, done, err := p.openObject(i)
	if err != nil {
		return i, err
	}
	typ := wOther
	sawType := false
	var at [maxPartSlots]int // per slot: 1 + the index of the member's value; 0 when absent
	for !done {
		k, esc, v, err := p.key(i)
		if err != nil {
			return v, err
		}
		i = v
		switch w := lookup(k, esc); {
		case w == wType:
			if sawType {
				return i, duplicate(partParam(list, m, j, "type"))
			}
			sawType = true
			if p.b[i] != '"' {
				return p.wrongType(i, partParam(list, m, j, "type"), "a string")
			}
			var tesc bool
			if i, tesc, err = p.str(v); err == nil {
				typ = lookup(p.b[v+1:i-1], tesc)
			}
		case partSlot[w] != 0:
			s := partSlot[w]
			if at[s] != 0 {
				return i, duplicate(partParam(list, m, j, names[w]))
			}
			at[s] = i + 1
			i, err = p.skip(i)
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
	if !sawType {
		return i, missing(partParam(list, m, j, "type"), "")
	}
	for _, r := range partRules(p.ep, typ) {
		v := at[partSlot[r.member]] - 1
		if err := p.partMember(v, r, typ, list, m, j); err != nil {
			return i, err
		}
	}
	return i, nil
}

// partMember checks the value at v (-1: absent) of the member of a part of type typ that
// r is the rule for. The value is known to be valid JSON.
func (p *parser) partMember(v int, r partRule, typ word, list string, m, j int) *Error {
	name := names[r.member]
	switch {
	case v < 0 && r.required:
		return missing(partParam(list, m, j, name), fmt.Sprintf(" in a part of type %q", names[typ]))
	case v < 0 || p.b[v] == 'n' && !r.required:
		return nil
	}
	c := p.b[v]
	var want string
	switch r.shape {
	case sString:
		if c == '"' {
			return nil
		}
		want = "a string"
	case sObject:
		if c == '{' {
			return nil
		}
		want = "an object"
	case sStringOrArray:
		if c == '"' || c == '[' {
			return nil
		}
		want = "a string or an array"
	case sURL:
		if c == '{' {
			return p.urlObject(v, list, m, j, name)
		}
		want = `an object with a string "url"`
	}
	// The value was valid JSON; name its type without reading it again.
	return typeError(partParam(list, m, j, name), want, describeStart(c))
}

// urlObject checks the object at i, the member name of a content part: a string "url"
// (required) and "detail" a string or null when given.
func (p *parser) urlObject(i int, list string, m, j int, name string) *Error {
	sawURL, sawDetail := false, false
	_, err := p.members(i, func(w word, v int) (int, *Error) {
		switch w {
		case wURL:
			if sawURL {
				return v, duplicate(partParam(list, m, j, name+".url"))
			}
			sawURL = true
			if p.b[v] != '"' {
				return p.wrongType(v, partParam(list, m, j, name+".url"), "a string")
			}
		case wDetail:
			if sawDetail {
				return v, duplicate(partParam(list, m, j, name+".detail"))
			}
			sawDetail = true
			if c := p.b[v]; c != '"' && c != 'n' {
				return p.wrongType(v, partParam(list, m, j, name+".detail"), "a string")
			}
		}
		return p.skip(v)
	})
	if err == nil && !sawURL {
		err = missing(partParam(list, m, j, name+".url"), "")
	}
	return err
}
