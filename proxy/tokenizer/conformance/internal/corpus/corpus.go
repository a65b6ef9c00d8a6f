// Package corpus generates the conformance corpus: prompts that exercise every part of a
// tokenizer (scripts, combining marks and normalization forms, code, whitespace runs, numbers,
// emoji sequences, contractions, special-token look-alikes, long words) and chat conversations
// (system prompts, tools with JSON schemas, tool calls and results, several turns).
//
// Generation is deterministic: the same seed gives the same output on every platform and Go
// version, because it draws only from math/rand/v2's PCG, whose output the standard library
// specifies, and never iterates over a map.
package corpus

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Seed is the seed the committed corpus was generated with.
const Seed = 44

// Sizes of the committed corpus.
const (
	NumPrompts       = 12000
	NumLongPrompts   = 24 // 16 KiB each, about 8k tokens: the benchmark's long prompts
	NumConversations = 3000
)

// gen is one generator's state. It is not safe for concurrent use.
type gen struct {
	r *rand.Rand
}

func newGen(seed uint64, stream uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, stream))}
}

func (g *gen) n(k int) int             { return g.r.IntN(k) }
func (g *gen) coin(p float64) bool     { return g.r.Float64() < p }
func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }
func (g *gen) between(lo, hi int) int  { return lo + g.r.IntN(hi-lo+1) }

// runeIn returns a rune drawn uniformly from [lo, hi].
func (g *gen) runeIn(lo, hi rune) rune { return lo + rune(g.r.IntN(int(hi-lo+1))) }

// Prompts returns the corpus's prompts: NumPrompts short and medium ones drawn from the
// categories in turn, then NumLongPrompts long mixed ones.
func Prompts(seed uint64) []string {
	g := newGen(seed, 1)
	out := make([]string, 0, NumPrompts+NumLongPrompts)
	// Fixed edge cases first: the empty prompt, single characters and bare specials.
	out = append(out, edgeCases...)
	for i := len(out); i < NumPrompts; i++ {
		c := categories[i%len(categories)]
		out = append(out, c(g))
	}
	for range NumLongPrompts {
		var b strings.Builder
		for b.Len() < 16<<10 {
			b.WriteString(categories[g.n(len(categories))](g))
			b.WriteString(g.pick(joiners))
		}
		out = append(out, b.String())
	}
	return out
}

var joiners = []string{" ", "\n", "\n\n", "\t", "", ". ", "\r\n", "  "}

var edgeCases = []string{
	"", " ", "  ", "\n", "\t", "\r\n", "a", "A", "0", "é", "e\u0301", "中", "🙂", "'", "'s", "<s>", "</s>",
	"<unk>", "[INST]", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
	"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
	"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
	"\u00a0", "\u200b", "\ufeff", "\u3000", "\x00", "\x7f", "\u0085", "\u2028", "▁", "▁▁hello",
}

// categories are drawn in turn; mixedText draws from leaves.
var categories = append(leaves[:len(leaves):len(leaves)], mixedText)

var leaves = []func(*gen) string{
	unicodeText, codeText, whitespaceText, numberText, emojiText, contractionText,
	specialText, longWordText, normText, proseText,
}

// --- word lists ---------------------------------------------------------------------------

var english = strings.Fields(`the of and to in is was for on that with as by at from his her it an
were are which this be or has had not but have one their they new after who its first been also
two all would there more when into other time she may over year could about than only can state
city system model token router engine request cache prefix block hash latency throughput queue
Hello World Kubernetes Envoy gateway inference GPU batch stream server client ROUTER TTFT HTTP
JSON naïve café résumé façade coöperate Zürich São Paulo München Kraków Ærøskøbing`)

var foreign = strings.Fields(`Привет мир спасибо Москва данные
Γειά σου κόσμε ευχαριστώ δεδομένα
שלום עולם תודה נתונים
مرحبا بالعالم شكرا البيانات
नमस्ते दुनिया धन्यवाद डेटा
হ্যালো বিশ্ব ধন্যবাদ
สวัสดีชาวโลก ขอบคุณ ข้อมูล
გამარჯობა მსოფლიო
안녕하세요 세계 감사합니다 데이터
こんにちは世界 ありがとう データ カタカナ ひらがな
你好世界 谢谢 数据 模型 推理 路由器 龘 𠀀𠀁 𪚥
Բարեւ աշխարհ
ሰላም ዓለም
வணக்கம் உலகம்
ជំរាបសួរ ពិភពលោក
བཀྲ་ཤིས་བདེ་ལེགས
Xin chào thế giới Tiếng Việt
Merhaba dünya İstanbul ışık
ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ`)

// Unicode blocks to draw random runes from: letters of many scripts, marks, symbols, CJK
// (inside and outside DeepSeek's 一-龥 range), supplementary planes.
var blocks = [][2]rune{
	{0x0041, 0x007a}, {0x00c0, 0x024f}, {0x0370, 0x03ff}, {0x0400, 0x04ff}, {0x0530, 0x058f},
	{0x0590, 0x05ff}, {0x0600, 0x06ff}, {0x0900, 0x097f}, {0x0980, 0x09ff}, {0x0b80, 0x0bff},
	{0x0e00, 0x0e7f}, {0x10a0, 0x10ff}, {0x1100, 0x11ff}, {0x1200, 0x137f}, {0x1780, 0x17ff},
	{0x1e00, 0x1eff}, {0x2000, 0x206f}, {0x20a0, 0x20cf}, {0x2100, 0x214f}, {0x2190, 0x21ff},
	{0x2200, 0x22ff}, {0x2500, 0x257f}, {0x2600, 0x26ff}, {0x3000, 0x303f}, {0x3040, 0x309f},
	{0x30a0, 0x30ff}, {0x3400, 0x4dbf}, {0x4e00, 0x9fa5}, {0x9fa6, 0x9fff}, {0xac00, 0xd7a3},
	{0xf900, 0xfaff}, {0xfb00, 0xfb4f}, {0xfe30, 0xfe4f}, {0xff00, 0xffef}, {0x10000, 0x1007f},
	{0x1d400, 0x1d7ff}, {0x1f300, 0x1f5ff}, {0x20000, 0x2a6df}, {0xe000, 0xe0ff},
	{0x0300, 0x036f}, {0x1ab0, 0x1aff}, {0x20d0, 0x20ff}, {0xfe20, 0xfe2f},
}

// randRune draws from the blocks, skipping surrogates and noncharacters (which cannot be valid
// UTF-8 text).
func (g *gen) randRune() rune {
	for {
		b := blocks[g.n(len(blocks))]
		r := g.runeIn(b[0], b[1])
		if r >= 0xd800 && r <= 0xdfff || r&0xfffe == 0xfffe || r >= 0xfdd0 && r <= 0xfdef {
			continue
		}
		return r
	}
}

var combining = []rune{0x0300, 0x0301, 0x0302, 0x0303, 0x0308, 0x030a, 0x0327, 0x0323, 0x031b,
	0x0345, 0x05b4, 0x064b, 0x093c, 0x0e48, 0x3099, 0x309a, 0x20dd, 0xfe0f, 0x200d, 0x034f}

func unicodeText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 60) {
		switch g.n(6) {
		case 0, 1:
			b.WriteString(g.pick(foreign))
		case 2:
			for range g.between(1, 12) {
				b.WriteRune(g.randRune())
			}
		case 3:
			b.WriteString(g.pick(english))
			for range g.between(1, 4) {
				b.WriteRune(combining[g.n(len(combining))])
			}
		case 4:
			b.WriteString(g.pick(spaces))
		default:
			b.WriteString(g.pick(english))
		}
		if g.coin(0.6) {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// normText mixes composed and decomposed forms of the same text, compatibility characters and
// singletons, so that an NFC normalizer has work to do.
func normText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 30) {
		w := g.pick(normWords)
		switch g.n(4) {
		case 0:
			w = norm.NFD.String(w)
		case 1:
			w = norm.NFC.String(w)
		case 2:
			w = norm.NFKD.String(w)
		}
		b.WriteString(w)
		b.WriteString(g.pick([]string{" ", " ", "", "\n", "\u00a0"}))
	}
	return b.String()
}

var normWords = strings.Fields(`é è ê ë ñ ü ö ä å Å Å Ω Ω ǅ ﬁ ﬂ ｆｕｌｌ ① ² ½ ẞ ß ḱ ệ Việt ỗ
한국어 한 글 가각 가 ガ が パ ぱ ヴ ẛ̣ q̣̇ ḍ̇ Ǻ ǻ Ḉ ḉ ṩ कि क़ ড় ਖ਼ ফ় ﬀ ㎒ ℌ ℵ Ⅻ ⅻ ︷ ㈱ ŉ
Ǆ ǆ Ĳ ĳ ſt ﬅ ﬆ ℡ ™ ℃ Å Ω K`)

var spaces = []string{" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2002", "\u2003", "\u2009",
	"\u200a", "\u202f", "\u205f", "\u3000", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c",
	"\u200b", "\u200c", "\u200d", "\ufeff", "\u180e", "\r"}

// --- code ------------------------------------------------------------------------------------

var idents = strings.Fields(`x y i j n err ctx req resp buf dst src tokens ids prefixHash blockSize
maxLen kvCache router_state self this __init__ _private HTTPServer parseJSON utf8Len MAX_TOKENS
camelCaseName snake_case_name kebab-case SCREAMING_CASE`)

var codeTemplates = []string{
	"func %s(%s []byte) (int, error) {\n\tif len(%s) == 0 {\n\t\treturn 0, nil\n\t}\n\treturn %d, nil\n}\n",
	"def %s(%s):\n    \"\"\"Docstring with 'quotes' and \"%s\".\"\"\"\n    return [x ** %d for x in range(10)]\n",
	"const %s = (%s) => {\n  console.log(`${%s}: %d`);\n};\n",
	"SELECT %s, COUNT(*) FROM %s WHERE %s >= %d GROUP BY 1;\n",
	"<div class=\"%s\" id='%s'>&lt;%s&gt; &amp; %d</div>\n",
	"{\"%s\": {\"%s\": [\"%s\", %d, null, true, 1.5e-7]}}\n",
	"#include <stdio.h>\nint %s(char *%s) { /* %s */ return %d; }\n",
	"for (( i=0; i<%s; i++ )); do echo \"$%s\" | grep -E '^%s' >> /tmp/%d.log; done\n",
	"    %s := map[string]int{\"%s\": %s.Len(), \"n\": %d}\r\n",
	"impl %s {\n    pub fn %s(&self) -> Option<&str> { self.%s.get(%d) }\n}\n",
	"%s:\n  - name: %s\n    image: \"%s:v%d\"\n    args: [\"--port\", \"8000\"]\n",
	"// TODO(%s): %s -> %s !== %d ?? ... ;;; ::: ||| &&& <<= >>>= **= //= @@ -1,3 +1,4 @@\n",
}

func codeText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 6) {
		t := g.pick(codeTemplates)
		s := fmt.Sprintf(t, g.pick(idents), g.pick(idents), g.pick(idents), g.r.IntN(100000))
		if g.coin(0.3) {
			s = strings.ReplaceAll(s, "\t", "    ")
		}
		if g.coin(0.2) {
			s = strings.ReplaceAll(s, "\n", "\r\n")
		}
		b.WriteString(s)
		if g.coin(0.3) {
			b.WriteString(strings.Repeat(" ", g.between(1, 8)))
		}
	}
	return b.String()
}

// --- whitespace ----------------------------------------------------------------------------

func whitespaceText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 25) {
		switch g.n(5) {
		case 0:
			b.WriteString(strings.Repeat(" ", g.between(1, 40)))
		case 1:
			b.WriteString(strings.Repeat(g.pick([]string{"\n", "\r\n", "\t", "\r", " \n", "\n "}), g.between(1, 10)))
		case 2:
			for range g.between(1, 10) {
				b.WriteString(g.pick(spaces))
			}
		default:
			b.WriteString(g.pick(english))
		}
	}
	if g.coin(0.5) {
		b.WriteString(strings.Repeat(g.pick([]string{" ", "\n", "\t", "\r\n"}), g.between(1, 5)))
	}
	return b.String()
}

// --- numbers -------------------------------------------------------------------------------

var numeralRanges = [][2]rune{{'0', '9'}, {0x0660, 0x0669}, {0x06f0, 0x06f9}, {0x0966, 0x096f},
	{0x09e6, 0x09ef}, {0x0e50, 0x0e59}, {0xff10, 0xff19}, {0x2070, 0x2079}, {0x2080, 0x2089},
	{0x2150, 0x218b}, {0x2460, 0x249b}, {0x1d7ce, 0x1d7ff}, {0x3007, 0x3007}, {0x00b2, 0x00b3}}

func numberText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 20) {
		switch g.n(8) {
		case 0:
			for range g.between(1, 200) {
				b.WriteByte(byte('0' + g.n(10)))
			}
		case 1:
			fmt.Fprintf(&b, "%d.%d", g.r.IntN(1e6), g.r.IntN(1e9))
		case 2:
			fmt.Fprintf(&b, "%d,%03d,%03d", g.between(1, 999), g.n(1000), g.n(1000))
		case 3:
			fmt.Fprintf(&b, "0x%X 0b%b %e", g.r.Uint32(), g.r.IntN(4096), g.r.Float64()*1e12)
		case 4:
			fmt.Fprintf(&b, "+1 (%03d) %03d-%04d %04d-%02d-%02dT%02d:%02d:%02dZ", g.n(1000), g.n(1000),
				g.n(10000), g.between(1900, 2100), g.between(1, 12), g.between(1, 28), g.n(24), g.n(60), g.n(60))
		case 5:
			nr := numeralRanges[g.n(len(numeralRanges))]
			for range g.between(1, 12) {
				b.WriteRune(g.runeIn(nr[0], nr[1]))
			}
		case 6:
			fmt.Fprintf(&b, "v%d.%d.%d-rc.%d 3.14159 -42 1e10 %d%%", g.n(10), g.n(30), g.n(100), g.n(9), g.n(101))
		default:
			b.WriteString(g.pick(english))
		}
		b.WriteString(g.pick([]string{" ", "", ", ", "\n", "x", "a1b2"}))
	}
	return b.String()
}

// --- emoji ---------------------------------------------------------------------------------

var emoji = []string{"😀", "😂", "🥲", "❤️", "❤", "👍", "👍🏻", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻",
	"🧑‍🤝‍🧑", "🏳️‍🌈", "🏴‍☠️", "🇺🇸", "🇯🇵", "🇩🇪🇫🇷", "🇺", "1️⃣", "#️⃣", "©️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🫠", "🪿",
	"🤷‍♀️", "🙋🏾‍♂️", "👁️‍🗨️", "☺", "☺️", "✌🏼", "🦀", "🐍", "🚀", "💯", "🔥🔥🔥", "⭐", "🀄", "🃏"}

func emojiText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 30) {
		if g.coin(0.6) {
			b.WriteString(g.pick(emoji))
		} else {
			b.WriteString(g.pick(english))
		}
		b.WriteString(g.pick([]string{"", " ", "", "\n", "!"}))
	}
	return b.String()
}

// --- contractions --------------------------------------------------------------------------

var contractions = []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE",
	"'M", "'LL", "'D", "'Ll", "'lL", "'Re", "’s", "’ll", "''", "'", "'ss", "'x", "' s", "`s"}

func contractionText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 25) {
		w := g.pick(english)
		if g.coin(0.2) {
			w = strings.ToUpper(w)
		}
		b.WriteString(w)
		b.WriteString(g.pick(contractions))
		if g.coin(0.3) {
			b.WriteString(g.pick(contractions))
		}
		b.WriteString(g.pick([]string{" ", " ", "", "\n", "  ", "."}))
	}
	return b.String()
}

// --- special-token look-alikes -------------------------------------------------------------

var specials = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
	"</tool_call>", "<tool_response>", "<|fim_prefix|>", "<|vision_start|>",
	"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>",
	"<|constrain|>", "<|startoftext|>", "<|endofprompt|>", "<|reserved_200013|>",
	"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
	"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁17｜>",
	"<|EOT|>", "<｜fim▁hole｜>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]",
}

var lookAlikes = []string{
	"<|im_sta", "<|im_start", "im_start|>", "<|im_start|", "|im_start|>", "< |im_start|>",
	"<|IM_START|>", "<|im_start |>", "<||>", "<|>", "<|", "|>", "<|im_start|><|im_start|>",
	"<<|im_start|>>", "<|endoftext", "<s", "s>", "<<s>>", "<S>", "</s", "< s>", "<s >", "[INST",
	"INST]", "[ INST]", "[inst]", "[/INST", "<｜User", "｜>", "<｜", "<｜begin▁of▁sentence",
	"<|start|>assistant<|channel|>analysis<|message|>", "<|reserved_2000|>", "<think", "think>",
	"</think", "<tool_call", "<|fim_prefix", "▁<s>", "<unk", "<|EOT", "<|eot|>",
}

func specialText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 20) {
		switch g.n(4) {
		case 0:
			b.WriteString(g.pick(specials))
		case 1:
			b.WriteString(g.pick(lookAlikes))
		default:
			b.WriteString(g.pick(english))
		}
		b.WriteString(g.pick([]string{"", " ", "\n", "  ", "", "x"}))
	}
	return b.String()
}

// --- long words ----------------------------------------------------------------------------

func longWordText(g *gen) string {
	n := g.between(20, 3000)
	switch g.n(8) {
	case 0:
		return strings.Repeat(g.pick([]string{"a", "ab", "abc", "é", "中", "😀", "-", "=", ".", "0"}), n)
	case 1:
		var b strings.Builder
		for range n {
			b.WriteByte(byte('a' + g.n(26)))
		}
		return b.String()
	case 2:
		return strings.Repeat("Donaudampfschifffahrtsgesellschaft", 1+n/100)
	case 3:
		var b strings.Builder
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
		for range n {
			b.WriteByte(alphabet[g.n(len(alphabet))])
		}
		b.WriteString("==")
		return b.String()
	case 4:
		return "https://example.com/" + strings.Repeat(g.pick(idents)+"/", 1+n/40) + "?q=" + strings.Repeat("%20", 1+n/200)
	case 5:
		var b strings.Builder
		for range n / 3 {
			b.WriteRune(g.runeIn(0x4e00, 0x9fff))
		}
		return b.String()
	case 6:
		var b strings.Builder
		for range n / 2 {
			b.WriteRune(g.randRune())
		}
		return b.String()
	default:
		return strings.Repeat(" ", g.n(3)) + "pneumonoultramicroscopicsilicovolcanoconiosis" + strings.Repeat("s", n/10)
	}
}

// --- prose and mixed -----------------------------------------------------------------------

func proseText(g *gen) string {
	var b strings.Builder
	for range g.between(1, 8) {
		for i := range g.between(3, 25) {
			w := g.pick(english)
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			if g.coin(0.1) {
				w = g.pick(foreign)
			}
			b.WriteString(w)
			if g.coin(0.08) {
				b.WriteString(g.pick([]string{",", ";", ":", " -", " —", "'s", "n't"}))
			}
			b.WriteByte(' ')
		}
		b.WriteString(g.pick([]string{". ", "? ", "! ", "...\n", ".\n\n", "?!"}))
	}
	return b.String()
}

func mixedText(g *gen) string {
	var b strings.Builder
	for range g.between(2, 6) {
		s := leaves[g.n(len(leaves))](g)
		if len(s) > 600 {
			s = s[:600]
			s = strings.ToValidUTF8(s, "")
		}
		b.WriteString(s)
	}
	return b.String()
}
