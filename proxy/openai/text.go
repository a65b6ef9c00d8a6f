package openai

import "bytes"

// Reading content that Parse validated. These functions trust the JSON they are given to
// be well formed and do not check it again; on anything else they stay within bounds and
// always make progress, so they cannot panic or loop, but what they return is unspecified.

// appendPartsText appends the text of the parts of type "text" of the content array c, and
// of types "input_text" and "output_text" too when anyText (the Responses API's parts); when
// others, it appends any other part's raw JSON in its place.
func appendPartsText(dst, c []byte, anyText, others bool) []byte {
	i := 1 // past '['
	for {
		i = skipSpace(c, i)
		if i >= len(c) || c[i] == ']' {
			return dst
		}
		switch c[i] {
		case ',':
			i++
		case '{':
			start := i
			var text []byte
			var ok bool
			if i, text, ok = partText(c, i, anyText); ok {
				dst = appendUnescaped(dst, text)
			} else if others {
				dst = append(dst, c[start:i]...)
			}
		default:
			i = skipLoose(c, i)
		}
	}
}

// partText reads the part object at c[i] and returns the index after it and, when it is
// of type "text" (or, when anyText, "input_text" or "output_text"), the raw bytes of its
// text between the quotes.
func partText(c []byte, i int, anyText bool) (end int, text []byte, ok bool) {
	isText := false
	i++ // past '{'
	for {
		i = skipSpace(c, i)
		if i >= len(c) {
			return i, nil, false
		}
		switch c[i] {
		case '}':
			return i + 1, text, isText && text != nil
		case ',':
			i++
			continue
		case '"':
		default:
			return skipLoose(c, i), nil, false
		}
		kEnd := skipLoose(c, i)
		key := c[i+1 : max(i+1, kEnd-1)]
		i = skipSpace(c, kEnd)
		if i >= len(c) || c[i] != ':' {
			continue
		}
		i = skipSpace(c, i+1)
		if i >= len(c) {
			return i, nil, false
		}
		v := i
		i = skipLoose(c, i)
		if c[v] != '"' || i-v < 2 || c[i-1] != '"' {
			continue
		}
		val := c[v+1 : i-1]
		switch lookup(key, bytes.IndexByte(key, '\\') >= 0) {
		case wType:
			w := lookup(val, bytes.IndexByte(val, '\\') >= 0)
			isText = w == wText || anyText && (w == wInputText || w == wOutputText)
		case wText:
			text = val
		}
	}
}

func skipSpace(c []byte, i int) int {
	for i < len(c) && (c[i] == ' ' || c[i] == '\t' || c[i] == '\n' || c[i] == '\r') {
		i++
	}
	return i
}

// skipLoose returns the index after the value at c[i], i < len(c): a string, a container
// (by counting brackets outside strings) or a scalar. It returns at least i+1.
func skipLoose(c []byte, i int) int {
	switch c[i] {
	case '"':
		for j := i + 1; j < len(c); j++ {
			switch c[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(c)
	case '{', '[':
		depth := 0
		for j := i; j < len(c); j++ {
			switch c[j] {
			case '"':
				j = skipLoose(c, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(c)
	}
	j := i + 1
	for j < len(c) && !isDelim(c[j]) {
		j++
	}
	return j
}

// isDelim reports whether c ends a scalar.
func isDelim(c byte) bool {
	switch c {
	case ',', ':', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
