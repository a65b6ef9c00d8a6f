package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/simfleet"
)

// TestDebugSlow steps through /debug/slow: reading the factor, setting it, refusing a bad one
// (leaving the factor as it was) and another method.
func TestDebugSlow(t *testing.T) {
	s, err := simfleet.New(simfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handleSlow(s, w, r) }))
	defer hs.Close()
	for _, step := range []struct {
		method, query string
		wantStatus    int
		wantBody      string
		wantFactor    float64
	}{
		{"GET", "", 200, `{"factor":1}`, 1},
		{"POST", "?factor=3", 200, `{"factor":3}`, 3},
		{"POST", "?factor=0", 400, "factor: want a positive number", 3},
		{"POST", "?factor=inf", 400, "factor: want a positive number", 3},
		{"POST", "", 400, "factor: want a positive number", 3},
		{"PUT", "?factor=2", 405, "method not allowed", 3},
		{"POST", "?factor=1", 200, `{"factor":1}`, 1},
	} {
		req, _ := http.NewRequest(step.method, hs.URL+"/debug/slow"+step.query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != step.wantStatus || !strings.Contains(string(body), step.wantBody) {
			t.Errorf("%s /debug/slow%s: got %d %q, want %d %q", step.method, step.query, resp.StatusCode, body, step.wantStatus, step.wantBody)
		}
		if got := s.Slowdown(); got != step.wantFactor {
			t.Errorf("%s /debug/slow%s: Slowdown() = %v, want %v", step.method, step.query, got, step.wantFactor)
		}
	}
}
