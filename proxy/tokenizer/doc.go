// Package tokenizer computes, in process and in pure Go, the token ids a model server
// computes for a prompt: it loads a Hugging Face tokenizer.json and encodes text exactly as
// the Hugging Face tokenizers library (the Rust crate behind transformers' fast tokenizers,
// vLLM and SGLang) does. Exact prefix routing matches a prompt's blocks against the blocks
// engines report in their KV events, which are over token ids; a router that computes other
// ids than the engine never matches.
//
// # What is implemented
//
// [New] builds an [Encoder]; [Encoder.Encode] and [Encoder.EncodeSpecial] append ids to a
// caller's slice. The pipeline is the reference's:
//
//  1. Added tokens. The text is split on the added tokens, leftmost match first and the
//     longest at a position (the reference's Aho-Corasick automaton, MatchKind::LeftmostLongest,
//     here a byte trie): first those with normalized false, on the raw text; then, after
//     normalization, those with normalized true on each normalized stretch. single_word,
//     lstrip and rstrip are honoured as the reference's find_matches does. Special tokens
//     written in the text are tokens — what the reference does by default.
//  2. Normalizers: NFC, NFD, NFKC, NFKD (golang.org/x/text/unicode/norm), Prepend, Replace of a
//     string, and Sequences of them, applied to each stretch between added tokens (so
//     Prepend("▁") prepends to each stretch, as in the reference).
//  3. Pre-tokenizers: Split (behaviour Isolated) with a known pattern, then ByteLevel (its
//     byte-to-character map, and GPT-2's split when use_regex is set); Metaspace (each
//     prepend_scheme, split or not); or none.
//  4. BPE: the merges of lowest rank first, leftmost first among equal ranks, until none
//     applies; byte_fallback to <0xNN> tokens, unk_token with fuse_unk, ignore_merges.
//  5. Post-processor (EncodeSpecial only): TemplateProcessing's single template (a BOS token
//     and the like); ByteLevel adds nothing.
//
// Everything else — other models (WordPiece, Unigram), normalizers, pre-tokenizers,
// patterns, dropout — is refused by New with an error that names it, rather than
// approximated: an approximation would give other ids, silently.
//
// # The scanners, and why not regexp
//
// Byte-level families split text with a regular expression before BPE, and their expressions
// need what Go's regexp lacks: the lookahead in `\s+(?!\S)` (a run of spaces leaves its last
// space to the word after it), and the leftmost-first, backtracking alternation of the
// Oniguruma engine the reference uses — which alternative wins, and how a greedy run gives back
// characters, decides the pieces, so an RE2 approximation differs on real text. A general
// backtracking engine in Go would be slow and large. Instead each known pattern, recognised by
// its exact text in tokenizer.json, has a scanner written by hand over runes: a function that
// returns the end of the match starting at a position, following the pattern's alternatives
// in order and giving back characters as the backtracking engine would. The
// patterns known: Qwen2/Qwen3's, Llama 3's, o200k's (GPT-4o, GPT-OSS), DeepSeek-V3's three,
// and GPT-2's. An unknown pattern is an error naming it.
//
// Character classes come from package unicode, except for the letters, marks, numbers and
// symbols assigned in Unicode 15.1 and 16.0: Go's tables are Unicode 15.0 and the reference's
// Oniguruma is built with 16.0, so the difference is a table here (computed by running the
// reference's own pre-tokenizer with each class over every code point). Normalization forms
// are x/text's, at the version the module requires.
//
// # BPE
//
// Merges are looked up in a flat open-addressing table keyed by the pair of ids, holding the
// merge's rank and the merged id: no strings are built while encoding. A byte-level model
// starts a word from the ids of its bytes directly (the vocabulary is kept keyed by raw bytes,
// the byte-to-character map undone once at load). Words of up to 128 symbols are merged by
// scanning for the lowest-ranked pair; longer ones with a priority queue, as the reference
// does, in O(n log n). Both give the reference's order of merges: the current pair of lowest
// rank, and among equal ranks the leftmost.
//
// A SentencePiece-style model without a pre-tokenizer (Mistral's) encodes a whole stretch of
// text as one word. When no token of the vocabulary holds "▁" after another character, no
// merge can cross the start of a run of "▁", so the stretch is cut there into words that are
// merged apart — the same ids, found in linear rather than O(n log n) time, and cacheable.
//
// # Performance
//
// Each Encoder keeps a pool of scratch spaces (symbol and heap buffers, normalization buffers,
// and a direct-mapped cache of the ids of short words, 4096 entries of fixed size). Encoding
// with a dst that has room allocates nothing for a model whose normalizer leaves the text as
// it is, and one string per stretch of text that normalization changes. An 8k-token prompt
// takes about a millisecond on one core; see the package benchmarks (BenchmarkEncode, with
// USHER_TOKENIZERS naming a directory of the families' tokenizer files).
//
// # As the proxy's Tokenizer
//
// An Encoder is a [proxy.Tokenizer]: [Encoder.Tokenize] computes the ids the engine computes
// for a request — a chat (Chat Completions, Anthropic Messages, OpenAI Responses) converted as
// vLLM converts it ([Encoder.ConversationOf]), rendered with the model's chat template
// ([Encoder.RenderChat]) and encoded without added special tokens (the template writes the
// BOS); a Completions text prompt encoded with them ([Encoder.EncodeSpecial]); token ids as
// given — and hashes them into the chained block hashes of blocks of Options.BlockSize tokens,
// exactly as [proxy.EndpointTokenizer] hashes the ids a server's /tokenize returns. So the
// prefix index matches the engines' KV events (exact mode) without a round trip per request:
//
//	e, err := tokenizer.New(tokenizer.Options{Dir: "/models/qwen3", BlockSize: 16})
//	if err != nil {
//		return err // names the directory, and the file at fault
//	}
//	h, err := proxy.New(proxy.Options{Tokenizer: e, BlockSize: 16, ...})
//
// The gateway's configuration says the same with "tokenizer": "local:DIR" (and a pool's
// "tokenizer" for a model of its own); the endpoint picker with -tokenizer local:DIR.
//
// A request whose prompt cannot be computed exactly — a Responses request continuing a stored
// response, an image, a model without a chat template (GPT-OSS: vLLM renders it with Harmony,
// not with a template), several Completions prompts — makes Tokenize return an error; the
// proxy's Handler and the endpoint picker then hash that request's prompt by bytes, as
// [proxy.BytesTokenizer] does, which gives it approximate-mode affinity only.
//
// # Concurrency
//
// An Encoder is immutable after New and safe for concurrent use; the pooled scratch spaces are
// taken by one Encode at a time.
package tokenizer
