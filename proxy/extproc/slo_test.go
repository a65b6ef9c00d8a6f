package extproc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
)

// The picker reads latency targets as the gateway does: a trusted x-slo-* header with a bad
// value is a 400 naming it; an untrusted one is ignored; a good one is admitted and routed.
func TestSLOHeaders(t *testing.T) {
	const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		trusted bool
		value   string
		want    string // "" when the request goes to an endpoint
	}{
		{true, "abc", `"param":"X-Slo-Ttft-Ms"`},
		{true, "0", `"param":"X-Slo-Ttft-Ms"`},
		{true, "9999999", `"param":"X-Slo-Ttft-Ms"`},
		{false, "abc", ""},
		{true, "800", ""},
	} {
		s := newServer(t, Options{SLO: map[int]routing.Latency{0: {TTFT: 500 * time.Millisecond}}, TrustSLOHeaders: tc.trusted})
		st, _ := open(t, serve(t, s))
		send(t, st, buffered(reqHeaders("/v1/chat/completions", false, nil, "x-slo-ttft-ms", tc.value)))
		recv(t, st)
		send(t, st, reqBody(body, true))
		r := recv(t, st)
		if ir := r.GetImmediateResponse(); tc.want != "" {
			if ir == nil || ir.GetStatus().GetCode() != 400 || !strings.Contains(immediateBody(r), tc.want) {
				t.Errorf("trusted %v, %q: %v, want a 400 with %s", tc.trusted, tc.value, immediateBody(r), tc.want)
			}
		} else if ir != nil {
			t.Errorf("trusted %v, %q: refused %s, want a destination", tc.trusted, tc.value, immediateBody(r))
		}
		_ = st.CloseSend()
	}
}

func TestSLOOptions(t *testing.T) {
	for _, o := range []Options{
		{SLO: map[int]routing.Latency{4: {TTFT: time.Second}}},
		{SLO: map[int]routing.Latency{0: {TTFT: -1}}},
		{SLOShedAbove: 0.5},
	} {
		o.Endpoints, o.NoScrape = fleet, true
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

// A streamed request with a target that its answer meets is counted met, and the model's
// prediction error is recorded, as in the gateway.
func TestSLOMet(t *testing.T) {
	s := newServer(t, Options{SLO: map[int]routing.Latency{0: {TTFT: time.Minute}}})
	st, _ := open(t, serve(t, s))
	r := exchangeRequest(t, st, chatBody, nil, "x-session-id", "s1")
	if header, _ := destinationOf(t, r); !inFleet(header) {
		t.Fatalf("destination %q", header)
	}
	send(t, st, respHeaders("200", "text/event-stream", false, nil))
	recv(t, st)
	for i, ch := range sseChunks {
		send(t, st, respBody(ch, i == len(sseChunks)-1))
		recv(t, st)
	}
	send(t, st, respTrailers())
	recv(t, st)
	_ = st.CloseSend()
	waitIdle(t, s)
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var met, errs float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "usher_slo_requests_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "met" {
						met += m.GetCounter().GetValue()
					}
				}
			case "usher_latency_prediction_error_seconds":
				errs += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if met != 1 {
		t.Errorf("met %v, want 1", met)
	}
	if errs != 0 {
		t.Errorf("%v prediction errors recorded without a latency model in the profile, want 0", errs)
	}
}
