// Package slo holds what the gateway (package proxy) and the endpoint picker (proxy/extproc)
// do alike with a request's latency targets: read them from its band's configuration and the
// headers a trusted proxy sets, and turn them into an admission deadline from the router's
// latency predictions. See "Service-level objectives" in the proxy package documentation.
package slo

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/backendspec"
	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
)

// The headers a trusted proxy may set a request's targets with, in canonical form.
const (
	TTFTHeader = "X-Slo-Ttft-Ms"
	TPOTHeader = "X-Slo-Tpot-Ms"
	// maxMillis bounds a header's value: one hour.
	maxMillis = 3_600_000
)

// MinWait is the least time a request with a TTFT target may wait for admission, however far
// the router predicts it to miss its target: what it takes a queue to dispatch a request that
// is next in line, so that a request that cannot meet its target is still served when it would
// go (nearly) at once, and refused — shed on arrival by early shedding, or expired — rather
// than held when it would not.
const MinWait = 50 * time.Millisecond

// Config is a component's targets: by band (nil: none), whether the headers are trusted, and
// the shedding factor (0: off).
type Config struct {
	Bands     []routing.Latency
	Trusted   bool
	ShedAbove float64
}

// New validates the options as proxy.Options and extproc.Options name them (SLO by band,
// TrustSLOHeaders, SLOShedAbove) for a component with bands priority bands; errors wrap
// invalid.
func New(byBand map[int]routing.Latency, trusted bool, shedAbove float64, bands int, invalid error) (Config, error) {
	c := Config{Trusted: trusted, ShedAbove: shedAbove}
	if a := shedAbove; a != 0 && !(a >= 1 && a <= 1000) {
		return Config{}, fmt.Errorf("%w: SLOShedAbove %v: want 0 (off) or a factor from 1 to 1000", invalid, a)
	}
	if len(byBand) == 0 {
		return c, nil
	}
	c.Bands = make([]routing.Latency, bands)
	for b, t := range byBand {
		if b < 0 || b >= bands {
			return Config{}, fmt.Errorf("%w: SLO names band %d, want 0..%d", invalid, b, bands-1)
		}
		if t.TTFT < 0 || t.TPOT < 0 {
			return Config{}, fmt.Errorf("%w: SLO of band %d: negative target %+v", invalid, b, t)
		}
		c.Bands[b] = t
	}
	return c, nil
}

// Targets returns the targets of a request of band band with headers hd: the band's, each
// loosened (never tightened) by a trusted header. A trusted header that is not a whole number
// of milliseconds in [1, 3600000], or is sent twice, is a 400 naming it. O(1).
func (c *Config) Targets(hd http.Header, band int) (routing.Latency, *openai.Error) {
	var t routing.Latency
	if band >= 0 && band < len(c.Bands) {
		t = c.Bands[band]
	}
	if !c.Trusted {
		return t, nil
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{TTFTHeader, &t.TTFT}, {TPOTHeader, &t.TPOT}} {
		vs := hd.Values(f.name)
		if len(vs) == 0 {
			continue
		}
		n, err := strconv.Atoi(vs[0])
		if len(vs) > 1 || err != nil || n < 1 || n > maxMillis {
			return routing.Latency{}, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest,
				Code: "invalid_header", Param: f.name,
				Message: fmt.Sprintf("header %s: want one whole number of milliseconds from 1 to %d", f.name, maxMillis)}
		}
		// A header only loosens its band's target: a tighter one would move the request ahead
		// of its band under the slo and edf policies, and a band without a target leaves none
		// to loosen.
		if d := time.Duration(n) * time.Millisecond; *f.dst > 0 {
			*f.dst = max(*f.dst, d)
		}
	}
	return t, nil
}

// Deadline returns the admission deadline of a request with TTFT target ttft, arriving at
// arrival and routed by r as rr (see Admit), with p̂ the best TTFT r predicts; zero (the queue's
// TTL) when r predicts nothing. shed says the request is to be refused at once. O(backends)
// plus one prefix match (latency.Predict).
func (c *Config) Deadline(r *routing.Router, rr *routing.Request, ttft, ttl time.Duration, arrival, now time.Time) (dl time.Time, shed bool) {
	best, ok := latency.Predict(r, rr)
	if !ok {
		return time.Time{}, false
	}
	return c.Admit(best.TTFT, r.Stats().LatencyOutcomes, ttft, ttl, arrival, now)
}

// Queue readies fr, a request with latency targets, for the admission queue, as the gateway
// and the endpoint picker both admit one: fr.Value points at targets (what Target reads; the
// caller keeps targets alive while fr waits) and, with a TTFT target, fr.Deadline is Deadline's.
// When Deadline says shed, Queue records the refusal on g as early shedding does (outcome
// RejectedWait, SLO result shed, in band) and returns true: the caller answers
// flowcontrol.ErrWouldExpire. Zero targets leave fr alone. O(Deadline).
func (c *Config) Queue(fr *flowcontrol.Request, targets *routing.Latency, r *routing.Router, rr *routing.Request,
	ttl time.Duration, arrival time.Time, g *gatewaymetrics.Recorder, band int) (shed bool) {
	if *targets == (routing.Latency{}) {
		return false
	}
	fr.Value = targets
	if targets.TTFT <= 0 {
		return false
	}
	if fr.Deadline, shed = c.Deadline(r, rr, targets.TTFT, ttl, arrival, time.Now()); shed {
		g.ObserveAdmission(flowcontrol.RejectedWait, band, time.Since(arrival))
		g.ObserveSLO(band, gatewaymetrics.SLOShed)
	}
	return shed
}

// Admit is Deadline's rule given the prediction: the latest dispatch that still meets the
// target on the backend predicted fastest, arrival + ttft − predicted, no sooner than MinWait
// from now; zero when that is at or beyond ttl (0: unknown, no cap). shed is true when
// ShedAbove is set, predicted exceeds that many times the target and the model has learned
// latency.ColdOutcomes observations (learned). O(1).
func (c *Config) Admit(predicted time.Duration, learned uint64, ttft, ttl time.Duration, arrival, now time.Time) (dl time.Time, shed bool) {
	if c.ShedAbove > 0 && float64(predicted) > c.ShedAbove*float64(ttft) && learned >= latency.ColdOutcomes {
		return time.Time{}, true
	}
	dl = arrival.Add(ttft - predicted)
	if floor := now.Add(MinWait); dl.Before(floor) {
		dl = floor
	}
	if ttl > 0 && !dl.Before(arrival.Add(ttl)) {
		return time.Time{}, false
	}
	return dl, false
}

// Target returns the TTFT target a component put in a queue request's Value (a
// *routing.Latency), or 0: fairness.NewSLODeadline's Target.
func Target(v any) time.Duration {
	if t, ok := v.(*routing.Latency); ok && t != nil {
		return t.TTFT
	}
	return 0
}

// flagKeys are -slo's options.
var flagKeys = backendspec.Keys{"ttft": false, "tpot": false}

// ParseFlag parses the -slo flag of the gateway and the endpoint picker,
// BAND,ttft=DURATION,tpot=DURATION (either target may be left out), for a component of bands
// bands; errors wrap invalid.
func ParseFlag(s string, bands int, invalid error) (int, routing.Latency, error) {
	var t routing.Latency
	sp, err := backendspec.Parse(s, flagKeys)
	if err != nil {
		return 0, t, fmt.Errorf("%w: -slo: %w", invalid, err)
	}
	band, err := strconv.Atoi(sp.Target)
	if err != nil || band < 0 || band >= bands {
		return 0, t, fmt.Errorf("%w: -slo %q: want BAND (0..%d),ttft=DURATION,tpot=DURATION", invalid, s, bands-1)
	}
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"ttft", &t.TTFT}, {"tpot", &t.TPOT}} {
		if v := sp.Get(f.key); v != "" {
			if *f.dst, err = time.ParseDuration(v); err != nil || *f.dst <= 0 {
				return 0, t, fmt.Errorf("%w: -slo %q: %s=%q: want a positive duration such as 500ms", invalid, s, f.key, v)
			}
		}
	}
	return band, t, nil
}

// Finished is what a component knows of an admitted request when it finishes, for Observe.
type Finished struct {
	// Band and Targets are the request's; Stream says the answer was streamed.
	Band    int
	Targets routing.Latency
	Stream  bool
	// Pick is the router's Result when a backend was picked (Picked), and PickAt when.
	Pick   routing.Result
	Picked bool
	PickAt time.Time
	// Arrival is when the request reached the component; Info what the router is told at
	// Done, End set.
	Arrival time.Time
	Info    *routing.DoneInfo
	// ClientLeft says the client went away: the request neither met nor missed its targets.
	ClientLeft bool
}

// Observe records, for a streamed request, how far the router's prediction was from what the
// chosen backend did (TTFT from the pick, as the router learns it) and whether a request with
// targets met them (TTFT from arrival, as the client sees it; a failure misses). A whole
// answer's first token is not seen, so other requests count in neither. O(1).
func Observe(g *gatewaymetrics.Recorder, f *Finished) {
	if !f.Stream {
		return
	}
	info := f.Info
	var tpot time.Duration
	if !info.FirstTokenAt.IsZero() && info.Err == nil && info.OutputTokens >= 2 {
		tpot = info.End.Sub(info.FirstTokenAt) / time.Duration(info.OutputTokens-1)
	}
	if p := f.Pick.Predicted; f.Picked && p != (routing.Latency{}) && !info.FirstTokenAt.IsZero() {
		g.ObservePrediction(p, routing.Latency{TTFT: info.FirstTokenAt.Sub(f.PickAt), TPOT: tpot})
	}
	t := f.Targets
	if t == (routing.Latency{}) || (info.Err != nil && f.ClientLeft) {
		return
	}
	met := info.Err == nil && !info.FirstTokenAt.IsZero() &&
		(t.TTFT == 0 || info.FirstTokenAt.Sub(f.Arrival) <= t.TTFT) &&
		(t.TPOT == 0 || tpot <= t.TPOT)
	if met {
		g.ObserveSLO(f.Band, gatewaymetrics.SLOMet)
	} else {
		g.ObserveSLO(f.Band, gatewaymetrics.SLOMissed)
	}
}
