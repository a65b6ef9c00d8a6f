package metrics

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/promtest"
)

func TestScraperCollector(t *testing.T) {
	clock := newFakeClock()
	good := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	bad := newFakeServer(t, vllmBody(t, 1, 0, 0.1, 0, 0))
	bad.metricsCode.Store(http.StatusBadGateway)
	s := mustScraper(t, Options{Now: clock.Now, Targets: []Target{{Name: "good", URL: good.URL}, {Name: "bad", URL: bad.URL}}})
	_ = s.ScrapeOnce(context.Background())
	clock.Advance(3 * time.Second)
	_ = s.ScrapeOnce(context.Background())

	ts := strconv.FormatFloat(float64(clock.Now().UnixNano())/1e9, 'e', -1, 64)
	got := promtest.Text(t, s, "usher_scrape_errors_total", "usher_backend_stale", "usher_backend_healthy",
		"usher_scrapes_total", "usher_backend_last_scrape_timestamp_seconds")
	want := `# HELP usher_backend_healthy 1 if the model server is healthy (see State.Health), 0 if unhealthy or unknown.
# TYPE usher_backend_healthy gauge
usher_backend_healthy{backend="bad"} 1
usher_backend_healthy{backend="good"} 1
# HELP usher_backend_last_scrape_timestamp_seconds Unix time of the model server's last good metrics scrape (0 if none).
# TYPE usher_backend_last_scrape_timestamp_seconds gauge
usher_backend_last_scrape_timestamp_seconds{backend="bad"} 0
usher_backend_last_scrape_timestamp_seconds{backend="good"} ` + ts + `
# HELP usher_backend_stale 1 if the model server's last good metrics scrape is older than the staleness limit.
# TYPE usher_backend_stale gauge
usher_backend_stale{backend="bad"} 1
usher_backend_stale{backend="good"} 0
# HELP usher_scrape_errors_total Failed scrapes of a model server, by reason (timeout, transport, status, too_large, parse, health).
# TYPE usher_scrape_errors_total counter
usher_scrape_errors_total{backend="bad",reason="health"} 0
usher_scrape_errors_total{backend="bad",reason="parse"} 0
usher_scrape_errors_total{backend="bad",reason="status"} 2
usher_scrape_errors_total{backend="bad",reason="timeout"} 0
usher_scrape_errors_total{backend="bad",reason="too_large"} 0
usher_scrape_errors_total{backend="bad",reason="transport"} 0
usher_scrape_errors_total{backend="good",reason="health"} 0
usher_scrape_errors_total{backend="good",reason="parse"} 0
usher_scrape_errors_total{backend="good",reason="status"} 0
usher_scrape_errors_total{backend="good",reason="timeout"} 0
usher_scrape_errors_total{backend="good",reason="too_large"} 0
usher_scrape_errors_total{backend="good",reason="transport"} 0
# HELP usher_scrapes_total Completed scrape attempts of a model server.
# TYPE usher_scrapes_total counter
usher_scrapes_total{backend="bad"} 2
usher_scrapes_total{backend="good"} 2
`
	if got != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, want)
	}
	// The gateway's collectors and the Scraper in one registry: no name collides, every name is usher_.
	u, err := gatewaymetrics.New(gatewaymetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := gatewaymetrics.NewKVEvents(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range promtest.Gather(t, u, kv, s) {
		if !strings.HasPrefix(mf.GetName(), "usher_") {
			t.Errorf("metric %s lacks the usher_ prefix", mf.GetName())
		}
	}
}
