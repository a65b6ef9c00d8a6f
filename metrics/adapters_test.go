package metrics

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/usher-llm/usher/routing"
)

func TestParseLoRARequestsInfo(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "vllm_lora.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := mustParser(t, engineVLLM).Parse(raw, ContentTypeText)
	if err != nil {
		t.Fatal(err)
	}
	// The newest of the four series (value 1.764424931e9) is the current state.
	if !r.Found.Has(HasAdapters|HasRunning) || !slices.Equal(r.RunningAdapters, []string{"sql-lora", "chat-lora"}) ||
		!slices.Equal(r.WaitingAdapters, []string{"tax-lora"}) || r.MaxAdapters != 4 {
		t.Fatalf("reading = %+v, want running [sql-lora chat-lora], waiting [tax-lora], 4 slots", r)
	}
	st := &State{Name: "a", Reading: r}
	bs := st.BackendState()
	if !bs.Known.Has(routing.SignalAdapters) || bs.MaxAdapters != 4 || len(bs.RunningAdapters) != 2 || bs.WaitingAdapters[0] != "tax-lora" {
		t.Errorf("BackendState = %+v", bs)
	}
	// Servers without LoRA publish no such gauge: the signal is missing, not empty.
	r, _ = mustParser(t, engineVLLM).Parse([]byte("vllm:num_requests_running 1\n"), ContentTypeText)
	if r.Found.Has(HasAdapters) || (&State{Reading: r}).BackendState().Known.Has(routing.SignalAdapters) {
		t.Errorf("no gauge: adapters found %+v", r)
	}
}

func TestParseLoRARequestsInfoCases(t *testing.T) {
	const head = "# TYPE vllm:lora_requests_info gauge\n"
	tests := []struct {
		name             string
		body             string
		rank             string
		found            bool
		running, waiting []string
		slots            float64
	}{
		{"idle", `vllm:lora_requests_info{max_lora="8",running_lora_adapters="",waiting_lora_adapters=""} 5`, "", true, nil, nil, 8},
		{"spaces and duplicates", `vllm:lora_requests_info{max_lora="2",running_lora_adapters=" a , b,a,,",waiting_lora_adapters="c"} 5`, "", true, []string{"a", "b"}, []string{"c"}, 2},
		{"max not a number", `vllm:lora_requests_info{max_lora="four",running_lora_adapters="a",waiting_lora_adapters=""} 5`, "", false, nil, nil, 0},
		{"max zero", `vllm:lora_requests_info{max_lora="0",running_lora_adapters="a",waiting_lora_adapters=""} 5`, "", false, nil, nil, 0},
		{"no max label", `vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters=""} 5`, "", false, nil, nil, 0},
		{"bad time skipped", "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 3\n" +
			`vllm:lora_requests_info{max_lora="2",running_lora_adapters="new",waiting_lora_adapters=""} NaN`, "", true, []string{"old"}, nil, 2},
		{"data parallel: newest per engine, merged", "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"a\",waiting_lora_adapters=\"\"} 9\n" +
			"vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 3\n" +
			`vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 4`, "", true, []string{"a", "b"}, []string{"c"}, 4},
		{"one rank", "vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"a\",waiting_lora_adapters=\"\"} 9\n" +
			`vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="b",waiting_lora_adapters="c"} 4`, "1", true, []string{"b"}, []string{"c"}, 2},
	}
	for _, tt := range tests {
		prof := engineVLLM
		if tt.rank != "" {
			prof = engineVLLM.forRank(tt.rank)
		}
		r, err := mustParser(t, prof).Parse([]byte(head+tt.body+"\n"), ContentTypeText)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := r.Found.Has(HasAdapters); got != tt.found {
			t.Errorf("%s: found = %v, want %v", tt.name, got, tt.found)
			continue
		}
		if tt.found && (!slices.Equal(r.RunningAdapters, tt.running) || !slices.Equal(r.WaitingAdapters, tt.waiting) || r.MaxAdapters != tt.slots) {
			t.Errorf("%s: running %q waiting %q slots %v, want %q %q %v", tt.name, r.RunningAdapters, r.WaitingAdapters, r.MaxAdapters, tt.running, tt.waiting, tt.slots)
		}
	}
}

// Two series stamped with the same time (a server that stamps whole seconds wrote both
// within one): the state is chosen by content, the same whichever the exposition lists
// first — the busier one (more adapters named, then more slots), then the lexically first
// labels.
func TestParseLoRARequestsInfoTies(t *testing.T) {
	const head = "# TYPE vllm:lora_requests_info gauge\n"
	series := func(max, running, waiting string) string {
		return `vllm:lora_requests_info{max_lora="` + max + `",running_lora_adapters="` + running + `",waiting_lora_adapters="` + waiting + `"} 1.764424931e+09` + "\n"
	}
	tests := []struct {
		name             string
		x, y             string
		running, waiting []string
		slots            float64
	}{
		{"more adapters named", series("4", "a", ""), series("4", "a,b", "c"), []string{"a", "b"}, []string{"c"}, 4},
		{"waiting ones count too", series("4", "a", "b"), series("4", "z", ""), []string{"a"}, []string{"b"}, 4},
		{"as many: more slots", series("2", "a", ""), series("4", "b", ""), []string{"b"}, nil, 4},
		{"alike: lexical order of running", series("4", "b", "c"), series("4", "a", "d"), []string{"a"}, []string{"d"}, 4},
		{"alike: lexical order of waiting", series("4", "a", "d"), series("4", "a", "c"), []string{"a"}, []string{"c"}, 4},
		{"alike: lexical order of max", series("4", "a", ""), series("04", "a", ""), []string{"a"}, nil, 4},
	}
	for _, tt := range tests {
		for _, order := range [][2]string{{tt.x, tt.y}, {tt.y, tt.x}} {
			r, err := mustParser(t, engineVLLM).Parse([]byte(head+order[0]+order[1]), ContentTypeText)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if !r.Found.Has(HasAdapters) || !slices.Equal(r.RunningAdapters, tt.running) || !slices.Equal(r.WaitingAdapters, tt.waiting) || r.MaxAdapters != tt.slots {
				t.Errorf("%s, listed %q first: running %q waiting %q slots %v, want %q %q %v", tt.name, order[0], r.RunningAdapters, r.WaitingAdapters, r.MaxAdapters, tt.running, tt.waiting, tt.slots)
			}
		}
	}
}

func TestAdapterInfoValidate(t *testing.T) {
	p := *engineVLLM
	p.Adapters.Max = ""
	if _, err := NewParser(ParserOptions{Engine: &p}); err == nil {
		t.Error("AdapterInfo without a Max label accepted")
	}
	only := &Engine{Name: "lora-only", Adapters: vllmAdapters}
	if _, err := NewParser(ParserOptions{Engine: only}); err != nil {
		t.Errorf("a profile reading only adapters: %v", err)
	}
}
