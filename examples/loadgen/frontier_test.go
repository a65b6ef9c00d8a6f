package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// syntheticReport is a report with the figures the frontier reads: first turns and later
// turns sent, rejected and their TTFT (ms), and the throughput.
func syntheticReport(label string, first, later TurnClass, rps float64) Report {
	return Report{Label: label, Target: "target", URL: "http://127.0.0.1:18090", Workload: "synthetic: seed 1",
		Seconds: 60, Requests: first.Requests + later.Requests, RequestsPerSec: rps, FirstTurn: first, LaterTurns: later}
}

func turns(sent, r429, r503 int, p50, p99 float64) TurnClass {
	c := TurnClass{Requests: sent, Rejected429: r429, Rejected503: r503, OK: sent - r429 - r503}
	if c.OK > 0 {
		c.TTFT = Dist{Count: c.OK, P50: p50, P90: p99, P99: p99, Mean: p50, Max: p99}
	}
	return c
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// frontierDir writes three reports as frontier.sh does, in a temporary directory, and
// returns it and their paths in the script's order. The third has no label: its file names
// it.
func frontierDir(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	reps := []struct {
		file string
		rep  Report
	}{
		{"turn-priority.json", syntheticReport("turn-priority", turns(119, 0, 43, 17250, 19860), turns(282, 0, 0, 300, 2160), 3.72)},
		{"fcfs.json", syntheticReport("fcfs", turns(119, 0, 0, 5850, 12570), turns(413, 0, 0, 6810, 12870), 3.98)},
		{"bounded-wait-10s.json", syntheticReport("", turns(119, 2, 0, 10460, 12780), turns(413, 0, 3, 4590, 12760), 3.91)},
	}
	var paths []string
	for _, r := range reps {
		p := filepath.Join(dir, r.file)
		writeJSON(t, p, r.rep)
		paths = append(paths, p)
	}
	return dir, paths
}

// checkPlots checks that dir holds a PNG and an SVG frontier.
func checkPlots(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "frontier.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("frontier.png starts with %q, not the PNG signature", b[:min(8, len(b))])
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width != 576 || cfg.Height != 432 {
		t.Errorf("frontier.png: %dx%d, %v; want 576x432", cfg.Width, cfg.Height, err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "frontier.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.HasPrefix(s, "<?xml") || !strings.Contains(s, "<svg") || !strings.HasSuffix(strings.TrimSpace(s), "</svg>") {
		t.Errorf("frontier.svg is not an SVG document (%d bytes): %.80q", len(b), s)
	}
}

func TestFrontierReport(t *testing.T) {
	dir, paths := frontierDir(t)
	plots := filepath.Join(dir, "plots") // created by the mode
	var stdout, stderr bytes.Buffer
	args := append([]string{"-frontier", plots, "-title", "test frontier"}, paths...)
	if code := cli(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	want := []string{
		"| policy | first sent | first 429/503 | first TTFT p50 / p99 | later sent | later 429/503 | later TTFT p50 / p99 | req/s |",
		"|---|---:|---:|---|---:|---:|---|---:|",
		"| turn-priority | 119 | 0/43 | 17.25 / 19.86 s | 282 | 0/0 | 0.30 / 2.16 s | 3.72 |",
		"| fcfs | 119 | 0/0 | 5.85 / 12.57 s | 413 | 0/0 | 6.81 / 12.87 s | 3.98 |",
		"| bounded-wait-10s | 119 | 2/0 | 10.46 / 12.78 s | 413 | 0/3 | 4.59 / 12.76 s | 3.91 |",
	}
	tables := strings.SplitN(strings.TrimSpace(stdout.String()), "\n\n", 2)
	if got := strings.Split(tables[0], "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", stdout.String(), strings.Join(want, "\n"))
	}
	if len(tables) != 2 || len(strings.Split(tables[1], "\n")) != 5 || !strings.Contains(tables[1], "| fcfs | 1 | 0 | 12.57s |") {
		t.Errorf("no task table with a row per run after the frontier table:\n%s", stdout.String())
	}
	checkPlots(t, plots)
	if !strings.Contains(stderr.String(), "frontier.svg") {
		t.Errorf("stderr does not name the plots: %q", stderr.String())
	}

	// With no files, every DIR/*.json in name order.
	stdout.Reset()
	if code := cli(context.Background(), []string{"-frontier", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("directory: exit %d, stderr:\n%s", code, stderr.String())
	}
	rows := strings.Split(strings.SplitN(strings.TrimSpace(stdout.String()), "\n\n", 2)[0], "\n")
	if len(rows) != 5 || !strings.HasPrefix(rows[2], "| bounded-wait-10s |") || !strings.HasPrefix(rows[4], "| turn-priority |") {
		t.Errorf("directory table:\n%s", stdout.String())
	}
	checkPlots(t, dir)
}

// A report without a completed later turn is in the table but not on the plot.
func TestFrontierUnplottable(t *testing.T) {
	dir, paths := frontierDir(t)
	none := filepath.Join(dir, "las.json")
	writeJSON(t, none, syntheticReport("las", turns(10, 0, 0, 100, 200), turns(5, 0, 5, 0, 0), 0.1))
	var stdout, stderr bytes.Buffer
	if code := cli(context.Background(), []string{"-frontier", dir, paths[0], none}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "| las | 10 | 0/0 | 0.10 / 0.20 s | 5 | 0/5 | - | 0.10 |") {
		t.Errorf("table:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "not plotted, without a completed first and later turn: las") {
		t.Errorf("stderr: %s", stderr.String())
	}
	checkPlots(t, dir)
}

func TestFrontierBadInput(t *testing.T) {
	dir, paths := frontierDir(t)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	malformed := write("malformed.json", `{"label": "x", "first_turn": {`)
	empty := write("empty.json", "")
	overhead := write("overhead.json", `{"direct": {}, "gateway": {}, "throughput_ratio": 1}`)
	unplottable := write("unplottable.json", `{"target": "t", "first_turn": {"requests": 3, "rejected_503": 3}, "later_turns": {}}`)
	missing := filepath.Join(dir, "missing.json")
	emptyDir := t.TempDir()
	tests := []struct {
		name  string
		args  []string
		code  int
		err   string // in stderr
		row   string // a row of the table, printed all the same ("": no table)
		plots bool   // the plots of the readable reports are written
	}{
		{"missing file", []string{"-frontier", dir, paths[0], missing}, 1, "1 of 2 reports unreadable: open " + missing + ": no such file",
			"| missing | no report (open " + missing + ": no such file or directory) |", true},
		{"malformed", []string{"-frontier", dir, malformed}, 1, "malformed.json: no loadgen -json report: unexpected end of JSON input", "| malformed | no report (", false},
		{"empty file", []string{"-frontier", dir, empty}, 1, "empty.json: no loadgen -json report", "| empty | no report (", false},
		{"not a report", []string{"-frontier", dir, overhead}, 1, "overhead.json: no loadgen -json report: no target, first_turn or later_turns", "| overhead | no report (", false},
		{"nothing to plot", []string{"-frontier", dir, unplottable}, 1, "no report with a completed first turn and a completed later turn", "| unplottable | 3 | 0/3 | - | 0 | 0/0 | - | 0.00 |", false},
		{"no reports", []string{"-frontier", emptyDir}, 1, "no loadgen -json report in " + emptyDir, "", false},
		{"no directory", []string{"-frontier", filepath.Join(dir, "nowhere")}, 1, "nowhere: no such file", "", false},
		{"stray arguments", []string{"x.json"}, 2, "unexpected arguments", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "frontier.png"))
			os.Remove(filepath.Join(dir, "frontier.svg"))
			var stdout, stderr bytes.Buffer
			code := cli(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.err) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tt.code, tt.err)
			}
			if tt.row == "" && stdout.Len() > 0 || tt.row != "" && !strings.Contains(stdout.String(), "\n"+tt.row) {
				t.Errorf("stdout:\n%s\nwant the row %q", stdout.String(), tt.row)
			}
			_, err := os.Stat(filepath.Join(dir, "frontier.png"))
			if got := err == nil; got != tt.plots {
				t.Errorf("plots written %v, want %v", got, tt.plots)
			}
		})
	}
}

func TestPolicyOf(t *testing.T) {
	for _, tt := range []struct{ label, want string }{
		{"fcfs", "fcfs"},
		{"fcfs+shed", "fcfs+shed"},
		{"turn-priority", "turn-priority"},
		{"bounded-wait-5s", "bounded-wait"},
		{"bounded-wait-10s+shed", "bounded-wait+shed"},
		{"bounded-wait-", "bounded-wait-"},
		{"las", "las"},
	} {
		if got := policyOf(tt.label); got != tt.want {
			t.Errorf("policyOf(%q) = %q, want %q", tt.label, got, tt.want)
		}
	}
}

// The real thing, briefly: two labelled -json runs against a simulated server, then the
// frontier of their reports.
func TestFrontierEndToEnd(t *testing.T) {
	url := startSim(t)
	dir := t.TempDir()
	var paths []string
	for _, label := range []string{"fcfs", "turn-priority"} {
		var stdout, stderr bytes.Buffer
		code := cli(context.Background(), []string{"-url", url, "-json", "-quiet", "-label", label, "-retries", "0",
			"-duration", "1s", "-rate", "6", "-system-tokens", "400", "-min-turns", "2", "-max-turns", "3", "-think", "50ms",
			"-min-answer", "4", "-max-answer", "12", "-session-context", "4000", "-single-turn", "0"}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr:\n%s", label, code, stderr.String())
		}
		p := filepath.Join(dir, label+".json")
		if err := os.WriteFile(p, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var stdout, stderr bytes.Buffer
	if code := cli(context.Background(), append([]string{"-frontier", dir}, paths...), &stdout, &stderr); code != 0 {
		t.Fatalf("frontier: exit %d, stderr:\n%s", code, stderr.String())
	}
	rows := strings.Split(strings.SplitN(strings.TrimSpace(stdout.String()), "\n\n", 2)[0], "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[2], "| fcfs | ") || !strings.HasPrefix(rows[3], "| turn-priority | ") ||
		strings.Contains(stdout.String(), "| - |") {
		t.Errorf("table:\n%s", stdout.String())
	}
	checkPlots(t, dir)
}

func TestTable(t *testing.T) {
	dir := t.TempDir()
	rep := Report{Label: "three-synced", Requests: 10, OK: 9, Errors: 1, Rejected503: 1, HitRate: 0.5,
		TTFT: Dist{Count: 9, P50: 120, P99: 900}, LaterTurns: TurnClass{Requests: 6, HitRate: 0.75}, FirstTurn: TurnClass{Requests: 4}}
	b, _ := json.Marshal(rep)
	good := filepath.Join(dir, "a.json")
	os.WriteFile(good, b, 0o644)
	var out, errb bytes.Buffer
	if code := cli(context.Background(), []string{"-table", good}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "| three-synced | 10 | 1 | 0/1 | 0.750 | 0.500 | 0.12 / 0.90 s |"; !strings.Contains(out.String(), want) {
		t.Errorf("table:\n%s\nwant the row %s", out.String(), want)
	}
	out.Reset()
	if code := cli(context.Background(), []string{"-table", filepath.Join(dir, "missing.json")}, &out, &errb); code != 1 || !strings.Contains(out.String(), "no report") {
		t.Errorf("missing report: exit %d, table %q", code, out.String())
	}
	if code := cli(context.Background(), []string{"-table"}, &out, &errb); code != 2 {
		t.Errorf("-table without reports: exit %d, want 2", code)
	}
}

// Runs of one policy (equal labels) make one row of the task table: the median of the runs
// and, where they differ, their range.
func TestTaskTableMedians(t *testing.T) {
	rep := func(abandoned int, mean float64, rps float64) *Report {
		r := syntheticReport("las", turns(100, 0, 0, 200, 900), turns(300, 0, 2, 400, 9000), rps)
		r.Tasks = TaskStats{Sessions: 100, Completed: 100 - abandoned, Abandoned: abandoned, Censored: 0,
			AbandonedShare: float64(abandoned) / 100, Time: Dist{Count: 100 - abandoned, Mean: mean, P50: mean, P90: 2 * mean},
			Response: Dist{Count: 100 - abandoned, Mean: mean / 2}}
		return &r
	}
	runs := []frontierRun{
		{label: "las", rep: rep(10, 50000, 3.9)},
		{label: "fcfs", err: errNoReport},
		{label: "las", rep: rep(0, 70000, 4.1)},
		{label: "las", rep: rep(5, 60000, 4.0)},
	}
	var out bytes.Buffer
	writeTaskTable(&out, runs)
	for _, want := range []string{
		"| las | 3 | 0 | 0.90s | 2 | 0.40s | 9.00s | 95 (90–100) | 5.0% (0.0%–10.0%) | 0 | 60.0s (50.0s–70.0s) | 60.0s (50.0s–70.0s) | 120.0s (100.0s–140.0s) | 30.0s (25.0s–35.0s) | 4.00 (3.90–4.10) |",
		"| fcfs | no report |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("task table:\n%s\nwant the row\n%s", out.String(), want)
		}
	}
	if strings.Index(out.String(), "| las |") > strings.Index(out.String(), "| fcfs |") {
		t.Errorf("rows not in the order their labels first appear:\n%s", out.String())
	}
	// The plot draws the three runs of las as one point, labelled once.
	path := filepath.Join(t.TempDir(), "f.svg")
	if _, err := plotFrontier(runs, "runs", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), ">las<"); n != 1 {
		t.Errorf("the plot labels las %d times, want once", n)
	}
}
