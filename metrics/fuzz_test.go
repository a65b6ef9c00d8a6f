package metrics

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/usher-llm/usher/routing"
)

var fuzzContentTypes = []string{
	ContentTypeText,
	ContentTypeOpenMetrics,
	"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
	"",
}

// FuzzParse feeds arbitrary bytes under each content type to every built-in profile. Parse
// must not panic, and whatever it accepts must respect the Reading's invariants.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, uint8(0))
		f.Add(raw, uint8(1))
	}
	f.Add([]byte("vllm:num_requests_waiting{model_name=\"m\"} 3\n"), uint8(3))
	f.Add([]byte("# TYPE a counter\na_total 1 # {x=\"y\"} 1\n# EOF\n"), uint8(1))
	f.Add([]byte("vllm:cache_config_info{block_size=\"1e400\",num_gpu_blocks=\"-5\"} 1\n"), uint8(0))
	f.Add([]byte("\x0a\x05hello"), uint8(2))
	f.Add([]byte("vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a,,b\",waiting_lora_adapters=\" c\"} 1.7e9\n"+
		"vllm:lora_requests_info{max_lora=\"-1\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 1.8e9\n"), uint8(0))

	profiles := []*Engine{engineVLLM, engineSGLang, engineTensorRTLLM, engineTriton, engineTGI}
	parsers := make([]*Parser, len(profiles))
	for i, p := range profiles {
		parsers[i] = mustParser(f, p)
	}
	f.Fuzz(func(t *testing.T, body []byte, ct uint8) {
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		for _, p := range parsers {
			r, err := p.Parse(body, contentType)
			want, werr := referenceParse(p, body, contentType)
			if werr == nil {
				// Whatever expfmt accepts whole, the filtered parse reads the same.
				if err != nil {
					t.Fatalf("%s: Parse failed (%v) on an exposition expfmt accepts whole", p.profile.Name, err)
				}
				want.Series = r.Series
				if !readingsEqual(r, want) {
					t.Fatalf("%s: filtered parse %+v, whole parse %+v", p.profile.Name, r, want)
				}
			}
			if err != nil {
				continue
			}
			checkReading(t, p.profile.Name, r)
		}
	})
}

func checkReading(t *testing.T, profile string, r Reading) {
	t.Helper()
	for s := range numSignals {
		v := *r.field(s)
		if r.Found&(1<<s) == 0 {
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("%s: %s = %v", profile, signalNames[s], v)
		}
	}
	if r.Found.Has(HasKVUtilization) && r.KVUtilization > 1 || r.Found.Has(HasPrefixHitRate) && r.PrefixHitRate > 1 {
		t.Fatalf("%s: ratio above 1: %+v", profile, r)
	}
	if r.Found.Has(HasAdapters) && (r.MaxAdapters < 1 || slices.Contains(r.RunningAdapters, "") || slices.Contains(r.WaitingAdapters, "")) {
		t.Fatalf("%s: adapters %q %q %v", profile, r.RunningAdapters, r.WaitingAdapters, r.MaxAdapters)
	}
	if r.Series < 0 {
		t.Fatalf("%s: Series = %d", profile, r.Series)
	}
}

// TestHitRateModel compares the scraper's hit-rate bookkeeping with a naive reference that
// keeps every reading and searches back for the last interval with queries.
func TestHitRateModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		b := &backend{}
		var history []Reading
		hits, queries := 0.0, 0.0
		for step := range 50 {
			switch x := rng.IntN(10); {
			case x == 0: // restart: counters from zero
				queries = float64(rng.IntN(100))
				hits = float64(rng.IntN(int(queries) + 1))
			case x < 3: // idle
			default:
				dq := float64(rng.IntN(1000))
				queries += dq
				hits += float64(rng.IntN(int(dq) + 1))
			}
			r := Reading{PrefixHits: hits, PrefixQueries: queries, Found: HasPrefixHits | HasPrefixQueries}
			history = append(history, r)
			b.updateLocked(r, time.Unix(int64(step), 0))
			want, wantOK := referenceHitRate(history)
			if b.hasHitRate != wantOK || (wantOK && math.Abs(b.hitRate-want) > 1e-12) {
				t.Fatalf("trial %d step %d: rate %v %v, reference %v %v (history %v)",
					trial, step, b.hitRate, b.hasHitRate, want, wantOK, history)
			}
		}
	}
}

func referenceHitRate(h []Reading) (float64, bool) {
	for i := len(h) - 1; i >= 1; i-- {
		prev, cur := h[i-1], h[i]
		dh, dq := cur.PrefixHits-prev.PrefixHits, cur.PrefixQueries-prev.PrefixQueries
		if cur.PrefixHits < prev.PrefixHits || cur.PrefixQueries < prev.PrefixQueries {
			dh, dq = cur.PrefixHits, cur.PrefixQueries
		}
		if dq > 0 {
			return math.Min(math.Max(dh/dq, 0), 1), true
		}
	}
	return 0, false
}

// referenceParse hands the whole exposition to expfmt, without skipping any family.
func referenceParse(p *Parser, body []byte, contentType string) (Reading, error) {
	f := detectFormat(contentType, body)
	if f == formatProto {
		return p.Parse(body, contentType)
	}
	if f == formatOpenMetrics {
		if !endsWithEOF(body) {
			return Reading{}, ErrParse
		}
		body = bytes.Clone(p.classicTypes(body))
	}
	text := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := text.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return Reading{}, err
	}
	return p.extract(fams), nil
}

// TestHealthModel compares the health verdict over random probe sequences with a reference
// that looks at the whole history: unhealthy after a run of n silent probes at the end,
// otherwise the verdict of the last answer, otherwise unknown.
func TestHealthModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := 1 + rng.IntN(4)
		b := &backend{}
		var history []probe
		for step := range 40 {
			p := probe(rng.IntN(3))
			history = append(history, p)
			b.probeLocked(p, n)
			if want := referenceHealth(history, n); b.health != want {
				t.Fatalf("trial %d step %d (n=%d): health %v, reference %v (history %v)", trial, step, n, b.health, want, history)
			}
		}
	}
}

func referenceHealth(h []probe, n int) routing.Health {
	silent := 0
	for i := len(h) - 1; i >= 0 && h[i] == probeSilent; i-- {
		silent++
	}
	if silent >= n {
		return routing.Unhealthy
	}
	for i := len(h) - 1; i >= 0; i-- {
		switch h[i] {
		case probeUp:
			return routing.Healthy
		case probeDown:
			return routing.Unhealthy
		}
	}
	return routing.HealthUnknown
}

// FuzzLoRAOrder: two series of vLLM's LoRA info gauge, possibly stamped alike, read the same
// whichever the exposition lists first (a tie is broken by content, not order).
func FuzzLoRAOrder(f *testing.F) {
	f.Add("a", "", uint8(4), "a,b", "c", uint8(4), true)
	f.Add("b", "c", uint8(4), "a", "d", uint8(4), true)
	f.Add("x", "", uint8(2), "y", "", uint8(8), true)
	f.Add("a", "a", uint8(1), "a", "a", uint8(1), false)
	clean := func(s string) string {
		return string(slices.DeleteFunc([]byte(s), func(c byte) bool {
			return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ',' || c == '-' || c == ' ')
		}))
	}
	p := mustParser(f, engineVLLM)
	f.Fuzz(func(t *testing.T, r1, w1 string, m1 uint8, r2, w2 string, m2 uint8, same bool) {
		t2 := "1.764424931e+09"
		if !same {
			t2 = "1.764424932e+09"
		}
		x := `vllm:lora_requests_info{max_lora="` + strconv.Itoa(int(m1)) + `",running_lora_adapters="` + clean(r1) + `",waiting_lora_adapters="` + clean(w1) + `"} 1.764424931e+09` + "\n"
		y := `vllm:lora_requests_info{max_lora="` + strconv.Itoa(int(m2)) + `",running_lora_adapters="` + clean(r2) + `",waiting_lora_adapters="` + clean(w2) + `"} ` + t2 + "\n"
		const head = "# TYPE vllm:lora_requests_info gauge\n"
		a, errA := p.Parse([]byte(head+x+y), ContentTypeText)
		b, errB := p.Parse([]byte(head+y+x), ContentTypeText)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("errors differ by order: %v, %v", errA, errB)
		}
		if a.Found.Has(HasAdapters) != b.Found.Has(HasAdapters) || !slices.Equal(a.RunningAdapters, b.RunningAdapters) ||
			!slices.Equal(a.WaitingAdapters, b.WaitingAdapters) || a.MaxAdapters != b.MaxAdapters {
			t.Fatalf("order matters:\n%s%s→ %q %q %v\n%s%s→ %q %q %v", x, y, a.RunningAdapters, a.WaitingAdapters, a.MaxAdapters,
				y, x, b.RunningAdapters, b.WaitingAdapters, b.MaxAdapters)
		}
	})
}
