package openai

import (
	"math"
	"unicode/utf8"
)

// This file reads typed values. Each helper reads the value at i (inside the body) and returns the index
// after it; a value of the wrong type is validated as JSON first, so that a body that is
// not JSON is always reported as such.

// wrongType validates the value at i and reports that param must be want.
func (p *parser) wrongType(i int, param, want string) (int, *Error) {
	end, err := p.skip(i)
	if err != nil {
		return end, err
	}
	return end, typeError(param, want, describe(p.b, i, end))
}

// describe names the JSON value b[from:to] for an error message, quoting a short number.
func describe(b []byte, from, to int) string {
	if s := describeStart(b[from]); s != "a number" || to-from > 32 {
		return s
	}
	return "the number " + string(b[from:to])
}

// boolean reads a boolean or null.
func (p *parser) boolean(i int, param string) (end int, v, null bool, err *Error) {
	switch p.b[i] {
	case 't':
		end, err = p.literal(i, "true")
		return end, true, false, err
	case 'f':
		end, err = p.literal(i, "false")
		return end, false, false, err
	case 'n':
		end, err = p.literal(i, "null")
		return end, false, true, err
	}
	end, err = p.wrongType(i, param, "a boolean")
	return end, false, false, err
}

// stringValue reads a string, or null when nullable, and returns its raw bytes between the quotes.
func (p *parser) stringValue(i int, param string, nullable bool) (end int, raw []byte, null bool, err *Error) {
	switch p.b[i] {
	case '"':
		end, _, err = p.str(i)
		if err != nil {
			return end, nil, false, err
		}
		return end, p.b[i+1 : end-1], false, nil
	case 'n':
		if nullable {
			end, err = p.literal(i, "null")
			return end, nil, true, err
		}
	}
	end, err = p.wrongType(i, param, "a string")
	return end, nil, false, err
}

// integer reads an integer or null; an integer must lie in [lo, hi].
func (p *parser) integer(i int, param string, lo, hi int64) (end int, v int64, err *Error) {
	b := p.b
	switch c := b[i]; {
	case c == 'n':
		end, err = p.literal(i, "null")
		return end, 0, err
	case c == '-' || '0' <= c && c <= '9':
		end, isInt, err := p.number(i)
		if err != nil {
			return end, 0, err
		}
		if !isInt {
			return end, 0, typeError(param, "an integer", describe(b, i, end))
		}
		v, ok := parseInt(b[i:end])
		if !ok || v < lo || v > hi {
			return end, 0, rangeError(param, lo, hi, b[i:end])
		}
		return end, v, nil
	}
	end, err = p.wrongType(i, param, "an integer")
	return end, 0, err
}

// count reads an integer in [1, max], or null (reported as 0).
func (p *parser) count(i int, param string, max int) (end, v int, err *Error) {
	end, x, err := p.integer(i, param, 1, int64(max))
	return end, int(x), err
}

func rangeError(param string, lo, hi int64, lit []byte) *Error {
	got := short(string(lit))
	switch {
	case lo == math.MinInt64 && hi == math.MaxInt64:
		return invalid(codeInvalidValue, param, "%q must fit in a signed 64-bit integer, got %s", param, got)
	case hi == math.MaxInt64 && lo == 0:
		return invalid(codeInvalidValue, param, "%q must be a non-negative integer below 2^63, got %s", param, got)
	case hi == math.MaxInt64:
		return invalid(codeInvalidValue, param, "%q must be an integer from %d to 2^63-1, got %s", param, lo, got)
	case lo == hi:
		return invalid(codeInvalidValue, param, "%q must be %d, got %s", param, lo, got)
	}
	return invalid(codeInvalidValue, param, "%q must be between %d and %d, got %s", param, lo, hi, got)
}

// short truncates s for an error message, at a rune boundary.
func short(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// streamOptions reads stream_options: an object or null, with include_usage a boolean or null.
func (p *parser) streamOptions(i int, t *top) (int, *Error) {
	start := i
	t.streamOptions = p.b[i]
	switch p.b[i] {
	case 'n':
		end, err := p.literal(i, "null")
		t.options = span{start, end}
		return end, err
	case '{':
	default:
		return p.wrongType(i, "stream_options", "an object or null")
	}
	i, err := p.members(i, func(w word, v int) (int, *Error) {
		t.optionsMembers++
		if w != wIncludeUsage {
			return p.skip(v)
		}
		if t.includeUsage != 0 {
			return v, duplicate("stream_options.include_usage")
		}
		t.includeUsage = p.b[v]
		i, _, _, err := p.boolean(v, "stream_options.include_usage")
		t.usage = span{v, i}
		return i, err
	})
	t.options = span{start, i}
	return i, err
}

// members reads the object at i, which starts with '{': for each member it calls member
// with the word its key names and the index of its value, and member returns the index
// after the value.
func (p *parser) members(i int, member func(w word, v int) (int, *Error)) (int, *Error) {
	i, done, err := p.openObject(i)
	for err == nil && !done {
		k, esc, v, kerr := p.key(i)
		if kerr != nil {
			return v, kerr
		}
		if i, err = member(lookup(k, esc), v); err == nil {
			i, done, err = p.next(i, '}')
		}
	}
	return i, err
}

// elements reads the array at i, which starts with '[': for each element it calls element
// with the element's position and index, and element returns the index after it.
func (p *parser) elements(i int, element func(j, v int) (int, *Error)) (int, *Error) {
	i, done, err := p.openArray(i)
	for j := 0; err == nil && !done; j++ {
		if i, err = element(j, i); err == nil {
			i, done, err = p.next(i, ']')
		}
	}
	return i, err
}
