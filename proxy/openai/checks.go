package openai

import (
	"math"
	"strconv"
)

// This file checks the fields Parse passes on without reading: the sampling parameters and
// the like. usher decides nothing on them, so it refuses only values that no engine
// accepts — a wrong JSON type, a number that is not a finite float64 or does not fit an
// int64, and the few ranges every engine enforces — and lets the engine judge the rest:
// vLLM takes temperatures above OpenAI's 2, and top_k and min_p, which OpenAI does not know.

// check is what Parse requires of the value of a field it passes on. Every check accepts
// null: the field is then absent, as Python's Optional reads it.
type check uint8

const (
	cSkip           check = iota // anything: the field is not checked
	cBool                        // a boolean
	cString                      // a string
	cNumber                      // a finite number
	cTemperature                 // a finite number, at least 0
	cTopP                        // a finite number in (0, 1]
	cInteger                     // an integer that fits in an int64
	cTopK                        // an integer, at least -1 (-1 and 0 turn it off)
	cLogprobs                    // an integer in [0, ParseLimits.MaxLogprobs]
	cStop                        // a string or an array of strings
	cStrings                     // an array of strings
	cIntegers                    // an array of integers that fit in an int64
	cObject                      // an object
	cObjects                     // an array of objects
	cStringOrObject              // a string or an object
	cNumberMap                   // an object whose values are finite numbers
)

// passedCheck returns how the value of field w, which Parse does not read, is checked on
// ep's endpoint. The fields are the documented ones of each API (OpenAI's chat,
// completions, Responses and embeddings, Anthropic's Messages) and vLLM's own sampling
// parameters on chat and completions. Which check a name gets depends on the API where
// the APIs disagree: "logprobs" is a boolean to chat and an integer to completions.
func passedCheck(w word, ep API) check {
	switch ep {
	case Chat, Completions:
		switch w {
		case wTemperature:
			return cTemperature
		case wTopP:
			return cTopP
		case wTopK:
			return cTopK
		case wFrequencyPenalty, wPresencePenalty, wMinP, wRepetitionPenalty, wLengthPenalty:
			return cNumber
		case wSeed, wBestOf, wMinTokens, wPromptLogprobs, wTruncatePromptTokens:
			return cInteger
		case wStop:
			return cStop
		case wLogitBias:
			return cNumberMap
		case wUseBeamSearch, wIgnoreEOS, wIncludeStopStrInOutput, wSkipSpecialTokens,
			wSpacesBetweenSpecialTokens, wEcho, wAddSpecialTokens:
			return cBool
		case wStopTokenIDs, wAllowedTokenIDs:
			return cIntegers
		case wBadWords:
			return cStrings
		case wResponseFormat:
			return cObject
		case wLogprobs:
			if ep == Chat {
				return cBool
			}
			return cLogprobs
		}
		if ep == Completions {
			if w == wSuffix {
				return cString
			}
			return cSkip
		}
		switch w {
		case wTopLogprobs:
			return cLogprobs
		case wAddGenerationPrompt, wContinueFinalMessage, wParallelToolCalls, wStore:
			return cBool
		case wTools:
			return cObjects
		case wToolChoice:
			return cStringOrObject
		case wReasoningEffort, wServiceTier:
			return cString
		case wMetadata:
			return cObject
		}
	case Responses:
		switch w {
		case wTemperature:
			return cTemperature
		case wTopP:
			return cTopP
		case wTopLogprobs:
			return cLogprobs
		case wParallelToolCalls, wBackground:
			return cBool
		case wMaxToolCalls:
			return cInteger
		case wTruncation, wServiceTier:
			return cString
		case wReasoning, wText, wMetadata:
			return cObject
		case wToolChoice:
			return cStringOrObject
		case wInclude:
			return cStrings
		}
	case Messages:
		switch w {
		case wTemperature:
			return cTemperature
		case wTopP:
			return cTopP
		case wTopK:
			return cTopK
		case wStopSequences:
			return cStrings
		case wToolChoice, wThinking:
			return cObject
		case wServiceTier:
			return cString
		}
	case Embeddings:
		switch w {
		case wEncodingFormat:
			return cString
		case wDimensions:
			return cInteger
		}
	}
	return cSkip
}

// path names a value for an error message: name, name[idx] when idx >= 0, name.key when key
// is set. It is built only when there is an error, so that checking allocates nothing.
type path struct {
	name string
	idx  int
	key  []byte // raw, between the quotes
}

func (q path) String() string {
	switch {
	case q.key != nil:
		return q.name + "." + short(string(appendUnescaped(nil, q.key)))
	case q.idx >= 0:
		return q.name + "[" + strconv.Itoa(q.idx) + "]"
	}
	return q.name
}

// passed reads the value at i of the top-level field w, which Parse passes on without
// reading, and checks it as passedCheck says. O(len(value)).
func (p *parser) passed(i int, w word) (int, *Error) {
	c := passedCheck(w, p.ep)
	if c == cSkip {
		return p.skip(i)
	}
	return p.checked(i, c, path{name: names[w], idx: -1})
}

// checked reads the value at i and checks it against c; q names it in errors.
func (p *parser) checked(i int, c check, q path) (int, *Error) {
	b := p.b
	if b[i] == 'n' {
		return p.literal(i, "null")
	}
	switch c {
	case cBool:
		if b[i] == 't' || b[i] == 'f' {
			return p.skip(i)
		}
		return p.wrongType(i, q.String(), "a boolean")
	case cString:
		if b[i] == '"' {
			end, _, err := p.str(i)
			return end, err
		}
		return p.wrongType(i, q.String(), "a string")
	case cNumber, cTemperature, cTopP:
		return p.float(i, c, q)
	case cInteger:
		return p.int64(i, q, math.MinInt64, math.MaxInt64)
	case cTopK:
		return p.int64(i, q, -1, math.MaxInt64)
	case cLogprobs:
		return p.int64(i, q, 0, int64(p.lim.MaxLogprobs))
	case cObject:
		if b[i] == '{' {
			return p.skip(i)
		}
		return p.wrongType(i, q.String(), "an object")
	case cStringOrObject:
		if b[i] == '"' || b[i] == '{' {
			return p.skip(i)
		}
		return p.wrongType(i, q.String(), "a string or an object")
	case cStop:
		if b[i] == '"' {
			end, _, err := p.str(i)
			return end, err
		}
		if b[i] != '[' {
			return p.wrongType(i, q.String(), "a string or an array of strings")
		}
		return p.each(i, cString, q)
	case cStrings:
		if b[i] != '[' {
			return p.wrongType(i, q.String(), "an array of strings")
		}
		return p.each(i, cString, q)
	case cIntegers:
		if b[i] != '[' {
			return p.wrongType(i, q.String(), "an array of integers")
		}
		return p.each(i, cInteger, q)
	case cObjects:
		if b[i] != '[' {
			return p.wrongType(i, q.String(), "an array of objects")
		}
		return p.each(i, cObject, q)
	case cNumberMap:
		if b[i] != '{' {
			return p.wrongType(i, q.String(), "an object of numbers")
		}
		i, done, err := p.openObject(i)
		for err == nil && !done {
			k, _, v, kerr := p.key(i)
			if kerr != nil {
				return v, kerr
			}
			if i, err = p.float(v, cNumber, path{name: q.name, key: k}); err == nil {
				i, done, err = p.next(i, '}')
			}
		}
		return i, err
	}
	return p.skip(i)
}

// each reads the array at i (b[i] is '[') and checks each element against c; null
// elements are refused as the element's type is, since no engine takes a list with holes.
func (p *parser) each(i int, c check, q path) (int, *Error) {
	i, done, err := p.openArray(i)
	for j := 0; err == nil && !done; j++ {
		e := path{name: q.name, idx: j}
		if p.b[i] == 'n' {
			return p.wrongType(i, e.String(), elementWant[c])
		}
		if i, err = p.checked(i, c, e); err == nil {
			i, done, err = p.next(i, ']')
		}
	}
	return i, err
}

// elementWant names what each element of an array must be.
var elementWant = [...]string{cString: "a string", cInteger: "an integer", cObject: "an object"}

// float reads a number and checks it against c (cNumber, cTemperature or cTopP). The value
// is the float64 nearest the literal, as Python's float() reads it: 1e309 overflows to
// infinity and is refused, 1e-400 is 0. It allocates nothing for a literal of up to 32
// bytes (strconv's string stays on the stack).
func (p *parser) float(i int, c check, q path) (int, *Error) {
	b := p.b
	if x := b[i]; x != '-' && (x < '0' || x > '9') {
		return p.wrongType(i, q.String(), "a number")
	}
	end, _, err := p.number(i)
	if err != nil {
		return end, err
	}
	v, ok := shortFloat(b[i:end])
	if !ok {
		v, _ = strconv.ParseFloat(string(b[i:end]), 64) // the literal is valid: no syntax error; ±Inf on overflow
	}
	switch {
	case math.IsInf(v, 0):
		return end, invalid(codeInvalidValue, q.String(), "%q must be a finite number (within ±1.8e308), got %s", q.String(), short(string(b[i:end])))
	case c == cTemperature && v < 0:
		return end, invalid(codeInvalidValue, q.String(), "%q must be at least 0, got %s", q.String(), short(string(b[i:end])))
	case c == cTopP && (v <= 0 || v > 1):
		return end, invalid(codeInvalidValue, q.String(), "%q must be greater than 0 and at most 1, got %s", q.String(), short(string(b[i:end])))
	}
	return end, nil
}

// int64 reads an integer in [lo, hi]: no fraction, no exponent, as pydantic's strict int.
func (p *parser) int64(i int, q path, lo, hi int64) (int, *Error) {
	b := p.b
	if x := b[i]; x != '-' && (x < '0' || x > '9') {
		return p.wrongType(i, q.String(), "an integer")
	}
	end, isInt, err := p.number(i)
	if err != nil {
		return end, err
	}
	if !isInt {
		return end, typeError(q.String(), "an integer", describe(b, i, end))
	}
	if v, ok := parseInt(b[i:end]); !ok || v < lo || v > hi {
		return end, rangeError(q.String(), lo, hi, b[i:end])
	}
	return end, nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// shortFloat returns the value of the JSON number lit, exactly as strconv.ParseFloat would,
// when it has no exponent and at most 15 digits — what SDKs send (0.7, 0.95, 1234567) — and
// false otherwise. Its digits make an integer below 2^53 and its fraction a power of ten
// below 10^16, both exact in a float64, so that their quotient is rounded once: the nearest
// float64 (Clinger's fast path), at a third of ParseFloat's cost. O(len(lit)).
func shortFloat(lit []byte) (float64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var m uint64
	digits, frac := 0, -1 // frac: digits after the point; -1 before it
	for _, c := range lit {
		switch {
		case c == '.':
			frac = 0
			continue
		case c < '0' || c > '9': // an exponent
			return 0, false
		}
		if digits++; digits > 15 {
			return 0, false
		}
		m = m*10 + uint64(c-'0')
		if frac >= 0 {
			frac++
		}
	}
	v := float64(m)
	if frac > 0 {
		v /= pow10[frac]
	}
	if neg {
		v = -v
	}
	return v, true
}
