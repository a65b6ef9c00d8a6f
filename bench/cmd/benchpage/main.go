// Command benchpage turns `go test -bench` output into the benchmarks page: one row per
// benchmark with the median of every unit over its runs, next to usher's target for that path
// where it has one, and the machine and command the figures came from.
//
//	go test -run '^$' -bench . -benchmem -count 6 ./prefixcache ./routing > raw.txt
//	go run ./bench/cmd/benchpage -command "…" raw.txt > bench/BENCHMARKS.md
//
// bench/benchmarks.sh runs the benchmarks the page reports and calls it; the page is
// regenerated, never edited by hand. With -check-allocs it also fails (exit 1) when a benchmark
// that promises no allocation reports one, and with -check-targets when a time target is
// missed, printing which; CI checks the allocations (a shared machine's times are not
// evidence).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchpage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	command := fs.String("command", "", "the command that produced the input, printed on the page")
	date := fs.String("date", "", "the date printed on the page (default: today, UTC)")
	extra := fs.String("extra", "", "a file of Markdown appended under \"Other measurements\" (e.g. the gateway overhead)")
	checkAllocs := fs.Bool("check-allocs", false, "exit 1 when a benchmark that promises no allocation reports one")
	checkTargets := fs.Bool("check-targets", false, "exit 1 when a time target is missed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var runs []result
	var meta machine
	inputs := fs.Args()
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	for _, name := range inputs {
		f := os.Stdin
		if name != "-" {
			var err error
			if f, err = os.Open(name); err != nil {
				fmt.Fprintln(stderr, "benchpage:", err)
				return 1
			}
		}
		rs, m, err := parse(f)
		if name != "-" {
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(stderr, "benchpage: %s: %v\n", name, err)
			return 1
		}
		runs = append(runs, rs...)
		meta.merge(m)
	}
	if len(runs) == 0 {
		fmt.Fprintln(stderr, "benchpage: no benchmark results in the input")
		return 1
	}
	rows := summarise(runs)
	var extraText []byte
	if *extra != "" {
		var err error
		if extraText, err = os.ReadFile(*extra); err != nil {
			fmt.Fprintln(stderr, "benchpage:", err)
			return 1
		}
	}
	d := *date
	if d == "" {
		d = time.Now().UTC().Format("2006-01-02")
	}
	write(stdout, page{rows: rows, meta: meta, command: *command, date: d, extra: string(extraText)})
	if *checkAllocs || *checkTargets {
		if bad := verdicts(rows, *checkAllocs, *checkTargets); len(bad) > 0 {
			for _, b := range bad {
				fmt.Fprintln(stderr, "benchpage:", b)
			}
			return 1
		}
	}
	return 0
}

// result is one line of benchmark output: a name (without the -GOMAXPROCS suffix), the
// package it ran in, and its values by unit.
type result struct {
	pkg, name string
	procs     int
	values    map[string]float64
}

// machine is what the benchmark output says about where it ran.
type machine struct {
	goos, goarch, cpu string
}

func (m *machine) merge(o machine) {
	if m.goos == "" {
		m.goos = o.goos
	}
	if m.goarch == "" {
		m.goarch = o.goarch
	}
	if m.cpu == "" {
		m.cpu = o.cpu
	}
}

var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// parse reads `go test -bench` output: header lines (goos:, goarch:, pkg:, cpu:) and result
// lines "BenchmarkName-P  N  v unit  v unit ...". Everything else is skipped.
func parse(r io.Reader) ([]result, machine, error) {
	var out []result
	var m machine
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "Benchmark") {
			switch k {
			case "goos":
				m.goos = v
			case "goarch":
				m.goarch = v
			case "cpu":
				m.cpu = v
			case "pkg":
				pkg = v
			}
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue // a benchmark's own log line, or a failure
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		res := result{pkg: pkg, name: f[0], procs: 1, values: map[string]float64{}}
		if sm := procsSuffix.FindStringSubmatch(f[0]); sm != nil {
			res.name = strings.TrimSuffix(f[0], sm[0])
			res.procs, _ = strconv.Atoi(sm[1])
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, m, fmt.Errorf("%s: value %q of %s is not a number", f[0], f[i], f[i+1])
			}
			res.values[f[i+1]] = v
		}
		out = append(out, res)
	}
	return out, m, sc.Err()
}

// row is one benchmark summarised over its runs.
type row struct {
	pkg, name string
	procs     int
	runs      int
	median    map[string]float64
	min, max  map[string]float64
	target    *target
}

func summarise(rs []result) []row {
	type key struct{ pkg, name string }
	by := map[key][]result{}
	var order []key
	for _, r := range rs {
		k := key{r.pkg, r.name}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	rows := make([]row, 0, len(order))
	for _, k := range order {
		group := by[k]
		rw := row{pkg: k.pkg, name: k.name, procs: group[0].procs, runs: len(group),
			median: map[string]float64{}, min: map[string]float64{}, max: map[string]float64{}}
		units := map[string][]float64{}
		for _, r := range group {
			for u, v := range r.values {
				units[u] = append(units[u], v)
			}
		}
		for u, vs := range units {
			slices.Sort(vs)
			rw.median[u] = median(vs)
			rw.min[u], rw.max[u] = vs[0], vs[len(vs)-1]
		}
		rw.target = targetFor(k.pkg, k.name)
		rows = append(rows, rw)
	}
	return rows
}

// median of sorted values.
func median(vs []float64) float64 {
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// target is usher's goal for one benchmark: a bound on its time per op (CPU time per op where
// the benchmark reports it, which a loaded machine distorts less) and whether it promises no
// allocation.
type target struct {
	path      string  // what the benchmark stands for, as DESIGN.md's table names it
	maxNs     float64 // 0: no time target
	relTo     string  // when set, maxNs is a ratio to this benchmark's time (same package)
	zeroAlloc bool
}

// targets are DESIGN.md's, keyed by package suffix and a benchmark name pattern.
var targets = []struct {
	pkg  string
	name *regexp.Regexp
	t    target
}{
	{"prefixcache", regexp.MustCompile(`^BenchmarkHashTokens/2048$`), target{path: "hash a 2,048-token prompt (≤ 1.3× xxhash over the same bytes)", maxNs: 1.3, relTo: "BenchmarkHashTokens/xxhash-baseline/2048", zeroAlloc: true}},
	{"prefixcache", regexp.MustCompile(`^BenchmarkHashTokens/`), target{path: "hashing", zeroAlloc: true}},
	{"prefixcache", regexp.MustCompile(`^BenchmarkMatch/backends=64/all-hit$`), target{path: "match a 128-block prompt, 64 backends", maxNs: 2000, zeroAlloc: true}},
	{"prefixcache", regexp.MustCompile(`^BenchmarkMatch`), target{path: "match", zeroAlloc: true}},
	{"prefixcache", regexp.MustCompile(`^BenchmarkInsert/new(-below-capacity)?$`), target{path: "insert 128 new blocks", maxNs: 5000, zeroAlloc: true}},
	{"prefixcache", regexp.MustCompile(`^BenchmarkInsert`), target{path: "insert", zeroAlloc: true}},
	{"routing", regexp.MustCompile(`^BenchmarkPick/backends=100$`), target{path: "router pick, 100 backends, 4 scorers incl. prefix match", maxNs: 3000, zeroAlloc: true}},
	{"routing", regexp.MustCompile(`^BenchmarkPick(Peers|Profiles|Parts|Insert|Outlier|Latency)?/`), target{path: "pick", zeroAlloc: true}},
	{"outlier", regexp.MustCompile(`^BenchmarkPickOutlier/`), target{path: "pick with outlier detection", zeroAlloc: true}},
	{"latency", regexp.MustCompile(`^BenchmarkLinear/predict$`), target{path: "learned latency model: one prediction", maxNs: 1000, zeroAlloc: true}},
	{"latency", regexp.MustCompile(`^BenchmarkLinear/`), target{path: "learned latency model", zeroAlloc: true}},
	{"flowcontrol", regexp.MustCompile(`^BenchmarkAdmitDone/.*flows=100000`), target{path: "admit + done, 100,000 backlogged flows", maxNs: 500, zeroAlloc: true}},
	{"flowcontrol", regexp.MustCompile(`^BenchmarkAdmitDone`), target{path: "admission", zeroAlloc: true}},
}

func targetFor(pkg, name string) *target {
	for i := range targets {
		t := &targets[i]
		if (pkg == t.pkg || strings.HasSuffix(pkg, "/"+t.pkg)) && t.name.MatchString(name) {
			return &t.t
		}
	}
	return nil
}

// timeOf is the figure a target is checked against: CPU time per op when reported, else
// wall time.
func (r row) timeOf() (float64, string) {
	if v, ok := r.median["cpu-ns/op"]; ok {
		return v, "cpu-ns/op"
	}
	return r.median["ns/op"], "ns/op"
}

// verdict says whether r meets its target: "met", "missed" or "" (no time target).
func verdict(r row, rows []row) (string, string) {
	t := r.target
	if t == nil || t.maxNs == 0 {
		return "", ""
	}
	v, _ := r.timeOf()
	bound := t.maxNs
	if t.relTo != "" {
		i := slices.IndexFunc(rows, func(o row) bool { return o.pkg == r.pkg && o.name == t.relTo })
		if i < 0 {
			return "", ""
		}
		base, _ := rows[i].timeOf()
		bound *= base
		if v <= bound {
			return "met", fmt.Sprintf("≤ %.2g× %s (%.2f×)", t.maxNs, short(t.relTo), v/base)
		}
		return "missed", fmt.Sprintf("≤ %.2g× %s (%.2f×)", t.maxNs, short(t.relTo), v/base)
	}
	if v <= bound {
		return "met", "≤ " + dur(bound)
	}
	return "missed", "≤ " + dur(bound)
}

// verdicts lists the broken promises asked for: an allocation where none is promised, a
// missed time target.
func verdicts(rows []row, allocs, times bool) []string {
	var bad []string
	for _, r := range rows {
		if r.target == nil {
			continue
		}
		if a, ok := r.median["allocs/op"]; allocs && ok && r.target.zeroAlloc && a > 0 {
			bad = append(bad, fmt.Sprintf("%s %s: %g allocs/op, promised 0", r.pkg, r.name, a))
		}
		if v, goal := verdict(r, rows); times && v == "missed" {
			t, unit := r.timeOf()
			bad = append(bad, fmt.Sprintf("%s %s: %s %s, target %s", r.pkg, r.name, dur(t), unit, goal))
		}
	}
	return bad
}

type page struct {
	rows          []row
	meta          machine
	command, date string
	extra         string
}

func write(w io.Writer, p page) {
	fmt.Fprintf(w, "# usher's benchmarks\n\n")
	fmt.Fprintf(w, "Generated by `bench/benchmarks.sh` on %s; do not edit by hand. Each figure is the median over\n", p.date)
	fmt.Fprintf(w, "the runs of `go test -bench` (range in brackets). Time targets are DESIGN.md's and are checked\n")
	fmt.Fprintf(w, "against CPU time per op where the benchmark reports it (cpu-ns/op, the benchmark thread's own\n")
	fmt.Fprintf(w, "CPU time), which a busy machine distorts less than wall time.\n\n")
	fmt.Fprintf(w, "- machine: %s/%s, %s\n", p.meta.goos, p.meta.goarch, orDash(p.meta.cpu))
	if p.command != "" {
		fmt.Fprintf(w, "- command: `%s`\n", p.command)
	}
	fmt.Fprintln(w)

	var pkgs []string
	for _, r := range p.rows {
		if !slices.Contains(pkgs, r.pkg) {
			pkgs = append(pkgs, r.pkg)
		}
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		fmt.Fprintf(w, "## %s\n\n", pkg)
		fmt.Fprintln(w, "| benchmark | runs | time/op | CPU/op | B/op | allocs/op | target |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
		for _, r := range p.rows {
			if r.pkg != pkg {
				continue
			}
			goal := ""
			if v, g := verdict(r, p.rows); v != "" {
				goal = fmt.Sprintf("%s: **%s**", g, v)
			}
			if r.target != nil && r.target.zeroAlloc {
				if goal != "" {
					goal += "; "
				}
				if a, ok := r.median["allocs/op"]; !ok || a == 0 {
					goal += "0 allocs"
				} else {
					goal += "0 allocs: **missed**"
				}
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", strings.TrimPrefix(r.name, "Benchmark"), r.runs,
				rangeOf(r, "ns/op", dur), rangeOf(r, "cpu-ns/op", dur), num(r, "B/op"), num(r, "allocs/op"), goal)
		}
		fmt.Fprintln(w)
	}
	if strings.TrimSpace(p.extra) != "" {
		fmt.Fprintf(w, "## Other measurements\n\n%s\n", strings.TrimSpace(p.extra))
	}
}

func rangeOf(r row, unit string, format func(float64) string) string {
	v, ok := r.median[unit]
	if !ok {
		return ""
	}
	if r.runs == 1 || r.min[unit] == r.max[unit] {
		return format(v)
	}
	return fmt.Sprintf("%s (%s–%s)", format(v), format(r.min[unit]), format(r.max[unit]))
}

func num(r row, unit string) string {
	v, ok := r.median[unit]
	if !ok {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// dur formats nanoseconds with three significant digits.
func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns", ns)
}

func short(name string) string { return strings.TrimPrefix(name, "Benchmark") }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
