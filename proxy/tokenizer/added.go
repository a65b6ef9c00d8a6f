package tokenizer

import (
	"sort"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	Content    string `json:"content"`
	ID         uint32 `json:"id"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// matcher finds added tokens in text, leftmost first and, at one position, longest first —
// the reference's Aho-Corasick automaton with MatchKind::LeftmostLongest — as a byte trie.
type matcher struct {
	nodes  []trieNode
	first  [256]bool // bytes that start some token
	tokens []addedToken
}

type trieNode struct {
	edges []trieEdge // sorted by byte
	token int32      // index in tokens, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

func newMatcher(tokens []addedToken, pattern func(addedToken) string) *matcher {
	m := &matcher{nodes: []trieNode{{token: -1}}, tokens: tokens}
	for ti, t := range tokens {
		p := pattern(t)
		if p == "" {
			continue
		}
		m.first[p[0]] = true
		n := int32(0)
		for i := 0; i < len(p); i++ {
			edges := m.nodes[n].edges
			k := sort.Search(len(edges), func(k int) bool { return edges[k].b >= p[i] })
			if k < len(edges) && edges[k].b == p[i] {
				n = edges[k].next
				continue
			}
			m.nodes = append(m.nodes, trieNode{token: -1})
			next := int32(len(m.nodes) - 1)
			edges = append(edges, trieEdge{})
			copy(edges[k+1:], edges[k:])
			edges[k] = trieEdge{b: p[i], next: next}
			m.nodes[n].edges = edges
			n = next
		}
		if m.nodes[n].token < 0 {
			// The first of two tokens with one pattern keeps it, as the automaton's first pattern.
			m.nodes[n].token = int32(ti)
		}
	}
	return m
}

// longest returns the index of the longest token that s[i:] starts with and its length.
func (m *matcher) longest(s string, i int) (tok int32, n int) {
	tok = -1
	node := int32(0)
	for j := i; j < len(s); j++ {
		edges := m.nodes[node].edges
		next := int32(-1)
		for _, e := range edges {
			if e.b == s[j] {
				next = e.next
				break
			}
			if e.b > s[j] {
				break
			}
		}
		if next < 0 {
			break
		}
		node = next
		if t := m.nodes[node].token; t >= 0 {
			tok, n = t, j+1-i
		}
	}
	return tok, n
}

// split calls piece for each stretch of s between tokens (with its offset in s) and token for
// each token found,
// honouring single_word, lstrip and rstrip as the reference does (find_matches).
// It is O(len(s) · longest token).
func (m *matcher) split(s string, piece func(string, int), token func(uint32)) {
	if m == nil || len(m.tokens) == 0 {
		piece(s, 0)
		return
	}
	start := 0 // end of the last split
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, n := m.longest(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := &m.tokens[ti]
		mStart, mStop := i, i+n
		i = mStop // the automaton goes on after the match, kept or not
		if t.SingleWord {
			startOK := mStart == 0 || !endsWithWord(s[:mStart])
			stopOK := mStop == len(s) || !startsWithWord(s[mStop:])
			if !startOK || !stopOK {
				continue
			}
		}
		if t.LStrip {
			k := mStart
			for k > 0 {
				r, w := utf8.DecodeLastRuneInString(s[:k])
				if classOf(r)&cSpace == 0 {
					break
				}
				k -= w
			}
			mStart = max(k, start)
		}
		if t.RStrip {
			for mStop < len(s) {
				c, w := at(s, mStop)
				if c&cSpace == 0 {
					break
				}
				mStop += w
			}
		}
		if start < mStart {
			piece(s[start:mStart], start)
		}
		token(t.ID)
		start = mStop
	}
	if start < len(s) {
		piece(s[start:], start)
	}
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return classOf(r)&cWord != 0
}

func startsWithWord(s string) bool {
	c, _ := at(s, 0)
	return c&cWord != 0
}
