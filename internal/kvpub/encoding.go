package kvpub

// HashForm selects how an Encoding writes block hashes.
type HashForm uint8

const (
	// HashAsUint writes hashes as unsigned msgpack ints (vLLM with
	// integer hashes).
	HashAsUint HashForm = iota
	// HashAsInt writes hashes as signed msgpack ints holding the same 64-bit
	// pattern (Python's hash(): negative values are common).
	HashAsInt
	// HashAsBytes writes hashes as 32-byte strings (vLLM's sha256 block
	// hashes) whose last 8 bytes, big-endian, are the hash; the first 24
	// are derived from it, so the Decoder, which folds a byte-string hash to its last 8
	// bytes, recovers the hash exactly.
	HashAsBytes
)

// Encoding describes one of the wire encodings a publisher may use. The
// zero value is vLLM's legacy encoding: the batch and its events are
// positional arrays and hashes are unsigned ints.
//
// An Encoding is a plain value, safe for concurrent use.
type Encoding struct {
	// MapBatch writes the batch as a map {"ts", "events",
	// "data_parallel_rank"} instead of [ts, events, data_parallel_rank].
	MapBatch bool
	// MapEvents writes each event as a map tagged with "type" instead of
	// an array whose first element is the tag.
	MapEvents bool
	// Hashes selects the representation of block hashes.
	Hashes HashForm
	// ZeroParent writes parent_block_hash 0 instead of nil for a chain
	// that starts a sequence, as some vLLM-compatible servers do. The
	// Decoder reads both as "no parent".
	ZeroParent bool
}

// Append appends the msgpack encoding of batch, a *kvevents.Batch, to dst and returns the
// extended slice. Fields at their defaults are written as vLLM writes them: nil for optional
// values inside an event and omitted when trailing (positional) or absent (map). Cost is
// linear in the size of the batch. It panics on anything but a *kvevents.Batch.
func (enc Encoding) Append(dst []byte, batch any) []byte {
	if Encode == nil {
		panic("kvpub: Encode not installed (package kvevents is not linked)")
	}
	return Encode(enc, dst, batch)
}

// Encode is installed by package kvevents, which owns the batch types and the writer: it
// appends the encoding of batch (a *kvevents.Batch, passed as an any because kvpub cannot
// import kvevents, which imports it) in enc to dst. It panics on anything else, a bug in the
// module.
var Encode func(enc Encoding, dst []byte, batch any) []byte
