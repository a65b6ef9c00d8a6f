package openaiwire

import (
	"github.com/usher-llm/usher/internal/glue/openaiwire/hook"
	"github.com/usher-llm/usher/proxy/openai"
)

// AppendUpstream appends the body to send to the backend for r. Two things change, by
// splicing byte ranges Parse recorded; the body is never re-encoded:
//
//   - the top-level "priority" member is removed, with the comma that separated it:
//     clients may not reorder requests inside the engine, usher's band decides;
//   - when Stream is true and IncludeUsage false, stream_options.include_usage is set to
//     true (inserted, or replacing false or null), so that the proxy learns the usage;
//     the proxy then drops that extra chunk from the client's stream.
//
// Everything else is byte-for-byte as received; when nothing changes, it appends Body
// unchanged. It runs in O(len(Body)) and allocates only to grow dst.
func AppendUpstream(r *openai.Request, dst []byte) []byte { return hook.AppendUpstream(r, dst) }

// Upstream returns the body to send to the backend for r: Body itself when AppendUpstream
// would change nothing, else a new slice holding what AppendUpstream appends. O(1) without a
// change, O(len(Body)) with one.
func Upstream(r *openai.Request) []byte { return hook.Upstream(r) }
