package metrics

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these with context, so callers
// test them with errors.Is.
var (
	// ErrInvalidOptions reports a malformed Options, Target or Engine.
	ErrInvalidOptions = errors.New("metrics: invalid options")
	// ErrParse reports an exposition the Prometheus parser rejected.
	ErrParse = errors.New("metrics: malformed exposition")
	// ErrStatus reports a metrics or health endpoint that answered with a non-2xx status.
	ErrStatus = errors.New("metrics: unexpected HTTP status")
	// ErrTooLarge reports an exposition larger than Options.MaxBodyBytes.
	ErrTooLarge = errors.New("metrics: exposition too large")
	// ErrTimeout reports a scrape that did not finish within Options.Timeout.
	ErrTimeout = errors.New("metrics: scrape timed out")
	// ErrUnhealthy reports a health endpoint that failed or did not answer.
	ErrUnhealthy = errors.New("metrics: backend unhealthy")
	// ErrNotScraped reports a backend that has not been scraped successfully yet.
	ErrNotScraped = errors.New("metrics: not scraped yet")
	// ErrRunning reports a second concurrent call of Scraper.Run.
	ErrRunning = errors.New("metrics: scraper already running")
)
