package extproc

import (
	"fmt"
	"strings"
	"testing"
)

// TestModelsRouteToTheirEndpoints: endpoints that list models get only requests for those
// models (or their adapters); the fallbacks too.
func TestModelsRouteToTheirEndpoints(t *testing.T) {
	eps, err := ParseEndpoints([]byte(`
10.0.0.1:8000 models=alpha adapters=sql-lora
10.0.0.2:8000 models=alpha adapters=sql-lora
10.0.0.3:8000 models=beta
10.0.0.4:8000 models=beta
`))
	if err != nil {
		t.Fatal(err)
	}
	if eps[0].Adapters[0] != "sql-lora" || eps[2].Models[0] != "beta" {
		t.Fatalf("parsed %+v", eps)
	}
	s := newServer(t, Options{Endpoints: eps, Fallbacks: 3})
	want := map[string]string{"alpha": "10.0.0.1:8000,10.0.0.2:8000", "sql-lora": "10.0.0.1:8000,10.0.0.2:8000", "beta": "10.0.0.3:8000,10.0.0.4:8000"}
	for i := range 12 {
		model := []string{"alpha", "sql-lora", "beta"}[i%3]
		st, _ := open(t, serve(t, s))
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"request %d"}]}`, model, i)
		dest, _ := destinationOf(t, exchangeRequest(t, st, body, nil))
		for _, ep := range strings.Split(dest, ",") {
			if !strings.Contains(want[model], ep) {
				t.Errorf("%s sent to %s (destination %q), want one of %s", model, ep, dest, want[model])
			}
		}
		_ = st.CloseSend()
	}
	if _, err := ParseEndpoint("10.0.0.5:8000,adapters=x"); err == nil {
		t.Error("adapters without models: no error")
	}
}
