package tokenizer

// TEMPORARY (helper T's branch only): Encoder is helper E's (model.go, built by New). At
// merge delete this file and doc_stub.go, add to E's Encoder the field
// `chat *chatTemplate`, and set it in New once the config is read:
// `if e.chat, err = newChatTemplate(configJSON); err != nil { ... }`.

// Encoder is a model's tokenizer (stand-in until the encoder lands).
type Encoder struct {
	chat *chatTemplate
}
