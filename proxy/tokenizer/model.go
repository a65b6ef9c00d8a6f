package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// An Encoder is a model's tokenizer, built from its Hugging Face tokenizer.json: the
// normalizer, pre-tokenizer, BPE model, added tokens and post-processor.
//
// An Encoder is immutable after [New] and safe for concurrent use. [Encoder.Encode] is
// O(n log n) in the length n of the text, O(n) in practice: pre-tokenized pieces are short,
// and the ids of short words are cached. Encoding works in scratch spaces (buffers and a
// 512 KiB word cache each) that an Encoder keeps, up to GOMAXPROCS of them, for the next
// call; so, given a dst with room, Encode allocates nothing for text that needs no
// normalization.
type Encoder struct {
	chat   *chatTemplate // tokenizer_config.json's chat_template; nil without one
	norm   []normStep
	splits []split // the Split pre-tokenizers, in order
	gpt2   bool    // ByteLevel with use_regex: GPT-2's split after the others
	prefix bool    // ByteLevel's add_prefix_space
	// spaceSplit: no pre-tokenizer, and no token of the vocabulary holds "▁" after another
	// character, so no merge can cross the start of a run of "▁": the text is split there
	// into words that are merged (and cached) apart, with the same ids.
	spaceSplit bool
	meta       *metaspace // the Metaspace pre-tokenizer, if that is the pre-tokenizer
	bpe        *bpe

	added     *matcher // added tokens matched in the raw text (normalized: false)
	addedNorm *matcher // added tokens matched in the normalized text (normalized: true)

	before, after []uint32 // the post-processor's ids around the text, for EncodeSpecial

	config []byte // tokenizer_config.json as given

	blockSize int           // Options.BlockSize, for Tokenize
	bufs      chan *tokBufs // Tokenize's idle buffers: a free list, as free is

	// free holds the idle scratch spaces, each with its word cache of this model: a free
	// list rather than a sync.Pool, which the collector empties, and the caches with it.
	free chan *scratch
}

// Options says where an [Encoder]'s files are.
type Options struct {
	// Dir is a directory holding tokenizer.json and, optionally, tokenizer_config.json. It is
	// read when TokenizerJSON is nil.
	Dir string
	// TokenizerJSON and ConfigJSON are the contents of tokenizer.json and
	// tokenizer_config.json, for a caller that has them in hand. ConfigJSON may be nil.
	TokenizerJSON, ConfigJSON []byte
	// BlockSize is the engine's tokens per KV-cache block (vLLM --block-size), the size of
	// the blocks [Encoder.Tokenize] hashes. Zero: 16.
	BlockSize int
}

// ErrInvalidOptions reports Options that name no tokenizer.json, or a negative BlockSize.
var ErrInvalidOptions = errors.New("tokenizer: invalid options")

// New builds an Encoder from a model's tokenizer.json and tokenizer_config.json. A model,
// normalizer, pre-tokenizer, pattern or post-processor that it does not implement exactly is
// an error naming it, never an Encoder that would give other ids than the reference.
// New is O(size of the files).
func New(o Options) (*Encoder, error) {
	if o.BlockSize < 0 {
		return nil, fmt.Errorf("%w: BlockSize %d", ErrInvalidOptions, o.BlockSize)
	}
	tj, cj := o.TokenizerJSON, o.ConfigJSON
	if tj == nil {
		if o.Dir == "" {
			return nil, fmt.Errorf("%w: neither Dir nor TokenizerJSON", ErrInvalidOptions)
		}
		var err error
		if tj, err = os.ReadFile(filepath.Join(o.Dir, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		cj, err = os.ReadFile(filepath.Join(o.Dir, "tokenizer_config.json"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	e, err := build(tj, cj)
	if err != nil {
		if o.TokenizerJSON == nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", o.Dir, err)
		}
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	e.blockSize = cmp.Or(o.BlockSize, 16)
	e.bufs = make(chan *tokBufs, runtime.GOMAXPROCS(0))
	return e, nil
}

type fileJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type                    string            `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		FuseUnk                 bool              `json:"fuse_unk"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  json.RawMessage   `json:"merges"`
	} `json:"model"`
}

type preJSON struct {
	Type          string            `json:"type"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Pattern       struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`
}

type postJSON struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

// build parses both files and builds the Encoder.
func build(data, config []byte) (*Encoder, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	m := &Encoder{free: make(chan *scratch, runtime.GOMAXPROCS(0))}
	chat, cerr := newChatTemplate(config)
	if cerr != nil {
		return nil, cerr
	}
	m.chat = chat
	if t := f.Model.Type; t != "" && t != "BPE" {
		return nil, fmt.Errorf("model %q is not supported (only BPE)", t)
	}
	if f.Model.Vocab == nil {
		return nil, errors.New("model has no vocab")
	}
	if d := f.Model.Dropout; d != nil && *d != 0 {
		return nil, errors.New("BPE dropout is not supported")
	}
	if p := f.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, errors.New("BPE continuing_subword_prefix is not supported")
	}
	if p := f.Model.EndOfWordSuffix; p != nil && *p != "" {
		return nil, errors.New("BPE end_of_word_suffix is not supported")
	}
	var err error
	if m.norm, err = parseNormalizer(f.Normalizer, nil); err != nil {
		return nil, err
	}
	byteLevel, err := m.parsePre(f.PreTokenizer, true)
	if err != nil {
		return nil, err
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	if m.bpe, err = buildBPE(f.Model.Vocab, merges, byteLevel); err != nil {
		return nil, err
	}
	m.bpe.fallback = f.Model.ByteFallback
	m.bpe.fuseUnk = f.Model.FuseUnk
	m.bpe.ignore = f.Model.IgnoreMerges
	if u := f.Model.UnkToken; u != nil {
		m.bpe.unk, m.bpe.hasUnk = f.Model.Vocab[*u]
	}
	m.spaceSplit = !byteLevel && len(m.splits) == 0 && (m.meta == nil || !m.meta.split) && spaceBound(f.Model.Vocab)
	if err := m.parseAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := m.parsePost(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := m.parseConfig(config, f.Model.Vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	m.config = bytes.Clone(config)
	return m, nil
}

type configJSON struct {
	Class    string          `json:"tokenizer_class"`
	AddBOS   *bool           `json:"add_bos_token"`
	AddEOS   *bool           `json:"add_eos_token"`
	BOSToken json.RawMessage `json:"bos_token"`
	EOSToken json.RawMessage `json:"eos_token"`
}

// parseConfig reads what of tokenizer_config.json changes encoding: transformers rebuilds
// the post-processor of the Llama tokenizer classes from add_bos_token and add_eos_token.
func (e *Encoder) parseConfig(config []byte, vocab map[string]uint32, added []addedToken) error {
	if len(bytes.TrimSpace(config)) == 0 {
		return nil
	}
	var c configJSON
	if err := json.Unmarshal(config, &c); err != nil {
		return fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if c.Class != "LlamaTokenizer" && c.Class != "LlamaTokenizerFast" {
		return nil
	}
	idOf := func(name string, raw json.RawMessage) (uint32, error) {
		var tok string
		if err := json.Unmarshal(raw, &tok); err != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == "" {
				return 0, fmt.Errorf("tokenizer_config.json: %s is neither a string nor a token", name)
			}
			tok = obj.Content
		}
		for _, t := range added {
			if t.Content == tok {
				return t.ID, nil
			}
		}
		if id, ok := vocab[tok]; ok {
			return id, nil
		}
		return 0, fmt.Errorf("tokenizer_config.json: %s %q is not a token", name, tok)
	}
	e.before, e.after = []uint32{}, []uint32{}
	if c.AddBOS == nil || *c.AddBOS {
		id, err := idOf("bos_token", c.BOSToken)
		if err != nil {
			return err
		}
		e.before = append(e.before, id)
	}
	if c.AddEOS != nil && *c.AddEOS {
		id, err := idOf("eos_token", c.EOSToken)
		if err != nil {
			return err
		}
		e.after = append(e.after, id)
	}
	return nil
}

// parseMerges reads the merges as pairs (["a", "b"]) or as strings ("a b").
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model merges: %w", err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("model merges: line %d (%q) is not two tokens", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

// parsePre reads the pre-tokenizer: Split pre-tokenizers with a known pattern, then a
// ByteLevel one (or none). It reports whether the model is byte-level.
func (e *Encoder) parsePre(raw json.RawMessage, top bool) (byteLevel bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var p preJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "Sequence":
		if !top {
			return false, errors.New("pre_tokenizer: nested Sequence is not supported")
		}
		for i, sub := range p.Pretokenizers {
			if byteLevel {
				return false, errors.New("pre_tokenizer: only ByteLevel may come last in the Sequence")
			}
			bl, err := e.parsePre(sub, false)
			if err != nil {
				return false, fmt.Errorf("%w (pre_tokenizer %d)", err, i)
			}
			byteLevel = bl
		}
		return byteLevel, nil
	case "Split":
		if p.Pattern.Regex == nil {
			return false, errors.New("pre_tokenizer Split: only Regex patterns are supported")
		}
		if p.Behavior != "Isolated" || p.Invert {
			return false, fmt.Errorf("pre_tokenizer Split: behavior %q (invert %v) is not supported", p.Behavior, p.Invert)
		}
		sc, err := scannerFor(*p.Pattern.Regex)
		if err != nil {
			return false, fmt.Errorf("pre_tokenizer: %w", err)
		}
		e.splits = append(e.splits, sc)
		return false, nil
	case "ByteLevel":
		e.prefix = p.AddPrefixSpace != nil && *p.AddPrefixSpace
		e.gpt2 = p.UseRegex == nil || *p.UseRegex
		return true, nil
	case "Metaspace":
		if !top || len(e.splits) > 0 {
			return false, errors.New("pre_tokenizer: Metaspace is supported alone only")
		}
		if p.Replacement != meta {
			return false, fmt.Errorf("pre_tokenizer Metaspace: replacement %q is not supported (only %q)", p.Replacement, meta)
		}
		ms := &metaspace{split: p.Split == nil || *p.Split}
		switch p.PrependScheme {
		case "always":
			ms.prepend = prependAlways
		case "first":
			ms.prepend = prependFirst
		case "never":
			ms.prepend = prependNever
		case "":
			// Before prepend_scheme, add_prefix_space (default true) meant always.
			if p.AddPrefixSpace == nil || *p.AddPrefixSpace {
				ms.prepend = prependAlways
			}
		default:
			return false, fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme %q is not supported", p.PrependScheme)
		}
		e.meta = ms
		return false, nil
	}
	return false, fmt.Errorf("pre_tokenizer %q is not supported", p.Type)
}

// parseAdded builds the two matchers of the added tokens.
func (e *Encoder) parseAdded(tokens []addedToken) error {
	var special, classic []addedToken
	seen := map[string]bool{}
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		if t.Special && !seen[t.Content] {
			special = append(special, t)
			seen[t.Content] = true
		}
	}
	for _, t := range tokens {
		if t.Content != "" && !t.Special && !seen[t.Content] {
			classic = append(classic, t)
		}
	}
	// The reference matches special tokens, then the others, in the order given.
	all := append(special, classic...)
	var raw, normed []addedToken
	for _, t := range all {
		if t.Normalized {
			normed = append(normed, t)
		} else {
			raw = append(raw, t)
		}
	}
	if len(raw) > 0 {
		e.added = newMatcher(raw, func(t addedToken) string { return t.Content })
	}
	if len(normed) > 0 {
		var a, b []byte
		e.addedNorm = newMatcher(normed, func(t addedToken) string {
			var s string
			s, a, b = normalize(e.norm, t.Content, a, b)
			return s
		})
	}
	return nil
}

// parsePost reads the post-processor: ByteLevel (adds nothing), TemplateProcessing (its
// single-sequence template), or a Sequence of those.
func (e *Encoder) parsePost(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var p postJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, sub := range p.Processors {
			if err := e.parsePost(sub); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		if e.before != nil || e.after != nil {
			return errors.New("post_processor: two TemplateProcessing")
		}
		e.before, e.after = []uint32{}, []uint32{}
		seq := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				if seq || piece.Sequence.ID != "A" {
					return errors.New("post_processor TemplateProcessing: single must hold $A once")
				}
				seq = true
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor TemplateProcessing: no special token %q", piece.SpecialToken.ID)
				}
				if seq {
					e.after = append(e.after, st.IDs...)
				} else {
					e.before = append(e.before, st.IDs...)
				}
			default:
				return errors.New("post_processor TemplateProcessing: unknown piece in single")
			}
		}
		if !seq {
			return errors.New("post_processor TemplateProcessing: single has no $A")
		}
		return nil
	}
	return fmt.Errorf("post_processor %q is not supported", p.Type)
}

// scratch is one encoding's working memory, pooled.
type scratch struct {
	syms   []symbol
	heap   []uint64
	na, nb []byte // normalization buffers
	iter   norm.Iter
	normed []byte    // the normalized stretches of one text, end to end
	segs   []segment // the text split on the added tokens matched before normalization
	mb     []byte    // Metaspace's buffer
	cache  wordCache
	// origStart is where in the text the stretch being encoded starts (Metaspace's "first").
	origStart int
	m         *Encoder
	dst       []uint32
}

// segment is a token (id, when end < 0) or a stretch of text: text[start:end], or
// normed[start:end] when normed is set.
type segment struct {
	start, end int
	id         uint32
	normed     bool
	orig       int // where the stretch starts in the text
}

// Encode appends to dst the token ids of text as the Hugging Face tokenizers library encodes
// it without special tokens (encode(text, add_special_tokens=False)): added and special
// tokens written in the text are matched as tokens, the rest is normalized, pre-tokenized
// and split by BPE. It returns the extended dst.
//
// Encode is safe for concurrent use. When dst has room it allocates nothing for text the
// normalizer leaves as it is, and one string for text it changes (the text normalized);
// under a Metaspace pre-tokenizer, one string a stretch between added tokens.
func (e *Encoder) Encode(dst []uint32, text string) []uint32 {
	var sc *scratch
	select {
	case sc = <-e.free:
	default:
		sc = &scratch{m: e}
		sc.cache.seed = maphash.MakeSeed()
	}
	sc.dst = dst
	sc.encode(text)
	dst = sc.dst
	sc.dst = nil
	select {
	case e.free <- sc:
	default: // as many idle as the free list holds; the rest go to the collector
	}
	return dst
}

// encode splits text on the added tokens matched in the raw text, normalizes the stretches
// between them into one buffer (one string for the whole text), and encodes each stretch.
func (sc *scratch) encode(text string) {
	m := sc.m
	if len(m.norm) == 0 {
		m.added.split(text, sc.rawPiece, sc.token)
		return
	}
	sc.segs, sc.normed = sc.segs[:0], sc.normed[:0]
	m.added.split(text, sc.rawSegment, sc.tokenSegment)
	var normed string
	if len(sc.normed) > 0 {
		normed = string(sc.normed) // the one allocation of a text the normalizer changes
	}
	for _, g := range sc.segs {
		switch {
		case g.end < 0:
			sc.token(g.id)
		case g.normed:
			sc.origStart = g.orig
			sc.normPiece(normed[g.start:g.end])
		default:
			sc.origStart = g.orig
			sc.normPiece(text[g.start:g.end])
		}
	}
}

func (sc *scratch) tokenSegment(id uint32) { sc.segs = append(sc.segs, segment{end: -1, id: id}) }

// rawSegment normalizes a stretch of the text between tokens, into sc.normed if that changes it.
func (sc *scratch) rawSegment(s string, at int) {
	var out []byte
	var changed bool
	out, changed, sc.na, sc.nb = normalizeBytes(sc.m.norm, &sc.iter, s, sc.na, sc.nb)
	if !changed {
		sc.segs = append(sc.segs, segment{start: at, end: at + len(s), orig: at})
		return
	}
	start := len(sc.normed)
	sc.normed = append(sc.normed, out...)
	sc.segs = append(sc.segs, segment{start: start, end: len(sc.normed), normed: true, orig: at})
}

// EncodeSpecial is [Encoder.Encode] with the special tokens the post-processor adds
// (encode(text, add_special_tokens=True)) as the engine applies them: for a model whose
// tokenizer_class is LlamaTokenizer or LlamaTokenizerFast, the bos_token when add_bos_token
// (the default) and the eos_token when add_eos_token, as transformers rewrites the
// post-processor of those; for the others, tokenizer.json's TemplateProcessing template, or
// nothing.
func (e *Encoder) EncodeSpecial(dst []uint32, text string) []uint32 {
	dst = append(dst, e.before...)
	dst = e.Encode(dst, text)
	return append(dst, e.after...)
}

func (sc *scratch) token(id uint32) { sc.dst = append(sc.dst, id) }

// rawPiece takes a stretch of the text between added tokens, of a model without normalizer.
func (sc *scratch) rawPiece(s string, at int) {
	sc.origStart = at
	sc.normPiece(s)
}

// normPiece takes a normalized stretch: searched for the normalized added tokens, then
// pre-tokenized.
func (sc *scratch) normPiece(s string) {
	if m := sc.m; m.addedNorm != nil {
		m.addedNorm.split(s, sc.piece, sc.token)
		return
	}
	sc.piece(s, 0)
}

// piece pre-tokenizes a normalized stretch and encodes its words.
func (sc *scratch) piece(s string, at int) {
	if s == "" {
		return
	}
	if sc.m.meta != nil {
		sc.metaspace(s, sc.origStart == 0 && at == 0)
		return
	}
	sc.split(s, 0)
}

// split runs the Split pre-tokenizer of the given level over s (matches and the gaps
// between them are pieces alike: behaviour Isolated) and passes each piece to the next level.
func (sc *scratch) split(s string, level int) {
	m := sc.m
	if level == len(m.splits) {
		sc.final(s)
		return
	}
	sp := m.splits[level]
	gap := 0
	for i := 0; i < len(s); {
		if sp.first != nil && !sp.first[s[i]] {
			i++ // not a first byte, nor the start of a rune that could begin a match
			continue
		}
		e := sp.scan(s, i)
		if e <= i {
			i += width(s, i)
			continue
		}
		if gap < i {
			sc.split(s[gap:i], level+1)
		}
		sc.split(s[i:e], level+1)
		i, gap = e, e
	}
	if gap < len(s) {
		sc.split(s[gap:], level+1)
	}
}

// final applies ByteLevel's own split (use_regex), then BPE.
func (sc *scratch) final(s string) {
	m := sc.m
	if m.prefix && s[0] != ' ' {
		// ByteLevel's add_prefix_space: the piece is encoded as if it began with a space.
		sc.na = append(append(sc.na[:0], ' '), s...)
		s = string(sc.na)
	}
	if m.spaceSplit {
		start := 0
		for i := 1; i < len(s); {
			k := strings.Index(s[i:], meta)
			if k < 0 {
				break
			}
			if i += k; !strings.HasSuffix(s[:i], meta) {
				sc.dst = m.bpe.word(sc.dst, s[start:i], sc)
				start = i
			}
			i += len(meta)
		}
		sc.dst = m.bpe.word(sc.dst, s[start:], sc)
		return
	}
	if !m.gpt2 {
		sc.dst = m.bpe.word(sc.dst, s, sc)
		return
	}
	gap := 0
	for i := 0; i < len(s); {
		e := scanGPT2(s, i)
		if e <= i {
			i += width(s, i)
			continue
		}
		if gap < i {
			sc.dst = m.bpe.word(sc.dst, s[gap:i], sc)
		}
		sc.dst = m.bpe.word(sc.dst, s[i:e], sc)
		i, gap = e, e
	}
	if gap < len(s) {
		sc.dst = m.bpe.word(sc.dst, s[gap:], sc)
	}
}

// meta is SentencePiece's stand-in for a space, U+2581.
const meta = "\u2581"

// spaceBound reports whether the vocabulary has "▁" and no token holding "▁" right after
// another character.
func spaceBound(vocab map[string]uint32) bool {
	if _, ok := vocab[meta]; !ok {
		return false
	}
	for tok := range vocab {
		for i := 1; i < len(tok); i++ {
			if strings.HasPrefix(tok[i:], meta) && !strings.HasSuffix(tok[:i], meta) {
				return false
			}
		}
	}
	return true
}

// metaspace is the Metaspace pre-tokenizer: spaces become "▁", a "▁" is prepended to a
// piece that does not start with one (always, or only to the piece at the start of the text,
// or never), and with split each "▁" starts a word (MergedWithNext).
type metaspace struct {
	prepend prependScheme
	split   bool
}

type prependScheme uint8

const (
	prependNever prependScheme = iota
	prependAlways
	prependFirst
)

// metaspace encodes a piece of a model whose pre-tokenizer is Metaspace. first tells whether
// the piece starts the text. It allocates the rewritten piece.
func (sc *scratch) metaspace(s string, first bool) {
	m, ms := sc.m, sc.m.meta
	b := sc.mb[:0]
	if !strings.HasPrefix(s, " ") && !strings.HasPrefix(s, meta) &&
		(ms.prepend == prependAlways || ms.prepend == prependFirst && first) {
		b = append(b, meta...)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			b = append(b, meta...)
		} else {
			b = append(b, s[i])
		}
	}
	sc.mb = b
	w := string(b)
	if !ms.split {
		sc.final(w)
		return
	}
	start := 0
	for i := 1; i < len(w); {
		k := strings.Index(w[i:], meta)
		if k < 0 {
			break
		}
		i += k
		sc.dst = m.bpe.word(sc.dst, w[start:i], sc)
		start = i
		i += len(meta)
	}
	sc.dst = m.bpe.word(sc.dst, w[start:], sc)
}
