package simfleet

import (
	"slices"
	"sync"
	"testing"

	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// recorder is a KVPublisher that encodes each batch in vLLM's wire format and decodes it
// back, as a subscriber would.
type recorder struct {
	mu     sync.Mutex
	events []kvevents.BlockEvent
	seq    uint64
}

func (r *recorder) Publish(b any) (uint64, error) {
	payload := kvpub.Encoding{}.Append(nil, b)
	var got kvevents.Batch
	if err := new(kvevents.Decoder).Decode(payload, &got); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range got.Events {
		ev.Hashes = slices.Clone(ev.Hashes)
		ev.Tokens = slices.Clone(ev.Tokens)
		r.events = append(r.events, ev)
	}
	r.seq++
	return r.seq - 1, nil
}

func TestPublishKVEvents(t *testing.T) {
	rec := &recorder{}
	var errs []error
	p := fast()
	p.NumBlocks = 16 // small, so that a few requests evict
	f := startFleet(t, 1, func(_ int, o *Options) {
		o.Engine.Profile = p
		o.OnKVEvents = PublishKVEvents(rec, func(err error) { errs = append(errs, err) })
	})
	url := f.URLs()[0] + "/v1/completions"
	prompt := "The quick brown fox jumps over the lazy dog and keeps running through the forest until night falls."
	for i := range 12 {
		decode[chatResponse](t, post(t, url, map[string]any{"prompt": prompt + string(rune('a'+i)) + prompt, "max_tokens": 40, "ignore_eos": true}), 200)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	stored, removed := 0, 0
	want := Tokenize(prompt + "a" + prompt)
	for _, ev := range rec.events {
		switch ev.Kind {
		case kvevents.BlockStored:
			stored += len(ev.Hashes)
			if ev.BlockSize != 16 || len(ev.Tokens) != 16*len(ev.Hashes) || ev.Medium != "GPU" {
				t.Fatalf("stored event %+v", ev)
			}
		case kvevents.BlockRemoved:
			removed += len(ev.Hashes)
		}
	}
	first := rec.events[0]
	if first.Kind != kvevents.BlockStored || first.HasParent || !slices.Equal(first.Tokens, want[:len(first.Tokens)]) {
		t.Errorf("first event %+v does not start the first prompt %v", first, want[:16])
	}
	if stored == 0 || removed == 0 {
		t.Errorf("stored %d, removed %d blocks: want both", stored, removed)
	}
}
