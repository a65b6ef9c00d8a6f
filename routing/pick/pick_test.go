package pick

import (
	"math"
	"testing"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/rng"
)

// draw runs a picker n times over scores and returns the share of picks per index.
func draw(p routing.Picker, scores []float64, n int, seed uint64) []float64 {
	cs := make([]routing.Candidate, len(scores))
	g, _ := rng.New(seed)
	counts := make([]float64, len(scores))
	for range n {
		counts[p.Pick(&routing.Request{}, cs, scores, g)]++
	}
	for i := range counts {
		counts[i] /= float64(n)
	}
	return counts
}

func checkShares(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Errorf("%s: share[%d] = %.4f, want %.4f ± %.3f (all %v)", name, i, got[i], want[i], tol, got)
		}
	}
}

// With 200,000 draws the standard error of a share is below 0.0012; 0.006 is five of them.
const draws, tol = 200_000, 0.006

func TestWeightedRandomConvergesToWeights(t *testing.T) {
	scores := []float64{1, 2, 3, 4, 0}
	checkShares(t, "weighted random", draw(WeightedRandom(), scores, draws, 1),
		[]float64{0.1, 0.2, 0.3, 0.4, 0}, tol)
	// All zero: uniform.
	checkShares(t, "weighted random zeros", draw(WeightedRandom(), []float64{0, 0, 0, 0}, draws, 2),
		[]float64{0.25, 0.25, 0.25, 0.25}, tol)
	// Tiny scores keep their ratio (log-space keys do not underflow).
	checkShares(t, "weighted random tiny", draw(WeightedRandom(), []float64{1e-300, 3e-300}, draws, 3),
		[]float64{0.25, 0.75}, tol)
}

func TestMaxScoreTieBreakUniform(t *testing.T) {
	checkShares(t, "max score ties", draw(MaxScore(), []float64{0.5, 2, 1, 2, 2}, draws, 4),
		[]float64{0, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3}, tol)
	checkShares(t, "max score unique", draw(MaxScore(), []float64{0.5, 2, 3}, 1000, 5),
		[]float64{0, 0, 1}, 0)
}

// Power of two choices over distinct scores ranked r = 0 (worst) … n−1 (best): the candidate of
// rank r wins when it is in the pair and the other is worse, probability r / C(n, 2).
func TestPowerOfTwoDistribution(t *testing.T) {
	scores := []float64{0.1, 0.4, 0.2, 0.9} // ranks 0, 2, 1, 3; C(4,2) = 6
	checkShares(t, "power of two", draw(PowerOfTwo(), scores, draws, 6),
		[]float64{0, 2.0 / 6, 1.0 / 6, 3.0 / 6}, tol)
	checkShares(t, "power of two ties", draw(PowerOfTwo(), []float64{1, 1, 1}, draws, 7),
		[]float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, tol)
	checkShares(t, "power of two single", draw(PowerOfTwo(), []float64{1}, 100, 8), []float64{1}, 0)
}

func TestSoftmaxDistribution(t *testing.T) {
	scores := []float64{0, 0.5, 1}
	const temp = 0.5
	w := []float64{math.Exp(0 / temp), math.Exp(0.5 / temp), math.Exp(1 / temp)}
	sum := w[0] + w[1] + w[2]
	checkShares(t, "softmax", draw(Softmax(temp), scores, draws, 9),
		[]float64{w[0] / sum, w[1] / sum, w[2] / sum}, tol)
	if _, ok := Softmax(0).(maxScorePicker); !ok {
		t.Error("Softmax(0) is not MaxScore")
	}
}

func TestRoundRobinCycles(t *testing.T) {
	p := RoundRobin()
	cs := make([]routing.Candidate, 3)
	var got []int
	for range 7 {
		got = append(got, p.Pick(&routing.Request{}, cs, nil, nil))
	}
	want := []int{0, 1, 2, 0, 1, 2, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("round robin = %v, want %v", got, want)
		}
	}
}
