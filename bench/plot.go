package bench

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Errors of the plots.
var (
	// ErrNothingToPlot is returned when no cell or point of a plot's input can be drawn.
	ErrNothingToPlot = errors.New("bench: nothing to plot")
	// ErrPlotInput is returned for an invalid point or an unsupported file extension.
	ErrPlotInput = errors.New("bench: bad plot input")
)

// Plot size: 6 × 4.5 inches (576 × 432 pixels in PNG at gonum's 96 dpi).
const (
	plotWidth  = 6 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// Marker radii of the frontier, in points: a cell that shed nothing gets frontierMinRadius, the
// one that shed most frontierMinRadius+frontierSpanRadius, and the area in between grows with
// the number shed (the radius with its square root).
const (
	frontierMinRadius  = 2
	frontierSpanRadius = 6
)

// PlotFrontier draws the admission frontier of cells — normally the cells of one workload at
// one rate under many policies, behind one router or several — and saves it to path, as PNG
// or SVG by the extension (.png, .svg).
//
// Each cell is one point: x is the median over its runs of First.WaitP99, the p99 wait of
// newcomers (first turns) in the gateway queue, in seconds; y is the median of Later.TTFT.P50,
// the p50 time to first token of later turns, in seconds, over the runs that completed a later
// turn. Both axes start at zero and are better low: the frontier is the lower-left edge. The
// marker's area grows with the median number of requests the cell shed (First.Shed() +
// Later.Shed()): radius 2 + 6·√(shed/maxShed) points, maxShed the largest over the plotted
// cells. Each point is labelled with its policy, prefixed with "router/" when the cells have
// more than one router.
// FCFS ("fcfs") and llm-d's turn-priority ("turn-priority") have their own colours and shapes,
// named in the legend, filled for the policy and hollow for its "+shed" twin; other policies
// are grey circles.
//
// Cells without a completed later turn in any run are skipped. PlotFrontier returns an error
// wrapping ErrNothingToPlot when no cell is left, ErrPlotInput for an unsupported extension,
// and the file system's error for a bad path. It is safe for concurrent use. O(cells·runs).
func PlotFrontier(cells []*Cell, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	pts := frontierPoints(cells)
	if len(pts) == 0 {
		return fmt.Errorf("%w: no cell with a completed later turn", ErrNothingToPlot)
	}
	return PlotFrontierPoints(pts, FrontierAxes{}, title, path)
}

// PlotTaskFrontier draws the admission frontier of cells with task completion time — the
// cells of one workload at one rate under many policies — and saves it to path, as PNG or SVG
// by the extension: x is the median over a cell's runs of First.WaitP99, the newcomers' p99
// wait, y the median of Tasks.TimeMean, the mean task completion time of the completed
// sessions, both in seconds; the marker's area grows with the median number of newcomers shed
// (First.Shed()). A point's label is its policy and, when the median share of abandoned
// sessions (TaskStats.AbandonedShare) is 5% or more, that share: a policy that abandons the
// long sessions completes the short ones, and its mean looks fast (below 5% the label stays
// short, so that the labels of policies that land together still fit). Styles, label merging and
// routers are PlotFrontier's.
//
// Cells without a completed session in any run are skipped. Errors are PlotFrontier's. It is
// safe for concurrent use. O(cells·runs).
func PlotTaskFrontier(cells []*Cell, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	routers := make(map[string]bool)
	for _, c := range cells {
		routers[c.Router] = true
	}
	var pts []FrontierPoint
	for _, c := range cells {
		var mean []float64
		for _, r := range c.Runs {
			if r.Tasks.Completed > 0 {
				mean = append(mean, r.Tasks.TimeMean.Seconds())
			}
		}
		if len(mean) == 0 {
			continue
		}
		p := FrontierPoint{
			X:      c.Spread(func(r *Result) float64 { return r.First.WaitP99.Seconds() }).Median,
			Y:      SpreadOf(mean).Median,
			Shed:   c.Spread(func(r *Result) float64 { return float64(r.First.Shed()) }).Median,
			Label:  c.Policy,
			Policy: c.Policy,
		}
		if len(routers) > 1 {
			p.Label = c.Router + "/" + c.Policy
		}
		if ab := c.Spread(func(r *Result) float64 { return r.Tasks.AbandonedShare() }).Median; ab >= 0.05 {
			p.Label += fmt.Sprintf(" (%.0f%% abandoned)", 100*ab)
		}
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return fmt.Errorf("%w: no cell with a completed session", ErrNothingToPlot)
	}
	return PlotFrontierPoints(pts, FrontierAxes{Y: "mean task completion time (s)", Shed: "newcomers shed"}, title, path)
}

// FrontierPoint is one point of an admission frontier: X and Y in seconds, better low; Shed
// sets the marker's area (radius 2 + 6·√(Shed/max Shed) points); Label is written beside it;
// Policy chooses its style: FCFS ("fcfs") and turn-priority ("turn-priority") have their
// own, every other policy is a grey circle, and a name ending in EarlyShedSuffix gets the
// hollow twin of its style.
type FrontierPoint struct {
	X, Y, Shed    float64
	Label, Policy string
}

// FrontierAxes names what a frontier's axes and marker sizes measure. Zero fields are
// PlotFrontier's: "newcomer p99 wait (s)", "later-turn p50 TTFT (s)", "requests shed".
type FrontierAxes struct {
	X, Y, Shed string
}

// PlotFrontierPoints draws pts as an admission frontier (the drawing of PlotFrontier, from
// points a caller measured itself — a load generator's reports, say) and saves it to path, as
// PNG or SVG by the extension. Both axes start at zero; the x axis leaves room for the
// rightmost label. Points within 1% of the axes' spans of each other share one label.
//
// It returns an error wrapping ErrNothingToPlot for no points, ErrPlotInput for a coordinate
// or Shed that is negative, NaN or infinite or for an unsupported extension, and the file
// system's error for a bad path. It is safe for concurrent use. O(n²) in the points (the
// label merging), which are few.
func PlotFrontierPoints(pts []FrontierPoint, axes FrontierAxes, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	if len(pts) == 0 {
		return fmt.Errorf("%w: no points", ErrNothingToPlot)
	}
	if axes.X == "" {
		axes.X = "newcomer p99 wait (s)"
	}
	if axes.Y == "" {
		axes.Y = "later-turn p50 TTFT (s)"
	}
	if axes.Shed == "" {
		axes.Shed = "requests shed"
	}
	maxShed := 0.0
	for i, pt := range pts {
		for _, v := range []float64{pt.X, pt.Y, pt.Shed} {
			if !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: point %d (%s) at (%g, %g), shed %g", ErrPlotInput, i, pt.Label, pt.X, pt.Y, pt.Shed)
			}
		}
		maxShed = max(maxShed, pt.Shed)
	}
	radius := func(shed float64) vg.Length {
		if maxShed == 0 {
			return frontierMinRadius
		}
		return vg.Length(frontierMinRadius + frontierSpanRadius*math.Sqrt(shed/maxShed))
	}

	p := newPlot(title, axes.X, axes.Y)
	entries := 0
	scatters := make([]*plotter.Scatter, len(frontierGroups))
	for g, fg := range frontierGroups {
		var xys plotter.XYs
		var radii []vg.Length
		for _, pt := range pts {
			if frontierGroupOf(pt.Policy) == g {
				xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
				radii = append(radii, radius(pt.Shed))
			}
		}
		if len(xys) == 0 {
			continue
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		s.GlyphStyle = draw.GlyphStyle{Color: fg.colour, Shape: fg.shape, Radius: 4}
		s.GlyphStyleFunc = func(i int) draw.GlyphStyle {
			st := s.GlyphStyle
			st.Radius = radii[i]
			return st
		}
		scatters[g] = s
	}
	// The grey policies first, so that a big marker of sheds does not hide FCFS or
	// turn-priority drawn at the same place; the legend keeps the groups' order.
	for _, g := range frontierDrawOrder {
		if scatters[g] != nil {
			p.Add(scatters[g])
		}
	}
	for g, fg := range frontierGroups {
		if scatters[g] != nil {
			p.Legend.Add(fg.name, scatters[g])
			entries++
		}
	}
	for _, l := range frontierLabels(pts) {
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: l.X, Y: l.Y}}, Labels: []string{l.Label}})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		lb.TextStyle[0].Font.Size = vg.Points(7)
		lb.Offset = vg.Point{X: radius(l.Shed) + 2, Y: -vg.Points(2.5)}
		p.Add(lb)
	}
	if maxShed > 0 {
		p.Legend.Add("marker area: " + axes.Shed + " (max " + strconv.FormatFloat(maxShed, 'f', -1, 64) + ")")
		entries++
	}
	// From zero (nobody waited: 0–1 s rather than gonum's −1–1), widened by a seventh so
	// that the rightmost point's label fits.
	p.X.Min = min(p.X.Min, 0)
	p.X.Max = max(p.X.Max, p.X.Min+1)
	p.X.Max = p.X.Min + (p.X.Max-p.X.Min)*8/7
	return save(p, path, entries)
}

// frontierPoints returns the frontier's points of cells, in order, skipping the cells without
// a completed later turn: x, y and shed are medians over the cell's runs (see PlotFrontier).
// O(cells·runs).
func frontierPoints(cells []*Cell) []FrontierPoint {
	routers := make(map[string]bool)
	for _, c := range cells {
		routers[c.Router] = true
	}
	var pts []FrontierPoint
	for _, c := range cells {
		var ttft []float64
		for _, r := range c.Runs {
			if r.Later.Completed > 0 {
				ttft = append(ttft, r.Later.TTFT.P50.Seconds())
			}
		}
		if len(ttft) == 0 {
			continue
		}
		p := FrontierPoint{
			X:      c.Spread(func(r *Result) float64 { return r.First.WaitP99.Seconds() }).Median,
			Y:      SpreadOf(ttft).Median,
			Shed:   c.Spread(func(r *Result) float64 { return float64(r.First.Shed() + r.Later.Shed()) }).Median,
			Label:  c.Policy,
			Policy: c.Policy,
		}
		if len(routers) > 1 {
			p.Label = c.Router + "/" + c.Policy
		}
		pts = append(pts, p)
	}
	return pts
}

// frontierLabels returns one label per place on the frontier: points that fall within 1% of
// the axes' spans of each other (turn-priority and bounded wait with W past the TTL, say)
// share one label naming them all, at the first one's position with the largest marker.
func frontierLabels(pts []FrontierPoint) []FrontierPoint {
	var spanX, spanY float64
	for _, pt := range pts {
		spanX, spanY = max(spanX, pt.X), max(spanY, pt.Y)
	}
	near := func(a, b FrontierPoint) bool {
		return math.Abs(a.X-b.X) <= 0.01*spanX && math.Abs(a.Y-b.Y) <= 0.01*spanY
	}
	var out []FrontierPoint
	for _, pt := range pts {
		merged := false
		for i := range out {
			if near(out[i], pt) {
				out[i].Label += ", " + pt.Label
				out[i].Shed = max(out[i].Shed, pt.Shed)
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, pt)
		}
	}
	return out
}

// frontierGroup is a family of policies drawn alike on the frontier.
type frontierGroup struct {
	name   string
	colour color.Color
	shape  draw.GlyphDrawer
}

// frontierGroups are the frontier's marker styles, indexed by frontierGroupOf.
var frontierGroups = []frontierGroup{
	{"FCFS", okabeIto[1], draw.BoxGlyph{}},
	{"FCFS+shed", okabeIto[1], draw.SquareGlyph{}},
	{"turn-priority", okabeIto[0], draw.PyramidGlyph{}},
	{"turn-priority+shed", okabeIto[0], draw.TriangleGlyph{}},
	{"other", color.Gray{Y: 110}, draw.CircleGlyph{}},
	{"other+shed", color.Gray{Y: 110}, draw.RingGlyph{}},
}

// frontierDrawOrder is the order the groups are drawn in: the grey ones underneath.
var frontierDrawOrder = []int{4, 5, 0, 1, 2, 3}

// frontierGroupOf returns the index in frontierGroups of policy's style.
func frontierGroupOf(policy string) int {
	base, shed := strings.CutSuffix(policy, EarlyShedSuffix)
	g := 4
	switch base {
	case FCFSPolicy().Name:
		g = 0
	case turnPriorityName:
		g = 2
	}
	if shed {
		g++
	}
	return g
}

// PlotKnee draws the knee of p99 TTFT under load and saves it to path, as PNG or SVG by the
// extension (.png, .svg): x is the cell's Rate (the load multiplier), y the median over the
// cell's runs of TTFT.P99, the p99 time to first token of all completed requests, in seconds,
// from zero. There is one line with points per router, named by the router in the legend;
// when the cells hold several policies, one line per policy and router, named "policy/router"
// (or by the policy alone when there is one router). Runs that completed nothing are left out
// of the medians, and a cell with no other run is skipped.
//
// PlotKnee returns an error wrapping ErrNothingToPlot when no cell is left, ErrPlotInput for an
// unsupported extension, and the file system's error for a bad path. It is safe for
// concurrent use. O(cells·runs + cells·log cells).
func PlotKnee(cells []*Cell, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	type key struct{ policy, router string }
	var keys []key
	lines := make(map[key]plotter.XYs)
	policies, routers := make(map[string]bool), make(map[string]bool)
	for _, c := range cells {
		policies[c.Policy], routers[c.Router] = true, true
	}
	for _, c := range cells {
		var p99 []float64
		for _, r := range c.Runs {
			if r.Completed > 0 {
				p99 = append(p99, r.TTFT.P99.Seconds())
			}
		}
		if len(p99) == 0 {
			continue
		}
		k := key{c.Policy, c.Router}
		if _, ok := lines[k]; !ok {
			keys = append(keys, k)
		}
		lines[k] = append(lines[k], plotter.XY{X: c.Rate, Y: SpreadOf(p99).Median})
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no cell with a completed request", ErrNothingToPlot)
	}
	p := newPlot(title, "load ×", "p99 TTFT (s)")
	for i, k := range keys {
		xys := lines[k]
		slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		name := k.router
		switch {
		case len(policies) > 1 && len(routers) > 1:
			name = k.policy + "/" + k.router
		case len(policies) > 1:
			name = k.policy
		}
		if err := addLine(p, i, name, xys); err != nil {
			return err
		}
	}
	return save(p, path, len(keys))
}

// KVPoint is one point of PlotHitVsKV: the prefix-cache hit rate a router reached, as a share
// of the ideal (Result.HitRate / Result.IdealHitRate), with KVBlocks KV-cache blocks per
// server (EngineProfile.NumBlocks).
type KVPoint struct {
	Router       string
	KVBlocks     int
	HitOverIdeal float64
}

// PlotHitVsKV draws each router's hit rate over the ideal (y from zero, a ratio, 1 for a
// router that serves every hit an infinite shared cache would) against the KV blocks per
// server (x, on a log scale with a tick at every block count when the counts span more than
// 8×), one line with points per router in the order of the routers' first point, and saves it
// to path, as PNG or SVG by the extension (.png, .svg). Points of one router at one block
// count (several seeds) are drawn as their median.
//
// PlotHitVsKV returns an error wrapping ErrNothingToPlot for no points, ErrPlotInput for a
// point with KVBlocks ≤ 0 or a HitOverIdeal that is NaN or infinite or for an unsupported
// extension, and the file system's error for a bad path. It is safe for concurrent use.
// O(n log n) in the points.
func PlotHitVsKV(points []KVPoint, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	if len(points) == 0 {
		return fmt.Errorf("%w: no points", ErrNothingToPlot)
	}
	type key struct {
		router string
		blocks int
	}
	var routers []string
	at := make(map[key][]float64)
	lo, hi := math.MaxInt, 0
	for i, pt := range points {
		if pt.KVBlocks <= 0 || math.IsNaN(pt.HitOverIdeal) || math.IsInf(pt.HitOverIdeal, 0) {
			return fmt.Errorf("%w: point %d (%s, %d KV blocks, hit/ideal %g)", ErrPlotInput, i, pt.Router, pt.KVBlocks, pt.HitOverIdeal)
		}
		if !slices.Contains(routers, pt.Router) {
			routers = append(routers, pt.Router)
		}
		k := key{pt.Router, pt.KVBlocks}
		at[k] = append(at[k], pt.HitOverIdeal)
		lo, hi = min(lo, pt.KVBlocks), max(hi, pt.KVBlocks)
	}
	p := newPlot(title, "KV blocks per server", "hit rate / ideal")
	if hi > 8*lo {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = blockTicks(points)
	}
	for i, r := range routers {
		var xys plotter.XYs
		for k, v := range at {
			if k.router == r {
				xys = append(xys, plotter.XY{X: float64(k.blocks), Y: SpreadOf(v).Median})
			}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if err := addLine(p, i, r, xys); err != nil {
			return err
		}
	}
	return save(p, path, len(routers))
}

// blockTicks returns ticks at the distinct block counts of points, labelled at most 12 of
// them (every k-th) so that the labels do not run into each other.
func blockTicks(points []KVPoint) plot.ConstantTicks {
	var bs []int
	for _, pt := range points {
		bs = append(bs, pt.KVBlocks)
	}
	slices.Sort(bs)
	bs = slices.Compact(bs)
	every := (len(bs) + 11) / 12
	ticks := make(plot.ConstantTicks, len(bs))
	for i, b := range bs {
		ticks[i].Value = float64(b)
		if i%every == 0 {
			ticks[i].Label = strconv.Itoa(b)
		}
	}
	return ticks
}

// SurvivalCurve is one curve of PlotSurvival: the survival function of a session's total
// service, P(S ≥ X[i]) = Y[i], X in weighted tokens, positive and ascending, Y in [0, 1].
// Dashed draws it dashed (a true distribution, say, against the learned one in a solid line);
// Colour indexes the plots' palette, so that a learned curve and its truth share one.
type SurvivalCurve struct {
	Name   string
	X, Y   []float64
	Dashed bool
	Colour int
}

// PlotSurvival draws curves as survival functions over a logarithmic service axis (x:
// "session service (weighted tokens)", y: "P(service ≥ x)", from 0 to 1) and saves the plot to
// path, as PNG or SVG by the extension; each curve is named in the legend. It returns an error
// wrapping ErrNothingToPlot for no curve, ErrPlotInput for a curve whose X and Y differ in
// length, an X that is not positive and ascending or a Y outside [0, 1], or an unsupported
// extension, and the file system's error for a bad path. It is safe for concurrent use.
// O(points).
func PlotSurvival(curves []SurvivalCurve, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	if len(curves) == 0 {
		return fmt.Errorf("%w: no curve", ErrNothingToPlot)
	}
	p := newPlot(title, "session service (weighted tokens)", "P(service ≥ x)")
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	for _, c := range curves {
		if len(c.X) == 0 || len(c.X) != len(c.Y) {
			return fmt.Errorf("%w: curve %q has %d x and %d y", ErrPlotInput, c.Name, len(c.X), len(c.Y))
		}
		xys := make(plotter.XYs, len(c.X))
		for i := range c.X {
			if !(c.X[i] > 0) || math.IsInf(c.X[i], 0) || (i > 0 && !(c.X[i] > c.X[i-1])) || !(c.Y[i] >= 0 && c.Y[i] <= 1) {
				return fmt.Errorf("%w: curve %q point %d at (%g, %g)", ErrPlotInput, c.Name, i, c.X[i], c.Y[i])
			}
			xys[i] = plotter.XY{X: c.X[i], Y: c.Y[i]}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		l.Color, l.Width = okabeIto[c.Colour%len(okabeIto)], vg.Points(1.5)
		if c.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(c.Name, l)
	}
	p.Y.Max = 1
	return save(p, path, len(curves))
}

// WritePlots writes the figures of a comparison into dir, creating it if missing, and returns
// the paths it wrote, in order. For each workload of results (in the order of its first
// result): the admission frontier at every rate (PlotFrontier over that rate's cells, every
// policy and router), as frontier-<workload>-x<rate>.png and .svg, and the same with task
// completion time (PlotTaskFrontier) as task-frontier-<workload>-x<rate>.png and .svg; and,
// when more than one rate
// was run, the knee (PlotKnee over all the workload's cells) as knee-<workload>.png and .svg.
// A figure with nothing to plot (a frontier of a workload without later turns) is left out.
// O(results + figures·cells·runs).
func WritePlots(dir string, results []*Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plot directory: %w", err)
	}
	cells := Cells(results)
	var workloads []string
	for _, c := range cells {
		if !slices.Contains(workloads, c.Workload) {
			workloads = append(workloads, c.Workload)
		}
	}
	var written []string
	figure := func(f func(cells []*Cell, title, path string) error, cells []*Cell, title, base string) error {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, base+ext)
			err := f(cells, title, path)
			if errors.Is(err, ErrNothingToPlot) {
				return nil
			}
			if err != nil {
				return err
			}
			written = append(written, path)
		}
		return nil
	}
	for _, w := range workloads {
		var mine []*Cell
		var rs []float64
		for _, c := range cells {
			if c.Workload == w {
				mine = append(mine, c)
				if !slices.Contains(rs, c.Rate) {
					rs = append(rs, c.Rate)
				}
			}
		}
		slices.Sort(rs)
		name := fileSafe(w)
		for _, r := range rs {
			rate := strconv.FormatFloat(r, 'g', -1, 64)
			err := figure(PlotFrontier, cellsAt(mine, r), w+" at load ×"+rate+": admission frontier", "frontier-"+name+"-x"+rate)
			if err != nil {
				return written, err
			}
			err = figure(PlotTaskFrontier, cellsAt(mine, r), w+" at load ×"+rate+": task completion time", "task-frontier-"+name+"-x"+rate)
			if err != nil {
				return written, err
			}
		}
		if len(rs) > 1 {
			if err := figure(PlotKnee, mine, w+": p99 TTFT against load", "knee-"+name); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// WriteHitVsKV writes PlotHitVsKV of points, titled with the workload's name, into dir
// (created if missing) as hit-kv-<workload>.png and .svg, and returns the paths it wrote.
// Errors are PlotHitVsKV's and the file system's. It is safe for concurrent use (calls
// writing the same files race on them, as any two writers would).
func WriteHitVsKV(dir, workload string, points []KVPoint) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plot directory: %w", err)
	}
	var written []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "hit-kv-"+fileSafe(workload)+ext)
		if err := PlotHitVsKV(points, workload+": hit rate against KV cache", path); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

// fileSafe replaces every character of s outside [A-Za-z0-9._-] with '-', for a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, s)
}

// okabeIto is the Okabe–Ito palette, readable with the common colour-vision deficiencies,
// without its yellow, which is too light on white.
var okabeIto = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
}

// lineShapes are the point markers of the lines, cycled at a different period from the
// colours so that lines up to len(okabeIto)·len(lineShapes) stay distinct.
var lineShapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}, draw.SquareGlyph{},
	draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
}

// addLine adds the i-th line of a plot, xys joined by a line with a marker at each point,
// named in the legend.
func addLine(p *plot.Plot, i int, name string, xys plotter.XYs) error {
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPlotInput, err)
	}
	c := okabeIto[i%len(okabeIto)]
	l.Color, l.Width = c, vg.Points(1.2)
	if i >= len(okabeIto) {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	s.GlyphStyle = draw.GlyphStyle{Color: c, Shape: lineShapes[i%len(lineShapes)], Radius: 3}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// newPlot returns a plot with a title, axis labels, a light grid and the legend at the top
// right.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = x, y
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = color.Gray{Y: 225}, color.Gray{Y: 225}
	p.Add(g)
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p
}

// checkExt returns an error wrapping ErrPlotInput unless path ends in .png or .svg (in any
// case), before any file is created.
func checkExt(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("%w: %q: want a .png or .svg file", ErrPlotInput, path)
}

// save writes p to path at the plots' size, in the format of the extension. It starts the
// y axis at zero (every y of the plots is a non-negative duration or ratio) and raises its top
// to leave the legend, at the top right, a band of its own above the data.
func save(p *plot.Plot, path string, legendEntries int) error {
	p.Y.Min = min(p.Y.Min, 0)
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	// About 9 points per legend entry of an 8-point font, over the ~270 points of the data
	// area's height at 4.5 inches.
	band := min(float64(legendEntries*9+10)/270, 0.5)
	p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-band)
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("bench: saving plot: %w", err)
	}
	return nil
}

// AttainmentCurve is one line of PlotAttainment: a configuration's share of requests attaining
// a goal at each offered rate (GoodputPoint.Rate in requests per second per server).
type AttainmentCurve struct {
	Name   string
	Points []GoodputPoint
}

// PlotAttainment draws each curve's attainment (y, 0 to 1) against the offered rate per server
// (x), one line with points per curve in order, with a dashed line at share (the goodput's
// threshold; none when 0), and saves it to path, as PNG or SVG by the extension.
//
// PlotAttainment returns an error wrapping ErrNothingToPlot when no curve has a point,
// ErrPlotInput for a NaN or infinite point or an unsupported extension, and the file system's
// error for a bad path. It is safe for concurrent use. O(n log n) in the points.
func PlotAttainment(curves []AttainmentCurve, share float64, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	p := newPlot(title, "offered rate (requests/s per server)", "share attaining both targets")
	n, hi := 0, 0.0
	for _, c := range curves {
		if len(c.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, 0, len(c.Points))
		for _, pt := range c.Points {
			if math.IsNaN(pt.Rate) || math.IsInf(pt.Rate, 0) || math.IsNaN(pt.Attainment) || math.IsInf(pt.Attainment, 0) {
				return fmt.Errorf("%w: curve %q: point %+v", ErrPlotInput, c.Name, pt)
			}
			xys = append(xys, plotter.XY{X: pt.Rate, Y: pt.Attainment})
			hi = max(hi, pt.Rate)
		}
		slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if err := addLine(p, n, c.Name, xys); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: no curve with a point", ErrNothingToPlot)
	}
	if share > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: share}, {X: hi, Y: share}})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		l.Color, l.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
	}
	p.X.Min = 0
	p.Y.Max = 1
	return save(p, path, n)
}
