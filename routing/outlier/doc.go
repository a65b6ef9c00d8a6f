// Package outlier is passive health for a [routing.Router]: it ejects backends that fail
// requests, and routes around backends that are unhealthy or whose signals are stale.
//
// # Passive health
//
// A server that fails every request at once finishes them instantly, looks idle to
// least-loaded scoring, and attracts the traffic. A [Detector] learns from outcomes instead.
// Whoever finishes a [routing.Result] classifies a failure in [routing.DoneInfo].Failure —
// connect, timeout, server error, or overload, which is a load signal and not counted — and
// the Detector, a [routing.Completer], ejects a backend with Envoy's outlier-detection rules
// and defaults (see [Options]): consecutive failures, a failure share over a window, or a
// single refused connection. The ejection takes effect before Done returns, backs off
// exponentially when repeated, and never leaves a pick with no backend (it is then given all of
// them, counted). When an ejection ends the backend turns half-open: one request at a time goes
// to it as a probe, claimed only when a pick chooses it; success restores it, failure ejects it
// for longer. A backend whose writer verdict turns from [routing.Unhealthy] to
// [routing.Healthy] is probed at once, so a restarted server gets traffic within a scrape
// interval; one that passes health checks but fails requests waits out its backoff. A backend
// that holds every streamed answer without a byte ([routing.Candidate].Silence) is passed over
// after [Options].StallAfter. As a [routing.Scorer], the Detector also lowers backends whose
// recent failure share is below the ejection thresholds. [With] adds it to a
// [routing.Profile], first among the filters, so it sees the health verdicts before the
// [HealthFilter] drops anyone; [Of] finds it again in a Router built from that profile.
//
// # Active health checks
//
// Passive health alone spends user requests: a half-open backend's probe is a client's request,
// and a backend ejected while traffic is idle stays out until a client's request finds it back.
// A health checker that sends requests of its own on a timer (package proxy/healthcheck, which
// the gateway and the endpoint picker run) reports each probe's outcome to [Detector.Probed].
// From its first report the Detector admits no user request to an ejected backend; the
// checker's successful probe restores it once its back-off is over and no failure came after
// the probe was sent, and a failed probe keeps it out without lengthening the back-off, so a
// restarted server is back at the checker's next probe (about a second). The Detector still
// learns from every request's outcome (Completed), and a probe of a backend in rotation counts
// as a request: a refused or stalled probe ejects at once.
//
// # Missing and stale signals
//
// [HealthFilter] drops unhealthy backends and those whose polled signals are stale while a
// fresh one remains, and keeps them all when none is: then the scraper, not the fleet, is down,
// and the load scorers impute the missing signals rather than read them as zero load or as
// saturation. A Router knows this filter and skips it when nothing is stale or unhealthy.
//
// # Alternatives not taken
//
//   - Active health checks in this package: they would put network calls and goroutines into
//     a package that must not touch the network. The checker is a package of its own
//     (proxy/healthcheck); this one keeps the state machine and hears the probes' outcomes.
//   - Ending an ejection by the clock alone, as Envoy does: a backend still down would take its
//     full share of traffic at once; a half-open backend costs one request at a time to find
//     out.
//
// # Concurrency
//
// A Detector is safe for concurrent use: its Filter, Score and Picked run on every pick from any
// number of goroutines without a lock, and Completed takes a short one.
package outlier
