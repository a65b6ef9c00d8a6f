package metrics

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vllmLoad are the values templated into testdata/vllm.txt and vllm.om.txt, a V1 exposition
// of ~200 series written after vLLM's documented metrics (testdata/gen_vllm.py renders it).
type vllmLoad struct {
	running, waiting int
	kv               float64
	queries, hits    float64
}

func vllmExposition(t testing.TB, file string, l vllmLoad) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []byte(strings.NewReplacer(
		"{running}", strconv.Itoa(l.running)+".0",
		"{waiting}", strconv.Itoa(l.waiting)+".0",
		"{kv}", f(l.kv),
		"{queries}", f(l.queries),
		"{hits}", f(l.hits),
	).Replace(string(raw)))
}

func readTestdata(t testing.TB, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustParser(t testing.TB, p *Engine) *Parser {
	t.Helper()
	parser, err := NewParser(ParserOptions{Engine: p})
	if err != nil {
		t.Fatal(err)
	}
	return parser
}

func TestParseProfiles(t *testing.T) {
	load := vllmLoad{running: 17, waiting: 4, kv: 0.8125, queries: 120000, hits: 45000}
	custom := &Engine{
		Name:          "custom",
		Waiting:       []Selector{{Name: "tgi_queue_size"}},
		Running:       []Selector{{Name: "tgi_batch_current_size", Scale: 0.5}},
		KVUtilization: []Selector{{Name: "tgi_batch_current_max_tokens", Scale: 1.0 / 60224}},
	}
	tests := []struct {
		name        string
		profile     *Engine
		body        []byte
		contentType string
		want        Reading // Series is checked only when non-zero
	}{
		{
			name: "vLLM V1 classic text", profile: engineVLLM,
			body: vllmExposition(t, "vllm.txt", load), contentType: ContentTypeText,
			want: Reading{Waiting: 4, Running: 17, KVUtilization: 0.8125, BlockSize: 16, NumBlocks: 27153,
				PrefixHits: 45000, PrefixQueries: 120000,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasPrefixHits | HasPrefixQueries},
		},
		{
			name: "vLLM V1 OpenMetrics", profile: engineVLLM,
			body: vllmExposition(t, "vllm.om.txt", load), contentType: ContentTypeOpenMetrics,
			want: Reading{Waiting: 4, Running: 17, KVUtilization: 0.8125, BlockSize: 16, NumBlocks: 27153,
				PrefixHits: 45000, PrefixQueries: 120000,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasPrefixHits | HasPrefixQueries},
		},
		{
			name: "vLLM OpenMetrics without Content-Type", profile: engineVLLM,
			body: vllmExposition(t, "vllm.om.txt", load), contentType: "",
			want: Reading{Waiting: 4, Running: 17, KVUtilization: 0.8125, BlockSize: 16, NumBlocks: 27153,
				PrefixHits: 45000, PrefixQueries: 120000,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasPrefixHits | HasPrefixQueries},
		},
		{
			name: "vLLM deprecated gpu_cache_usage_perc and hit-rate gauge", profile: engineVLLM,
			body: readTestdata(t, "vllm_v0.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 4, Running: 17, KVUtilization: 0.8125, BlockSize: 32, NumBlocks: 9132,
				PrefixHitRate: 0.4375,
				Found:         HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasPrefixHitRate, Series: 8},
		},
		{
			name: "SGLang with two data-parallel ranks", profile: engineSGLang,
			body: readTestdata(t, "sglang.txt"), contentType: "text/plain; version=0.0.4; charset=utf-8",
			want: Reading{Waiting: 8, Running: 40, KVUtilization: 0.54, BlockSize: 16, NumBlocks: 80000,
				CapacityTokens: 1280000, PrefixHits: 720000, PrefixQueries: 1.2e6, PrefixHitRate: 0.6,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasCapacityTokens |
					HasPrefixHits | HasPrefixQueries | HasPrefixHitRate},
		},
		{
			name: "TensorRT-LLM serve", profile: engineTensorRTLLM,
			body: readTestdata(t, "trtllm.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 2, Running: 30, KVUtilization: 0.375, BlockSize: 32, NumBlocks: 16384,
				PrefixHits: 300000, PrefixQueries: 500000, PrefixHitRate: 0.61,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks |
					HasPrefixHits | HasPrefixQueries | HasPrefixHitRate},
		},
		{
			name: "TensorRT-LLM serve, older names", profile: engineTensorRTLLM,
			body: readTestdata(t, "trtllm_old.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 6, Running: 11, KVUtilization: 0.5, PrefixHitRate: 0.25,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasPrefixHitRate, Series: 4},
		},
		{
			name: "Triton TensorRT-LLM backend", profile: engineTriton,
			body: readTestdata(t, "triton.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 9, Running: 57, KVUtilization: 0.625, BlockSize: 64, NumBlocks: 8000, UsedBlocks: 5000,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasUsedBlocks},
		},
		{
			name: "Triton without waiting and fraction series", profile: engineTriton,
			body: readTestdata(t, "triton_old.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 3, Running: 15, KVUtilization: 0.25, BlockSize: 64, NumBlocks: 6240, UsedBlocks: 1560,
				Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasUsedBlocks, Series: 9},
		},
		{
			name: "TGI", profile: engineTGI,
			body: readTestdata(t, "tgi.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 7, Running: 24, Found: HasWaiting | HasRunning, Series: 12},
		},
		{
			name: "custom profile with scales", profile: custom,
			body: readTestdata(t, "tgi.txt"), contentType: ContentTypeText,
			want: Reading{Waiting: 7, Running: 12, KVUtilization: 0.5, Found: HasWaiting | HasRunning | HasKVUtilization},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustParser(t, tt.profile).Parse(tt.body, tt.contentType)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tt.want.Series == 0 {
				tt.want.Series = got.Series
			}
			if !readingsEqual(got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func readingsEqual(a, b Reading) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*max(1, math.Abs(y)) }
	return a.Found == b.Found && a.Series == b.Series &&
		eq(a.Waiting, b.Waiting) && eq(a.Running, b.Running) && eq(a.KVUtilization, b.KVUtilization) &&
		eq(a.BlockSize, b.BlockSize) && eq(a.NumBlocks, b.NumBlocks) && eq(a.UsedBlocks, b.UsedBlocks) &&
		eq(a.CapacityTokens, b.CapacityTokens) && eq(a.PrefixHits, b.PrefixHits) &&
		eq(a.PrefixQueries, b.PrefixQueries) && eq(a.PrefixHitRate, b.PrefixHitRate) &&
		slices.Equal(a.RunningAdapters, b.RunningAdapters) && slices.Equal(a.WaitingAdapters, b.WaitingAdapters) &&
		eq(a.MaxAdapters, b.MaxAdapters)
}

func TestParseSeriesCount(t *testing.T) {
	// The two files carry the same 195 samples (the OpenMetrics one writes counters'
	// _created samples without their own HELP and TYPE lines).
	for _, tt := range []struct{ file, contentType string }{
		{"vllm.txt", ContentTypeText},
		{"vllm.om.txt", ContentTypeOpenMetrics},
	} {
		body := vllmExposition(t, tt.file, vllmLoad{kv: 0.5})
		lines := 0
		for _, l := range strings.Split(string(body), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				lines++
			}
		}
		got, err := mustParser(t, engineVLLM).Parse(body, tt.contentType)
		if err != nil {
			t.Fatal(err)
		}
		if got.Series != lines {
			t.Errorf("%s: Series = %d, want %d sample lines", tt.file, got.Series, lines)
		}
	}
}

// TestParseOpenMetricsTypes checks the OpenMetrics-only family types, which the classic
// parser reads as untyped.
func TestParseOpenMetricsTypes(t *testing.T) {
	body := []byte(`# TYPE build info
build_info{version="0.11.0"} 1
# TYPE mode stateset
mode{mode="on"} 1
mode{mode="off"} 0
# TYPE q unknown
q 3
# TYPE kv gaugehistogram
kv_bucket{le="0.5"} 1
kv_bucket{le="+Inf"} 4
kv_gcount 4
kv_gsum 2.5
# TYPE "odd name" Info
{"odd name_info",x="y"} 1
# TYPE vllm:prefix_cache_hits counter
# UNIT vllm:prefix_cache_hits tokens
vllm:prefix_cache_hits_total 40
vllm:prefix_cache_hits_created 1.7644250001e+09
# EOF
`)
	p := mustParser(t, &Engine{Name: "om", Waiting: []Selector{{Name: "q"}}, PrefixHits: engineVLLM.PrefixHits,
		BlockSize: []Selector{{Name: "build_info", ValueLabel: "version", Agg: AggMax}}})
	got, err := p.Parse(body, ContentTypeOpenMetrics)
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{Waiting: 3, PrefixHits: 40, BlockSize: 0, Found: HasWaiting | HasPrefixHits, Series: 11}
	if !readingsEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// The rewrite leaves an exposition without OpenMetrics-only types untouched.
	plain := vllmExposition(t, "vllm.om.txt", vllmLoad{})
	if out := p.classicTypes(plain); &out[0] != &plain[0] {
		t.Error("classicTypes copied an exposition it had nothing to change in")
	}
}

// TestParseOpenMetricsExemplar: exemplars and fractional timestamps are OpenMetrics the
// classic parser cannot read; they are rejected with ErrParse, not misread.
func TestParseOpenMetricsExemplar(t *testing.T) {
	p := mustParser(t, &Engine{Name: "a", Waiting: []Selector{{Name: "a"}}, PrefixHits: []Selector{{Name: "a_total"}}})
	for _, body := range []string{
		"# TYPE a counter\na_total 4 # {trace_id=\"abc\"} 1.0\n# EOF\n",
		"# TYPE a gauge\na 4 1764425000.25\n# EOF\n",
	} {
		if _, err := p.Parse([]byte(body), ContentTypeOpenMetrics); !errors.Is(err, ErrParse) {
			t.Errorf("Parse(%q) = %v, want ErrParse", body, err)
		}
	}
	// In a family no selector reads, an exemplar is skipped with the rest of the family.
	body := "# TYPE b counter\nb_total 4 # {trace_id=\"abc\"} 1.0\n# TYPE a gauge\na 2\n# EOF\n"
	if r, err := p.Parse([]byte(body), ContentTypeOpenMetrics); err != nil || r.Waiting != 2 || r.Series != 2 {
		t.Errorf("Parse(%q) = %+v, %v; want Waiting 2, 2 series", body, r, err)
	}
}

func TestParseAggregations(t *testing.T) {
	body := []byte(`# TYPE q gauge
q{rank="0"} 2
q{rank="1"} 6
q{rank="2"} NaN
q{rank="3"} -1
q{rank="4",role="draft"} 100
`)
	tests := []struct {
		agg  Aggregation
		want float64
	}{
		{AggSum, 108}, {AggMean, 36}, {AggMax, 100}, {AggMin, 2},
	}
	for _, tt := range tests {
		t.Run(tt.agg.String(), func(t *testing.T) {
			p := mustParser(t, &Engine{Name: "agg", Waiting: []Selector{{Name: "q", Agg: tt.agg}}})
			got, err := p.Parse(body, ContentTypeText)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Found.Has(HasWaiting) || got.Waiting != tt.want {
				t.Errorf("Waiting = %v (found %v), want %v", got.Waiting, got.Found.Has(HasWaiting), tt.want)
			}
		})
	}
	// An empty wanted label value matches series without the label.
	p := mustParser(t, &Engine{Name: "nolabel", Waiting: []Selector{{Name: "q", Labels: map[string]string{"role": ""}}}})
	got, err := p.Parse(body, ContentTypeText)
	if err != nil {
		t.Fatal(err)
	}
	if got.Waiting != 8 {
		t.Errorf("Waiting without role = %v, want 8 (NaN and negative ignored)", got.Waiting)
	}
}

func TestParseFallbackOrder(t *testing.T) {
	// Both names present: the first selector wins.
	body := []byte("vllm:kv_cache_usage_perc 0.25\nvllm:gpu_cache_usage_perc 0.75\n")
	got, err := mustParser(t, engineVLLM).Parse(body, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.KVUtilization != 0.25 {
		t.Errorf("KVUtilization = %v, want 0.25 from the current name", got.KVUtilization)
	}
	// Only unusable values under the current name: fall back.
	body = []byte("vllm:kv_cache_usage_perc NaN\nvllm:gpu_cache_usage_perc 0.75\n")
	got, err = mustParser(t, engineVLLM).Parse(body, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.KVUtilization != 0.75 {
		t.Errorf("KVUtilization = %v, want 0.75 from the deprecated name", got.KVUtilization)
	}
	// Out-of-range utilisation is clamped; a block count that is not a number is absent.
	body = []byte(`vllm:kv_cache_usage_perc 1.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1
`)
	got, err = mustParser(t, engineVLLM).Parse(body, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.KVUtilization != 1 || got.Found.Has(HasNumBlocks) || !got.Found.Has(HasBlockSize) {
		t.Errorf("got %+v, want KVUtilization 1, BlockSize found, NumBlocks absent", got)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, body, contentType string
	}{
		{"garbage", "this is not an exposition\n", ContentTypeText},
		{"proxy error page", "upstream connect error or disconnect/reset before headers. reset reason: overflow", ""},
		{"HTML", "<html><body>502 Bad Gateway</body></html>\n", "text/html"},
		{"JSON", `{"object":"error","message":"Not Found"}`, "application/json"},
		{"unclosed labels in an unread family", `foo{a="b" 1` + "\n", ContentTypeText},
		{"bad value in an unread family", "foo{a=\"b\"} one\n", ContentTypeText},
		{"missing value in an unread family", "foo{a=\"b\"}\n", ContentTypeText},
		{"bad value", "vllm:num_requests_waiting abc\n", ContentTypeText},
		{"unterminated labels", `vllm:num_requests_waiting{model_name="x 1` + "\n", ContentTypeText},
		{"OpenMetrics without EOF", "# TYPE a gauge\na 1\n", ContentTypeOpenMetrics},
		{"OpenMetrics data after EOF", "a 1\n# EOF\nb 2\n", ContentTypeOpenMetrics},
		{"protobuf garbage", "\x05\x01\x02", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"},
		{"protobuf length beyond the body", "\xff\xff\xff\xff\x0f\x0a", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mustParser(t, engineVLLM).Parse([]byte(tt.body), tt.contentType)
			if !errors.Is(err, ErrParse) {
				t.Errorf("Parse error = %v, want ErrParse", err)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	got, err := mustParser(t, engineVLLM).Parse(nil, ContentTypeText)
	if err != nil {
		t.Fatalf("empty exposition: %v", err)
	}
	if got.Found != 0 || got.Series != 0 {
		t.Errorf("empty exposition: got %+v, want nothing found", got)
	}
}

func TestDetectFormat(t *testing.T) {
	tests := []struct {
		contentType, body string
		want              format
	}{
		{ContentTypeText, "a 1\n", formatText},
		{"text/plain", "a 1\n", formatText},
		{"", "a 1\n", formatText},
		{"garbage;;", "a 1\n", formatText},
		{ContentTypeOpenMetrics, "a 1\n# EOF\n", formatOpenMetrics},
		{"application/openmetrics-text; version=0.0.1", "a 1\n# EOF\n", formatOpenMetrics},
		{"application/openmetrics-text; version=2.0.0", "a 1\n# EOF\n", formatOpenMetrics},
		{"text/plain", "a 1\n# EOF\n", formatOpenMetrics},
		{"", "# EOF", formatOpenMetrics},
		{"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", "", formatProto},
		{"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=text", "a 1\n", formatText},
	}
	for _, tt := range tests {
		if got := detectFormat(tt.contentType, []byte(tt.body)); got != tt.want {
			t.Errorf("detectFormat(%q, %q) = %v, want %v", tt.contentType, tt.body, got, tt.want)
		}
	}
}

func TestProfileValidate(t *testing.T) {
	for _, p := range []*Engine{engineVLLM, engineSGLang, engineTensorRTLLM, engineTriton, engineTGI} {
		if err := p.validate(); err != nil {
			t.Errorf("built-in profile %s: %v", p.Name, err)
		}
	}
	bad := []*Engine{
		nil,
		{Name: "empty"},
		{Name: "noname", Waiting: []Selector{{}}},
		{Name: "agg", Waiting: []Selector{{Name: "x", Agg: 99}}},
		{Name: "scale", Waiting: []Selector{{Name: "x", Scale: math.NaN()}}},
		{Name: "negscale", Waiting: []Selector{{Name: "x", Scale: -1}}},
	}
	for _, p := range bad {
		if _, err := NewParser(ParserOptions{Engine: p}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewParser(%+v) error = %v, want ErrInvalidOptions", p, err)
		}
	}
}

func TestParseProtobuf(t *testing.T) {
	// Encode the classic vLLM exposition as delimited protobuf with expfmt, then read it back.
	text := vllmExposition(t, "vllm.txt", vllmLoad{running: 7, waiting: 2, kv: 0.5, queries: 10, hits: 4})
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range fams {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	got, err := mustParser(t, engineVLLM).Parse(buf.Bytes(), string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{Waiting: 2, Running: 7, KVUtilization: 0.5, BlockSize: 16, NumBlocks: 27153, PrefixHits: 4, PrefixQueries: 10,
		Found: HasWaiting | HasRunning | HasKVUtilization | HasBlockSize | HasNumBlocks | HasPrefixHits | HasPrefixQueries, Series: 195}
	if !readingsEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
