package api

import (
	"encoding/json"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer"
	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
)

// TestTemplates holds RenderChat to Jinja2's rendering of every conversation, for each family
// whose tokenizer_config.json has a chat template: the same text, or an error where the template
// raised.
func TestTemplates(t *testing.T) {
	convs := golden.Lines(golden.Gunzip(t, "conversations.jsonl.gz"))
	for _, f := range golden.Families {
		t.Run(f.Dir, func(t *testing.T) {
			if !f.Template {
				t.Skipf("%s: the committed tokenizer_config.json has no chat_template (none found on npm; see PROVENANCE)", f.Dir)
			}
			m := encoder(t, f)
			goldens := golden.DecodeLines[golden.Rendering](t, f.Dir+"/templates.jsonl.gz")
			if len(goldens) != len(convs) {
				t.Fatalf("%d goldens for %d conversations", len(goldens), len(convs))
			}
			const show = 5
			var bad, rendered, raised int
			var dst []byte
			for i, line := range convs {
				var c tokenizer.Conversation
				if err := json.Unmarshal(line, &c); err != nil {
					if bad++; bad <= show {
						t.Errorf("conversation %d: decoding into tokenizer.Conversation: %v", i, err)
					}
					continue
				}
				g := goldens[i]
				var err error
				dst, err = m.RenderChat(dst[:0], &c)
				switch {
				case g.Text == nil && err == nil:
					if bad++; bad <= show {
						t.Errorf("conversation %d: RenderChat succeeded, the reference raised %q\nconversation: %s", i, g.Error, line)
					}
				case g.Text == nil:
					raised++
				case err != nil:
					if bad++; bad <= show {
						t.Errorf("conversation %d: RenderChat: %v; the reference rendered %d bytes\nconversation: %s", i, err, len(*g.Text), line)
					}
				case string(dst) != *g.Text:
					if bad++; bad <= show {
						t.Errorf("conversation %d: %s\nconversation: %s", i, golden.TextDiff(string(dst), *g.Text), line)
					}
				default:
					rendered++
				}
			}
			t.Logf("%s: %d conversations: %d rendered identically, %d failed as the reference did, %d mismatches", f.Dir, len(convs), rendered, raised, bad)
			if bad > 0 {
				t.Errorf("%s: %d of %d conversations differ from the reference (want 0)", f.Dir, bad, len(convs))
			}
		})
	}
}
