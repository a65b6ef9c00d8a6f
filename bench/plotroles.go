package bench

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// RoleSeries is one line of PlotRoles: a run's servers in prefill over time (Result.Roles),
// drawn as a step function until End.
type RoleSeries struct {
	Name    string
	Samples []RoleSample
	End     time.Duration
}

// PlotRoles draws each series' servers in prefill (y) against the run's time in minutes (x),
// one step line per series, with a dashed vertical line at each of marks (phase boundaries),
// and saves it to path, as PNG or SVG by the extension.
//
// PlotRoles returns an error wrapping ErrNothingToPlot when no series has a sample,
// ErrPlotInput for an unsupported extension, and the file system's error for a bad path. It
// is safe for concurrent use. O(samples).
func PlotRoles(series []RoleSeries, marks []time.Duration, title, path string) error {
	if err := checkExt(path); err != nil {
		return err
	}
	p := newPlot(title, "time (minutes)", "servers in prefill")
	n, top := 0, 0
	for _, s := range series {
		if len(s.Samples) == 0 {
			continue
		}
		xys := make(plotter.XYs, 0, 2*len(s.Samples)+1)
		for i, r := range s.Samples {
			if i > 0 {
				xys = append(xys, plotter.XY{X: r.At.Minutes(), Y: float64(s.Samples[i-1].Prefill)})
			}
			xys = append(xys, plotter.XY{X: r.At.Minutes(), Y: float64(r.Prefill)})
			top = max(top, r.Prefill)
		}
		last := s.Samples[len(s.Samples)-1]
		xys = append(xys, plotter.XY{X: max(s.End, last.At).Minutes(), Y: float64(last.Prefill)})
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		l.Color, l.Width = okabeIto[n%len(okabeIto)], vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(s.Name, l)
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: no series with a sample", ErrNothingToPlot)
	}
	for _, m := range marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m.Minutes(), Y: 0}, {X: m.Minutes(), Y: float64(top + 1)}})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPlotInput, err)
		}
		l.Color, l.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
	}
	p.X.Min = 0
	return save(p, path, n)
}
