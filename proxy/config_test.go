package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/routing"
)

// TestConfigNames builds a Handler configuration for every policy and router name the
// registries list (the names -policy and -router accept), and checks that an unknown name is
// refused with the list of known ones.
func TestConfigNames(t *testing.T) {
	base := DefaultConfig()
	base.Backends = []BackendConfig{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
	for _, name := range fairness.Names() {
		c := base
		c.Policy = name
		if _, err := c.Options(); err != nil {
			t.Errorf("-policy %s: %v", name, err)
		}
	}
	for _, name := range routing.ProfileNames() {
		c := base
		c.Router = name
		if _, err := c.Options(); err != nil {
			t.Errorf("-router %s: %v", name, err)
		}
	}
	for _, c := range []func(*Config){
		func(c *Config) { c.Policy = "las-llmd" },
		func(c *Config) { c.Router = "llmd" },
	} {
		cfg := base
		c(&cfg)
		_, err := cfg.Options()
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("policy %q router %q: error %v, want ErrInvalidOptions listing the names", cfg.Policy, cfg.Router, err)
		}
	}
}
