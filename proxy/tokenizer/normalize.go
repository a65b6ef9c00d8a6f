package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normStep is one normalizer of a tokenizer.json normalizer (a Sequence is flattened).
type normStep struct {
	form    norm.Form // for kind normForm
	kind    normKind
	from    string // Replace's pattern; Prepend's text is in to
	to      string
	formSet bool
}

type normKind uint8

const (
	normForm normKind = iota
	normPrepend
	normReplace
)

type normJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content string `json:"content"`
}

// parseNormalizer flattens a normalizer into steps; null is none.
func parseNormalizer(raw json.RawMessage, steps []normStep) ([]normStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return steps, nil
	}
	var n normJSON
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "Sequence":
		for _, sub := range n.Normalizers {
			var err error
			if steps, err = parseNormalizer(sub, steps); err != nil {
				return nil, err
			}
		}
		return steps, nil
	case "NFC":
		return append(steps, normStep{kind: normForm, form: norm.NFC}), nil
	case "NFD":
		return append(steps, normStep{kind: normForm, form: norm.NFD}), nil
	case "NFKC":
		return append(steps, normStep{kind: normForm, form: norm.NFKC}), nil
	case "NFKD":
		return append(steps, normStep{kind: normForm, form: norm.NFKD}), nil
	case "Prepend":
		return append(steps, normStep{kind: normPrepend, to: n.Prepend}), nil
	case "Replace":
		if n.Pattern.String == nil {
			return nil, fmt.Errorf("normalizer Replace: only a String pattern is supported")
		}
		if *n.Pattern.String == "" {
			return nil, fmt.Errorf("normalizer Replace: empty pattern")
		}
		return append(steps, normStep{kind: normReplace, from: *n.Pattern.String, to: n.Content}), nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported", n.Type)
}

// normalize applies the steps to s. It returns s itself when no step changes it, else one new
// string; the buffers are scratch, returned grown for reuse.
func normalize(steps []normStep, s string, a, b []byte) (string, []byte, []byte) {
	if len(s) == 0 {
		return s, a, b
	}
	changed := false // once set, the text is in a
	for _, st := range steps {
		switch st.kind {
		case normForm:
			if changed {
				if st.form.IsNormal(a) {
					continue
				}
				b = st.form.Append(b[:0], a...)
			} else {
				if st.form.IsNormalString(s) {
					continue
				}
				b = st.form.AppendString(b[:0], s)
			}
		case normPrepend:
			// Prepend adds its text to a string that is not empty.
			b = append(b[:0], st.to...)
			if changed {
				b = append(b, a...)
			} else {
				b = append(b, s...)
			}
		case normReplace:
			if !changed {
				if !strings.Contains(s, st.from) {
					continue
				}
				a = append(a[:0], s...)
			} else if !bytes.Contains(a, []byte(st.from)) {
				continue
			}
			b = b[:0]
			cur := a
			for {
				i := bytes.Index(cur, []byte(st.from))
				if i < 0 {
					break
				}
				b = append(append(b, cur[:i]...), st.to...)
				cur = cur[i+len(st.from):]
			}
			b = append(b, cur...)
		}
		a, b = b, a
		changed = true
	}
	if !changed {
		return s, a, b
	}
	return string(a), a, b
}
