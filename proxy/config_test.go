package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/usher-llm/usher/internal/builtin"
)

// TestConfigNames builds a Handler configuration for every policy and router name the
// registries list (the names -policy and -router accept), and checks that an unknown name is
// refused with the list of known ones.
func TestConfigNames(t *testing.T) {
	base := DefaultConfig()
	base.Backends = []BackendConfig{{URL: "http://127.0.0.1:8000", Engine: "vllm"}}
	for _, name := range builtin.PolicyNames() {
		c := base
		c.Policy = name
		_, err := c.Options()
		assert.NoError(t, err, "-policy %s", name)
	}
	for _, name := range builtin.ProfileNames() {
		c := base
		c.Router = ProfileSpec{Extends: name}
		_, err := c.Options()
		assert.NoError(t, err, "-router %s", name)
	}
	for _, c := range []func(*Config){
		func(c *Config) { c.Policy = "las-llmd" },
		func(c *Config) { c.Router = ProfileSpec{Extends: "llmd"} },
	} {
		cfg := base
		c(&cfg)
		_, err := cfg.Options()
		if assert.ErrorIs(t, err, ErrInvalidOptions, "policy %q router %q", cfg.Policy, cfg.Router) {
			assert.Contains(t, err.Error(), "(have ", "the error lists the known names")
		}
	}
}
