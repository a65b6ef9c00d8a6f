package routing

import (
	"math/rand/v2"
	"testing"
)

func TestDbgHang(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range 3000 {
		n := rng.IntN(400)
		ops := make([]byte, n)
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
			if rng.IntN(3) == 0 { ops[i] = byte(rng.IntN(8)) }
		}
		m := newModel(t)
		for i := 0; i+1 < len(ops); i += 2 {
			m.step(ops[i], ops[i+1])
		}
		m.finish()
		_ = k
	}
}
