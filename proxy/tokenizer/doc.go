// Package tokenizer encodes text to token ids as the Hugging Face tokenizers library does.
package tokenizer
