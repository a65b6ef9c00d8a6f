package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/usher-llm/usher/prefixcache"
)

// sampleBatch exercises every field of every event kind.
func sampleBatch() *Batch {
	return &Batch{
		Timestamp:        1767225600.25,
		DataParallelRank: 1,
		HasRank:          true,
		Events: []BlockEvent{
			{Kind: BlockStored, Hashes: []uint64{11, 1 << 63, math.MaxUint64}, Tokens: seqTokens(0, 48), BlockSize: 16, Medium: "GPU"},
			{Kind: BlockStored, Hashes: []uint64{12}, Parent: math.MaxUint64, HasParent: true, Tokens: seqTokens(100, 16), BlockSize: 16, LoRAID: 3, LoRAName: "sql-adapter", Medium: "CPU"},
			{Kind: BlockStored, Hashes: []uint64{13}, Parent: 12, HasParent: true, Tokens: seqTokens(7, 16), BlockSize: 16, GroupIdx: 2},
			{Kind: BlockStored, Hashes: []uint64{14, 15}, Tokens: seqTokens(9, 32), BlockSize: 16, LoRAName: "sql-adapter", Salt: "tenant-7"},
			{Kind: BlockStored, Hashes: []uint64{16}, Tokens: seqTokens(9, 16), BlockSize: 16, Salt: "tenant-8", GroupIdx: 1},
			{Kind: BlockRemoved, Hashes: []uint64{11, 12}, Medium: "GPU"},
			{Kind: BlockRemoved, Hashes: []uint64{13}, GroupIdx: 1},
			{Kind: AllBlocksCleared},
		},
	}
}

func seqTokens(from uint32, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = from + uint32(i)*7919
	}
	return t
}

// allEncodings lists every combination a publisher may use.
func allEncodings() []Encoding {
	var out []Encoding
	for _, zp := range []bool{false, true} {
		for _, mb := range []bool{false, true} {
			for _, me := range []bool{false, true} {
				for _, h := range []HashForm{HashAsUint, HashAsInt, HashAsBytes} {
					out = append(out, Encoding{MapBatch: mb, MapEvents: me, Hashes: h, ZeroParent: zp})
				}
			}
		}
	}
	return out
}

func encName(enc Encoding) string {
	s := fmt.Sprintf("batch:%s/events:%s/hash:%d", form(enc.MapBatch), form(enc.MapEvents), enc.Hashes)
	if enc.ZeroParent {
		s += "/zero-parent"
	}
	return s
}

func form(m bool) string {
	if m {
		return "map"
	}
	return "array"
}

// normalize makes empty and nil slices compare equal.
func normalize(b *Batch) Batch {
	out := *b
	out.Events = make([]BlockEvent, len(b.Events))
	for i, e := range b.Events {
		if len(e.Hashes) == 0 {
			e.Hashes = nil
		}
		if len(e.Tokens) == 0 {
			e.Tokens = nil
		}
		out.Events[i] = e
	}
	if len(out.Events) == 0 {
		out.Events = nil
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	want := sampleBatch()
	d := new(Decoder)
	var got Batch
	for _, enc := range allEncodings() {
		t.Run(encName(enc), func(t *testing.T) {
			payload := enc.Append(nil, want)
			if err := d.Decode(payload, &got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if g, w := normalize(&got), normalize(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("round trip:\ngot  %+v\nwant %+v", g, w)
			}
		})
	}
}

// TestVLLMPayloads decodes payloads built as vLLM's msgspec writes them,
// independently of this package's encoder.
func TestVLLMPayloads(t *testing.T) {
	sha := make([]byte, 32)
	for i := range sha {
		sha[i] = byte(i + 1)
	}
	shaFold := binary.BigEndian.Uint64(sha[24:])
	xxh := sha[:16]
	xxhFold := binary.BigEndian.Uint64(xxh[8:])

	tests := []struct {
		name string
		wire any
		want Batch
	}{
		{
			name: "legacy arrays, int hashes, trailing fields omitted",
			wire: []any{1.5, []any{
				[]any{"BlockStored", []any{uint64(1), uint64(2)}, nil, []any{1, 2, 3, 4}, 2, nil, "GPU"},
				[]any{"BlockRemoved", []any{uint64(1)}, "GPU"},
				[]any{"AllBlocksCleared"},
			}, 0},
			want: Batch{Timestamp: 1.5, HasRank: true, Events: []BlockEvent{
				{Kind: BlockStored, Hashes: []uint64{1, 2}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"},
				{Kind: BlockRemoved, Hashes: []uint64{1}, Medium: "GPU"},
				{Kind: AllBlocksCleared},
			}},
		},
		{
			name: "negative int64 hashes (Python hash)",
			wire: []any{int64(2), []any{
				[]any{"BlockStored", []any{int64(-1), int64(-42)}, int64(-7), []any{5}, 1, 9, "GPU", "lora-a"},
			}},
			want: Batch{Timestamp: 2, Events: []BlockEvent{
				{Kind: BlockStored, Hashes: []uint64{math.MaxUint64, uint64(1<<64 - 42)}, Parent: uint64(1<<64 - 7), HasParent: true,
					Tokens: []uint32{5}, BlockSize: 1, LoRAID: 9, LoRAName: "lora-a", Medium: "GPU"},
			}},
		},
		{
			name: "sha256 and xxh3-128 byte hashes fold to their last 8 bytes",
			wire: []any{0.0, []any{
				[]any{"BlockStored", []any{sha, xxh}, sha, []any{}, 16, nil, nil, nil, nil, 0},
			}, nil},
			want: Batch{Events: []BlockEvent{
				{Kind: BlockStored, Hashes: []uint64{shaFold, xxhFold}, Parent: shaFold, HasParent: true, Tokens: []uint32{}, BlockSize: 16},
			}},
		},
		{
			name: "tagged maps with keys in any order, batch as map",
			wire: map[string]any{
				"events": []any{
					map[string]any{"block_size": 1, "token_ids": []any{9}, "type": "BlockStored", "block_hashes": []any{uint64(5)},
						"parent_block_hash": nil, "medium": "CPU", "lora_name": nil, "lora_id": nil, "extra_keys": []any{nil}, "group_idx": 3},
					map[string]any{"type": "BlockRemoved", "block_hashes": []any{uint64(5)}, "medium": "CPU"},
					map[string]any{"type": "AllBlocksCleared"},
				},
				"ts":                 3.25,
				"data_parallel_rank": 2,
				"something_new":      []any{1, 2},
			},
			want: Batch{Timestamp: 3.25, DataParallelRank: 2, HasRank: true, Events: []BlockEvent{
				{Kind: BlockStored, Hashes: []uint64{5}, Tokens: []uint32{9}, BlockSize: 1, Medium: "CPU", GroupIdx: 3},
				{Kind: BlockRemoved, Hashes: []uint64{5}, Medium: "CPU"},
				{Kind: AllBlocksCleared},
			}},
		},
		{
			name: "SGLang: attn_dp_rank, positional events",
			wire: map[string]any{"ts": 4.0, "attn_dp_rank": 1, "events": []any{
				[]any{"BlockStored", []any{uint64(77)}, uint64(76), []any{1, 2}, 2, nil},
			}},
			want: Batch{Timestamp: 4, DataParallelRank: 1, HasRank: true, Events: []BlockEvent{
				{Kind: BlockStored, Hashes: []uint64{77}, Parent: 76, HasParent: true, Tokens: []uint32{1, 2}, BlockSize: 2},
			}},
		},
		{
			name: "unknown event types are skipped and counted, newer trailing fields ignored",
			wire: []any{1.0, []any{
				[]any{"BlockPinned", []any{uint64(1)}, "GPU"},
				map[string]any{"type": "CacheResized", "blocks": 10},
				[]any{"BlockRemoved", []any{uint64(1)}, "GPU", 0, "future", map[string]any{"x": 1}},
				[]any{"AllBlocksCleared", "future"},
			}},
			want: Batch{Timestamp: 1, Unknown: 2, Events: []BlockEvent{
				{Kind: BlockRemoved, Hashes: []uint64{1}, Medium: "GPU"},
				{Kind: AllBlocksCleared},
			}},
		},
	}
	d := new(Decoder)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := msgpack.Marshal(tt.wire)
			if err != nil {
				t.Fatal(err)
			}
			var got Batch
			if err := d.Decode(payload, &got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if g, w := normalize(&got), normalize(&tt.want); !reflect.DeepEqual(g, w) {
				t.Fatalf("got  %+v\nwant %+v", g, w)
			}
		})
	}
}

// TestParentZeroMeansNoParent: a publisher that sends parent_block_hash 0
// for the first blocks of a sequence, where vLLM sends nil, in either
// event encoding. Taken as a parent, 0 made the index reject every such
// event ("unknown parent block: engine hash 0x0") and index nothing.
func TestParentZeroMeansNoParent(t *testing.T) {
	tokens := []any{1, 2, 3, 4, 5, 6, 7, 8}
	zeros := make([]byte, 32) // a sha256-sized hash that folds to 0
	tests := []struct {
		name string
		wire any
	}{
		// The shape of that publisher's batches: legacy positional
		// arrays, int hashes, the rank last.
		{"array, int 0", []any{1767225600.5, []any{
			[]any{"BlockStored", []any{uint64(0xa1), uint64(0xa2)}, 0, tokens, 4, nil, "GPU"},
		}, 0}},
		{"array, 32 zero bytes", []any{1.0, []any{
			[]any{"BlockStored", []any{uint64(0xa1), uint64(0xa2)}, zeros, tokens, 4, nil, "GPU"},
		}}},
		{"map, int 0", map[string]any{"ts": 1.0, "events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{uint64(0xa1), uint64(0xa2)},
				"parent_block_hash": 0, "token_ids": tokens, "block_size": 4, "medium": "GPU"},
		}}},
		{"Encoding.ZeroParent", Encoding{ZeroParent: true}.Append(nil, &Batch{Timestamp: 1, Events: []BlockEvent{
			{Kind: BlockStored, Hashes: []uint64{0xa1, 0xa2}, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
		}})},
	}
	want := BlockEvent{Kind: BlockStored, Hashes: []uint64{0xa1, 0xa2}, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, ok := tt.wire.([]byte)
			if !ok {
				payload = mustMarshal(tt.wire)
			}
			var b Batch
			if err := new(Decoder).Decode(payload, &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || !reflect.DeepEqual(b.Events[0], want) {
				t.Fatalf("decoded %+v, want %+v", b.Events, want)
			}

			// Applied to an index, the blocks are indexed and match the
			// gateway's own hash of the prompt.
			ix, err := prefixcache.New(prefixcache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			id, _ := ix.AddBackend("pod-a", 0)
			s, st := testSubscriber(t, ix, Source{Endpoint: "tcp://127.0.0.1:1", Backend: "pod-a", Model: "m"})
			st.live(t.Context(), [][]byte{nil, be64(0), payload})
			if st := s.Stats(); st.ApplyErrors != 0 || st.Events != 1 {
				t.Errorf("stats %+v: want 1 event applied, no apply error", st)
			}
			chain := prefixcache.HashTokens(nil, prefixcache.Seed("m", "", ""), want.Tokens, 4)
			if got := ix.Match(nil, chain)[id]; got != 2 {
				t.Errorf("matched %d blocks, want 2", got)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		wire any    // marshalled with msgpack unless raw is set
		raw  []byte // used verbatim when non-nil
		want string // substring of the error
	}{
		{name: "empty payload", raw: []byte{}, want: "batch: payload truncated"},
		{name: "not a batch", wire: "hello", want: "batch: want array or map, got str"},
		{name: "batch too short", wire: []any{1.0}, want: "array of 1 elements"},
		{name: "ts not a number", wire: []any{"now", []any{}}, want: "ts: want float, got str"},
		{name: "events not an array", wire: []any{1.0, 7}, want: "events: want array, got int"},
		{name: "event not array or map", wire: []any{1.0, []any{5}}, want: "malformed payload: event 0: event: want array or map, got int (at byte 11)"},
		{name: "empty event", wire: []any{1.0, []any{[]any{}}}, want: "empty array"},
		{name: "tag not a string", wire: []any{1.0, []any{[]any{1}}}, want: "type tag: want str, got int"},
		{name: "map event without type", wire: []any{1.0, []any{map[string]any{"block_hashes": []any{}}}}, want: "without a \"type\" key"},
		{name: "hash is a string", wire: []any{1.0, []any{[]any{"BlockRemoved", []any{"abc"}}}}, want: "event 0: BlockRemoved: block_hashes[0]: want int or bin hash, got str"},
		{name: "hash is a float", wire: []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}}, want: "block_hashes[0]: want int or bin hash, got float (at byte 26)"},
		{name: "empty byte hash", wire: []any{1.0, []any{[]any{"BlockRemoved", []any{[]byte{}}}}}, want: "byte-string hash of 0 bytes"},
		{name: "huge byte hash", wire: []any{1.0, []any{[]any{"BlockRemoved", []any{make([]byte, 65)}}}}, want: "byte-string hash of 65 bytes"},
		{name: "negative token", wire: []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{-1}, 16}}}, want: "token id -1 out of range"},
		{name: "token too large", wire: []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{int64(1) << 40}, 16}}}, want: "out of range"},
		{name: "nil token", wire: []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{nil}, 16}}}, want: "token_ids: want int, got nil"},
		{name: "negative block size", wire: []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{}, -16}}}, want: "block_size: -16 out of range"},
		{name: "medium not a string", wire: []any{1.0, []any{[]any{"BlockRemoved", []any{}, 5}}}, want: "medium: want str, got int"},
		{name: "rank not an int", wire: []any{1.0, []any{}, "zero"}, want: "data_parallel_rank: want int, got str"},
		{name: "batch key not a string", wire: map[int]any{1: 2}, want: "batch key: want str, got int"},
		{name: "trailing bytes", raw: append(mustMarshal([]any{1.0, []any{}}), 0xc0), want: "1 trailing bytes"},
		{name: "truncated", raw: mustMarshal([]any{1.0, []any{[]any{"BlockRemoved", []any{uint64(1) << 60}}}})[:30], want: "payload truncated"},
		{name: "truncated inside token_ids", raw: mustMarshal([]any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{70000, 70001}, 16}}})[:34], want: "token_ids: payload truncated"},
		{name: "lying array length", raw: []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}, want: "array of 4294967295 elements in 1 remaining bytes"},
		{name: "lying str length", raw: []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}, want: "4294967295 bytes announced"},
		{name: "invalid code", raw: []byte{0xc1}, want: "invalid code 0xc1"},
	}
	d := new(Decoder)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := tt.raw
			if payload == nil {
				payload = mustMarshal(tt.wire)
			}
			var b Batch
			err := d.Decode(payload, &b)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(% x) = %v, want ErrMalformed", payload, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func mustMarshal(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestFoldHash(t *testing.T) {
	tests := []struct {
		in   []byte
		want uint64
	}{
		{[]byte{1}, 1},
		{[]byte{1, 2}, 0x0102},
		{[]byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0102030405060708},
		{[]byte{0xff, 0xee, 1, 2, 3, 4, 5, 6, 7, 8}, 0x0102030405060708},
	}
	for _, tt := range tests {
		if got := foldHash(tt.in); got != tt.want {
			t.Errorf("foldHash(% x) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

func TestParseTopic(t *testing.T) {
	tests := []struct {
		topic, pod, model string
		ok                bool
	}{
		{"kv@pod-0@meta-llama/Llama-3.1-8B", "pod-0", "meta-llama/Llama-3.1-8B", true},
		{"kv@p@m@with@ats", "p", "m@with@ats", true},
		{"kv@pod@", "", "", false},
		{"kv@@model", "", "", false},
		{"kv@pod", "", "", false},
		{"", "", "", false},
		{"kv-events", "", "", false},
	}
	for _, tt := range tests {
		pod, model, err := parseTopic(tt.topic)
		if (err == nil) != tt.ok || pod != tt.pod || model != tt.model {
			t.Errorf("parseTopic(%q) = %q, %q, %v; want %q, %q, ok=%v", tt.topic, pod, model, err, tt.pod, tt.model, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrTopic) {
			t.Errorf("parseTopic(%q) error %v does not wrap ErrTopic", tt.topic, err)
		}
	}
	if got := Topic("a", "b"); got != "kv@a@b" {
		t.Errorf("Topic = %q", got)
	}
}

func TestDecodeReusesBuffersWithoutAllocating(t *testing.T) {
	for _, enc := range allEncodings() {
		payload := enc.Append(nil, sampleBatch())
		d := new(Decoder)
		var b Batch
		if err := d.Decode(payload, &b); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := d.Decode(payload, &b); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 0 {
			t.Errorf("%v: Decode allocates %.1f times per batch, want 0", encName(enc), allocs)
		}
	}
}

// FuzzDecode checks that no input makes the decoder panic, that every
// failure wraps ErrMalformed, and that whatever decodes survives a
// re-encoding in every encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, enc := range allEncodings() {
		f.Add(enc.Append(nil, sampleBatch()))
	}
	f.Add(mustMarshal([]any{1.0, []any{[]any{"Mystery", 1}}}))
	f.Add([]byte{0x93, 0xcb})
	d := new(Decoder)
	var b, again Batch
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := d.Decode(payload, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if math.IsNaN(b.Timestamp) {
			b.Timestamp = 0 // NaN != NaN; the rest still must round-trip
		}
		b.Unknown = 0 // skipped events are not re-encoded
		for _, enc := range allEncodings() {
			if err := d.Decode(enc.Append(nil, &b), &again); err != nil {
				t.Fatalf("%v: re-encoded batch does not decode: %v", encName(enc), err)
			}
			if g, w := normalize(&again), normalize(&b); !reflect.DeepEqual(g, w) {
				t.Fatalf("%v: re-encoding changed the batch:\ngot  %+v\nwant %+v", encName(enc), g, w)
			}
		}
	})
}

// TestParseTopicModelWithSlash is what was parseTopic's example: a model name with a slash.
func TestParseTopicModelWithSlash(t *testing.T) {
	pod, model, err := parseTopic("kv@vllm-7f9c@meta-llama/Llama-3.1-8B-Instruct")
	if got, want := fmt.Sprintln(pod, model, err), "vllm-7f9c meta-llama/Llama-3.1-8B-Instruct <nil>\n"; got != want {
		t.Errorf("parseTopic = %q, want %q", got, want)
	}
}
