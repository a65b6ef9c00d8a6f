package kvevents

import (
	"errors"
	"fmt"
	"strings"
)

// Kind is the type of a KV-cache event, named as on the wire.
type Kind uint8

// The event kinds vLLM and SGLang publish.
const (
	// BlockStored: the engine computed and cached one or more consecutive
	// blocks (a chain: each block's parent is the previous one).
	BlockStored Kind = iota + 1
	// BlockRemoved: the engine evicted the listed blocks from a medium.
	BlockRemoved
	// AllBlocksCleared: the engine dropped its whole prefix cache.
	AllBlocksCleared
)

// String returns the wire tag of k ("BlockStored", ...).
func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// BlockEvent is one decoded KV-cache event. Which fields are meaningful depends
// on Kind: BlockStored uses all of them, BlockRemoved uses Hashes, Medium
// and GroupIdx, AllBlocksCleared none.
//
// Hashes are in the engine's key space: opaque identifiers the engine
// chose (see the package documentation); they are folded to 64 bits by
// the decoder. BlockEvent and Batch are plain data with no synchronisation.
type BlockEvent struct {
	Kind Kind
	// Hashes are the engine block hashes (block_hashes), in chain order.
	Hashes []uint64
	// Parent is the engine hash of the block preceding Hashes[0]
	// (parent_block_hash); HasParent is false when the chain starts at
	// the beginning of a sequence: the wire carries nil, or 0 (an int 0
	// or a byte string that folds to 0), which some publishers send for
	// "no parent". Parent is then 0.
	Parent    uint64
	HasParent bool
	// Tokens are the token ids of all stored blocks concatenated
	// (token_ids); len(Tokens) == len(Hashes)*BlockSize for full blocks.
	Tokens    []uint32
	BlockSize int
	// LoRAID is the adapter id (lora_id); 0 means none. LoRAName is the
	// adapter name (lora_name), "" for the base model.
	LoRAID   int64
	LoRAName string
	// Medium says where the blocks live ("GPU", "CPU", ...); "" when the
	// publisher did not say, which vLLM means as "GPU".
	Medium string
	// GroupIdx is the KV-cache group (group_idx) of hybrid models; 0 by
	// default.
	GroupIdx int
	// Salt is the request's cache_salt, read from the first block's
	// extra_keys (vLLM folds the adapter's name, multimodal identifiers,
	// then the salt into the first block of a chain); "" when the chain
	// does not start here or was not salted. It seeds the chain as a salted
	// request's is seeded.
	Salt string
}

// reset clears e for reuse, keeping the capacity of its slices.
func (e *BlockEvent) reset() {
	*e = BlockEvent{Hashes: e.Hashes[:0], Tokens: e.Tokens[:0]}
}

// Batch is one published message: a timestamp, events in the order the
// engine produced them, and the data-parallel rank that produced them.
type Batch struct {
	// Timestamp is the publisher's wall clock in seconds (ts).
	Timestamp float64
	Events    []BlockEvent
	// DataParallelRank is the engine's data-parallel rank
	// (data_parallel_rank); HasRank is false when the wire omits it or
	// carries nil.
	DataParallelRank int
	HasRank          bool
	// Unknown counts events of a type this package does not know, which
	// the decoder skipped (they are not in Events).
	Unknown int
}

// reset clears b for reuse, keeping its events' buffers.
func (b *Batch) reset() {
	b.Timestamp, b.DataParallelRank, b.HasRank, b.Unknown = 0, 0, false, 0
	b.Events = b.Events[:0]
}

// next extends b.Events by one reset event, reusing the slot's buffers.
func (b *Batch) next() *BlockEvent {
	if len(b.Events) < cap(b.Events) {
		b.Events = b.Events[:len(b.Events)+1]
	} else {
		b.Events = append(b.Events, BlockEvent{})
	}
	e := &b.Events[len(b.Events)-1]
	e.reset()
	return e
}

// ErrTopic reports a topic that is not of the form kv@<pod>@<model>.
var ErrTopic = errors.New("kvevents: malformed topic")

// parseTopic splits a vLLM KV-event topic "kv@<pod>@<model>" into the pod
// and the model name. The model may itself contain '@'; the pod may not.
// Both parts must be non-empty. It does not allocate.
func parseTopic(topic string) (pod, model string, err error) {
	if !strings.HasPrefix(topic, "kv@") {
		return "", "", fmt.Errorf("%w: %q does not start with \"kv@\"", ErrTopic, topic)
	}
	pod, model, ok := cutTopic(topic)
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not kv@<pod>@<model>", ErrTopic, topic)
	}
	return pod, model, nil
}

// cutTopic is parseTopic without the error, for topics as strings or as
// the bytes of a frame (which it does not copy).
func cutTopic[T ~string | ~[]byte](topic T) (pod, model T, ok bool) {
	if len(topic) < 3 || string(topic[:3]) != "kv@" {
		return pod, model, false
	}
	rest := topic[3:]
	for i := range len(rest) {
		if rest[i] == '@' {
			if i == 0 || i+1 == len(rest) {
				break
			}
			return rest[:i], rest[i+1:], true
		}
	}
	return pod, model, false
}
