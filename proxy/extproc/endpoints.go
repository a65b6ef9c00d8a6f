package extproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/glue/backendspec"
	"github.com/usher-llm/usher/routing"
)

// Endpoint is one model server of the pool, as Envoy reaches it. It is a plain value.
type Endpoint struct {
	// Address is "ip:port" (IPv6 in brackets), the form the picker answers with. It is also
	// the endpoint's name in the router, the prefix index and the metrics.
	Address string
	// Metrics is the server's metrics URL. Empty: http://Address/metrics.
	Metrics string
	// KVEvents is the server's KV-event ZMQ endpoint (tcp://ip:5557), and Replay its replay
	// endpoint; both optional.
	KVEvents, Replay string
	// Role is the part of inference the server serves (routing.BackendState.Role): both
	// (the zero value), prefill or decode.
	Role routing.Role
	// Models are the base models the server serves, and Adapters the LoRA adapters it serves
	// on Models[0]. A request naming a model goes only to the endpoints that list it (or list
	// none); one naming an adapter is keyed and routed as that adapter of its base model.
	Models, Adapters []string
}

// ErrInvalidEndpoint is returned (wrapped) for an endpoint the picker cannot use.
var ErrInvalidEndpoint = errors.New("extproc: invalid endpoint")

// validate checks that e names an ip:port and that its URLs parse.
func (e Endpoint) validate() error {
	host, port, err := net.SplitHostPort(e.Address)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%w: %q: want ip:port", ErrInvalidEndpoint, e.Address)
	}
	if e.Metrics != "" {
		u, err := url.Parse(e.Metrics)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: %s: metrics URL %q: want http(s)://host:port/path", ErrInvalidEndpoint, e.Address, e.Metrics)
		}
	}
	for _, z := range []string{e.KVEvents, e.Replay} {
		if z != "" && !strings.Contains(z, "://") {
			return fmt.Errorf("%w: %s: KV-event endpoint %q: want tcp://host:port", ErrInvalidEndpoint, e.Address, z)
		}
	}
	if e.Replay != "" && e.KVEvents == "" {
		return fmt.Errorf("%w: %s: a replay endpoint without a KV-event endpoint", ErrInvalidEndpoint, e.Address)
	}
	for _, m := range slices.Concat(e.Models, e.Adapters) {
		if m == "" || len(m) > 256 {
			return fmt.Errorf("%w: %s: a model or adapter name must have 1 to 256 bytes", ErrInvalidEndpoint, e.Address)
		}
	}
	if len(e.Adapters) > 0 && len(e.Models) == 0 {
		return fmt.Errorf("%w: %s: adapters need models, whose first is their base model", ErrInvalidEndpoint, e.Address)
	}
	return nil
}

// serves reports whether e serves model: it lists it, or lists no models.
func (e Endpoint) serves(model string) bool {
	return len(e.Models) == 0 || slices.Contains(e.Models, model) || slices.Contains(e.Adapters, model)
}

// served returns the names e serves (its models and adapters); nil when it lists none.
func (e Endpoint) served() []string {
	if len(e.Models) == 0 {
		return nil
	}
	return slices.Concat(e.Models, e.Adapters)
}

// metricsURL is where the endpoint's metrics are scraped.
func (e Endpoint) metricsURL() string {
	if e.Metrics != "" {
		return e.Metrics
	}
	return "http://" + e.Address + "/metrics"
}

// endpointKeys are ParseEndpoint's options; true marks a list.
var endpointKeys = backendspec.Keys{"metrics": false, "kv-events": false, "replay": false, "role": false, "models": true, "adapters": true}

// ParseEndpoint parses one endpoint in usher's backend syntax (the gateway's -backend one,
// with an ip:port for the URL): "ip:port" followed by options separated by commas or spaces —
// metrics=URL, kv-events=tcp://..., replay=tcp://..., role=prefill|decode|both, models=A,B...,
// adapters=L1,L2... An unknown or repeated option is an error naming it.
func ParseEndpoint(s string) (Endpoint, error) {
	sp, err := backendspec.Parse(s, endpointKeys)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	e := Endpoint{Address: sp.Target, Metrics: sp.Get("metrics"), KVEvents: sp.Get("kv-events"), Replay: sp.Get("replay"),
		Models: sp.List("models"), Adapters: sp.List("adapters")}
	if e.Role, err = backendspec.Role(sp.Get("role")); err != nil {
		return e, fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	return e, e.validate()
}

// MaxEndpoints bounds the endpoints of one set (a list, a file, an EndpointSource's update).
const MaxEndpoints = 4096

// ParseEndpoints parses an endpoint file: one endpoint per line (ParseEndpoint), blank lines
// and lines starting with # ignored. A repeated address is an error, as are more than
// MaxEndpoints endpoints.
func ParseEndpoints(data []byte) ([]Endpoint, error) {
	var out []Endpoint
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		e, err := ParseEndpoint(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if seen[e.Address] {
			return nil, fmt.Errorf("line %d: %w: %s listed twice", n, ErrInvalidEndpoint, e.Address)
		}
		if len(out) == MaxEndpoints {
			return nil, fmt.Errorf("line %d: %w: more than %d endpoints", n, ErrInvalidEndpoint, MaxEndpoints)
		}
		seen[e.Address] = true
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
	}
	return out, nil
}

// An EndpointSource tells the picker which endpoints the pool has. It is the seam for a Kubernetes
// InferencePool watch (pods matching the pool's selector, on its target port): an
// implementation calls update with the whole set each time it changes, from one goroutine,
// until ctx ends. Run returns ctx.Err() when ctx ends, or the error that stopped it.
type EndpointSource interface {
	Run(ctx context.Context, update func([]Endpoint)) error
}

// FileSource watches a file of endpoints (ParseEndpoints), re-reading it every Interval
// and reporting the set whenever the file's content changed and stayed the same for one
// more poll (so a file caught mid-write is never applied; a change takes one to two
// intervals). A file that cannot be read or
// parsed keeps the last good set and is reported to OnError. It is a plain value; Run may
// be called once at a time.
type FileSource struct {
	// Path is the file.
	Path string
	// Interval is the poll interval. Zero: 1 s.
	Interval time.Duration
	// OnError, if set, hears read and parse errors (each distinct error once in a row).
	OnError func(error)
}

// Run implements EndpointSource: it reports the file's set at once (if it loads) and after every
// change, polling every Interval. O(file) per poll.
func (f FileSource) Run(ctx context.Context, update func([]Endpoint)) error {
	every := f.Interval
	if every <= 0 {
		every = time.Second
	}
	var last, pending []byte
	var lastErr string
	poll := func() {
		data, err := os.ReadFile(f.Path)
		if err == nil && last != nil && bytes.Equal(data, last) {
			pending = nil
			return
		}
		if err == nil && last != nil && !bytes.Equal(data, pending) {
			// Changed since the last poll: apply it once the next poll reads the same, so a
			// file caught mid-write (truncated, half written) is never applied.
			pending = data
			return
		}
		pending = nil
		var eps []Endpoint
		if err == nil {
			eps, err = ParseEndpoints(data)
		}
		if err != nil {
			if msg := err.Error(); msg != lastErr && f.OnError != nil {
				f.OnError(fmt.Errorf("endpoints file %s: %w", f.Path, err))
				lastErr = msg
			}
			return
		}
		last, lastErr = data, ""
		update(eps)
	}
	poll()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			poll()
		}
	}
}

var _ EndpointSource = FileSource{}
