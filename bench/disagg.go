package bench

import (
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/routing"
)

// Disaggregated serving in the simulator (Config.PrefillServers).
//
// A request's life in a disaggregated fleet: the decode pick (routing.RoleDecode) as for any
// request; the Decider, given that pick's Result; if it approves, the prefill pick
// (routing.RolePrefill, without the session, whose home stays its decode server) and a
// one-token request on the prefill server's engine (phasePrefill); when that finishes, the
// prefill pick is closed and the KV travels to the decode server (phaseTransfer) for
// TransferLatency plus TransferPerToken per prompt token whose block the decode server's
// engine does not hold then — NIXL reads only the missing blocks; then the decode server's
// engine takes the request with its prompt computed (phaseDecode, engine.Request.RemotePrefill)
// and serves it. The decode pick's prefill charge is released when the prefill goes
// elsewhere, as the gateway does; it is closed, like any pick, when the answer ends. TTFT is
// the decode server's first token; a request the Decider keeps is served whole by its decode
// server.

// Phases of a disaggregated request (simReq.phase); zero: served whole.
const (
	phaseWhole uint8 = iota
	phasePrefill
	phaseTransfer
	phaseDecode
)

// RoleSample is the number of servers a role planner had in prefill from At on (Result.Roles);
// the others were in both.
type RoleSample struct {
	At      time.Duration
	Prefill int
}

// pdStats counts what disaggregation did in a run.
type pdStats struct {
	disaggregated int           // requests prefilled on a prefill server
	transfer      time.Duration // their summed transfer time
}

// role is server i's role: the first PrefillServers are prefill servers, the others decode
// servers; every server serves both when the fleet is not disaggregated.
func (s *sim) role(i int) routing.Role {
	switch {
	case s.cfg.PrefillServers == 0:
		return routing.RoleBoth
	case i < s.cfg.PrefillServers:
		return routing.RolePrefill
	}
	return routing.RoleDecode
}

// decide asks the Decider about r, picked decode server r.server by rr, and on approval picks
// its prefill server. Without one available, the decode server serves r whole.
func (s *sim) decide(r *simReq, rr *routing.Request) {
	if !s.cfg.Decider.Disaggregate(rr, &r.res) {
		return
	}
	p, err := s.gw[r.gw].router.Pick(&routing.Request{
		Chain: rr.Chain, BlockSize: rr.BlockSize, PromptTokens: rr.PromptTokens, Role: routing.RolePrefill, Now: rr.Now,
		Exclude: []routing.BackendID{r.res.ID}, // a server that serves both never prefills for itself
	})
	if err != nil {
		return
	}
	r.pres, r.pserver, r.phase = p, int32(p.ID), phasePrefill
	r.res.FirstToken(s.clock.now) // the decode server will not prefill: release its charge
	s.pd.disaggregated++
}

// prefillEvent handles an event of r's prefill on prefill server sv: at its end, the prefill
// pick is closed and the transfer to the decode server begins.
func (s *sim) prefillEvent(r *simReq, sv *server, ev engine.Event) {
	switch ev.Kind {
	case engine.EventPreempted:
		s.preempts++
	case engine.EventToken:
		r.pres.FirstToken(s.clock.now)
	case engine.EventFinished:
		s.addLoad(sv, -1)
		r.pres.Done(routing.DoneInfo{FirstTokenAt: s.clock.now, PromptTokens: int(r.w.PromptTokens), OutputTokens: 1})
		r.phase = phaseTransfer
		d := s.cfg.TransferLatency + time.Duration(s.missing(r))*s.cfg.TransferPerToken
		s.pd.transfer += d
		s.schedule(s.now+d, evTransfer, r.idx)
	}
}

// missing is how many of r's prompt tokens its decode server's engine does not hold now: the
// prompt past its longest cached prefix of blocks.
func (s *sim) missing(r *simReq) int {
	chain := s.chainOf(r)
	e := s.srv[r.server].e
	held := 0
	for _, h := range chain {
		if !e.Cached(engine.BlockHash(h)) {
			break
		}
		held++
	}
	return max(int(r.w.PromptTokens)-held*s.cfg.Profile.BlockSize, 0)
}
