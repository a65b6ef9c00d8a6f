package tokenizer

// TEMPORARY (helper T's branch only): Model is defined by helper E's model.go. At merge
// delete this file and add to E's Model the field `chat *chatTemplate`, set in Parse with
// `m.chat, err = newChatTemplate(configJSON)`.

// Model is a tokenizer model (stand-in until the encoder lands).
type Model struct {
	chat *chatTemplate
}

// parseChatOnly builds a Model with only its chat template, for T's tests.
func parseChatOnly(configJSON []byte) (*Model, error) {
	ct, err := newChatTemplate(configJSON)
	if err != nil {
		return nil, err
	}
	return &Model{chat: ct}, nil
}
