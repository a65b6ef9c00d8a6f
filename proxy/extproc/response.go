package extproc

import (
	"bytes"
	"encoding/json"
	"mime"
	"time"
)

// Bounds of what the watcher keeps: one server-sent event, and the part of a whole JSON
// answer read for its usage.
const (
	maxEventBytes = 1 << 20
	maxWholeBytes = 4 << 20
)

// usage is the usage object of an OpenAI response.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

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
	done     bool // [DONE] seen
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
		if eos && w.keep {
			var body struct {
				Usage *usage `json:"usage"`
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

var doneData = []byte("[DONE]")

// data handles one data line: a chunk of the stream.
func (w *watcher) data(data []byte, ex *exchange) {
	if bytes.Equal(data, doneData) {
		w.done = true
		return
	}
	hasUsage := chunkHasUsage(data)
	if w.sawFirst && !hasUsage {
		w.chunks++
		return
	}
	var chunk struct {
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content          string          `json:"content"`
				ReasoningContent string          `json:"reasoning_content"`
				ToolCalls        json.RawMessage `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return
	}
	for _, c := range chunk.Choices {
		if c.Text == "" && c.Delta.Content == "" && c.Delta.ReasoningContent == "" && len(c.Delta.ToolCalls) == 0 {
			continue // a chat stream opens with a role-only chunk
		}
		w.chunks++
		if !w.sawFirst {
			w.sawFirst = true
			ex.firstToken(time.Now())
		}
		break
	}
	if chunk.Usage != nil {
		ex.setUsage(*chunk.Usage)
	}
}

// chunkHasUsage reports whether a chunk carries a usage object that is not null. O(len).
func chunkHasUsage(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`"usage"`))
		if i < 0 {
			return false
		}
		data = data[i+len(`"usage"`):]
		v := bytes.TrimLeft(data, " \t\r\n")
		if len(v) > 0 && v[0] == ':' {
			v = bytes.TrimLeft(v[1:], " \t\r\n")
			return len(v) > 0 && v[0] == '{'
		}
	}
}
