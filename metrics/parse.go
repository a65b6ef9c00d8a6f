package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protowire"
)

// Found is the set of signals a Reading found, one bit each (routing.Signal is the router's
// own set, which a State translates to).
type Found uint16

// The signals of a Reading.
const (
	HasWaiting Found = 1 << iota
	HasRunning
	HasKVUtilization
	HasBlockSize
	HasNumBlocks
	HasUsedBlocks
	HasCapacityTokens
	HasPrefixHits
	HasPrefixQueries
	HasPrefixHitRate
	// HasAdapters: RunningAdapters, WaitingAdapters and MaxAdapters (Engine.Adapters).
	HasAdapters
)

// Has reports whether every signal in want is in s.
func (s Found) Has(want Found) bool { return s&want == want }

// Reading is what one exposition said about the signals of an Engine: raw values, before any
// rate between scrapes is taken. A field is meaningful only if its bit is set in Found.
type Reading struct {
	Waiting        float64 // requests queued in the server
	Running        float64 // requests in the running batch
	KVUtilization  float64 // fraction of KV cache in use, clamped to 0..1
	BlockSize      float64 // tokens per KV block
	NumBlocks      float64 // KV blocks the server holds
	UsedBlocks     float64 // KV blocks in use
	CapacityTokens float64 // KV capacity in tokens
	PrefixHits     float64 // prefix cache hit counter (cumulative)
	PrefixQueries  float64 // prefix cache query counter (cumulative)
	PrefixHitRate  float64 // prefix cache hit rate gauge, clamped to 0..1
	// RunningAdapters and WaitingAdapters are the LoRA adapters of the running and waiting
	// requests, and MaxAdapters the adapter slots (Engine.Adapters). Names are distinct,
	// non-empty, in the server's order; the slices are never modified once returned.
	RunningAdapters, WaitingAdapters []string
	MaxAdapters                      float64

	// Found holds the signals the exposition provided, directly or derived
	// (KVUtilization from UsedBlocks/NumBlocks, NumBlocks from CapacityTokens/BlockSize).
	Found Found
	// Series is the number of samples (series) in the exposition: one per counter, gauge or
	// untyped metric, buckets+2 per histogram, quantiles+2 per summary.
	Series int
}

func (r *Reading) field(s signal) *float64 {
	switch s {
	case sigWaiting:
		return &r.Waiting
	case sigRunning:
		return &r.Running
	case sigKVUtilization:
		return &r.KVUtilization
	case sigBlockSize:
		return &r.BlockSize
	case sigNumBlocks:
		return &r.NumBlocks
	case sigUsedBlocks:
		return &r.UsedBlocks
	case sigCapacityTokens:
		return &r.CapacityTokens
	case sigPrefixHits:
		return &r.PrefixHits
	case sigPrefixQueries:
		return &r.PrefixQueries
	default:
		return &r.PrefixHitRate
	}
}

// Exposition formats recognised by Parse, chosen from the response's Content-Type.
const (
	// ContentTypeText is the classic Prometheus text format.
	ContentTypeText = "text/plain; version=0.0.4; charset=utf-8"
	// ContentTypeOpenMetrics is OpenMetrics 1.0 text.
	ContentTypeOpenMetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8"
)

// fmtProtoDelim makes expfmt's protobuf decoder accept UTF-8 metric names, so a server using
// them is read rather than rejected.
const (
	fmtProtoDelim = expfmt.Format(`application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; escaping=allow-utf-8`)
)

type format uint8

const (
	formatText format = iota
	formatOpenMetrics
	formatProto
)

// detectFormat chooses the parser from the Content-Type, falling back to the body: an
// exposition whose last line is "# EOF" is OpenMetrics whatever the header says. O(1).
func detectFormat(contentType string, body []byte) format {
	if mt, params, err := mime.ParseMediaType(contentType); err == nil {
		switch mt {
		case "application/openmetrics-text":
			return formatOpenMetrics
		case "application/vnd.google.protobuf":
			if params["proto"] == "io.prometheus.client.MetricFamily" && params["encoding"] == "delimited" {
				return formatProto
			}
		}
	}
	if endsWithEOF(body) {
		return formatOpenMetrics
	}
	return formatText
}

// endsWithEOF reports whether the last line of body is "# EOF", as OpenMetrics requires.
func endsWithEOF(body []byte) bool {
	body = bytes.TrimSuffix(body, []byte("\n"))
	return bytes.Equal(body, []byte("# EOF")) || bytes.HasSuffix(body, []byte("\n# EOF"))
}

// Parser turns an exposition into a Reading for one Engine, with a maintained Prometheus
// parser (github.com/prometheus/common/expfmt): classic text, OpenMetrics 1.0, or delimited
// protobuf, chosen by Content-Type. A Parser keeps its parsing buffers between calls.
//
// A Parser is not safe for concurrent use; give each goroutine (the Scraper gives each
// backend) its own.
type Parser struct {
	profile *Engine
	sels    [numSignals][]Selector
	text    expfmt.TextParser
	fams    map[string]*dto.MetricFamily
	reader  bytes.Reader
	wanted  map[string]struct{} // metric names the selectors read
	kept    []byte              // the lines of the last exposition handed to expfmt
	scratch []byte              // classicTypes' output
}

// ParserOptions configures a Parser.
type ParserOptions struct {
	// Engine names the series the Parser reads (required). The Parser keeps the pointer: the
	// Engine must not be modified afterwards.
	Engine *Engine
}

// NewParser returns a Parser for o.Engine, or an error wrapping ErrInvalidOptions if the
// engine is nil or malformed.
func NewParser(o ParserOptions) (*Parser, error) {
	engine := o.Engine
	if err := engine.validate(); err != nil {
		return nil, err
	}
	p := &Parser{
		profile: engine,
		sels:    engine.selectors(),
		text:    expfmt.NewTextParser(model.UTF8Validation),
		fams:    make(map[string]*dto.MetricFamily),
		wanted:  make(map[string]struct{}),
	}
	for _, list := range p.sels {
		for _, sel := range list {
			p.wanted[sel.Name] = struct{}{}
		}
	}
	if engine.Adapters.Name != "" {
		p.wanted[engine.Adapters.Name] = struct{}{}
	}
	return p, nil
}

// Parse reads one exposition. contentType is the response's Content-Type header; an empty or
// unknown type is read as classic text (or OpenMetrics if the body ends with "# EOF").
// Signals the exposition lacks are simply absent from Reading.Found; an error (wrapping
// ErrParse) means the exposition itself is malformed. Parse never panics on any input.
//
// OpenMetrics is read by expfmt's classic text parser, which accepts the OpenMetrics that
// model servers write (counters with _total and _created samples, gauges, histograms,
// summaries, "# UNIT" and "# EOF" lines); the TYPE lines of OpenMetrics-only types (info,
// stateset, gaugehistogram, unknown) are read as untyped. A body announced as OpenMetrics must
// end with "# EOF", which is how OpenMetrics tells a complete exposition from a cut one.
// Exemplars and fractional timestamps in a family the engine reads are rejected: expfmt's
// OpenMetrics decoder, which would read them, is too slow for a scrape path (see the package
// documentation).
//
// Only the families the engine selects are handed to expfmt: the rest of the
// exposition is scanned for line boundaries and names, and counted in Reading.Series.
//
// Cost: linear in the size of the exposition, plus expfmt's parse of the selected families
// and O(selectors × matching series) to extract the signals.
func (p *Parser) Parse(body []byte, contentType string) (Reading, error) {
	fams, series, err := p.decode(body, detectFormat(contentType, body))
	if err != nil {
		return Reading{}, fmt.Errorf("%w: %s: %w", ErrParse, p.profile.Name, err)
	}
	r := p.extract(fams)
	r.Series = series
	return r, nil
}

// decode parses body into metric families keyed by name and counts its samples.
func (p *Parser) decode(body []byte, f format) (fams map[string]*dto.MetricFamily, series int, err error) {
	// expfmt is well fuzzed, but a scrape must never take the gateway down with it: turn
	// any panic inside the third-party parser into an error.
	defer func() {
		if r := recover(); r != nil {
			fams, err = nil, fmt.Errorf("parser panic: %v", r)
		}
	}()
	if f == formatProto {
		fams, err = p.decodeProto(body)
		for _, mf := range fams {
			series += samples(mf)
		}
		return fams, series, err
	}
	if f == formatOpenMetrics && !endsWithEOF(body) {
		return nil, 0, errors.New("OpenMetrics exposition does not end with # EOF")
	}
	body, series = p.filter(body)
	if f == formatOpenMetrics {
		body = p.classicTypes(body)
	}
	p.reader.Reset(body)
	fams, err = p.text.TextToMetricFamilies(&p.reader)
	return fams, series, err
}

// filter returns the lines of a text or OpenMetrics exposition that expfmt has to parse, and
// the number of samples in the whole exposition. Most of a model server's exposition is
// histograms no router reads (vLLM: 152 of 195 series), and expfmt allocates some
// thirty times per series, so the parser sees only the TYPE lines and samples of the
// families the engine selects, plus every line that does not look like a sample (quoted
// UTF-8 names, a label set without a closing brace, a value that is not a number: garbage
// such as an HTML or proxy error page), so that such an exposition still fails to parse.
// The price: a line of an unselected family that has the shape of a sample but is subtly
// malformed inside (an unbalanced quote) is skipped rather than rejected.
// HELP and other comments are dropped. Lines are never modified, and no value of a skipped
// line is ever used. O(len(body)).
func (p *Parser) filter(body []byte) ([]byte, int) {
	p.kept = p.kept[:0]
	series := 0
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		t := bytes.TrimLeft(line, " \t")
		switch {
		case len(bytes.TrimSpace(t)) == 0:
			continue
		case t[0] == '#':
			rest, ok := bytes.CutPrefix(t, []byte("# TYPE "))
			if !ok {
				continue
			}
			if name, known := leadingName(bytes.TrimLeft(rest, " \t")); known && !p.wants(name) {
				continue
			}
		default:
			series++
			if name, known := leadingName(t); known && !p.wants(name) && plausibleSample(t[len(name):]) {
				continue
			}
		}
		p.kept = append(p.kept, line...)
	}
	return p.kept, series
}

// wants reports whether a selector reads the metric name. O(1), allocation-free.
func (p *Parser) wants(name []byte) bool {
	_, ok := p.wanted[string(name)]
	return ok
}

// leadingName returns the metric name at the start of a sample or TYPE line and whether it
// is a plain name followed by a label set or a blank: only then may the line be skipped.
func leadingName(line []byte) ([]byte, bool) {
	n := 0
	for n < len(line) && isNameByte(line[n], n == 0) {
		n++
	}
	if n == 0 || n == len(line) {
		return nil, false
	}
	switch line[n] {
	case '{', ' ', '\t':
		return line[:n], true
	}
	return nil, false
}

// plausibleSample reports whether rest, a sample line after its metric name, is an optional
// label set, blanks and a number: the shape of a sample. It only decides whether a line of an
// unselected family may be skipped; expfmt parses every line whose value is used.
func plausibleSample(rest []byte) bool {
	if len(rest) > 0 && rest[0] == '{' {
		// Label values may hold any byte, but not the value after the label set: the set
		// ends at the line's last brace.
		end := bytes.LastIndexByte(rest, '}')
		if end < 0 {
			return false
		}
		rest = rest[end+1:]
	}
	rest = bytes.TrimLeft(rest, " \t")
	end := bytes.IndexAny(rest, " \t\r\n")
	if end < 0 {
		end = len(rest)
	}
	if end == 0 {
		return false
	}
	_, err := strconv.ParseFloat(string(rest[:end]), 64)
	return err == nil
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// decodeProto reads delimited protobuf with expfmt's decoder.
func (p *Parser) decodeProto(body []byte) (map[string]*dto.MetricFamily, error) {
	// expfmt's decoder trusts each message's length prefix (no size limit) and allocates
	// that much before reading: check every prefix against the bytes actually there.
	for rest := body; len(rest) > 0; {
		size, n := protowire.ConsumeVarint(rest)
		if n < 0 || size > uint64(len(rest)-n) {
			return nil, errors.New("protobuf message length exceeds the exposition")
		}
		rest = rest[n+int(size):]
	}
	clear(p.fams)
	p.reader.Reset(body)
	dec := expfmt.NewDecoder(&p.reader, fmtProtoDelim)
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				return p.fams, nil
			}
			return nil, err
		}
		if prev, ok := p.fams[mf.GetName()]; ok {
			// A family split in two (only a broken server does that): keep every
			// series rather than drop some.
			prev.Metric = append(prev.Metric, mf.Metric...)
			continue
		}
		p.fams[mf.GetName()] = mf
	}
}

// classicTypes returns body with the TYPE of every OpenMetrics-only family (info, stateset,
// gaugehistogram, unknown) replaced by untyped, which the classic parser reads; samples are
// never touched. It returns body itself when there is nothing to replace. O(len(body)).
func (p *Parser) classicTypes(body []byte) []byte {
	out := body
	copied := false
	for rest, off := body, 0; len(rest) > 0; {
		line := rest
		n := len(rest)
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, n = rest[:i], i+1
		}
		if bytes.HasPrefix(line, []byte("# TYPE ")) {
			sp := bytes.LastIndexByte(line, ' ')
			if typ := line[sp+1:]; bytes.EqualFold(typ, []byte("info")) || bytes.EqualFold(typ, []byte("stateset")) ||
				bytes.EqualFold(typ, []byte("gaugehistogram")) || bytes.EqualFold(typ, []byte("unknown")) {
				if !copied {
					p.scratch = append(p.scratch[:0], body[:off]...)
					copied = true
				}
				p.scratch = append(p.scratch, line[:sp+1]...)
				p.scratch = append(p.scratch, "untyped"...)
				p.scratch = append(p.scratch, rest[len(line):n]...)
				rest, off = rest[n:], off+n
				continue
			}
		}
		if copied {
			p.scratch = append(p.scratch, rest[:n]...)
		}
		rest, off = rest[n:], off+n
	}
	if copied {
		out = p.scratch
	}
	return out
}

// extract applies the engine's selectors to the parsed families and derives the signals
// that can be derived.
func (p *Parser) extract(fams map[string]*dto.MetricFamily) Reading {
	var r Reading
	for s := range numSignals {
		for _, sel := range p.sels[s] {
			v, ok := selectValue(fams[sel.Name], &sel, s)
			if !ok {
				continue
			}
			*r.field(s) = v
			r.Found |= 1 << s
			break
		}
	}
	extractAdapters(&r, fams[p.profile.Adapters.Name], &p.profile.Adapters, p.profile.RankLabel, p.profile.rank)
	if !r.Found.Has(HasKVUtilization) && r.Found.Has(HasUsedBlocks|HasNumBlocks) && r.NumBlocks > 0 {
		r.KVUtilization = min(r.UsedBlocks/r.NumBlocks, 1)
		r.Found |= HasKVUtilization
	}
	if !r.Found.Has(HasNumBlocks) && r.Found.Has(HasCapacityTokens|HasBlockSize) && r.BlockSize >= 1 {
		r.NumBlocks = math.Floor(r.CapacityTokens / r.BlockSize)
		r.Found |= HasNumBlocks
	}
	return r
}

// selectValue aggregates the usable values of the series of mf that sel matches. It reports
// false if none is usable. O(series × labels).
func selectValue(mf *dto.MetricFamily, sel *Selector, s signal) (float64, bool) {
	if mf == nil {
		return 0, false
	}
	agg := sel.Agg
	if agg == AggDefault {
		agg = defaultAgg[s]
	}
	var acc float64
	n := 0
	for _, m := range mf.GetMetric() {
		if m == nil || !labelsMatch(m.GetLabel(), sel.Labels) {
			continue
		}
		v, ok := sampleValue(m, sel.ValueLabel)
		if !ok {
			continue
		}
		switch {
		case n == 0:
			acc = v
		case agg == AggSum || agg == AggMean:
			acc += v
		case agg == AggMax:
			acc = max(acc, v)
		case agg == AggMin:
			acc = min(acc, v)
		}
		n++
	}
	if n == 0 {
		return 0, false
	}
	if agg == AggMean {
		acc /= float64(n)
	}
	if sel.Scale != 0 {
		acc *= sel.Scale
	}
	if math.IsInf(acc, 0) || math.IsNaN(acc) {
		return 0, false
	}
	if s == sigKVUtilization || s == sigPrefixHitRate {
		acc = min(max(acc, 0), 1)
	}
	return acc, true
}

// sampleValue returns the value of one series: the number in label valueLabel if set, else
// the gauge, counter or untyped value. Negative and non-finite values are unusable: no
// signal can legitimately be negative, and SGLang reports -1 for "not computed".
func sampleValue(m *dto.Metric, valueLabel string) (float64, bool) {
	var v float64
	switch {
	case valueLabel != "":
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == valueLabel {
				f, err := strconv.ParseFloat(lp.GetValue(), 64)
				if err != nil {
					return 0, false
				}
				v, found = f, true
				break
			}
		}
		if !found {
			return 0, false
		}
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Counter != nil:
		v = m.Counter.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// labelsMatch reports whether the series' labels carry every wanted value; an empty wanted
// value matches an absent label. O(len(want) × len(have)).
func labelsMatch(have []*dto.LabelPair, want map[string]string) bool {
	for k, v := range want {
		got := ""
		for _, lp := range have {
			if lp.GetName() == k {
				got = lp.GetValue()
				break
			}
		}
		if got != v {
			return false
		}
	}
	return true
}

// samples counts the samples of a family as they appear in an exposition. O(metrics).
func samples(mf *dto.MetricFamily) int {
	n := 0
	for _, m := range mf.GetMetric() {
		switch {
		case m == nil:
		case m.Histogram != nil:
			bs := m.Histogram.GetBucket()
			n += len(bs) + 2
			if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) {
				n++ // the +Inf bucket, implied by the count
			}
		case m.Summary != nil:
			n += len(m.Summary.GetQuantile()) + 2
		default:
			n++
		}
	}
	return n
}
