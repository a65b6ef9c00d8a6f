package replica

import (
	"errors"
	"github.com/usher-llm/usher/internal/peer"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
)

func TestChangesRoundTrip(t *testing.T) {
	chain := []prefixcache.BlockHash{1, 2, 3, math.MaxUint64}
	exp := time.UnixMilli(1_767_225_600_123)
	b := appendHeader(nil, kindChanges)
	var ok [4]bool
	b, ok[0] = appendChain(b, recInsert, "http://a:8000", chain)
	b, ok[1] = appendPlace(b, 0xdeadbeef, "http://b:8000", 77, exp)
	b, ok[2] = appendUsage(b, peer.UsageDelta{Flow: "tenant-1", Band: 2, Amount: 1234.5})
	b, ok[3] = appendChain(b, recRemove, "http://a:8000", chain[:2])
	if ok != [4]bool{true, true, true, true} {
		t.Fatalf("append reported %v", ok)
	}
	var got []change
	var scratch []prefixcache.BlockHash
	err := decodeChanges(b, &scratch, func(c *change) {
		cc := *c
		cc.chain = slices.Clone(c.chain)
		got = append(got, cc)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("decoded %d records, want 4", len(got))
	}
	if got[0].kind != recInsert || got[0].backend != "http://a:8000" || !slices.Equal(got[0].chain, chain) {
		t.Errorf("insert: %+v", got[0])
	}
	if got[1].kind != recPlace || got[1].session != 0xdeadbeef || got[1].backend != "http://b:8000" || got[1].blocks != 77 || !got[1].expires.Equal(exp) {
		t.Errorf("placement: %+v", got[1])
	}
	if got[2].kind != recUsage || got[2].usage != (peer.UsageDelta{Flow: "tenant-1", Band: 2, Amount: 1234.5}) {
		t.Errorf("usage: %+v", got[2])
	}
	if got[3].kind != recRemove || !slices.Equal(got[3].chain, chain[:2]) {
		t.Errorf("remove: %+v", got[3])
	}
}

func TestAppendRefuses(t *testing.T) {
	long := string(make([]byte, MaxNameBytes+1))
	if _, ok := appendChain(nil, recInsert, long, []prefixcache.BlockHash{1}); ok {
		t.Error("over-long backend accepted")
	}
	if _, ok := appendChain(nil, recInsert, "a", nil); ok {
		t.Error("empty chain accepted")
	}
	for _, a := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, ok := appendUsage(nil, peer.UsageDelta{Flow: "f", Amount: a}); ok {
			t.Errorf("usage amount %g accepted", a)
		}
	}
	if _, ok := appendUsage(nil, peer.UsageDelta{Flow: "f", Band: -1, Amount: 1}); ok {
		t.Error("negative band accepted")
	}
	// A chain longer than the format carries is cut, not refused.
	b, ok := appendChain(appendHeader(nil, kindChanges), recInsert, "a", make([]prefixcache.BlockHash, MaxChainBlocks+5))
	if !ok {
		t.Fatal("long chain refused")
	}
	var n int
	if err := decodeChanges(b, new([]prefixcache.BlockHash), func(c *change) { n = len(c.chain) }); err != nil || n != MaxChainBlocks {
		t.Errorf("long chain decoded to %d blocks (err %v), want %d", n, err, MaxChainBlocks)
	}
}

func TestLoadRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_767_225_600_000)
	in := []peer.Load{
		{Backend: "a", Requests: 3, PrefillTokens: 4000, Blocks: 60},
		{Backend: "b"},
	}
	got, gotAt, err := decodeLoad(appendLoad(nil, at, in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !gotAt.Equal(at) || !slices.Equal(got, in) {
		t.Errorf("got %v at %v, want %v at %v", got, gotAt, in, at)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := appendHeader(nil, kindChanges)
	good, _ = appendChain(good, recInsert, "a", []prefixcache.BlockHash{1, 2})
	cases := map[string][]byte{
		"empty":           nil,
		"foreign":         []byte(`{"json": true}`),
		"other version":   append([]byte(magic), 9, kindChanges),
		"load as changes": appendLoad(nil, time.Now(), nil),
		"truncated":       good[:len(good)-3],
		"unknown record":  append(appendHeader(nil, kindChanges), 99),
		"huge count":      append(append(appendHeader(nil, kindChanges), recInsert, 1, 'a'), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"not utf-8":       append(appendHeader(nil, kindChanges), recInsert, 2, 0xff, 0xfe, 1, 0, 0, 0, 0, 0, 0, 0, 0),
		"zero amount":     append(append(appendHeader(nil, kindChanges), recUsage, 1, 'f', 0), 0, 0, 0, 0, 0, 0, 0, 0),
	}
	for name, b := range cases {
		err := decodeChanges(b, new([]prefixcache.BlockHash), func(*change) {})
		if !errors.Is(err, ErrBadPayload) {
			t.Errorf("%s: err %v, want ErrBadPayload", name, err)
		}
	}
	if _, _, err := decodeLoad(append(appendLoad(nil, time.Now(), nil), 0), nil); !errors.Is(err, ErrBadPayload) {
		t.Errorf("load with trailing bytes: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b := appendHeader(nil, kindChanges)
	b, _ = appendChain(b, recInsert, "a", []prefixcache.BlockHash{1, 2})
	b, _ = appendPlace(b, 7, "b", 3, time.UnixMilli(5))
	b, _ = appendUsage(b, peer.UsageDelta{Flow: "t", Band: 1, Amount: 2})
	f.Add(b)
	f.Add(appendLoad(nil, time.UnixMilli(9), []peer.Load{{Backend: "a", Requests: 1}}))
	f.Add([]byte("usr"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var scratch []prefixcache.BlockHash
		n := 0
		err := decodeChanges(data, &scratch, func(c *change) {
			n++
			if len(c.chain) > MaxChainBlocks || len(c.backend) > MaxNameBytes {
				t.Fatalf("record beyond the limits: %d blocks, %d-byte name", len(c.chain), len(c.backend))
			}
		})
		if err != nil && !errors.Is(err, ErrBadPayload) {
			t.Fatalf("error %v does not wrap ErrBadPayload", err)
		}
		loads, _, err := decodeLoad(data, nil)
		if err != nil && !errors.Is(err, ErrBadPayload) {
			t.Fatalf("load error %v does not wrap ErrBadPayload", err)
		}
		if len(loads) > MaxLoadBackends {
			t.Fatalf("%d backends", len(loads))
		}
	})
}
