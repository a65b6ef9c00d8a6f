package replicaext_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/proxy"
)

// A program configured by package gateway registers the replica; the configuration's redis,
// replica_id and cluster become its params. Building it dials nothing: the Handler's Run
// connects.
func Example() {
	reg := new(proxy.Registry)
	if err := replicaext.Register(reg); err != nil {
		log.Fatal(err)
	}
	ext, err := proxy.Build[proxy.Extension](reg, proxy.PartSpec{Name: "replica",
		Params: []byte(`{"redis": "127.0.0.1:6379", "replica_id": "gw-1", "cluster": "demo"}`)})
	fmt.Println(reg.Names("extension"), ext != nil, err)
	_, err = proxy.Build[proxy.Extension](reg, proxy.PartSpec{Name: "replica", Params: []byte(`{"redis": "no-port"}`)})
	fmt.Println(errors.Is(err, proxy.ErrInvalidOptions))
	// Output:
	// [replica] true <nil>
	// true
}
