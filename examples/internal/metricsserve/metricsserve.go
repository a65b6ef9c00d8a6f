// Package metricsserve is the metrics listener the example programs share (examples/gateway
// and examples/epp): a metrics.Exporter over a registry, behind -metrics-token-file's bearer
// tokens and then, with -metrics-endpoint-auth, the Kubernetes API server's TokenReview and
// SubjectAccessReview (kube/metricsauth), served on a port of its own with timeouts that
// bound slow scrapers.
package metricsserve

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/usher-llm/usher/kube/metricsauth"
	"github.com/usher-llm/usher/metrics"
)

// Config is what the flags say.
type Config struct {
	// Listen is -metrics-listen; empty: no listener.
	Listen string
	// TokenFile is -metrics-token-file.
	TokenFile string
	// EndpointAuth is -metrics-endpoint-auth: tokens the file does not hold are reviewed by
	// the API server of Kubeconfig (in-cluster when empty).
	EndpointAuth bool
	Kubeconfig   string
	// Connect builds the client of the reviews; nil: metricsauth.Connect (a test hook).
	Connect func(kubeconfig string) (kubernetes.Interface, error)
}

// Server returns the metrics server over reg and its bound listener, for the caller to
// Serve and Shutdown; nil, nil, nil when c.Listen is empty. Its timeouts bound slow scrapers:
// an exposition is small and quick.
func Server(c Config, reg prometheus.Gatherer) (*http.Server, net.Listener, error) {
	if c.Listen == "" {
		return nil, nil, nil
	}
	o := metrics.ExporterOptions{Gatherer: reg, TokenFile: c.TokenFile}
	if c.EndpointAuth {
		connect := c.Connect
		if connect == nil {
			connect = metricsauth.Connect
		}
		client, err := connect(c.Kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("-metrics-endpoint-auth: %w", err)
		}
		rev, err := metricsauth.New(metricsauth.Options{Client: client})
		if err != nil {
			return nil, nil, err
		}
		o.Authenticate = rev.Authenticate
	}
	exp, err := metrics.NewExporter(o)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}, ln, nil
}

// Describe says which authentication guards /metrics, for a startup line.
func Describe(c Config) string {
	const kube = "Kubernetes TokenReview and SubjectAccessReview (get /metrics)"
	switch {
	case c.TokenFile != "" && c.EndpointAuth:
		return "bearer tokens from " + c.TokenFile + ", then " + kube
	case c.TokenFile != "":
		return "bearer tokens from " + c.TokenFile
	case c.EndpointAuth:
		return kube
	}
	return "no authentication"
}
