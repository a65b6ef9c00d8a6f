package gateway

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
)

// Latency targets come per band from -slo or the config file's "slo", strictly; with
// -trust-slo-headers the Handler reads the x-slo-* headers.
func TestConfigSLO(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-backend", "http://127.0.0.1:8000", "-slo", "0,ttft=500ms,tpot=50ms", "-slo", "2,ttft=3s", "-trust-slo-headers"}); err != nil {
		t.Fatal(err)
	}
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]routing.Latency{0: {TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond}, 2: {TTFT: 3 * time.Second}}
	if len(o.SLO) != len(want) || o.SLO[0] != want[0] || o.SLO[2] != want[2] || !o.TrustSLOHeaders {
		t.Errorf("SLO %v, trusted %v; want %v, true", o.SLO, o.TrustSLOHeaders, want)
	}
	for _, bad := range []string{"4,ttft=1s", "-1,ttft=1s", "x,ttft=1s", "0,ttft=fast", "0,ttft=-1s", "0,ttft=0s", "0,slo=1s", "0,ttft=1s,ttft=2s"} {
		c := DefaultConfig()
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		fs.SetOutput(nopWriter{})
		c.RegisterFlags(fs)
		if err := fs.Parse([]string{"-slo", bad}); err == nil || !strings.Contains(err.Error(), "slo") {
			t.Errorf("-slo %s: %v, want an error", bad, err)
		}
	}
	fs = flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(nopWriter{})
	c = DefaultConfig()
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-slo", "1,ttft=1s", "-slo", "1,tpot=1ms"}); err == nil {
		t.Error("a band given twice was accepted")
	}

	dir := t.TempDir()
	for _, tc := range []struct{ json, err string }{
		{`{"slo":{"1":{"ttft":"250ms"},"3":{"tpot":"20ms"}},"trust_slo_headers":true}`, ""},
		{`{"slo":{"1":{"ttft":250}}}`, "duration"},
		{`{"slo":{"1":{"ttft":"1s","itl":"1s"}}}`, "unknown field"},
		{`{"slo":{"9":{"ttft":"1s"}}}`, "band 9"},
		{`{"slo":{"0":{"ttft":"-1s"}}}`, "band 0"},
	} {
		file := filepath.Join(dir, "gateway.json")
		if err := os.WriteFile(file, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
		err := c.LoadFile(file)
		if err == nil {
			var o proxy.Options
			if o, err = c.Options(); err == nil && (o.SLO[1] != routing.Latency{TTFT: 250 * time.Millisecond} ||
				o.SLO[3] != routing.Latency{TPOT: 20 * time.Millisecond} || !o.TrustSLOHeaders) {
				t.Errorf("%s: SLO %v trusted %v", tc.json, o.SLO, o.TrustSLOHeaders)
			}
			if err != nil && !errors.Is(err, proxy.ErrInvalidOptions) {
				t.Errorf("%s: %v, want ErrInvalidOptions", tc.json, err)
			}
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.json, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error containing %q", tc.json, err, tc.err)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
