package simfleet

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Message is one chat message as the OpenAI API sends it. Content is a string or an array of
// parts of which the text parts are used.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Text returns the message's text: the string content, or its text parts joined.
func (m Message) Text() (string, error) {
	c := m.Content
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(c, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", errors.New("content must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// TextMessage returns a Message with string content.
func TextMessage(role, text string) Message {
	c, _ := json.Marshal(text)
	return Message{Role: role, Content: c}
}

// RenderChat applies the simulated servers' fixed chat template (ChatML, as Qwen models use)
// and returns the prompt text:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n   for each message
//	<|im_start|>assistant\n                      if addGenerationPrompt
//
// An assistant answer produced for one turn, sent back as the assistant message of the next,
// renders to exactly the tokens the server generated, so the next turn can reuse the cached
// blocks of the answer too. O(total length of the messages).
func RenderChat(messages []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	for _, m := range messages {
		text, err := m.Text()
		if err != nil {
			return "", err
		}
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteString("\n")
		b.WriteString(text)
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

// words are the simulated model's answers. Each is shorter than maxPiece bytes, so it is one
// token with or without its leading space.
var words = shortWords(`the a of to and in is it that for on with as was at by be this
have from or one had not but what all were when we there can an your which their said if do
will each about how up out them then she many some so these would other into has more her two
like him see time could no make than first been its who now people my made over did down only
way find use may water long little very after words called just where most know get through
back much go good new write our me man too any day same right look think also around another
came come work three word must because does part even place well such here take why things
help put years different away again off went old number great tell men say small every found
still between name should home big give air line set own under read last never us left end
along while might next sound below saw something thought both few those always looked show
large often together asked house don world going want school important until form food keep
children feet land side without boy once animals life enough took sometimes four head above
kind began almost live page got earth need far hand high year mother light parts country
father let night following picture being study second eyes soon times story boys since white
days ever paper hard near sentence better best across during today others however sure means
knew its try told young miles sun ways thing whole hear example heard several change answer
room sea against top turned learn point city play toward five using himself usually`)

func shortWords(list string) []string {
	var out []string
	for _, w := range strings.Fields(list) {
		if len(w) < maxPiece {
			out = append(out, w)
		}
	}
	return out
}

// answer returns the deterministic answer to a prompt: n words chosen by a hash of the
// prompt's tokens and the word's position (the simulated model is greedy: the same prompt gets
// the same answer), as text pieces, one token each, the first without a leading space.
func answer(dst []string, prompt []uint32, n int) []string {
	var buf [8]byte
	d := xxhash.New()
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(buf[:4], t)
		_, _ = d.Write(buf[:4])
	}
	seed := d.Sum64()
	for i := range n {
		x := seed + uint64(i)*0x9e3779b97f4a7c15
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 29
		w := words[x%uint64(len(words))]
		if i > 0 {
			w = " " + w
		}
		dst = append(dst, w)
	}
	return dst
}

// naturalLength is the answer length the simulated model chooses when nothing forces it: a
// hash of the prompt spread over [lo, hi].
func naturalLength(prompt []uint32, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	h := uint64(len(prompt))
	for _, t := range prompt[max(0, len(prompt)-8):] {
		h = h*0x100000001b3 ^ uint64(t)
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return lo + int(h%uint64(hi-lo+1))
}
