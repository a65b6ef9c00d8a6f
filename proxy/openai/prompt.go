package openai

import (
	"math"
	"strconv"
)

// This file reads the prompt of a completions body.

// promptName is the name of the field prompt reads: "prompt", or the embeddings' "input".
func (p *parser) promptName() string {
	if p.ep == Embeddings {
		return "input"
	}
	return "prompt"
}

func (p *parser) promptParam(n, k int) string {
	s := p.promptName() + "[" + strconv.Itoa(n) + "]"
	if k >= 0 {
		s += "[" + strconv.Itoa(k) + "]"
	}
	return s
}

// prompt reads the prompt: a string, or a non-empty array of strings, of token ids, or of
// non-empty arrays of token ids.
func (p *parser) prompt(i int, r *Request) (int, *Error) {
	b := p.b
	start := i
	switch b[i] {
	case '"':
		end, _, err := p.str(i)
		if err != nil {
			return end, err
		}
		r.promptText, r.promptIsText = b[i+1:end-1], true
		r.Prompt = b[start:end]
		return end, nil
	case '[':
	default:
		return p.wrongType(i, p.promptName(), "a string or an array")
	}
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	if done {
		return i, invalid(codeInvalidValue, p.promptName(), "%q must not be empty", p.promptName())
	}
	first := b[i]
	for n := 0; !done; n++ {
		switch {
		case first == '"':
			if b[i] != '"' {
				return p.wrongType(i, p.promptParam(n, -1), "a string, as "+p.promptName()+"[0] is")
			}
			s := i
			if i, _, err = p.str(i); err != nil {
				return i, err
			}
			r.promptText, r.promptIsText = b[s+1:i-1], n == 0
		case first == '[':
			i, err = p.tokenIDs(i, n)
		case first == '-' || '0' <= first && first <= '9':
			i, err = p.tokenID(i, n, -1)
		default:
			return p.wrongType(i, p.promptName()+"[0]", "a string, a token id, or an array of token ids")
		}
		if err != nil {
			return i, err
		}
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	r.Prompt = b[start:i]
	return i, nil
}

// tokenIDs reads prompt[n], a non-empty array of token ids.
func (p *parser) tokenIDs(i, n int) (int, *Error) {
	if p.b[i] != '[' {
		return p.wrongType(i, p.promptParam(n, -1), "an array of token ids, as "+p.promptName()+"[0] is")
	}
	i, done, err := p.openArray(i)
	if err != nil {
		return i, err
	}
	if done {
		param := p.promptParam(n, -1)
		return i, invalid(codeInvalidValue, param, "%q must not be empty", param)
	}
	for k := 0; !done; k++ {
		if i, err = p.tokenID(i, n, k); err != nil {
			return i, err
		}
		if i, done, err = p.next(i, ']'); err != nil {
			return i, err
		}
	}
	return i, nil
}

// tokenID reads prompt[n] (k < 0) or prompt[n][k], a non-negative integer.
func (p *parser) tokenID(i, n, k int) (int, *Error) {
	const want = "a token id (a non-negative integer)"
	c := p.b[i]
	if c != '-' && (c < '0' || c > '9') {
		return p.wrongType(i, p.promptParam(n, k), want)
	}
	end, isInt, err := p.number(i)
	if err != nil {
		return end, err
	}
	if !isInt {
		return end, typeError(p.promptParam(n, k), want, describe(p.b, i, end))
	}
	if v, ok := parseInt(p.b[i:end]); !ok || v < 0 {
		return end, rangeError(p.promptParam(n, k), 0, math.MaxInt64, p.b[i:end])
	}
	return end, nil
}
