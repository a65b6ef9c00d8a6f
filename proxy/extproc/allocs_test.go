package extproc

import (
	"context"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// pickAllocs is what one request costs the picker on its pick path without quotas (measured
// before Options.Quota existed): the messages of a streamed chat request handled in process,
// request headers to the end of the answer, protobuf answers included.
const pickAllocs = 76

// Without Options.Quota the pick path allocates what it did before quotas.
func TestPickAllocsWithoutQuota(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	s := newServer(t, Options{})
	msgs := []*extprocv3.ProcessingRequest{
		buffered(reqHeaders("/v1/chat/completions", false, nil, "x-session-id", "allocs")),
		reqBody(chatBody, true),
		respHeaders("200", "text/event-stream", false, nil),
		respBody(sseChunks[1]+sseChunks[2]+sseChunks[3], true),
	}
	var out []*extprocv3.ProcessingResponse
	got := testing.AllocsPerRun(200, func() {
		ex := &exchange{s: s, ctx: context.Background()}
		for _, m := range msgs {
			out = ex.handle(m, out[:0])
		}
		if !ex.finished {
			t.Fatal("the exchange did not finish")
		}
	})
	t.Logf("%v allocations per request", got)
	if got > pickAllocs {
		t.Errorf("%v allocations per request without quotas, want at most %d", got, pickAllocs)
	}
}
