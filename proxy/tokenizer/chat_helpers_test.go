package tokenizer

// parseChatOnly builds an Encoder holding only the chat template of configJSON, for the
// tests of the chat files: they need no tokenizer.json.
func parseChatOnly(configJSON []byte) (*Encoder, error) {
	ct, err := newChatTemplate(configJSON)
	if err != nil {
		return nil, err
	}
	return &Encoder{chat: ct}, nil
}
