// Package conformance holds the data and tests that hold the tokenizer package
// (github.com/usher-llm/usher/proxy/tokenizer) to its references: the tokenizer files of four
// model families (Qwen3, GPT-OSS, DeepSeek-V3, Mistral) with their licences, a generated corpus of
// prompts and chat conversations, token ids computed by the Hugging Face tokenizers library and
// chat templates rendered by Jinja2 as transformers configures it. It is a module of its own so
// that none of this is in the library module's zip; the package itself exports nothing.
//
// See README.md for the layout, the provenance of each file and how to regenerate the goldens.
package conformance
