package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/usher-llm/usher/internal/peer"
	"math"
	"time"
	"unicode/utf8"

	"github.com/usher-llm/usher/prefixcache"
)

// The wire format of everything a replica writes to Redis. A payload is
//
//	magic "usr" | version 1 | kind | body
//
// with unsigned varints for counts and lengths, little-endian 64-bit words for hashes and
// floats, and strings as a varint length and UTF-8 bytes. Two kinds exist:
//
//	kindChanges (a change-stream entry): a sequence of records until the end, each
//	  recInsert/recRemove: backend, n, n block hashes
//	  recPlace: session hash (u64), backend, blocks, expiry (Unix ms, varint)
//	  recUsage: flow, band, amount (f64)
//	kindLoad (a replica's load key): sent-at (Unix ms, varint), n, n × (backend, requests,
//	  prefill tokens, blocks)
//
// Decoding checks every length against the payload and the limits below before it slices or
// allocates, so foreign or corrupt data is an error, never a panic or an unbounded allocation.
const (
	magic   = "usr"
	version = 1

	kindChanges = 1
	kindLoad    = 2

	recInsert = 1
	recRemove = 2
	recPlace  = 3
	recUsage  = 4
)

// Limits of the wire format, enforced on decode (and on encode, where a local value could
// exceed them: such a record is not sent).
const (
	// MaxNameBytes bounds a backend name or a flow id.
	MaxNameBytes = 512
	// MaxChainBlocks bounds the blocks of one replicated chain.
	MaxChainBlocks = 8192
	// MaxPayloadBytes bounds one stream entry or load key.
	MaxPayloadBytes = 4 << 20
	// MaxLoadBackends bounds the backends of one load report.
	MaxLoadBackends = 4096
)

// ErrBadPayload is wrapped by every decoding error: the data is not a replica payload of this
// version, or is corrupt.
var ErrBadPayload = errors.New("replica: bad payload")

// change is one decoded record of a change-stream entry. Chain aliases the decoder's scratch
// space and is valid only until the next record.
type change struct {
	kind    byte
	backend string
	chain   []prefixcache.BlockHash
	session uint64
	blocks  int
	expires time.Time
	usage   peer.UsageDelta
}

func appendHeader(b []byte, kind byte) []byte {
	b = append(b, magic...)
	return append(b, version, kind)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendChain appends an insert or remove record. It reports false, appending nothing, for a
// record the format cannot carry.
func appendChain(b []byte, rec byte, backend string, chain []prefixcache.BlockHash) ([]byte, bool) {
	if len(backend) > MaxNameBytes || len(chain) == 0 {
		return b, false
	}
	chain = chain[:min(len(chain), MaxChainBlocks)]
	b = append(b, rec)
	b = appendString(b, backend)
	b = binary.AppendUvarint(b, uint64(len(chain)))
	for _, h := range chain {
		b = binary.LittleEndian.AppendUint64(b, uint64(h))
	}
	return b, true
}

func appendPlace(b []byte, session uint64, backend string, blocks int, expires time.Time) ([]byte, bool) {
	if len(backend) > MaxNameBytes || blocks < 0 {
		return b, false
	}
	b = append(b, recPlace)
	b = binary.LittleEndian.AppendUint64(b, session)
	b = appendString(b, backend)
	b = binary.AppendUvarint(b, uint64(blocks))
	return binary.AppendVarint(b, expires.UnixMilli()), true
}

func appendUsage(b []byte, d peer.UsageDelta) ([]byte, bool) {
	if len(d.Flow) > MaxNameBytes || d.Band < 0 || d.Band > math.MaxUint16 || !(d.Amount > 0) || math.IsInf(d.Amount, 0) {
		return b, false
	}
	b = append(b, recUsage)
	b = appendString(b, string(d.Flow))
	b = binary.AppendUvarint(b, uint64(d.Band))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(d.Amount)), true
}

// appendLoad appends a whole load payload.
func appendLoad(b []byte, at time.Time, loads []peer.Load) []byte {
	b = appendHeader(b, kindLoad)
	b = binary.AppendVarint(b, at.UnixMilli())
	n := 0
	for _, l := range loads {
		if len(l.Backend) <= MaxNameBytes && n < MaxLoadBackends {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	n = 0
	for _, l := range loads {
		if len(l.Backend) > MaxNameBytes || n == MaxLoadBackends {
			continue
		}
		n++
		b = appendString(b, l.Backend)
		b = binary.AppendUvarint(b, uint64(max(l.Requests, 0)))
		b = binary.AppendUvarint(b, uint64(max(l.PrefillTokens, 0)))
		b = binary.AppendUvarint(b, uint64(max(l.Blocks, 0)))
	}
	return b
}

// reader decodes a payload.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d", ErrBadPayload, what, r.off)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail(what + ": truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint(what string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail(what + ": bad varint")
		return 0
	}
	if v > max {
		r.fail(fmt.Sprintf("%s: %d exceeds %d", what, v, max))
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail(what + ": bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil || len(r.b)-r.off < 8 {
		r.fail(what + ": truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// str returns a string field; bytes that are not UTF-8 are an error (names come from
// configuration and flow ids from the gateway's keyer, both text).
func (r *reader) str(what string) string {
	n := int(r.uvarint(what+" length", MaxNameBytes))
	if r.err != nil {
		return ""
	}
	if len(r.b)-r.off < n {
		r.fail(what + ": truncated")
		return ""
	}
	s := r.b[r.off : r.off+n]
	if !utf8.Valid(s) {
		r.fail(what + ": not UTF-8")
		return ""
	}
	r.off += n
	return string(s)
}

// header checks the magic, version and kind.
func (r *reader) header(kind byte) {
	if len(r.b) > MaxPayloadBytes {
		r.fail(fmt.Sprintf("%d bytes exceed %d", len(r.b), MaxPayloadBytes))
		return
	}
	if len(r.b) < len(magic)+2 || string(r.b[:len(magic)]) != magic {
		r.fail("not a replica payload")
		return
	}
	r.off = len(magic)
	if v := r.byte("version"); r.err == nil && v != version {
		r.fail(fmt.Sprintf("version %d (this replica speaks %d)", v, version))
		return
	}
	if k := r.byte("kind"); r.err == nil && k != kind {
		r.fail(fmt.Sprintf("kind %d where %d was expected", k, kind))
	}
}

// decodeChanges calls fn for each record of a change-stream entry, in order, and returns the
// first decoding error (records before it were delivered). scratch is reused for chains.
func decodeChanges(payload []byte, scratch *[]prefixcache.BlockHash, fn func(*change)) error {
	r := reader{b: payload}
	r.header(kindChanges)
	var c change
	for r.err == nil && r.off < len(r.b) {
		c = change{kind: r.byte("record")}
		switch c.kind {
		case recInsert, recRemove:
			c.backend = r.str("backend")
			n := int(r.uvarint("blocks", MaxChainBlocks))
			if r.err == nil && (n == 0 || len(r.b)-r.off < 8*n) {
				r.fail("chain: empty or truncated")
			}
			if r.err != nil {
				break
			}
			ch := (*scratch)[:0]
			for range n {
				ch = append(ch, prefixcache.BlockHash(r.u64("block")))
			}
			*scratch = ch
			c.chain = ch
		case recPlace:
			c.session = r.u64("session")
			c.backend = r.str("backend")
			c.blocks = int(r.uvarint("blocks", math.MaxInt32))
			c.expires = time.UnixMilli(r.varint("expiry"))
		case recUsage:
			c.usage.Flow = r.str("flow")
			c.usage.Band = int(r.uvarint("band", math.MaxUint16))
			c.usage.Amount = math.Float64frombits(r.u64("amount"))
			if r.err == nil && (!(c.usage.Amount > 0) || math.IsInf(c.usage.Amount, 0)) {
				r.fail(fmt.Sprintf("usage amount %g", c.usage.Amount))
			}
		default:
			if r.err == nil {
				r.off--
				r.fail(fmt.Sprintf("unknown record %d", c.kind))
			}
		}
		if r.err == nil {
			fn(&c)
		}
	}
	return r.err
}

// decodeLoad decodes a load payload into dst (reused), with the time it was sent.
func decodeLoad(payload []byte, dst []peer.Load) ([]peer.Load, time.Time, error) {
	r := reader{b: payload}
	r.header(kindLoad)
	at := time.UnixMilli(r.varint("sent at"))
	n := int(r.uvarint("backends", MaxLoadBackends))
	dst = dst[:0]
	const maxCount = 1 << 40
	for i := 0; i < n && r.err == nil; i++ {
		var l peer.Load
		l.Backend = r.str("backend")
		l.Requests = int64(r.uvarint("requests", maxCount))
		l.PrefillTokens = int64(r.uvarint("prefill", maxCount))
		l.Blocks = int64(r.uvarint("blocks", maxCount))
		if r.err == nil {
			dst = append(dst, l)
		}
	}
	if r.err == nil && r.off != len(r.b) {
		r.fail("trailing bytes")
	}
	return dst, at, r.err
}
