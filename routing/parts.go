package routing

// NewHealthFilter returns a HealthFilter.
//
// HealthFilter drops unhealthy backends and routes around backends whose signals are stale.
//
//   - A backend marked Unhealthy is always dropped.
//   - A backend whose signals are stale (older than Options.StaleAfter) or were never observed
//     is dropped while at least one candidate with fresh signals remains. When every remaining
//     candidate is stale — the scraper is down, not the fleet — they are all kept rather than
//     failing every request, and the fallback is counted in Fallbacks. Their stale signals are
//     then imputed by the load scorers, never read as zero load or as saturation.
//
// O(n), no allocation. Safe for concurrent use.
func NewHealthFilter() Filter { return newHealthFilter() }

// NewSaturationFilter returns the filter with the limits of opts (Mean is ignored).
//
// SaturationFilter keeps the candidates below saturation (level < 1, as Router.Saturation
// computes it per backend), or every candidate when none is: paired with the gauge behind an
// admission gate, a request dispatched because some backend had room is sent to one that has
// it, even when its session's home or its best prefix match is full. O(n), no allocation, safe
// for concurrent use.
func NewSaturationFilter(opts SaturationOptions) Filter { return newSaturationFilter(opts) }
