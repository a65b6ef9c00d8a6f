package metrics

import "testing"

// TestEngineOfCopies: EngineOf hands out copies, so editing one (a selector's labels included)
// leaves the built-in engine, and the next copy, as they were.
func TestEngineOfCopies(t *testing.T) {
	for _, name := range []string{"vllm", "sglang", "trtllm", "triton", "tgi"} {
		e, ok := EngineOf(name)
		if !ok || e == nil {
			t.Fatalf("EngineOf(%q) = %v, %v; want an engine", name, e, ok)
		}
		e.Waiting[0].Name = "edited"
		if e.Waiting[0].Labels != nil {
			for k := range e.Waiting[0].Labels {
				e.Waiting[0].Labels[k] = "edited"
			}
		}
		again, _ := EngineOf(name)
		if got := again.Waiting[0].Name; got == "edited" {
			t.Errorf("%s: editing a copy changed the built-in engine's Waiting name", name)
		}
		for k, v := range again.Waiting[0].Labels {
			if v == "edited" {
				t.Errorf("%s: editing a copy changed the built-in engine's label %s", name, k)
			}
		}
	}
	if e, ok := EngineOf("llama.cpp"); ok || e != nil {
		t.Errorf("EngineOf(unknown) = %v, %v; want nil, false", e, ok)
	}
}
