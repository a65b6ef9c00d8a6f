package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLoadMooncake(t *testing.T) {
	const in = `{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 5, "input_length": 1500, "output_length": 20, "hash_ids": [0, 1, 2]}
{"timestamp": 5, "input_length": 600, "output_length": 30, "hash_ids": [0, 3]}

{"timestamp": 1000.5, "input_length": 300, "output_length": 1, "hash_ids": [0]}
`
	w, err := LoadMooncake(strings.NewReader(in), MooncakeOptions{OpeningShare: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at            time.Duration
		session, turn int32
	}{
		{0, 0, 1},
		{5 * time.Millisecond, 0, 2},
		{5 * time.Millisecond, 1, 1},
		{1000500 * time.Microsecond, -1, 1}, // only the opening: no session
	}
	if len(w.Requests) != len(want) || w.Sessions != 2 {
		t.Fatalf("%d requests, %d sessions; want %d, 2", len(w.Requests), w.Sessions, len(want))
	}
	for i, x := range want {
		r := w.Requests[i]
		if r.At != x.at || r.Session != x.session || r.Turn != x.turn || r.Prev != -1 {
			t.Errorf("request %d: at %v session %d turn %d prev %d; want %v %d %d -1", i, r.At, r.Session, r.Turn, r.Prev, x.at, x.session, x.turn)
		}
	}
	// 8 ids; hits: request 1 has [0,1] seen, request 2 [0], request 3 [0]: 4 of 8.
	if got := w.IdealBlockHitRate(); got != 4.0/8 {
		t.Errorf("ideal block hit rate %v, want 0.5", got)
	}
}

func TestLoadMooncakeErrors(t *testing.T) {
	for _, in := range []string{
		``,
		`not json`,
		`{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0]}`, // too few ids
		`{"timestamp": 0, "input_length": 0, "output_length": 10, "hash_ids": []}`,     // empty
		`{"timestamp": -1, "input_length": 10, "output_length": 10, "hash_ids": [0]}`,  // negative time
		`{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]}`,    // no output
		"{\"timestamp\": 9, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n" + // backwards
			`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0]}`,
	} {
		if _, err := LoadMooncake(strings.NewReader(in), MooncakeOptions{}); !errors.Is(err, ErrInvalidWorkload) {
			t.Errorf("LoadMooncake(%q) error = %v, want ErrInvalidWorkload", in, err)
		}
	}
}

// FuzzLoadMooncake: the loader never panics, and whatever it accepts is a valid workload that
// the simulator can run.
func FuzzLoadMooncake(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}`)
	f.Add("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [7]}\n{\"timestamp\": 3, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [7, 8]}")
	f.Fuzz(func(t *testing.T, in string) {
		w, err := LoadMooncake(strings.NewReader(in), MooncakeOptions{})
		if err != nil {
			return
		}
		if err := w.validate(); err != nil {
			t.Fatalf("accepted an invalid workload: %v", err)
		}
		if len(w.Requests) <= 4 && totalTokens(w) < 1<<16 {
			if _, err := Run(w, Config{Servers: 1}); err != nil {
				t.Fatalf("Run: %v", err)
			}
		}
	})
}

func totalTokens(w *Workload) int64 {
	var n int64
	for i := range w.Requests {
		n += int64(w.Requests[i].PromptTokens) + int64(w.Requests[i].OutputTokens)
	}
	return n
}

func TestSynthetic(t *testing.T) {
	for _, w := range []*Workload{
		Chat(ChatOptions{Seed: 1, Sessions: 300}),
		Agentic(AgenticOptions{Seed: 1, Sessions: 60}),
		Bursty(BurstyOptions{Seed: 1, Requests: 1500}),
		Forks(ForksOptions{Seed: 1, Sessions: 400}),
	} {
		t.Run(w.Name, func(t *testing.T) {
			if err := w.validate(); err != nil {
				t.Fatal(err)
			}
			st := w.Stats()
			if st.Requests == 0 || st.Sessions == 0 || st.IdealBlockHitRate <= 0 || st.IdealBlockHitRate >= 1 {
				t.Errorf("stats %+v", st)
			}
			// Every later turn extends its previous turn: the previous prompt's full blocks are
			// a prefix of it.
			for i := range w.Requests {
				r := &w.Requests[i]
				if r.Prev < 0 {
					continue
				}
				p := &w.Requests[r.Prev]
				full := int(p.PromptTokens) / w.BlockTokens
				for k := range full {
					if p.IDs[k] != r.IDs[k] {
						t.Fatalf("request %d does not extend request %d at block %d", i, r.Prev, k)
					}
				}
				if r.Session != p.Session || r.Turn != p.Turn+1 {
					t.Fatalf("request %d: session %d turn %d after session %d turn %d", i, r.Session, r.Turn, p.Session, p.Turn)
				}
			}
		})
	}
	// Same seed, same workload.
	a, b := Agentic(AgenticOptions{Seed: 9, Sessions: 20}), Agentic(AgenticOptions{Seed: 9, Sessions: 20})
	if len(a.Requests) != len(b.Requests) || a.Requests[len(a.Requests)-1].IDs[5] != b.Requests[len(b.Requests)-1].IDs[5] {
		t.Error("Agentic is not deterministic for a seed")
	}
}

// TestForksShape checks what Forks is for: first turns that share most of their prompt with
// an earlier session's (forks, shared documents), in the proportions asked.
func TestForksShape(t *testing.T) {
	o := ForksOptions{Seed: 3, Sessions: 2000}
	w := Forks(o)
	// For each first turn, the longest prefix of full blocks it shares with any earlier
	// request of another session.
	seen := map[string]int32{} // prefix of ids → session that sent it first
	key := func(ids []uint64) string {
		b := make([]byte, 0, 8*len(ids))
		for _, id := range ids {
			b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24), byte(id>>32), byte(id>>40), byte(id>>48), byte(id>>56))
		}
		return string(b)
	}
	firsts, mostly, forkTokens, prompt := 0, 0, 0, 0
	for i := range w.Requests {
		r := &w.Requests[i]
		full := int(r.PromptTokens) / w.BlockTokens
		shared := 0
		for k := full; k > 0; k-- {
			if s, ok := seen[key(r.IDs[:k])]; ok && s != r.Session {
				shared = k
				break
			}
		}
		for k := 1; k <= full; k++ {
			if _, ok := seen[key(r.IDs[:k])]; !ok {
				seen[key(r.IDs[:k])] = r.Session
			}
		}
		prompt += int(r.PromptTokens)
		if r.Turn != 1 {
			continue
		}
		firsts++
		if shared*w.BlockTokens >= int(r.PromptTokens)/2 {
			mostly++
			forkTokens += int(r.PromptTokens)
		}
	}
	if firsts != o.Sessions {
		t.Fatalf("%d first turns, want %d", firsts, o.Sessions)
	}
	// Forks (20%) and documents (30%) hold most of their prompt elsewhere; so may a fresh
	// session with a short message under a system prompt.
	if share := float64(mostly) / float64(firsts); share < 0.45 || share > 0.9 {
		t.Errorf("%.2f of first turns share at least half their prompt with another session, want 0.45–0.9", share)
	}
	if share := float64(forkTokens) / float64(prompt); share < 0.3 {
		t.Errorf("those first turns carry %.2f of all prompt tokens, want ≥ 0.3", share)
	}
	a, b := Forks(ForksOptions{Seed: 9, Sessions: 50}), Forks(ForksOptions{Seed: 9, Sessions: 50})
	if len(a.Requests) != len(b.Requests) || a.Requests[len(a.Requests)-1].IDs[3] != b.Requests[len(b.Requests)-1].IDs[3] {
		t.Error("Forks is not deterministic for a seed")
	}
}

func TestScaled(t *testing.T) {
	w := Chat(ChatOptions{Sessions: 10, Seed: 2})
	s := w.Scaled(4)
	for i := range w.Requests {
		a, b := w.Requests[i], s.Requests[i]
		want := a.At
		if a.Prev < 0 {
			want = time.Duration(float64(a.At) / 4)
		}
		if b.At != want {
			t.Fatalf("request %d: scaled at %v, want %v", i, b.At, want)
		}
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 1},
		{[]float64{0, 0}, 1},
		{[]float64{1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 0.5}, 0.9},
	} {
		if got := Jain(tc.xs); abs(got-tc.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
