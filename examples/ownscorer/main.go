// Command ownscorer is a gateway with a scorer of its own, chosen and weighted from a JSON
// config file: a Registry with the built-ins plus "fewest-streams" (and the KV-event feed and
// the replica, which a configuration may ask for), and the gateway's own configuration path
// (gateway.Config, its flags and -config) over it.
//
//	go run ./examples/ownscorer -config examples/ownscorer/gateway.json
//
// With no backend in the config it serves a simulated fleet of four in process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/usher-llm/usher/gateway"
	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/routing"
)

// fewestStreams prefers the backend with the fewest requests this gateway has in flight there,
// with a bonus for an empty one (params: {"idle_bonus": 0.5}). A candidate with n requests in
// flight scores
//
//	(1/(1+n) + idle_bonus·[n = 0]) / (1 + idle_bonus)
//
// so every score stays in [0, 1], as the router wants (it clamps anything above 1, which would
// cancel the bonus): an idle backend scores 1 and the bonus widens its lead over a busy one,
// 1 against 1/(2·(1 + idle_bonus)) for one request in flight. Safe for concurrent use.
type fewestStreams struct{ idleBonus float64 }

// newFewestStreams returns the scorer with the given bonus, which must be finite and ≥ 0.
func newFewestStreams(idleBonus float64) (fewestStreams, error) {
	if !(idleBonus >= 0) || math.IsInf(idleBonus, 1) {
		return fewestStreams{}, fmt.Errorf("fewest-streams: idle_bonus %v: want a finite value ≥ 0", idleBonus)
	}
	return fewestStreams{idleBonus}, nil
}

func (s fewestStreams) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	norm := 1 / (1 + s.idleBonus)
	for i, c := range cands {
		v := 1 / float64(1+c.InFlight.Requests)
		if c.InFlight.Requests == 0 {
			v += s.idleBonus
		}
		dst[i] = v * norm
	}
}

func main() {
	reg := new(proxy.Registry)
	if err := proxy.Register(reg, "fewest-streams", func(p proxy.Params) (routing.Scorer, error) {
		var o struct {
			IdleBonus float64 `json:"idle_bonus"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		return newFewestStreams(o.IdleBonus)
	}); err != nil {
		log.Fatal(err)
	}
	// Extensions are parts too: built only if the configuration names KV events or Redis.
	if err := errors.Join(kvfeed.Register(reg), replicaext.Register(reg)); err != nil {
		log.Fatal(err)
	}
	c := gateway.DefaultConfig()
	c.Registry = reg
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Func("config", "JSON config file", c.LoadFile)
	c.RegisterFlags(flag.CommandLine)
	flag.Parse()
	if len(c.Backends) == 0 {
		fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 4})
		if err != nil {
			log.Fatal(err)
		}
		for _, u := range fleet.URLs() {
			c.Backends = append(c.Backends, gateway.BackendSpec{URL: u, Engine: "vllm"})
		}
	}
	if err := serve(c, *listen); err != nil {
		log.Fatal(err)
	}
}

func serve(c gateway.Config, listen string) error {
	o, err := c.Options()
	if err != nil {
		return err
	}
	h, err := proxy.New(o)
	if err != nil {
		return err
	}
	h.Start(context.Background())
	go h.Run(context.Background())
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Printf("gateway with the fewest-streams scorer on http://%s", ln.Addr())
	// Bounds on slow clients that cut no stream: no ReadTimeout or WriteTimeout (the Handler
	// bounds the body read and every wait on a backend itself).
	srv := &http.Server{
		Addr:              listen,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	return srv.Serve(h.Listener(ln))
}
