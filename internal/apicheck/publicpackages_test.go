package apicheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublicPackages checks which directories count as the library: not commands, not
// internal/ or testdata/, and nothing at or below a directory with a go.mod of its own.
func TestPublicPackages(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":            "module m\n",
		"doc.go":            "package m\n",
		"a/a.go":            "package a\n",
		"a/b/b.go":          "package b\n",
		"cmd/x/main.go":     "package main\n",
		"internal/i/i.go":   "package i\n",
		"a/testdata/t.go":   "package t\n",
		"examples/go.mod":   "module m/examples\n",
		"examples/e.go":     "package examples\n",
		"examples/sub/s.go": "package sub\n",
		"notes/README.md":   "no Go here\n",
		"a/b/c/c_test.go":   "package c\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(publicPackages(t, dir), " ")
	if want := ". a a/b"; got != want {
		t.Errorf("publicPackages = %q, want %q", got, want)
	}
}
