package extproc_test

import (
	"fmt"
	"net"

	"google.golang.org/grpc"

	"github.com/usher-llm/usher/proxy/extproc"
)

// Example starts an endpoint picker for a pool of two model servers on a gRPC listener, as
// Envoy's ext_proc filter (or an InferencePool's endpoint picker reference) would reach it.
// Run (not called here) would scrape the servers' metrics and follow their KV events.
func Example() {
	epp, err := extproc.New(extproc.Options{
		Endpoints: []extproc.Endpoint{{Address: "10.0.0.7:8000"}, {Address: "10.0.0.8:8000"}},
		Fallbacks: 1, // list one more endpoint for Envoy to retry on
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer epp.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // 9002 in a pool's deployment
	if err != nil {
		fmt.Println(err)
		return
	}
	g := grpc.NewServer()
	epp.Register(g) // ext_proc v3 and grpc.health.v1
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()

	fmt.Println("endpoints:", len(epp.Router().Backends(nil)))
	fmt.Println("header:", extproc.DestinationHeader)
	fmt.Println("metadata:", extproc.MetadataNamespace+"/"+extproc.DestinationHeader)
	// Output:
	// endpoints: 2
	// header: x-gateway-destination-endpoint
	// metadata: envoy.lb/x-gateway-destination-endpoint
}
