package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// fixedNow is the clock of conformance/scripts/render_chat.py's strftime_now.
var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type refResult struct {
	Out string `json:"out"`
	Err string `json:"err"`
}

// renderReference renders cases with transformers' semantics in Python (jinja2), skipping
// the test where python3 with jinja2 is not installed.
func renderReference(t testing.TB, configs map[string]json.RawMessage, family []string, chats []*Conversation) []refResult {
	t.Helper()
	// USHER_PYTHON names the interpreter (CI sets Debian's, which has python3-jinja2);
	// USHER_REQUIRE_JINJA2 makes its absence a failure rather than a skip.
	python := cmp.Or(os.Getenv("USHER_PYTHON"), "python3")
	if err := exec.Command(python, "-c", "import jinja2").Run(); err != nil {
		if os.Getenv("USHER_REQUIRE_JINJA2") != "" {
			t.Fatalf("%s has no jinja2 and USHER_REQUIRE_JINJA2 is set (apt-get install python3-jinja2): %v", python, err)
		}
		t.Skipf("%s has no jinja2 (apt-get install python3-jinja2): %v", python, err)
	}
	type refCase struct {
		Config       string        `json:"config"`
		Conversation *Conversation `json:"chat"`
	}
	req := struct {
		Configs map[string]json.RawMessage `json:"configs"`
		Cases   []refCase                  `json:"cases"`
	}{Configs: configs}
	for i, c := range chats {
		req.Cases = append(req.Cases, refCase{family[i], c})
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The reference script lives with the conformance data, outside the library module: a
	// copy of the library without it (its module zip) skips this comparison.
	const script = "conformance/scripts/render_chat.py"
	if _, err := os.Stat(script); err != nil {
		t.Skipf("%s: %v", script, err)
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render_chat.py: %v: %s", err, stderr.String())
	}
	var res []refResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRenderFamiliesAgainstJinja2 renders generated conversations (system prompts,
// tools, tool calls and results, reasoning, unicode) with each family's real
// tokenizer_config.json and compares with Jinja2. The files are not in this module: set
// USHER_TOKDATA to a directory holding <family>/tokenizer_config.json (qwen3, gpt-oss,
// deepseek-v3, mistral), and USHER_TOKDATA_N for the conversations per family (default 300).
// A family whose config has no chat_template takes one from <family>/chat_template.jinja.
func TestRenderFamiliesAgainstJinja2(t *testing.T) {
	dir := os.Getenv("USHER_TOKDATA")
	if dir == "" {
		t.Skip("USHER_TOKDATA not set")
	}
	n := 300
	if s := os.Getenv("USHER_TOKDATA_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	configs := map[string]json.RawMessage{}
	models := map[string]*Encoder{}
	var family []string
	var chats []*Conversation
	for _, fam := range []string{"qwen3", "gpt-oss", "deepseek-v3", "mistral"} {
		cfg, err := os.ReadFile(filepath.Join(dir, fam, "tokenizer_config.json"))
		if err != nil {
			t.Logf("%s: %v", fam, err)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(cfg, &m); err != nil {
			t.Fatal(err)
		}
		if m["chat_template"] == nil {
			tpl, err := os.ReadFile(filepath.Join(dir, fam, "chat_template.jinja"))
			if err != nil {
				t.Logf("%s: no chat template", fam)
				continue
			}
			m["chat_template"] = string(tpl)
			if cfg, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		model, err := parseChatOnly(cfg)
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		configs[fam] = cfg
		models[fam] = model
		rng := rand.New(rand.NewPCG(uint64(len(fam)), 44))
		for range n {
			family = append(family, fam)
			chats = append(chats, genChat(rng, fam))
		}
	}
	want := renderReference(t, configs, family, chats)
	mismatches := map[string]int{}
	errs := map[string]int{}
	for i, c := range chats {
		c.Now = fixedNow
		got, err := models[family[i]].RenderChat(nil, c)
		w := want[i]
		bad := false
		switch {
		case w.Err != "" && err == nil:
			bad = true
			t.Errorf("%s #%d: got %q, want an error like %s", family[i], i, got, w.Err)
		case w.Err == "" && err != nil:
			bad = true
			t.Errorf("%s #%d: got error %v, want %q", family[i], i, err, w.Out)
		case w.Err == "" && string(got) != w.Out:
			bad = true
			t.Errorf("%s #%d:\n got %q\nwant %q", family[i], i, got, w.Out)
		case w.Err != "":
			errs[family[i]]++
			if errs[family[i]] <= 2 {
				t.Logf("%s #%d: both fail: %s / %v", family[i], i, w.Err, err)
			}
		}
		if bad {
			mismatches[family[i]]++
			if mismatches[family[i]] == 1 {
				j, _ := json.Marshal(c)
				t.Logf("%s #%d chat: %s", family[i], i, j)
			}
		}
	}
	for fam := range configs {
		t.Logf("%s: %d conversations, %d mismatches, %d rendered errors on both sides", fam, n, mismatches[fam], errs[fam])
	}
}

var genTools = []string{
	`{"type":"function","function":{"name":"get_weather","description":"Get the weather for a city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"The city, e.g. Paris"},"unit":{"type":"string","enum":["celsius","fahrenheit"],"default":"celsius"}},"required":["city"]}}}`,
	`{"type":"function","function":{"name":"search","description":"Search the web — ünïcode ok.","parameters":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","default":10},"filters":{"type":"array","items":{"type":"string"}},"safe":{"type":"boolean"},"ratio":{"type":"number","default":0.5}},"required":["query"]}}}`,
	`{"type":"function","function":{"name":"run_sql","description":"Run a query.","parameters":{"type":"object","properties":{"sql":{"type":"string","nullable":true},"opts":{"type":"object","properties":{"timeout":{"type":"integer"},"db":{"type":"string"}},"required":["db"]},"rows":{"type":"array","items":{"type":"object","properties":{"a":{"type":"string"}}}},"mode":{"oneOf":[{"type":"string","description":"by name"},{"type":"integer"}]}},"required":["sql"]}}}`,
	`{"type":"function","function":{"name":"noop","description":"Does nothing.","parameters":{"type":"object","properties":{}}}}`,
	`{"type":"function","function":{"name":"multi","description":"Types as a list.","parameters":{"type":"object","properties":{"v":{"type":["string","number"]},"w":{"type":"array"}}}}}`,
}

var genTexts = []string{
	"Hello!", "What's the weather in Paris?", "日本語で答えてください。", "line one\nline two\n\n  indented",
	"emoji 🎉👍🏽 and accents: café", "code:\n```go\nfunc main() { fmt.Println(\"hi\") }\n```", "  leading and trailing spaces  ",
	"<|im_start|> look-alike <|im_end|>", "tabs\tand\\backslashes\\", "{\"json\": [1, 2, 3]}", "", "'quotes' and \"double\"",
	"<tool_response>\nfake\n</tool_response>", "<think>\nhidden\n</think>\n\nvisible", "A much longer message. " + "Lorem ipsum dolor sit amet. ",
}

func jstr(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func genChat(rng *rand.Rand, fam string) *Conversation {
	c := &Conversation{AddGenerationPrompt: rng.IntN(3) > 0}
	pick := func() string { return genTexts[rng.IntN(len(genTexts))] }
	if rng.IntN(2) == 0 && (fam != "mistral" || rng.IntN(5) == 0) {
		role := "system"
		if fam == "gpt-oss" && rng.IntN(2) == 0 {
			role = "developer"
		}
		c.Messages = append(c.Messages, Message{Role: role, Content: jstr("You are a helpful assistant. " + pick())})
	}
	if fam != "mistral" && rng.IntN(2) == 0 {
		for _, i := range rng.Perm(len(genTools))[:1+rng.IntN(3)] {
			c.Tools = append(c.Tools, json.RawMessage(genTools[i]))
		}
	}
	turns := 1 + rng.IntN(4)
	call := 0
	for t := range turns {
		c.Messages = append(c.Messages, Message{Role: "user", Content: jstr(pick())})
		if t == turns-1 && rng.IntN(3) > 0 {
			break
		}
		if fam != "mistral" && rng.IntN(3) == 0 {
			// a tool call round: assistant calls, tool answers, assistant concludes
			calls := 1 + rng.IntN(2)
			if fam == "gpt-oss" {
				calls = 1
			}
			a := Message{Role: "assistant", Content: jstr("")}
			switch rng.IntN(6) {
			case 0:
				a.Content = json.RawMessage("null") // vLLM would pass "": both fail on most templates
			case 1, 2:
				a.Content = jstr("Let me check.")
			}
			if fam == "deepseek-v3" {
				a.Content = json.RawMessage("null")
			}
			for range calls {
				var tc ToolCall
				call++
				tc.ID = fmt.Sprintf("call_%d", call)
				tc.Type = "function"
				tc.Function.Name = []string{"get_weather", "search", "run_sql"}[rng.IntN(3)]
				args := `{"city": "Paris", "n": 3, "nested": {"a": [1, 2.5, null, true]}, "s": "é\n\"q\""}`
				if rng.IntN(2) == 0 || fam == "deepseek-v3" {
					tc.Function.Arguments = jstr(args)
				} else {
					tc.Function.Arguments = json.RawMessage(args)
				}
				a.ToolCalls = append(a.ToolCalls, tc)
			}
			c.Messages = append(c.Messages, a)
			for i := range calls {
				c.Messages = append(c.Messages, Message{Role: "tool", ToolCallID: a.ToolCalls[i].ID, Content: jstr(`{"temp": 21, "sky": "clear"}`)})
			}
			if rng.IntN(2) == 0 {
				continue
			}
		}
		a := Message{Role: "assistant", Content: jstr(pick())}
		if fam == "qwen3" && rng.IntN(3) == 0 {
			a.ReasoningContent = "I should think about " + pick()
		}
		c.Messages = append(c.Messages, a)
	}
	switch fam {
	case "qwen3":
		switch rng.IntN(3) {
		case 0:
			c.Kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
		case 1:
			c.Kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("true")}
		}
	case "gpt-oss":
		c.Kwargs = map[string]json.RawMessage{}
		if rng.IntN(2) == 0 {
			c.Kwargs["reasoning_effort"] = jstr([]string{"low", "medium", "high"}[rng.IntN(3)])
		}
		if rng.IntN(3) == 0 {
			c.Kwargs["builtin_tools"] = json.RawMessage([]string{`["browser"]`, `["python"]`, `["browser","python"]`}[rng.IntN(3)])
		}
		if rng.IntN(4) == 0 {
			c.Kwargs["model_identity"] = jstr("You are a test model.")
		}
	}
	return c
}
