package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/usher-llm/usher/routing
cpu: Test CPU
BenchmarkPick/backends=100-2   	  1000	      4000 ns/op	      2500 cpu-ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/backends=100-2   	  1000	      5000 ns/op	      2900 cpu-ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/backends=100-2   	  1000	      6000 ns/op	      3100 cpu-ns/op	       0 B/op	       0 allocs/op
BenchmarkPickParallel-2        	  1000	      2000 ns/op	       16 B/op	       1 allocs/op
some log line
PASS
pkg: github.com/usher-llm/usher/flowcontrol
BenchmarkAdmitDone/backlog/flows=100000-2 	 1000	 700 ns/op	 650 cpu-ns/op	 0 B/op	 0 allocs/op
BenchmarkAdmitDone/idle/flows=1-2 	 1000	 300 ns/op	 0 B/op	 2 allocs/op
`

func TestPage(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "raw.txt")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run([]string{"-date", "2026-12-02", "-command", "go test -bench .", "-check-allocs", "-check-targets", in}, &out, &errs); code != 1 {
		t.Fatalf("exit %d, want 1 (a missed target and an allocation):\n%s", code, errs.String())
	}
	page := out.String()
	for _, want := range []string{
		"on 2026-12-02",
		"- machine: linux/amd64, Test CPU",
		"- command: `go test -bench .`",
		"## github.com/usher-llm/usher/routing",
		// median of 2500, 2900, 3100 is 2900 ≤ 3 µs: met, with its range
		"| Pick/backends=100 | 3 | 5 µs (4 µs–6 µs) | 2.9 µs (2.5 µs–3.1 µs) | 0 | 0 | ≤ 3 µs: **met**; 0 allocs |",
		// no target: no verdict
		"| PickParallel | 1 | 2 µs |  | 16 | 1 |  |",
		"| AdmitDone/backlog/flows=100000 | 1 | 700 ns | 650 ns | 0 | 0 | ≤ 500 ns: **missed**; 0 allocs |",
		"| AdmitDone/idle/flows=1 | 1 | 300 ns |  | 0 | 2 | 0 allocs: **missed** |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	for _, want := range []string{
		"AdmitDone/backlog/flows=100000: 650 ns cpu-ns/op, target ≤ 500 ns",
		"AdmitDone/idle/flows=1: 2 allocs/op, promised 0",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("-check output lacks %q:\n%s", want, errs.String())
		}
	}
	if strings.Contains(errs.String(), "Pick/backends=100") {
		t.Errorf("-check flagged a met target:\n%s", errs.String())
	}
}

func TestCheckAllocsOnly(t *testing.T) {
	in := filepath.Join(t.TempDir(), "raw.txt")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run([]string{"-check-allocs", in}, &out, &errs); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errs.String(), "promised 0") || strings.Contains(errs.String(), "target") {
		t.Errorf("-check-allocs reported %q, want the allocation only", errs.String())
	}
}

func TestPageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(empty, []byte("PASS\n"), 0o644)
	os.WriteFile(bad, []byte("BenchmarkX-2 10 abc ns/op\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{empty}, "no benchmark results"},
		{[]string{bad}, `value "abc" of ns/op is not a number`},
		{[]string{filepath.Join(dir, "missing.txt")}, "no such file"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code != 1 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errs.String(), tc.want)
		}
	}
}

func TestHashRatioTarget(t *testing.T) {
	rs, _, err := parse(strings.NewReader(`pkg: github.com/usher-llm/usher/prefixcache
BenchmarkHashTokens/2048-2 100 1400 ns/op
BenchmarkHashTokens/xxhash-baseline/2048-2 100 1000 ns/op
`))
	if err != nil {
		t.Fatal(err)
	}
	rows := summarise(rs)
	if v, goal := verdict(rows[0], rows); v != "missed" || goal != "≤ 1.3× HashTokens/xxhash-baseline/2048 (1.40×)" {
		t.Errorf("verdict %q %q", v, goal)
	}
}
