package bench

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPlotRoles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "roles.svg")
	series := []RoleSeries{{Name: "planner", End: 3 * time.Minute, Samples: []RoleSample{{0, 0}, {70 * time.Second, 3}, {2 * time.Minute, 1}}}}
	if err := PlotRoles(series, []time.Duration{time.Minute, 2 * time.Minute}, "roles", path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v, %v", st, err)
	}
	if err := PlotRoles(nil, nil, "none", path); !errors.Is(err, ErrNothingToPlot) {
		t.Errorf("no series: %v, want ErrNothingToPlot", err)
	}
	if err := PlotRoles(series, nil, "roles", filepath.Join(t.TempDir(), "roles.gif")); !errors.Is(err, ErrPlotInput) {
		t.Errorf("a .gif: %v, want ErrPlotInput", err)
	}
}
