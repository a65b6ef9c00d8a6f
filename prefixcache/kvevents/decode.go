package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed reports a payload that is not a KV-event batch. The wrapping
// error says what was wrong and where (the byte offset in the payload).
var ErrMalformed = errors.New("kvevents: malformed payload")

// maxHashBytes bounds a byte-string hash. vLLM sends 32 bytes (sha256) or
// 16 (xxh3-128); anything longer than a sha512 digest is garbage.
const maxHashBytes = 64

// field identifies an event field, so that the positional and the map
// encodings share one decoding routine.
type field uint8

const (
	fSkip field = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
)

// Positional field order of each event kind after the type tag, as vLLM
// declares them. Fields beyond these are skipped (newer publishers may
// append fields); missing trailing fields keep their defaults.
var (
	storedFields  = [...]field{fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroupIdx}
	removedFields = [...]field{fHashes, fMedium, fGroupIdx}
)

// Decoder decodes msgpack KV-event batches as vLLM and SGLang publish them.
// It keeps its scratch buffers between calls; steady-state decoding into
// a reused Batch does not allocate (strings are interned: the common media
// and the last LoRA name seen are reused).
//
// The zero value is ready to use. A Decoder is not safe for concurrent use
// (use one per goroutine) and must not be copied after first use.
type Decoder struct {
	r       bytes.Reader
	dec     *msgpack.Decoder // reads r; nil before the first Decode
	payload []byte           // being decoded (nil between calls), for the fast paths
	size    int              // len(payload), for offsets in errors
	scratch []byte           // holds the last string or byte-string read

	// Interned strings, so that repeated values cost nothing.
	loraName string
	keys     [8]string // the last extra keys read (internKey)
	nextKey  int
	medium   string
}

// Decode decodes one batch payload (the third frame of a ZMQ message) into
// b, replacing its contents and reusing its buffers. The batch may be the
// positional array [ts, events, data_parallel_rank] or a map with those
// keys; each event may be a positional array whose first element is the
// type tag or a map with a "type" key. Events of unknown type are skipped
// and counted in b.Unknown.
//
// On error the contents of b are unspecified and the error wraps
// ErrMalformed. Decode never panics on any input. Cost is linear in the
// payload size; it allocates only to grow b's buffers or to intern a new
// medium or LoRA name.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	b.reset()
	if d.dec == nil { // the first call
		d.dec = msgpack.NewDecoder(&d.r)
		d.scratch = make([]byte, 0, 64)
	}
	d.r.Reset(payload)
	d.payload, d.size = payload, len(payload)
	err := d.batch(b)
	d.payload = nil
	if err == nil && d.r.Len() != 0 {
		err = d.fail("%d trailing bytes after the batch", d.r.Len())
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

func (d *Decoder) offset() int { return d.size - d.r.Len() }

// fail describes what is wrong at the current position. Decode prefixes
// ErrMalformed; callers on the way up prefix where in the batch it was.
func (d *Decoder) fail(format string, args ...any) error {
	return fmt.Errorf("%s (at byte %d)", fmt.Sprintf(format, args...), d.offset())
}

// wrap converts an error of the msgpack library into ErrMalformed.
func (d *Decoder) wrap(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return d.fail("%s: payload truncated", what)
	}
	return d.fail("%s: %v", what, err)
}

func (d *Decoder) peek(what string) (byte, error) {
	if d.r.Len() == 0 {
		return 0, d.fail("%s: payload truncated", what)
	}
	return d.payload[d.size-d.r.Len()], nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

func isFloat(c byte) bool { return c == msgpcode.Float || c == msgpcode.Double }

// describe names the msgpack type of code c for error messages.
func describe(c byte) string {
	switch {
	case c == msgpcode.Nil:
		return "nil"
	case c == msgpcode.True || c == msgpcode.False:
		return "bool"
	case isInt(c):
		return "int"
	case isFloat(c):
		return "float"
	case msgpcode.IsString(c):
		return "str"
	case msgpcode.IsBin(c):
		return "bin"
	case isArray(c):
		return "array"
	case isMap(c):
		return "map"
	case msgpcode.IsExt(c):
		return "ext"
	}
	return fmt.Sprintf("invalid code 0x%02x", c)
}

func (d *Decoder) typeErr(what, want string, c byte) error {
	if what == "" {
		return d.fail("want %s, got %s", want, describe(c))
	}
	return d.fail("%s: want %s, got %s", what, want, describe(c))
}

// arrayLen reads an array header whose element count is plausible for the
// bytes left (every element takes at least one byte), so that garbage
// cannot make the decoder allocate gigabytes.
func (d *Decoder) arrayLen(what string) (int, error) {
	c, err := d.peek(what)
	if err != nil {
		return 0, err
	}
	if !isArray(c) {
		return 0, d.typeErr(what, "array", c)
	}
	n, k := containerLen(d.unread(), msgpcode.FixedArrayMask)
	if k > 0 {
		d.consume(k)
	} else if n, err = d.dec.DecodeArrayLen(); err != nil {
		return 0, d.wrap(what, err)
	}
	if n > d.r.Len() {
		return 0, d.fail("%s: array of %d elements in %d remaining bytes", what, n, d.r.Len())
	}
	return n, nil
}

// containerLen parses the header of an array or map at the start of p
// (fixed, 16- or 32-bit length) and returns the element count and the
// header's length; k == 0 when the header is incomplete.
func containerLen(p []byte, fixMask byte) (n, k int) {
	if len(p) == 0 {
		return 0, 0
	}
	switch c := p[0]; c {
	case msgpcode.Array16, msgpcode.Map16:
		if len(p) >= 3 {
			return int(binary.BigEndian.Uint16(p[1:])), 3
		}
	case msgpcode.Array32, msgpcode.Map32:
		if len(p) >= 5 {
			return int(binary.BigEndian.Uint32(p[1:])), 5
		}
	default:
		return int(c & fixMask), 1
	}
	return 0, 0
}

func (d *Decoder) mapLen(what string) (int, error) {
	n, k := containerLen(d.unread(), msgpcode.FixedMapMask)
	if k == 0 {
		var err error
		if n, err = d.dec.DecodeMapLen(); err != nil {
			return 0, d.wrap(what, err)
		}
	}
	d.consume(k)
	if 2*n > d.r.Len() {
		return 0, d.fail("%s: map of %d entries in %d remaining bytes", what, n, d.r.Len())
	}
	return n, nil
}

// rawBytes reads the payload of a str or bin into d.scratch.
func (d *Decoder) rawBytes(what string) ([]byte, error) {
	// Fast path: the bytes are returned in place, valid until Decode
	// returns.
	p := d.unread()
	n, k := -1, 0
	if len(p) > 0 {
		switch c := p[0]; {
		case msgpcode.IsFixedString(c):
			n, k = int(c&msgpcode.FixedStrMask), 1
		case (c == msgpcode.Str8 || c == msgpcode.Bin8) && len(p) >= 2:
			n, k = int(p[1]), 2
		case (c == msgpcode.Str16 || c == msgpcode.Bin16) && len(p) >= 3:
			n, k = int(binary.BigEndian.Uint16(p[1:])), 3
		case (c == msgpcode.Str32 || c == msgpcode.Bin32) && len(p) >= 5:
			n, k = int(binary.BigEndian.Uint32(p[1:])), 5
		}
	}
	if k > 0 && n <= len(p)-k {
		d.consume(k + n)
		return p[k : k+n], nil
	}
	n, err := d.dec.DecodeBytesLen()
	if err != nil {
		return nil, d.wrap(what, err)
	}
	if n > d.r.Len() {
		return nil, d.fail("%s: %d bytes announced, %d remain", what, n, d.r.Len())
	}
	if n > cap(d.scratch) {
		d.scratch = make([]byte, n)
	}
	buf := d.scratch[:max(n, 0)]
	if err := d.dec.ReadFull(buf); err != nil {
		return nil, d.wrap(what, err)
	}
	return buf, nil
}

// str reads a msgpack str into d.scratch (valid until the next read).
func (d *Decoder) str(what string) ([]byte, error) {
	c, err := d.peek(what)
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsString(c) {
		return nil, d.typeErr(what, "str", c)
	}
	return d.rawBytes(what)
}

// optStr reads a str or nil; nil yields ok == false.
func (d *Decoder) optStr(what string) (s []byte, ok bool, err error) {
	c, err := d.peek(what)
	if err != nil {
		return nil, false, err
	}
	if c == msgpcode.Nil {
		return nil, false, d.skip(what)
	}
	s, err = d.str(what)
	return s, err == nil, err
}

// optInt reads an int or nil; nil yields ok == false.
func (d *Decoder) optInt(what string) (v int64, ok bool, err error) {
	c, err := d.peek(what)
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		d.consume(1)
		return 0, false, nil
	}
	if !isInt(c) {
		return 0, false, d.typeErr(what, "int", c)
	}
	u, neg, k := fastInt(d.unread())
	if k == 0 {
		_, err := d.dec.DecodeInt64() // truncated: let the library say so
		return 0, false, d.wrap(what, err)
	}
	if !neg && u > math.MaxInt64 {
		return 0, false, d.fail("%s: %d out of range", what, u)
	}
	d.consume(k)
	return int64(u), true, nil
}

// smallInt reads an optional int that must fit comfortably in an int.
func (d *Decoder) smallInt(what string) (int, error) {
	v, _, err := d.optInt(what)
	if err != nil {
		return 0, err
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, d.fail("%s: %d out of range", what, v)
	}
	return int(v), nil
}

func (d *Decoder) skip(what string) error {
	if c, err := d.peek(what); err != nil {
		return err
	} else if c == msgpcode.Nil {
		d.consume(1)
		return nil
	}
	return d.skipValue(what)
}

// skipValue skips one msgpack value by reading its headers straight from
// the payload, without the library: every announced length and element
// count is checked against the bytes that remain, so a garbage header that
// claims gigabytes fails at once instead of making the library allocate
// (it reads such a value in chunks of up to 1 MB before it meets the end).
// Nested values are counted, not recursed into. O(size of the value).
func (d *Decoder) skipValue(what string) error {
	p := d.unread()
	i, pending := 0, 1
	for pending > 0 {
		pending--
		if i >= len(p) {
			return d.fail("%s: payload truncated", what)
		}
		c := p[i]
		i++
		var lenBytes, fixed, items int // a length field, fixed data bytes, nested values
		switch {
		case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow,
			c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
		case msgpcode.IsFixedMap(c):
			items = 2 * int(c&0x0f)
		case msgpcode.IsFixedArray(c):
			items = int(c & 0x0f)
		case msgpcode.IsFixedString(c):
			fixed = int(c & 0x1f)
		case c == msgpcode.Bin8 || c == msgpcode.Str8:
			lenBytes = 1
		case c == msgpcode.Bin16 || c == msgpcode.Str16:
			lenBytes = 2
		case c == msgpcode.Bin32 || c == msgpcode.Str32:
			lenBytes = 4
		case c == msgpcode.Ext8:
			lenBytes, fixed = 1, 1 // the type byte follows the length
		case c == msgpcode.Ext16:
			lenBytes, fixed = 2, 1
		case c == msgpcode.Ext32:
			lenBytes, fixed = 4, 1
		case c == msgpcode.Uint8 || c == msgpcode.Int8:
			fixed = 1
		case c == msgpcode.Uint16 || c == msgpcode.Int16:
			fixed = 2
		case c == msgpcode.Uint32 || c == msgpcode.Int32 || c == msgpcode.Float:
			fixed = 4
		case c == msgpcode.Uint64 || c == msgpcode.Int64 || c == msgpcode.Double:
			fixed = 8
		case c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16:
			fixed = 1 + 1<<(c-msgpcode.FixExt1) // type byte and 1, 2, 4, 8 or 16 data bytes
		case c == msgpcode.Array16 || c == msgpcode.Map16:
			lenBytes = 2
		case c == msgpcode.Array32 || c == msgpcode.Map32:
			lenBytes = 4
		default:
			return d.fail("%s: invalid msgpack code %#x", what, c)
		}
		if lenBytes > 0 {
			if lenBytes > len(p)-i {
				return d.fail("%s: payload truncated", what)
			}
			var n uint64
			for _, x := range p[i : i+lenBytes] {
				n = n<<8 | uint64(x)
			}
			i += lenBytes
			if n > uint64(len(p)) { // more than can possibly remain
				return d.fail("%s: %d bytes or elements announced, %d remain", what, n, len(p)-i)
			}
			switch c {
			case msgpcode.Array16, msgpcode.Array32:
				items = int(n)
			case msgpcode.Map16, msgpcode.Map32:
				items = 2 * int(n)
			default:
				fixed += int(n)
			}
		}
		if fixed > len(p)-i {
			return d.fail("%s: payload truncated", what)
		}
		i += fixed
		pending += items
		if pending > len(p)-i { // every pending value takes at least one byte
			return d.fail("%s: %d values announced, %d bytes remain", what, pending, len(p)-i)
		}
	}
	d.consume(i)
	return nil
}

// hash reads one engine block hash: an int (uint64 or int64, taken as its
// 64-bit pattern) or a byte string folded to its last 8 bytes read
// big-endian (all of it when shorter).
func (d *Decoder) hash(what string) (uint64, error) {
	c, err := d.peek(what)
	if err != nil {
		return 0, err
	}
	if h, k := fastHash(d.unread()); k > 0 {
		d.consume(k)
		return h, nil
	}
	switch {
	case isInt(c):
		h, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, d.wrap(what, err)
		}
		return h, nil
	case msgpcode.IsBin(c):
		b, err := d.rawBytes(what)
		if err != nil {
			return 0, err
		}
		if len(b) == 0 || len(b) > maxHashBytes {
			return 0, d.fail("byte-string hash of %d bytes, want 1..%d", len(b), maxHashBytes)
		}
		return foldHash(b), nil
	}
	return 0, d.typeErr(what, "int or bin hash", c)
}

// foldHash folds a byte-string block hash to 64 bits: its last 8 bytes read
// big-endian (all of it when shorter). vLLM's sha256 block hashes are 32
// bytes; the fold keeps their low-order 64 bits. O(1); it does not allocate.
func foldHash(b []byte) uint64 {
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	var h uint64
	for _, x := range b {
		h = h<<8 | uint64(x)
	}
	return h
}

// The integer arrays (token_ids, block_hashes) are most of a payload.
// Going through the msgpack library costs an interface call and a
// buffered read per value, so they are parsed straight from the payload
// bytes; any element the fast path does not recognise is handed to the
// library, which reports the precise error.

// unread returns the part of the payload not consumed yet.
func (d *Decoder) unread() []byte { return d.payload[d.size-d.r.Len():] }

// consume advances the reader past n bytes the fast path parsed.
func (d *Decoder) consume(n int) { _, _ = d.r.Seek(int64(n), io.SeekCurrent) }

// fastInt parses a msgpack integer at the start of p and returns its 64-bit
// pattern (signed ints sign-extended), whether it is negative, and its
// encoded length; n == 0 when p does not start with a complete integer.
func fastInt(p []byte) (v uint64, neg bool, n int) {
	if len(p) == 0 {
		return 0, false, 0
	}
	c := p[0]
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return uint64(c), false, 1
	case c >= msgpcode.NegFixedNumLow:
		return uint64(int64(int8(c))), true, 1
	}
	switch c {
	case msgpcode.Uint8:
		if len(p) >= 2 {
			return uint64(p[1]), false, 2
		}
	case msgpcode.Uint16:
		if len(p) >= 3 {
			return uint64(binary.BigEndian.Uint16(p[1:])), false, 3
		}
	case msgpcode.Uint32:
		if len(p) >= 5 {
			return uint64(binary.BigEndian.Uint32(p[1:])), false, 5
		}
	case msgpcode.Uint64:
		if len(p) >= 9 {
			return binary.BigEndian.Uint64(p[1:]), false, 9
		}
	case msgpcode.Int8:
		if len(p) >= 2 {
			x := int64(int8(p[1]))
			return uint64(x), x < 0, 2
		}
	case msgpcode.Int16:
		if len(p) >= 3 {
			x := int64(int16(binary.BigEndian.Uint16(p[1:])))
			return uint64(x), x < 0, 3
		}
	case msgpcode.Int32:
		if len(p) >= 5 {
			x := int64(int32(binary.BigEndian.Uint32(p[1:])))
			return uint64(x), x < 0, 5
		}
	case msgpcode.Int64:
		if len(p) >= 9 {
			x := int64(binary.BigEndian.Uint64(p[1:]))
			return uint64(x), x < 0, 9
		}
	}
	return 0, false, 0
}

// fastHash parses an int or a bin8 hash of 1..maxHashBytes bytes at the
// start of p; n == 0 otherwise.
func fastHash(p []byte) (h uint64, n int) {
	if h, _, n = fastInt(p); n > 0 {
		return h, n
	}
	if len(p) >= 2 && p[0] == msgpcode.Bin8 {
		l := int(p[1])
		if l >= 1 && l <= maxHashBytes && len(p) >= 2+l {
			return foldHash(p[2 : 2+l]), 2 + l
		}
	}
	return 0, 0
}

func (d *Decoder) hashes(dst []uint64, what string) ([]uint64, error) {
	n, err := d.arrayLen(what)
	if err != nil {
		return dst, err
	}
	dst = dst[:0]
	p, used := d.unread(), 0
	for i := range n {
		if h, k := fastHash(p[used:]); k > 0 {
			dst = append(dst, h)
			used += k
			continue
		}
		d.consume(used)
		h, err := d.hash("")
		if err != nil {
			return dst, fmt.Errorf("%s[%d]: %w", what, i, err)
		}
		dst = append(dst, h)
		p, used = d.unread(), 0
	}
	d.consume(used)
	return dst, nil
}

func (d *Decoder) tokens(dst []uint32) ([]uint32, error) {
	const what = "token_ids"
	n, err := d.arrayLen(what)
	if err != nil {
		return dst, err
	}
	dst = dst[:0]
	if cap(dst) < n {
		dst = make([]uint32, 0, n)
	}
	p, used := d.unread(), 0
	for range n {
		v, neg, k := fastInt(p[used:])
		if k == 0 || neg || v > math.MaxUint32 {
			d.consume(used)
			return dst, d.badToken()
		}
		dst = append(dst, uint32(v))
		used += k
	}
	d.consume(used)
	return dst, nil
}

// badToken explains why the next value is not a token id (the fast path
// accepts every valid one).
func (d *Decoder) badToken() error {
	const what = "token_ids"
	c, err := d.peek(what)
	if err != nil {
		return err
	}
	if !isInt(c) {
		return d.typeErr(what, "int", c)
	}
	if c == msgpcode.Uint64 {
		u, err := d.dec.DecodeUint64()
		if err != nil {
			return d.wrap(what, err)
		}
		return d.fail("%s: token id %d out of range", what, u)
	}
	v, err := d.dec.DecodeInt64()
	if err != nil {
		return d.wrap(what, err)
	}
	return d.fail("%s: token id %d out of range", what, v)
}

// internMedium returns s as a string without allocating for the common
// media and for a repeat of the previous value.
func (d *Decoder) internMedium(s []byte) string {
	switch string(s) {
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "DISK":
		return "DISK"
	case d.medium:
		return d.medium
	}
	d.medium = string(s)
	return d.medium
}

func (d *Decoder) internLoRA(s []byte) string {
	if string(s) == d.loraName {
		return d.loraName
	}
	d.loraName = string(s)
	return d.loraName
}

// readField decodes one field value into e.
func (d *Decoder) readField(e *BlockEvent, f field) error {
	var err error
	switch f {
	case fHashes:
		e.Hashes, err = d.hashes(e.Hashes, "block_hashes")
	case fParent:
		var c byte
		if c, err = d.peek("parent_block_hash"); err != nil {
			return err
		}
		if c == msgpcode.Nil {
			e.Parent, e.HasParent = 0, false
			return d.skip("parent_block_hash")
		}
		// 0 means no parent too: some vLLM-compatible publishers send it
		// where vLLM sends nil, and no engine hash folds to 0 in practice.
		e.Parent, err = d.hash("parent_block_hash")
		e.HasParent = err == nil && e.Parent != 0
	case fTokens:
		e.Tokens, err = d.tokens(e.Tokens)
	case fBlockSize:
		e.BlockSize, err = d.smallInt("block_size")
	case fLoRAID:
		e.LoRAID, _, err = d.optInt("lora_id")
	case fMedium:
		var s []byte
		var ok bool
		if s, ok, err = d.optStr("medium"); ok {
			e.Medium = d.internMedium(s)
		}
	case fLoRAName:
		var s []byte
		var ok bool
		if s, ok, err = d.optStr("lora_name"); ok {
			e.LoRAName = d.internLoRA(s)
		}
	case fGroupIdx:
		e.GroupIdx, err = d.smallInt("group_idx")
	case fExtraKeys:
		err = d.extraKeys(e)
	default: // unknown fields
		err = d.skip("field")
	}
	return err
}

// extraKeys reads extra_keys — nil, or one entry per stored block, each nil or an array of
// what vLLM folded into that block's hash (LoRA name, multimodal identifiers, cache_salt,
// ...) — and keeps the first block's last string in e.Salt, which finishSalt then keeps
// only when it is the cache_salt (vLLM appends the salt last, to the first block of a
// chain only). Nothing else is kept; O(size of the value).
func (d *Decoder) extraKeys(e *BlockEvent) error {
	const what = "extra_keys"
	c, err := d.peek(what)
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		d.consume(1)
		return nil
	}
	n, err := d.arrayLen(what)
	if err != nil {
		return err
	}
	for i := range n {
		if i > 0 {
			if err := d.skip(what); err != nil {
				return err
			}
			continue
		}
		c, err := d.peek(what)
		if err != nil {
			return err
		}
		if !isArray(c) {
			if err := d.skip(what); err != nil {
				return err
			}
			continue
		}
		k, err := d.arrayLen(what)
		if err != nil {
			return err
		}
		for j := range k {
			c, err := d.peek(what)
			if err != nil {
				return err
			}
			if j == k-1 && msgpcode.IsString(c) {
				s, err := d.str(what)
				if err != nil {
					return err
				}
				e.Salt = d.internKey(s)
				continue
			}
			if err := d.skip(what); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishSalt keeps e.Salt only when it can be the cache_salt: the chain starts at the
// event's first block, and the key read is not the adapter's name.
func finishSalt(e *BlockEvent) {
	if e.HasParent || e.Salt == e.LoRAName {
		e.Salt = ""
	}
}

// internKey returns s as a string, from the last keys read when it is one of them, so that
// the salts of a few tenants cost no allocation per batch.
func (d *Decoder) internKey(s []byte) string {
	for _, k := range d.keys {
		if string(s) == k {
			return k
		}
	}
	k := string(s)
	d.keys[d.nextKey] = k
	d.nextKey = (d.nextKey + 1) % len(d.keys)
	return k
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	}
	return 0
}

func fieldByName(name []byte) field {
	switch string(name) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoRAID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroupIdx
	}
	return fSkip
}

func (d *Decoder) batch(b *Batch) error {
	c, err := d.peek("batch")
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		n, err := d.arrayLen("batch")
		if err != nil {
			return err
		}
		if n < 2 {
			return d.fail("batch: array of %d elements, want [ts, events, data_parallel_rank]", n)
		}
		if b.Timestamp, err = d.timestamp(); err != nil {
			return err
		}
		if err := d.events(b); err != nil {
			return err
		}
		if n >= 3 {
			if err := d.rank(b); err != nil {
				return err
			}
		}
		for range n - 3 {
			if err := d.skip("batch"); err != nil {
				return err
			}
		}
		return nil
	case isMap(c):
		n, err := d.mapLen("batch")
		if err != nil {
			return err
		}
		for range n {
			key, err := d.str("batch key")
			if err != nil {
				return err
			}
			switch string(key) {
			case "ts":
				b.Timestamp, err = d.timestamp()
			case "events":
				err = d.events(b)
			case "data_parallel_rank", "attn_dp_rank":
				err = d.rank(b)
			default:
				err = d.skip("batch")
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return d.typeErr("batch", "array or map", c)
}

func (d *Decoder) timestamp() (float64, error) {
	c, err := d.peek("ts")
	if err != nil {
		return 0, err
	}
	switch {
	case isFloat(c):
		f, err := d.dec.DecodeFloat64()
		if err != nil {
			return 0, d.wrap("ts", err)
		}
		return f, nil
	case isInt(c) || c == msgpcode.Nil:
		v, _, err := d.optInt("ts")
		return float64(v), err
	}
	return 0, d.typeErr("ts", "float", c)
}

func (d *Decoder) rank(b *Batch) error {
	v, ok, err := d.optInt("data_parallel_rank")
	if err != nil {
		return err
	}
	if v < 0 || v > math.MaxInt32 {
		return d.fail("data_parallel_rank: %d out of range", v)
	}
	b.DataParallelRank, b.HasRank = int(v), ok
	return nil
}

func (d *Decoder) events(b *Batch) error {
	n, err := d.arrayLen("events")
	if err != nil {
		return err
	}
	for i := range n {
		c, err := d.peek("event")
		if err != nil {
			return err
		}
		switch {
		case isArray(c):
			err = d.eventArray(b)
		case isMap(c):
			err = d.eventMap(b)
		default:
			err = d.typeErr("event", "array or map", c)
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}

// eventArray decodes the legacy positional form: [tag, field, field, ...].
func (d *Decoder) eventArray(b *Batch) error {
	n, err := d.arrayLen("event")
	if err != nil {
		return err
	}
	if n == 0 {
		return d.fail("event: empty array, want the type tag first")
	}
	tag, err := d.str("type tag")
	if err != nil {
		return err
	}
	var fields []field
	kind := kindOf(tag)
	switch kind {
	case BlockStored:
		fields = storedFields[:]
	case BlockRemoved:
		fields = removedFields[:]
	case AllBlocksCleared:
	default:
		b.Unknown++
		for range n - 1 {
			if err := d.skip("unknown event"); err != nil {
				return err
			}
		}
		return nil
	}
	e := b.next()
	e.Kind = kind
	for i := 1; i < n; i++ {
		f := fSkip
		if i-1 < len(fields) {
			f = fields[i-1]
		}
		if err := d.readField(e, f); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	finishSalt(e)
	return nil
}

// eventMap decodes the tagged-map form: {"type": tag, field: value, ...},
// keys in any order.
func (d *Decoder) eventMap(b *Batch) error {
	n, err := d.mapLen("event")
	if err != nil {
		return err
	}
	e := b.next()
	var kind Kind
	var tagged, unknown bool
	for range n {
		key, err := d.str("event key")
		if err != nil {
			b.Events = b.Events[:len(b.Events)-1]
			return err
		}
		if string(key) == "type" {
			tag, err := d.str("type tag")
			if err != nil {
				b.Events = b.Events[:len(b.Events)-1]
				return err
			}
			kind, tagged = kindOf(tag), true
			unknown = kind == 0
			continue
		}
		if err := d.readField(e, fieldByName(key)); err != nil {
			b.Events = b.Events[:len(b.Events)-1]
			return err
		}
	}
	if !tagged || unknown {
		b.Events = b.Events[:len(b.Events)-1]
		if !tagged {
			return d.fail("event: map without a \"type\" key")
		}
		b.Unknown++
		return nil
	}
	e.Kind = kind
	// Fields that do not belong to the kind are dropped, so that an
	// BlockEvent's meaningful fields are exactly those of its kind.
	switch kind {
	case BlockRemoved:
		*e = BlockEvent{Kind: kind, Hashes: e.Hashes, Tokens: e.Tokens[:0], Medium: e.Medium, GroupIdx: e.GroupIdx}
	case AllBlocksCleared:
		*e = BlockEvent{Kind: kind, Hashes: e.Hashes[:0], Tokens: e.Tokens[:0]}
	}
	finishSalt(e)
	return nil
}
