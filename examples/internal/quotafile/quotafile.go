// Package quotafile reads the -quota file of the example programs: a JSON file holding the
// gateway configuration's "quota" object and nothing else, {"quota": {...}}, read by package
// gateway's own reader (gateway.Config.LoadFile: snake-case keys, windows as duration
// strings, unknown keys an error), so that the endpoint picker's quotas and the gateway's
// are written alike and one file serves both.
package quotafile

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/usher-llm/usher/gateway"
	"github.com/usher-llm/usher/proxy/quota"
)

// Read returns the quota options of the file at path. It fails on a file that is not one
// JSON object whose only key is "quota", on what gateway.Config.LoadFile refuses, and on a
// quota without limits; the limits themselves are validated by quota.New.
func Read(path string) (quota.Options, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return quota.Options{}, fmt.Errorf("-quota: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return quota.Options{}, fmt.Errorf("-quota %s: %w", path, err)
	}
	if _, ok := top["quota"]; !ok || len(top) != 1 {
		return quota.Options{}, fmt.Errorf(`-quota %s: want {"quota": {...}}, the gateway configuration's quota object alone`, path)
	}
	var c gateway.Config
	if err := c.LoadFile(path); err != nil {
		return quota.Options{}, fmt.Errorf("-quota: %w", err)
	}
	if len(c.Quota.Limits) == 0 {
		return quota.Options{}, fmt.Errorf("-quota %s: no limits", path)
	}
	return c.Quota, nil
}
