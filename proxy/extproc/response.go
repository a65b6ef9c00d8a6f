package extproc

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// Bounds of what the watcher keeps: one server-sent event, and the part of a whole JSON
// answer read for its usage.
const (
	maxEventBytes = 1 << 20
	maxWholeBytes = 4 << 20
)

// watcher reads the answer as Envoy forwards it, chunk by chunk, without changing it: for a
// stream, the first chunk with text (the first token) and the usage chunk; for a whole
// answer, its usage at the end. It parses JSON only until the first token and then only
// chunks that carry a usage object. Its buffers are bounded: an event longer than
// maxEventBytes is skipped, a whole answer longer than maxWholeBytes has no usage read.
type watcher struct {
	sse      bool // a stream of server-sent events
	keep     bool // read the usage of a successful answer
	buf      []byte
	skipping bool // inside an oversized event: drop bytes until its end
	sawFirst bool
	chunks   int  // chunks with text, for streams that report no usage
	done     bool // [DONE] seen, or a Messages or Responses stream's last event
	ep       openai.API
}

func (w *watcher) reset(sse, keep bool) {
	*w = watcher{sse: sse, keep: keep, buf: w.buf[:0]}
}

// feed takes one chunk of the answer. O(len(chunk)) plus the JSON of the chunks it parses.
func (w *watcher) feed(chunk []byte, eos bool, ex *exchange) {
	if !w.sse {
		if w.keep && len(w.buf)+len(chunk) <= maxWholeBytes {
			w.buf = append(w.buf, chunk...)
		} else {
			w.keep, w.buf = false, w.buf[:0]
		}
		if eos && w.keep && w.ep > openai.Completions {
			if a, err := openaiwire.ParseAnswer(w.ep, w.buf); err == nil {
				if a.Usage != nil {
					ex.setUsage(*a.Usage)
				}
				ex.remember(a.ResponseID)
			}
			w.buf = w.buf[:0]
		} else if eos && w.keep {
			var body struct {
				Usage *openaiwire.TokenUsage `json:"usage"`
			}
			if json.Unmarshal(w.buf, &body) == nil && body.Usage != nil {
				ex.setUsage(*body.Usage)
			}
			w.buf = w.buf[:0]
		}
		return
	}
	for len(chunk) > 0 && !w.done {
		nl := bytes.IndexByte(chunk, '\n')
		if nl < 0 {
			w.add(chunk)
			break
		}
		w.add(chunk[:nl+1])
		chunk = chunk[nl+1:]
		w.line(ex)
	}
	if eos && !w.done && len(w.buf) > 0 {
		w.add([]byte{'\n'})
		w.line(ex)
	}
}

// add appends to the current line, or drops it when it grows beyond the bound.
func (w *watcher) add(p []byte) {
	if w.skipping {
		return
	}
	if len(w.buf)+len(p) > maxEventBytes {
		w.skipping, w.buf = true, w.buf[:0]
		return
	}
	w.buf = append(w.buf, p...)
}

// line handles the complete line in buf.
func (w *watcher) line(ex *exchange) {
	if w.skipping {
		w.skipping = false
		w.buf = w.buf[:0]
		return
	}
	line := bytes.TrimRight(w.buf, "\r\n")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if ok {
		w.data(bytes.TrimPrefix(data, []byte(" ")), ex)
	}
	w.buf = w.buf[:0]
}

// data handles one data line: a chunk of the stream.
func (w *watcher) data(data []byte, ex *exchange) {
	if bytes.Equal(data, openaiwire.DoneData) {
		w.done = true
		return
	}
	api := w.ep == openai.Messages || w.ep == openai.Responses
	if w.sawFirst && (api && openaiwire.IsDeltaEvent(data) || !api && !openaiwire.ChunkHasUsage(data)) {
		w.chunks++
		return
	}
	c, err := openaiwire.ParseEvent(w.ep, data)
	if err != nil {
		return
	}
	if c.Token {
		w.chunks++
		if !w.sawFirst {
			w.sawFirst = true
			ex.firstToken(time.Now())
		}
	}
	if c.Usage != nil {
		if c.Usage.PromptTokens == 0 && ex.info.PromptTokens > 0 { // Anthropic's message_delta
			c.Usage.PromptTokens = ex.info.PromptTokens
			c.Usage.PromptTokensDetails = &struct {
				CachedTokens int `json:"cached_tokens"`
			}{int(ex.usage.CachedTokens)}
		}
		ex.setUsage(*c.Usage)
	}
	if c.ResponseID != "" && c.Error == "" {
		ex.remember(c.ResponseID)
	}
	if c.End {
		w.done = true
	}
}
