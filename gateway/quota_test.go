package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/quota"
)

// The quota's limits are data in the JSON config, read strictly and validated with errors
// that name the field.
func TestQuotaConfig(t *testing.T) {
	load := func(json string) (Config, error) {
		path := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(path, []byte(json), 0o600); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		c.Backends = []BackendSpec{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
		err := c.LoadFile(path)
		return c, err
	}
	c, err := load(`{"quota": {"output_cost": 4, "limits": [
		{"window": "1m", "requests": 600, "tokens": 2000000},
		{"window": "24h", "requests": 50000},
		{"tenant": "team-a", "model": "m", "bands": [0, 1], "window": "1m", "tokens": 5000000, "input_tokens": 4000000, "output_tokens": 1000000}]}}`)
	noError(t, err, "LoadFile")
	want := []quota.Limit{
		{Window: time.Minute, Requests: 600, Tokens: 2000000},
		{Window: 24 * time.Hour, Requests: 50000},
		{Tenant: "team-a", Model: "m", Bands: []int{0, 1}, Window: time.Minute, Tokens: 5000000, InputTokens: 4000000, OutputTokens: 1000000},
	}
	if len(c.Quota.Limits) != 3 || c.Quota.OutputCost != 4 || c.Quota.Limits[2].Tenant != "team-a" || c.Quota.Limits[1].Window != want[1].Window ||
		c.Quota.Limits[2].OutputTokens != want[2].OutputTokens || len(c.Quota.Limits[2].Bands) != 2 {
		t.Fatalf("quota %+v, want limits %+v and output cost 4", c.Quota, want)
	}
	o, err := c.Options()
	noError(t, err, "Options")
	if o.Quota == nil {
		t.Fatal("Options built no Limiter")
	}
	for _, bad := range []struct{ json, want string }{
		{`{"quota": {"limits": [{"window": "1m", "request": 5}]}}`, "unknown field"},
		{`{"quota": {"limits": [{"window": "0s", "requests": 5}]}}`, "limits[0] (tenant \"\", model \"\").window 0s"},
		{`{"quota": {"limits": [{"window": "1m"}]}}`, "limits[0] (tenant \"\", model \"\"): no requests"},
		{`{"quota": {"limits": [{"window": "1m", "requests": 1, "bands": [7]}]}}`, "quota.limits[0].bands: band 7"},
		{`{"quota": {"output_cost": -1, "limits": [{"window": "1m", "requests": 1}]}}`, "output_cost"},
	} {
		c, err := load(bad.json)
		if err == nil {
			_, err = c.Options()
		}
		if err == nil {
			t.Errorf("%s: accepted", bad.json)
			continue
		}
		contains(t, err.Error(), bad.want, bad.json)
		if !errors.Is(err, proxy.ErrInvalidOptions) && bad.want != "unknown field" {
			t.Errorf("%s: %v does not wrap proxy.ErrInvalidOptions", bad.json, err)
		}
	}
}
