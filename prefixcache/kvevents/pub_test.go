package kvevents

import "github.com/usher-llm/usher/internal/kvpub"

// The tests run the Subscriber against the real publisher, internal/kvpub, under the names it
// had when it lived here.
type (
	Publisher        = kvpub.Publisher
	PublisherOptions = kvpub.Options
	Encoding         = kvpub.Encoding
	HashForm         = kvpub.HashForm
)

const (
	HashAsUint  = kvpub.HashAsUint
	HashAsInt   = kvpub.HashAsInt
	HashAsBytes = kvpub.HashAsBytes
)

var (
	NewPublisher = kvpub.New
	Topic        = kvpub.Topic
)
