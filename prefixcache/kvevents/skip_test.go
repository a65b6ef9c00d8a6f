package kvevents

import (
	"bytes"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// skipCases are msgpack values of every kind, valid and truncated or
// corrupted, for comparing skipValue with the library's Skip.
func skipCases(t *testing.T) [][]byte {
	t.Helper()
	ext, err := msgpack.Marshal(time.Unix(1767225600, 5)) // a timestamp extension
	if err != nil {
		t.Fatal(err)
	}
	values := []any{
		nil, true, false, 0, 1, -1, 127, 128, -33, 255, 256, -129, 65536, -40000, uint64(1) << 40, int64(math.MinInt64),
		float32(1.5), 2.5, "", "abc", string(make([]byte, 40)), string(make([]byte, 300)), string(make([]byte, 70000)),
		[]byte{}, []byte{1, 2, 3}, make([]byte, 300), make([]byte, 70000),
		[]any{}, []any{1, "x", []any{nil, 2.5}}, make([]any, 20), make([]any, 70000),
		map[string]any{}, map[string]any{"a": 1, "b": []any{true}}, sampleBatch(),
	}
	var out [][]byte
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	out = append(out, ext)
	for _, enc := range allEncodings() {
		out = append(out, enc.Append(nil, sampleBatch()))
	}
	out = append(out,
		[]byte{0xd4, 1, 2}, []byte{0xd5, 1, 2, 3}, []byte{0xd8, 1}, // fixext 1, 2, 16 (the last truncated)
		[]byte{0xc7, 2, 9, 1, 2}, []byte{0xc8, 0, 1, 9, 1}, []byte{0xc9, 0, 0, 0, 0, 9}, // ext 8, 16, 32
		[]byte{0xc1},                            // never used
		[]byte{0xc6, 0xd4, 0xc1, 0xdd, 0x9d, 0}, // bin32 announcing 3.5 GB
		[]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0}, // array32 announcing 4G elements
		[]byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0}, // map32 announcing 4G pairs
	)
	// Every prefix of every case, and random corruptions.
	r := rand.New(rand.NewPCG(7, 7))
	for _, b := range out[:len(out):len(out)] {
		for n := 0; n < len(b) && n < 64; n++ {
			out = append(out, b[:n])
		}
		for range 20 {
			c := bytes.Clone(b[:min(len(b), 200)])
			c[r.IntN(len(c))] = byte(r.Uint32())
			out = append(out, c)
		}
	}
	return out
}

// TestSkipValueMatchesLibrary: skipValue accepts exactly what the msgpack
// library's Skip accepts and consumes the same bytes.
func TestSkipValueMatchesLibrary(t *testing.T) {
	for i, b := range skipCases(t) {
		lib := msgpack.NewDecoder(bytes.NewReader(b))
		libErr := lib.Skip()
		libRest := lib.Buffered().(*bytes.Reader).Len()

		d := new(Decoder)
		d.payload, d.size = b, len(b)
		d.r.Reset(b)
		err := d.skipValue("value")
		if (err == nil) != (libErr == nil) {
			t.Errorf("case %d % x: skipValue error %v, library %v", i, b[:min(len(b), 16)], err, libErr)
			continue
		}
		if err == nil && d.r.Len() != libRest {
			t.Errorf("case %d % x: skipValue left %d bytes, library %d", i, b[:min(len(b), 16)], d.r.Len(), libRest)
		}
	}
}

// TestSkipHugeAnnouncement: an unknown event whose fields announce a
// multi-gigabyte string is rejected without allocating for it (the library
// allocated 1 MB per such payload before reaching its end).
func TestSkipHugeAnnouncement(t *testing.T) {
	payload := []byte{0x92, 0x00, 0x91, 0x92, 0xa7, 'M', 'y', 's', 't', 'e', 'r', 'y', 0xc6, 0xd4, 0xc1, 0xdd, 0x9d, 1, 2, 3}
	d := new(Decoder)
	var b Batch
	if err := d.Decode(payload, &b); err == nil {
		t.Fatal("Decode accepted a truncated payload")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		_ = d.Decode(payload, &b)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("10 decodes of a %d-byte payload allocated %d bytes, want < 64 KiB", len(payload), got)
	}
}
