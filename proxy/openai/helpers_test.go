package openai_test

import (
	"fmt"
	"strings"
)

// chatBody returns a chat body of n messages (a system prompt, then users and assistants
// in turn, one user message in content parts) whose contents are about size bytes each,
// with the escapes real clients send.
func chatBody(n, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[`)
	line := `Lorem ipsum dolor sit amet, consectetur \"adipiscing\" elit, sed do eiusmod tempor.\n`
	text := strings.Repeat(line, size/len(line)+1)[:size]
	text = strings.TrimRight(text, `\`) // do not cut an escape in two
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		switch {
		case i == 0:
			fmt.Fprintf(&b, `{"role":"system","content":"%s"}`, text)
		case i == 3:
			fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":"%s"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}`, text)
		case i%2 == 1:
			fmt.Fprintf(&b, `{"role":"user","content":"%s"}`, text)
		default:
			fmt.Fprintf(&b, `{"role":"assistant","content":"%s"}`, text)
		}
	}
	b.WriteString(`],"stream":true,"max_tokens":512,"temperature":0.7,"priority":2,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`)
	return []byte(b.String())
}
