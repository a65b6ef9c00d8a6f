package extproc

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
)

// pdFleet is two prefill and two decode endpoints.
var pdFleet = []Endpoint{
	{Address: "10.0.1.1:8000", Role: routing.RolePrefill}, {Address: "10.0.1.2:8000", Role: routing.RolePrefill},
	{Address: "10.0.2.1:8000", Role: routing.RoleDecode}, {Address: "10.0.2.2:8000", Role: routing.RoleDecode},
}

// prefillerOf returns the prefill header the answer sets, and whether it removes a client's.
func prefillerOf(r *extprocv3.ProcessingResponse) (set string, removed bool) {
	hm := r.GetRequestBody().GetResponse().GetHeaderMutation()
	for _, h := range hm.GetSetHeaders() {
		if h.GetHeader().GetKey() == PrefillerHeader {
			set = string(h.GetHeader().GetRawValue())
		}
	}
	for _, k := range hm.GetRemoveHeaders() {
		removed = removed || k == PrefillerHeader
	}
	return set, removed
}

func roleOf(addr string) routing.Role {
	for _, e := range pdFleet {
		if e.Address == addr {
			return e.Role
		}
	}
	return routing.RoleBoth
}

// TestDisaggregated: with prefill endpoints in the set, a completion's destination is a decode
// endpoint and, when the Decider says so, a prefill endpoint goes to the decode pod's sidecar
// in x-prefiller-host-port; the prefill pick is charged until the decode's answer begins and
// closed exactly once, also when the stream ends first; a client's own x-prefiller-host-port
// is removed.
func TestDisaggregated(t *testing.T) {
	t.Run("disaggregated", func(t *testing.T) {
		s := newServer(t, Options{Endpoints: pdFleet, Decider: disagg.Always, Fallbacks: 2})
		st, _ := open(t, serve(t, s))
		r := exchangeRequest(t, st, chatBody, nil, PrefillerHeader, "evil.example:80")
		dest, _ := destinationOf(t, r)
		pre, _ := prefillerOf(r)
		if roleOf(firstEndpoint(dest)) != routing.RoleDecode || roleOf(pre) != routing.RolePrefill {
			t.Fatalf("destination %q (%v), prefiller %q (%v): want a decode then a prefill endpoint", dest, roleOf(firstEndpoint(dest)), pre, roleOf(pre))
		}
		if fb := dest[len(firstEndpoint(dest)):]; fb != "" && fb != ","+pdFleet[2].Address && fb != ","+pdFleet[3].Address {
			t.Errorf("fallbacks %q: want only the other decode endpoint", fb)
		}
		if in, _ := s.Router().InFlight(pre); in.Requests != 1 || in.PrefillTokens == 0 {
			t.Errorf("prefill endpoint in flight %+v before the answer, want 1 request and its prompt", in)
		}
		if in, _ := s.Router().InFlight(firstEndpoint(dest)); in.Requests != 1 || in.PrefillTokens != 0 {
			t.Errorf("decode endpoint in flight %+v, want 1 request and no prefill: it will not prefill", in)
		}
		send(t, st, respHeaders("200", "text/event-stream", false, nil))
		recv(t, st)
		if in, _ := s.Router().InFlight(pre); in.Requests != 0 {
			t.Errorf("prefill endpoint in flight %d once the decode answers, want 0", in.Requests)
		}
		for i, ch := range sseChunks {
			send(t, st, respBody(ch, i == len(sseChunks)-1))
			recv(t, st)
		}
		send(t, st, respTrailers())
		recv(t, st)
		_ = st.CloseSend()
		waitIdle(t, s)
		if rs := s.Router().Stats(); rs.Picks != 2 || rs.Done != 2 {
			t.Errorf("router picks %d done %d, want 2 and 2", rs.Picks, rs.Done)
		}
	})
	t.Run("cancelled before the answer", func(t *testing.T) {
		s := newServer(t, Options{Endpoints: pdFleet, Decider: disagg.Always})
		st, cancel := open(t, serve(t, s))
		r := exchangeRequest(t, st, chatBody, nil)
		if pre, _ := prefillerOf(r); pre == "" {
			t.Fatal("no prefill endpoint named")
		}
		cancel()
		waitIdle(t, s)
		if rs := s.Router().Stats(); rs.Picks != 2 || rs.Done != 2 {
			t.Errorf("router picks %d done %d, want 2 and 2", rs.Picks, rs.Done)
		}
	})
	t.Run("aggregated", func(t *testing.T) {
		s := newServer(t, Options{Endpoints: pdFleet, Decider: disagg.Never})
		st, _ := open(t, serve(t, s))
		r := exchangeRequest(t, st, chatBody, nil, PrefillerHeader, "evil.example:80")
		dest, _ := destinationOf(t, r)
		pre, removed := prefillerOf(r)
		if roleOf(dest) != routing.RoleDecode || pre != "" || !removed {
			t.Errorf("destination %q (%v), prefiller %q, client's removed %v: want a decode endpoint, none, true", dest, roleOf(dest), pre, removed)
		}
	})
	t.Run("no prefill endpoints", func(t *testing.T) {
		s := newServer(t, Options{Decider: disagg.Always})
		st, _ := open(t, serve(t, s))
		r := exchangeRequest(t, st, chatBody, nil)
		if pre, removed := prefillerOf(r); pre != "" || !removed {
			t.Errorf("aggregated fleet: prefiller %q, removed %v; want none, true", pre, removed)
		}
	})
}
