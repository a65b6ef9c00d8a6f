package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/usher-llm/usher/internal/kvpub"
)

func init() {
	kvpub.Encode = func(enc kvpub.Encoding, dst []byte, batch any) []byte {
		b, ok := batch.(*Batch)
		if !ok {
			panic(fmt.Sprintf("kvevents: kvpub.Encode of a %T, want a *kvevents.Batch", batch))
		}
		return appendBatch(enc, dst, b)
	}
}

// appendBatch appends the msgpack encoding of b in enc to dst and returns the extended slice.
// Fields at their defaults are written as vLLM writes them: nil for optional values inside an
// event and omitted when trailing (positional) or absent (map). Cost is linear in the size of
// b.
func appendBatch(enc kvpub.Encoding, dst []byte, b *Batch) []byte {
	buf := bytes.NewBuffer(dst)
	w := writer{Encoder: msgpack.NewEncoder(buf), enc: enc}
	w.batch(b)
	return buf.Bytes()
}

// writer carries an encoder; writes into a bytes.Buffer cannot fail, so
// the msgpack errors are ignored throughout.
type writer struct {
	*msgpack.Encoder
	enc     kvpub.Encoding
	scratch [32]byte
}

func (w *writer) batch(b *Batch) {
	n := 2
	if b.HasRank {
		n = 3
	}
	if w.enc.MapBatch {
		_ = w.EncodeMapLen(n)
		_ = w.EncodeString("ts")
	} else {
		_ = w.EncodeArrayLen(n)
	}
	_ = w.EncodeFloat64(b.Timestamp)
	if w.enc.MapBatch {
		_ = w.EncodeString("events")
	}
	_ = w.EncodeArrayLen(len(b.Events))
	for i := range b.Events {
		w.event(&b.Events[i])
	}
	if b.HasRank {
		if w.enc.MapBatch {
			_ = w.EncodeString("data_parallel_rank")
		}
		_ = w.EncodeInt(int64(b.DataParallelRank))
	}
}

func (w *writer) hash(h uint64) {
	switch w.enc.Hashes {
	case kvpub.HashAsInt:
		_ = w.EncodeInt(int64(h))
	case kvpub.HashAsBytes:
		x := h
		for i := 0; i < 24; i += 8 {
			x = x*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
			binary.BigEndian.PutUint64(w.scratch[i:], x^x>>29)
		}
		binary.BigEndian.PutUint64(w.scratch[24:], h)
		_ = w.EncodeBytes(w.scratch[:])
	default:
		_ = w.EncodeUint(h)
	}
}

func (w *writer) optString(s string) {
	if s == "" {
		_ = w.EncodeNil()
		return
	}
	_ = w.EncodeString(s)
}

// hasExtraKeys reports whether e's blocks were hashed with extra keys: an adapter's name, or
// the first block's Salt (a cache_salt).
func hasExtraKeys(e *BlockEvent) bool { return e.LoRAName != "" || (e.Salt != "" && !e.HasParent) }

// extraKeys writes extra_keys as vLLM does: one entry per block, the adapter's name, then
// (first block of a chain only) the salt; nil for a block without any.
func (w *writer) extraKeys(e *BlockEvent) {
	if !hasExtraKeys(e) {
		_ = w.EncodeNil()
		return
	}
	_ = w.EncodeArrayLen(len(e.Hashes))
	for i := range e.Hashes {
		k := 0
		if e.LoRAName != "" {
			k++
		}
		salt := i == 0 && !e.HasParent && e.Salt != ""
		if salt {
			k++
		}
		if k == 0 {
			_ = w.EncodeNil()
			continue
		}
		_ = w.EncodeArrayLen(k)
		if e.LoRAName != "" {
			_ = w.EncodeString(e.LoRAName)
		}
		if salt {
			_ = w.EncodeString(e.Salt)
		}
	}
}

// key writes a map key in the map form; nothing in the positional form.
func (w *writer) key(k string) {
	if w.enc.MapEvents {
		_ = w.EncodeString(k)
	}
}

func (w *writer) event(e *BlockEvent) {
	// n counts the fields after the tag.
	var n int
	switch e.Kind {
	case BlockStored:
		n = 6 // block_hashes .. medium are always written
		switch {
		case w.enc.MapEvents:
			// Maps omit defaults wherever they are.
			if e.LoRAName != "" {
				n++
			}
			if hasExtraKeys(e) {
				n++
			}
			if e.GroupIdx != 0 {
				n++
			}
		case e.GroupIdx != 0:
			n = 9 // positional: up to group_idx
		case hasExtraKeys(e):
			n = 8
		case e.LoRAName != "":
			n = 7
		}
	case BlockRemoved:
		n = 2
		if e.GroupIdx != 0 {
			n = 3
		}
	}
	if w.enc.MapEvents {
		_ = w.EncodeMapLen(n + 1)
		_ = w.EncodeString("type")
	} else {
		_ = w.EncodeArrayLen(n + 1)
	}
	_ = w.EncodeString(e.Kind.String())
	switch e.Kind {
	case BlockStored:
		w.key("block_hashes")
		w.hashList(e.Hashes)
		w.key("parent_block_hash")
		switch {
		case e.HasParent:
			w.hash(e.Parent)
		case w.enc.ZeroParent:
			_ = w.EncodeUint(0)
		default:
			_ = w.EncodeNil()
		}
		w.key("token_ids")
		_ = w.EncodeArrayLen(len(e.Tokens))
		for _, t := range e.Tokens {
			_ = w.EncodeUint(uint64(t))
		}
		w.key("block_size")
		_ = w.EncodeInt(int64(e.BlockSize))
		w.key("lora_id")
		if e.LoRAID != 0 {
			_ = w.EncodeInt(e.LoRAID)
		} else {
			_ = w.EncodeNil()
		}
		w.key("medium")
		w.optString(e.Medium)
		if w.enc.MapEvents {
			if e.LoRAName != "" {
				w.key("lora_name")
				_ = w.EncodeString(e.LoRAName)
			}
			if hasExtraKeys(e) {
				w.key("extra_keys")
				w.extraKeys(e)
			}
			if e.GroupIdx != 0 {
				w.key("group_idx")
				_ = w.EncodeInt(int64(e.GroupIdx))
			}
			return
		}
		if n >= 7 {
			w.optString(e.LoRAName)
		}
		if n >= 8 {
			w.extraKeys(e)
		}
		if n >= 9 {
			_ = w.EncodeInt(int64(e.GroupIdx))
		}
	case BlockRemoved:
		w.key("block_hashes")
		w.hashList(e.Hashes)
		w.key("medium")
		w.optString(e.Medium)
		if n >= 3 {
			w.key("group_idx")
			_ = w.EncodeInt(int64(e.GroupIdx))
		}
	}
}

func (w *writer) hashList(hs []uint64) {
	_ = w.EncodeArrayLen(len(hs))
	for _, h := range hs {
		w.hash(h)
	}
}
