package bench

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// pngSignature is the first eight bytes of every PNG file.
var pngSignature = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// checkPlot fails the test unless path holds a PNG (by its signature) or an SVG document, as
// its extension says, and returns the file's contents.
func checkPlot(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		if !bytes.HasPrefix(b, pngSignature) {
			t.Errorf("%s: first bytes %q, want the PNG signature", path, b[:min(8, len(b))])
		}
	case ".svg":
		if !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s: no <svg element in %d bytes", path, len(b))
		}
	default:
		t.Fatalf("checkPlot(%q): not a .png or .svg", path)
	}
	return b
}

// frontierRun is a hand-made run for the frontier: first-turn p99 wait, later-turn p50 TTFT
// (zero completed later turns when laterTTFT is 0) and requests shed.
func frontierRun(workload, policy, router string, rate float64, seed uint64, wait, laterTTFT time.Duration, shed int) *Result {
	r := &Result{
		Workload: workload, Policy: policy, Router: router, Rate: rate, Seed: seed,
		Sent: 100, Completed: 100 - shed, TTFT: Percentiles{P50: laterTTFT / 2, P99: 3 * laterTTFT},
		First: TurnStats{WaitP99: wait, Expired: shed},
	}
	if laterTTFT > 0 {
		r.Later = TurnStats{Sent: 50, Completed: 50, TTFT: Percentiles{P50: laterTTFT, P99: 2 * laterTTFT}}
	}
	return r
}

// frontierCells are the cells of one workload and rate under five policies and two routers,
// three seeds each; "vtc" never completes a later turn.
func frontierCells() []*Cell {
	var rs []*Result
	for _, router := range []string{"usher", "sglang"} {
		for seed := uint64(1); seed <= 3; seed++ {
			d := time.Duration(seed) * 100 * time.Millisecond
			if router == "sglang" {
				d += 7 * time.Second // apart from usher's points, so that each has its own label
			}
			rs = append(rs,
				frontierRun("chat", "fcfs", router, 4, seed, 2*time.Second+d, 3*time.Second, 0),
				frontierRun("chat", "turn-priority", router, 4, seed, 9*time.Second+d, time.Second, 12),
				frontierRun("chat", "turn-priority+shed", router, 4, seed, 5*time.Second+d, time.Second, 30),
				frontierRun("chat", "bw-10s", router, 4, seed, 4*time.Second+d, 1500*time.Millisecond, 3),
				frontierRun("chat", "vtc", router, 4, seed, time.Second, 0, 0),
			)
		}
	}
	return Cells(rs)
}

func TestPlotFrontier(t *testing.T) {
	cells := frontierCells()
	dir := t.TempDir()
	for _, ext := range []string{".png", ".svg", ".SVG"} {
		path := filepath.Join(dir, "frontier"+ext)
		if err := PlotFrontier(cells, "chat at load ×4", path); err != nil {
			t.Fatalf("PlotFrontier(%s): %v", ext, err)
		}
		b := checkPlot(t, path)
		if ext == ".png" {
			continue
		}
		svg := string(b)
		for _, want := range []string{
			"usher/fcfs", "sglang/turn-priority+shed", "usher/bw-10s", // two routers: labels prefixed
			"FCFS", "turn-priority", "turn-priority+shed", "other", // legend
			"newcomer p99 wait (s)", "later-turn p50 TTFT (s)", "chat at load ×4",
			"marker area: requests shed (max 30)",
		} {
			if !strings.Contains(svg, ">"+want) {
				t.Errorf("frontier SVG lacks the text %q", want)
			}
		}
		if strings.Contains(svg, "vtc") {
			t.Errorf("frontier SVG labels vtc, whose cells completed no later turn")
		}
	}

	// One router: labels are the bare policy names.
	var usher []*Cell
	for _, c := range cells {
		if c.Router == "usher" {
			usher = append(usher, c)
		}
	}
	path := filepath.Join(dir, "usher.svg")
	if err := PlotFrontier(usher, "usher", path); err != nil {
		t.Fatal(err)
	}
	svg := string(checkPlot(t, path))
	if !strings.Contains(svg, ">turn-priority+shed<") || strings.Contains(svg, "usher/") {
		t.Errorf("one-router frontier: want labels without the router prefix")
	}
}

// TestFrontierLabels: points within 1% of the axes' spans share one label naming them all,
// with the largest of their sheds; points apart keep their own.
func TestFrontierLabels(t *testing.T) {
	pts := []FrontierPoint{
		{X: 20, Y: 0.22, Shed: 192, Label: "turn-priority"},
		{X: 1, Y: 4, Label: "fcfs"},
		{X: 19.9, Y: 0.221, Shed: 200, Label: "bw-30s"},
		{X: 20, Y: 0.22, Shed: 10, Label: "bw-45s"},
		{X: 15, Y: 0.3, Label: "bw-20s"},
	}
	got := frontierLabels(pts)
	want := []FrontierPoint{
		{X: 20, Y: 0.22, Shed: 200, Label: "turn-priority, bw-30s, bw-45s"},
		{X: 1, Y: 4, Label: "fcfs"},
		{X: 15, Y: 0.3, Label: "bw-20s"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("frontierLabels = %+v, want %+v", got, want)
	}
}

// TestPlotFrontierPoints: points measured elsewhere, with their own axis names, and the
// inputs it refuses.
func TestPlotFrontierPoints(t *testing.T) {
	dir := t.TempDir()
	pts := []FrontierPoint{
		{X: 19.9, Y: 0.3, Shed: 43, Label: "turn-priority", Policy: "turn-priority"},
		{X: 12.6, Y: 6.8, Label: "fcfs", Policy: "fcfs"},
		{X: 12.8, Y: 4.6, Label: "bounded-wait-10s", Policy: "bounded-wait"},
	}
	path := filepath.Join(dir, "f.svg")
	axes := FrontierAxes{X: "first-turn p99 TTFT (s)", Shed: "first turns rejected"}
	if err := PlotFrontierPoints(pts, axes, "real processes", path); err != nil {
		t.Fatal(err)
	}
	svg := string(checkPlot(t, path))
	for _, want := range []string{"first-turn p99 TTFT (s)", "later-turn p50 TTFT (s)", "marker area: first turns rejected (max 43)", "turn-priority", "bounded-wait-10s", "real processes"} {
		if !strings.Contains(svg, ">"+want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	for _, bad := range []FrontierPoint{{X: -1}, {Y: math.NaN()}, {Shed: math.Inf(1)}} {
		if err := PlotFrontierPoints([]FrontierPoint{bad}, FrontierAxes{}, "", path); !errors.Is(err, ErrPlotInput) {
			t.Errorf("point %+v: err %v, want ErrPlotInput", bad, err)
		}
	}
	if err := PlotFrontierPoints(nil, FrontierAxes{}, "", path); !errors.Is(err, ErrNothingToPlot) {
		t.Errorf("no points: err %v, want ErrNothingToPlot", err)
	}
}

// TestFrontierPoints checks the frontier's points against their cells' medians over seeds,
// and that a cell is skipped when no run completed a later turn and kept (on the runs that
// did) when some did.
func TestFrontierPoints(t *testing.T) {
	rs := []*Result{
		frontierRun("chat", "fcfs", "usher", 4, 1, 1*time.Second, 4*time.Second, 2),
		frontierRun("chat", "fcfs", "usher", 4, 2, 5*time.Second, 2*time.Second, 9),
		frontierRun("chat", "fcfs", "usher", 4, 3, 3*time.Second, 9*time.Second, 4),
		frontierRun("chat", "vtc", "usher", 4, 1, 1*time.Second, 0, 0),
		frontierRun("chat", "las", "usher", 4, 1, 1*time.Second, 0, 0),
		frontierRun("chat", "las", "usher", 4, 2, 7*time.Second, 6*time.Second, 1),
	}
	pts := frontierPoints(Cells(rs))
	want := []FrontierPoint{
		{X: 3, Y: 4, Shed: 4, Label: "fcfs", Policy: "fcfs"},
		{X: 4, Y: 6, Shed: 0.5, Label: "las", Policy: "las"}, // y over the one run with later turns
	}
	if !slices.Equal(pts, want) {
		t.Errorf("frontierPoints = %+v; want %+v", pts, want)
	}
}

func TestFrontierGroupOf(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   string
	}{
		{"fcfs", "FCFS"},
		{"fcfs+shed", "FCFS+shed"},
		{"turn-priority", "turn-priority"},
		{"turn-priority+shed", "turn-priority+shed"},
		{"turn-priority", "turn-priority"}, // the gateway's name
		{"turn-priority+shed", "turn-priority+shed"},
		{"las", "other"},
		{"bw-10s+shed", "other+shed"},
		{"fcfs-ish", "other"},
	} {
		if got := frontierGroups[frontierGroupOf(tc.policy)].name; got != tc.want {
			t.Errorf("frontierGroupOf(%q) = %q, want %q", tc.policy, got, tc.want)
		}
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	noLater := Cells([]*Result{frontierRun("chat", "fcfs", "usher", 4, 1, time.Second, 0, 0)})
	noneDone := Cells([]*Result{{Workload: "chat", Policy: "fcfs", Router: "usher", Rate: 4, Sent: 10}})
	good := frontierCells()
	png := filepath.Join(dir, "x.png")
	missing := filepath.Join(dir, "no", "such", "dir", "x.png")
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: any error that is neither sentinel
	}{
		{"frontier of no cells", PlotFrontier(nil, "", png), ErrNothingToPlot},
		{"frontier without later turns", PlotFrontier(noLater, "", png), ErrNothingToPlot},
		{"frontier to .txt", PlotFrontier(good, "", filepath.Join(dir, "x.txt")), ErrPlotInput},
		{"frontier without extension", PlotFrontier(good, "", filepath.Join(dir, "x")), ErrPlotInput},
		{"frontier into a missing directory", PlotFrontier(good, "", missing), nil},
		{"knee of no cells", PlotKnee(nil, "", png), ErrNothingToPlot},
		{"knee without completions", PlotKnee(noneDone, "", png), ErrNothingToPlot},
		{"knee to .pdf", PlotKnee(good, "", filepath.Join(dir, "x.pdf")), ErrPlotInput},
		{"knee into a missing directory", PlotKnee(good, "", missing), nil},
		{"hit/KV of no points", PlotHitVsKV(nil, "", png), ErrNothingToPlot},
		{"hit/KV with 0 blocks", PlotHitVsKV([]KVPoint{{"usher", 0, 0.9}}, "", png), ErrPlotInput},
		{"hit/KV with NaN", PlotHitVsKV([]KVPoint{{"usher", 100, math.NaN()}}, "", png), ErrPlotInput},
		{"hit/KV with +Inf", PlotHitVsKV([]KVPoint{{"usher", 100, math.Inf(1)}}, "", png), ErrPlotInput},
		{"hit/KV to .jpg", PlotHitVsKV([]KVPoint{{"usher", 100, 0.9}}, "", filepath.Join(dir, "x.jpg")), ErrPlotInput},
		{"hit/KV into a missing directory", PlotHitVsKV([]KVPoint{{"usher", 100, 0.9}}, "", missing), nil},
	} {
		switch {
		case tc.err == nil:
			t.Errorf("%s: no error", tc.name)
		case tc.want != nil && !errors.Is(tc.err, tc.want):
			t.Errorf("%s: error %v, want %v", tc.name, tc.err, tc.want)
		case tc.want == nil && (errors.Is(tc.err, ErrNothingToPlot) || errors.Is(tc.err, ErrPlotInput)):
			t.Errorf("%s: error %v, want the file system's", tc.name, tc.err)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("failed plots left files behind: %v (%v)", ents, err)
	}
}

// kneeCells are the cells of one workload at three rates under two routers (and, with
// policies, under two policies), two seeds each.
func kneeCells(policies ...string) []*Cell {
	var rs []*Result
	for _, rate := range []float64{6, 2, 4} { // out of order: the lines sort by rate
		for _, p := range policies {
			for _, router := range []string{"usher", "dynamo"} {
				for seed := uint64(1); seed <= 2; seed++ {
					ttft := time.Duration(rate*rate) * time.Second / time.Duration(seed)
					rs = append(rs, frontierRun("chat", p, router, rate, seed, time.Second, ttft, 0))
				}
			}
		}
	}
	return Cells(rs)
}

func TestPlotKnee(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		cells    []*Cell
		want     []string
		unwanted string
	}{
		{"one policy", kneeCells("fcfs"), []string{">usher<", ">dynamo<", ">load ×<", ">p99 TTFT (s)<"}, "fcfs"},
		{"two policies", kneeCells("fcfs", "turn-priority"), []string{">fcfs/usher<", ">turn-priority/dynamo<"}, ""},
	} {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+ext)
			if err := PlotKnee(tc.cells, "chat: knee", path); err != nil {
				t.Fatalf("%s: PlotKnee: %v", tc.name, err)
			}
			b := string(checkPlot(t, path))
			if ext != ".svg" {
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(b, w) {
					t.Errorf("%s: knee SVG lacks %q", tc.name, w)
				}
			}
			if tc.unwanted != "" && strings.Contains(b, tc.unwanted) {
				t.Errorf("%s: knee SVG names %q, the only policy", tc.name, tc.unwanted)
			}
		}
	}
}

func TestPlotHitVsKV(t *testing.T) {
	dir := t.TempDir()
	var wide []KVPoint
	for _, kv := range []int{250, 500, 1000, 2000, 4500} {
		wide = append(wide,
			KVPoint{"usher", kv, 0.5 + float64(kv)/10000},
			KVPoint{"usher", kv, 0.55 + float64(kv)/10000}, // a second seed: drawn as the median
			KVPoint{"round-robin", kv, 0.2 + float64(kv)/20000})
	}
	narrow := []KVPoint{{"usher", 4000, 0.95}, {"usher", 4500, 0.97}, {"sglang", 4500, 0.9}}
	for _, tc := range []struct {
		name   string
		points []KVPoint
		ticks  []string // tick labels the SVG must have
	}{
		{"log scale", wide, []string{">250<", ">4500<", ">usher<", ">round-robin<", ">KV blocks per server<", ">hit rate / ideal<"}},
		{"linear scale", narrow, []string{">usher<", ">sglang<"}},
	} {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+ext)
			if err := PlotHitVsKV(tc.points, "hit rate against KV cache", path); err != nil {
				t.Fatalf("%s: PlotHitVsKV: %v", tc.name, err)
			}
			b := string(checkPlot(t, path))
			if ext != ".svg" {
				continue
			}
			for _, w := range tc.ticks {
				if !strings.Contains(b, w) {
					t.Errorf("%s: SVG lacks %q", tc.name, w)
				}
			}
		}
	}
}

func TestBlockTicks(t *testing.T) {
	var pts []KVPoint
	for i := 30; i >= 1; i-- { // 30 distinct counts, each twice, out of order
		pts = append(pts, KVPoint{"a", 100 * i, 1}, KVPoint{"b", 100 * i, 1})
	}
	ticks := blockTicks(pts)
	if len(ticks) != 30 || ticks[0].Value != 100 || ticks[29].Value != 3000 {
		t.Fatalf("blockTicks: %d ticks from %g to %g, want 30 from 100 to 3000", len(ticks), ticks[0].Value, ticks[len(ticks)-1].Value)
	}
	labelled := 0
	for _, tk := range ticks {
		if tk.Label != "" {
			labelled++
		}
	}
	if labelled > 12 || ticks[0].Label != "100" {
		t.Errorf("blockTicks labels %d ticks (want ≤ 12), first %q (want \"100\")", labelled, ticks[0].Label)
	}
}

func TestWritePlots(t *testing.T) {
	var results []*Result
	for _, c := range kneeCells("fcfs", "turn-priority") {
		results = append(results, c.Runs...)
	}
	// A second workload at one rate, without later turns: no frontier, no knee.
	results = append(results, frontierRun("prefix group", "fcfs", "usher", 2, 1, time.Second, 0, 0))
	dir := filepath.Join(t.TempDir(), "plots") // created by WritePlots
	paths, err := WritePlots(dir, results)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range paths {
		checkPlot(t, p)
		got = append(got, filepath.Base(p))
	}
	want := []string{
		"frontier-chat-x2.png", "frontier-chat-x2.svg",
		"frontier-chat-x4.png", "frontier-chat-x4.svg",
		"frontier-chat-x6.png", "frontier-chat-x6.svg",
		"knee-chat.png", "knee-chat.svg",
	}
	if !slices.Equal(got, want) {
		t.Errorf("WritePlots wrote %q, want %q", got, want)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != len(want) {
		t.Errorf("plot directory holds %d files, want %d (%v)", len(ents), len(want), err)
	}
}

func TestFileSafe(t *testing.T) {
	for in, want := range map[string]string{
		"mooncake":     "mooncake",
		"prefix-group": "prefix-group",
		"a/b c":        "a-b-c",
		"x_1.5":        "x_1.5",
	} {
		if got := fileSafe(in); got != want {
			t.Errorf("fileSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPlotFrontierSimulated plots the frontier of a short simulated comparison: two policies
// behind usher's router on a small closed-loop chat workload, tight enough to queue.
func TestPlotFrontierSimulated(t *testing.T) {
	w := tiny()
	var results []*Result
	for _, p := range []Policy{FCFSPolicy(), fairnessPolicy(t, turnPriorityName)} {
		res, err := Run(w, Config{Servers: 2, MaxInFlight: 4, Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		res.Rate = 1
		if res.Later.Completed == 0 {
			t.Fatalf("%s: no later turn completed; the workload is multi-turn", p.Name)
		}
		results = append(results, res)
	}
	cells := Cells(results)
	if len(cells) != 2 {
		t.Fatalf("%d cells, want 2", len(cells))
	}
	path := filepath.Join(t.TempDir(), "frontier.svg")
	if err := PlotFrontier(cells, "tiny chat", path); err != nil {
		t.Fatal(err)
	}
	svg := string(checkPlot(t, path))
	for _, want := range []string{">fcfs<", ">turn-priority<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("frontier of the simulation lacks the label %q", want)
		}
	}
}

// fairnessPolicy returns the matrix policy named name.
func fairnessPolicy(t *testing.T, name string) Policy {
	t.Helper()
	for _, p := range fairnessPolicies() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %q", name)
	return Policy{}
}

func TestPlotAttainment(t *testing.T) {
	dir := t.TempDir()
	curves := []AttainmentCurve{
		{Name: "aggregated", Points: []GoodputPoint{{0.5, 1}, {1, 0.95}, {1.5, 0.6}}},
		{Name: "always 5+3", Points: []GoodputPoint{{1.5, 0.2}, {0.5, 0.99}, {1, 0.92}}}, // drawn in rate order
		{Name: "empty"},
	}
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "attainment"+ext)
		if err := PlotAttainment(curves, 0.9, "long prompts", path); err != nil {
			t.Fatalf("PlotAttainment: %v", err)
		}
		b := string(checkPlot(t, path))
		if ext == ".svg" {
			for _, w := range []string{">aggregated<", ">always 5+3<", ">share attaining both targets<"} {
				if !strings.Contains(b, w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
		}
	}
	if err := PlotAttainment([]AttainmentCurve{{Name: "none"}}, 0.9, "", filepath.Join(dir, "x.png")); !errors.Is(err, ErrNothingToPlot) {
		t.Errorf("no points: got %v, want ErrNothingToPlot", err)
	}
	bad := []AttainmentCurve{{Name: "nan", Points: []GoodputPoint{{math.NaN(), 1}}}}
	if err := PlotAttainment(bad, 0.9, "", filepath.Join(dir, "x.png")); !errors.Is(err, ErrPlotInput) {
		t.Errorf("NaN: got %v, want ErrPlotInput", err)
	}
	if err := PlotAttainment(curves, 0.9, "", filepath.Join(dir, "x.jpg")); !errors.Is(err, ErrPlotInput) {
		t.Errorf(".jpg: got %v, want ErrPlotInput", err)
	}
}

// taskRun is frontierRun with sessions: completed of them, abandoned more, a mean task time.
func taskRun(policy string, seed uint64, wait time.Duration, shed, completed, abandoned int, mean time.Duration) *Result {
	r := frontierRun("agentic", policy, "usher", 24, seed, wait, time.Second, shed)
	r.Tasks = TaskStats{Sessions: completed + abandoned, Completed: completed, Abandoned: abandoned, TimeMean: mean}
	return r
}

// The task frontier: mean task time against newcomer wait, medians over the seeds, the share
// abandoned in the label when it is not negligible, a policy without a completed session left
// out; WritePlots draws it beside the admission frontier.
func TestPlotTaskFrontier(t *testing.T) {
	var results []*Result
	for seed := uint64(1); seed <= 3; seed++ {
		d := time.Duration(seed) * time.Second
		results = append(results,
			taskRun("fcfs", seed, 6*time.Second+d, 0, 400, 0, 150*time.Second+d),
			taskRun("las", seed, 200*time.Millisecond, 0, 340, 60, 118*time.Second+d),
			taskRun("turn-priority", seed, 20*time.Second, 190, 204, 196, 89*time.Second),
			taskRun("vtc", seed, time.Second, 0, 0, 400, 0))
	}
	cells := Cells(results)
	dir := t.TempDir()
	path := filepath.Join(dir, "task.svg")
	if err := PlotTaskFrontier(cells, "agentic at load ×24", path); err != nil {
		t.Fatal(err)
	}
	svg := string(checkPlot(t, path))
	for _, want := range []string{
		">fcfs<", ">las (15% abandoned)<", ">turn-priority (49% abandoned)<",
		">newcomer p99 wait (s)", ">mean task completion time (s)", "marker area: newcomers shed (max 190)",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("task frontier SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, "vtc") {
		t.Error("task frontier labels vtc, which completed no session")
	}
	pts := 0
	for _, c := range cells {
		if c.Policy == "fcfs" {
			pts++
			if got := c.Spread(func(r *Result) float64 { return r.Tasks.TimeMean.Seconds() }).Median; got != 152 {
				t.Errorf("fcfs median task time %v, want 152", got)
			}
		}
	}
	if pts != 1 {
		t.Fatalf("%d fcfs cells, want 1", pts)
	}
	if err := PlotTaskFrontier(cells[3:], "nothing", filepath.Join(dir, "none.png")); !errors.Is(err, ErrNothingToPlot) {
		t.Errorf("only vtc: %v, want ErrNothingToPlot", err)
	}
	if err := PlotTaskFrontier(cells, "x", filepath.Join(dir, "x.jpg")); !errors.Is(err, ErrPlotInput) {
		t.Errorf(".jpg: %v, want ErrPlotInput", err)
	}
	paths, err := WritePlots(filepath.Join(dir, "all"), results)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range paths {
		got = append(got, filepath.Base(p))
	}
	if want := []string{"frontier-agentic-x24.png", "frontier-agentic-x24.svg", "task-frontier-agentic-x24.png", "task-frontier-agentic-x24.svg"}; !slices.Equal(got, want) {
		t.Errorf("WritePlots wrote %q, want %q", got, want)
	}
}

// Survival curves on a log axis: named in the legend, bad input refused.
func TestPlotSurvival(t *testing.T) {
	x := []float64{64, 128, 256, 512, 1024}
	curves := []SurvivalCurve{
		{Name: "learned after 2,000 (KS 0.021)", X: x, Y: []float64{1, 0.8, 0.5, 0.2, 0}},
		{Name: "true", X: x, Y: []float64{1, 0.79, 0.52, 0.2, 0}, Dashed: true},
	}
	dir := t.TempDir()
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "survival"+ext)
		if err := PlotSurvival(curves, "trace-sessions: learned against true", path); err != nil {
			t.Fatal(err)
		}
		b := checkPlot(t, path)
		if ext == ".svg" {
			for _, want := range []string{">learned after 2,000 (KS 0.021)", ">true", ">session service (weighted tokens)", ">P(service ≥ x)", ">trace-sessions: learned against true"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("survival SVG lacks %q", want)
				}
			}
		}
	}
	for name, bad := range map[string]SurvivalCurve{
		"lengths":    {Name: "a", X: x, Y: []float64{1}},
		"descending": {Name: "b", X: []float64{2, 1}, Y: []float64{1, 1}},
		"zero x":     {Name: "c", X: []float64{0, 1}, Y: []float64{1, 1}},
		"y above 1":  {Name: "d", X: []float64{1, 2}, Y: []float64{1.5, 1}},
		"empty":      {Name: "e"},
	} {
		if err := PlotSurvival([]SurvivalCurve{bad}, "", filepath.Join(dir, "bad.png")); !errors.Is(err, ErrPlotInput) {
			t.Errorf("%s: %v, want ErrPlotInput", name, err)
		}
	}
	if err := PlotSurvival(nil, "", filepath.Join(dir, "none.png")); !errors.Is(err, ErrNothingToPlot) {
		t.Errorf("no curve: %v, want ErrNothingToPlot", err)
	}
	if err := PlotSurvival(curves, "", filepath.Join(dir, "x.gif")); !errors.Is(err, ErrPlotInput) {
		t.Errorf(".gif: %v, want ErrPlotInput", err)
	}
}
