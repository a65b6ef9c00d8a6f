// Package monitoring holds usher's Grafana dashboard (usher-dashboard.json) and Prometheus
// alerting rules (usher-alerts.yaml), built only from the series a gateway exports on
// GET /metrics: usher's own (package metrics' Gateway and Scraper, replica's usher_replica_sync_*,
// the KV-event feed's usher_kvevents_*) and the Go runtime's and the process's (go_*, process_*).
//
// The package has no code; its test keeps the two files honest. It builds a real
// proxy.Handler over an in-process simulated fleet, with a KV-event feed and a replica, gathers
// the metric families its registry exports (a histogram's as name_bucket, name_sum and
// name_count, a summary's as name, name_sum and name_count), and fails on any series name a
// dashboard target, template variable or alert expression uses that the gateway does not
// export, on a matcher of a closed label (outcome, decision, result, role, reason, kind,
// direction) naming a value no series has, and on any usher_ family the dashboard leaves
// out. Names are found by a tokenizer that
// skips strings, label matchers, ranges, functions, aggregation operators, keywords and the
// label lists of by, without, on, ignoring and group_left/right. Parsing is left to promtool
// (Debian's prometheus package): `promtool check rules` checks the alert rules, and the
// dashboard's expressions written as recording rules, with Grafana's variables replaced. Without
// promtool those checks skip, unless USHER_REQUIRE_PROMTOOL=1, as CI sets it, makes them fail.
//
// # Alternatives not taken
//
//   - Prometheus's own parser (github.com/prometheus/prometheus/promql/parser): exact, but it
//     would add the Prometheus server's module and its dependencies to go.mod for one test.
//   - Matching names with a regular expression over the whole text: it cannot tell a metric
//     from a function, a label in by (...) or a word in a string.
package monitoring
