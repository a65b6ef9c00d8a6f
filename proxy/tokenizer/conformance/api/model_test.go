// Package api holds the conformance tests and benchmarks that call the tokenizer package's API:
// Encode and EncodeSpecial against the reference's ids, RenderChat against Jinja2's renderings.
//
// Until that API is on main these files do not compile, so they are behind the build tag
// conformance_api and the module's go.mod ignores this directory (go mod tidy resolves imports
// under every tag). When the API lands, delete the go.mod's `ignore ./api` line and the
// //go:build lines; until then run them with
//
//	go test -tags conformance_api ./api
package api

import (
	"sync"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer"
	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
)

// models caches each family's encoder across the tests and benchmarks of one run.
var models sync.Map // family dir -> *modelOnce

type modelOnce struct {
	once sync.Once
	m    *tokenizer.Encoder
	err  error
}

func encoder(tb testing.TB, f golden.Family) *tokenizer.Encoder {
	tb.Helper()
	v, _ := models.LoadOrStore(f.Dir, new(modelOnce))
	mo := v.(*modelOnce)
	mo.once.Do(func() {
		mo.m, mo.err = tokenizer.New(tokenizer.Options{
			TokenizerJSON: golden.Gunzip(tb, f.Dir+"/tokenizer.json.gz"),
			ConfigJSON:    golden.Gunzip(tb, f.Dir+"/tokenizer_config.json.gz"),
		})
	})
	if mo.err != nil {
		tb.Fatalf("%s: New: %v", f.Dir, mo.err)
	}
	return mo.m
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
