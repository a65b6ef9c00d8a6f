// Command gittinscurves draws the Gittins policy's learned distribution of a session's service
// against the true one (bench/gittins-curves.sh runs its two steps around the fairness test
// that learns):
//
//	gittinscurves sessions DIR       writes DIR/sessions-<workload>.txt for trace-sessions and
//	                                 increasing-hazard: one session a line, its turns' prompt
//	                                 and output tokens ("p o p o ...")
//	gittinscurves plot DIR OUT       reads DIR/learned-<a>-then-<b>.json, which the fairness
//	                                 test TestGittinsLearnedCurves wrote, and draws
//	                                 OUT/gittins-learned-<a>-then-<b>.png: the learned survival
//	                                 after 2,000 ended sessions of a and after 2,000 more of b,
//	                                 against a's and b's true survival, with the KS distances
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/usher-llm/usher/bench"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// workloads are the two workloads of the curves: a falling hazard and a rising one.
var workloads = []string{"trace-sessions", "increasing-hazard"}

func run(args []string, stderr io.Writer) int {
	var err error
	switch {
	case len(args) == 2 && args[0] == "sessions":
		err = writeSessions(args[1])
	case len(args) == 3 && args[0] == "plot":
		err = plot(args[1], args[2], stderr)
	default:
		fmt.Fprintln(stderr, "usage: gittinscurves sessions DIR | gittinscurves plot DIR OUT")
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "gittinscurves:", err)
		return 1
	}
	return 0
}

// writeSessions writes each workload's sessions (seed 1) as lines of their turns' prompt and
// output tokens, in the order of their first turn. O(requests · log requests).
func writeSessions(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range workloads {
		w, err := bench.LoadWorkload(name, bench.LoadOptions{Seed: 1})
		if err != nil {
			return err
		}
		bySession := map[int32][]bench.Request{}
		var order []int32
		for _, r := range w.Requests {
			if r.Session < 0 {
				continue
			}
			if _, ok := bySession[r.Session]; !ok {
				order = append(order, r.Session)
			}
			bySession[r.Session] = append(bySession[r.Session], r)
		}
		var b strings.Builder
		for _, s := range order {
			turns := bySession[s]
			slices.SortStableFunc(turns, func(a, b bench.Request) int { return int(a.Turn - b.Turn) })
			for i, r := range turns {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%d %d", r.PromptTokens, r.OutputTokens)
			}
			b.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join(dir, "sessions-"+name+".txt"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// curve is one snapshot of the learned distribution, as TestGittinsLearnedCurves writes it.
type curve struct {
	Workload string    `json:"workload"`
	Ended    int64     `json:"ended"`
	Edges    []float64 `json:"edges"`
	Learned  []float64 `json:"learned"`
	True     []float64 `json:"true"`
	KS       float64   `json:"ks"`
}

// plot draws every learned-*.json of dir into out.
func plot(dir, out string, stderr io.Writer) error {
	paths, err := filepath.Glob(filepath.Join(dir, "learned-*.json"))
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return errors.New("no learned-*.json in " + dir + " (run the fairness test TestGittinsLearnedCurves with USHER_GITTINS_CURVES=" + dir + ")")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var cs []curve
		if err := json.Unmarshal(b, &cs); err != nil || len(cs) != 2 {
			return fmt.Errorf("%s: want two snapshots: %v", p, err)
		}
		var sc []bench.SurvivalCurve
		for i, c := range cs {
			phase := fmt.Sprintf("after %d ended", c.Ended)
			if i > 0 {
				phase = fmt.Sprintf("after the switch, %d more", c.Ended-cs[0].Ended)
			}
			sc = append(sc,
				bench.SurvivalCurve{Name: fmt.Sprintf("learned, %s (KS %.3f)", phase, c.KS), X: c.Edges, Y: c.Learned, Colour: i},
				bench.SurvivalCurve{Name: "true: " + c.Workload, X: c.Edges, Y: c.True, Dashed: true, Colour: i})
			fmt.Fprintf(stderr, "%s: %s, KS %.4f\n", filepath.Base(p), phase, c.KS)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		path := filepath.Join(out, "gittins-"+name+".png")
		title := fmt.Sprintf("Gittins: learned service distribution, %s then %s", cs[0].Workload, cs[1].Workload)
		if err := bench.PlotSurvival(sc, title, path); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
	}
	return nil
}
