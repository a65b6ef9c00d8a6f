package gateway_test

import (
	"flag"
	"fmt"
	"log"

	"github.com/usher-llm/usher/gateway"
	"github.com/usher-llm/usher/proxy"
)

// A Handler from a configuration by names, as a flag set or a JSON file gives it.
func ExampleConfig() {
	c := gateway.DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-backend", "http://127.0.0.1:8000,engine=vllm", "-policy", "vtc", "-router", "llm-d"}); err != nil {
		log.Fatal(err)
	}
	opts, err := c.Options()
	if err != nil {
		log.Fatal(err)
	}
	h, err := proxy.New(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	fmt.Println(len(opts.Backends), h.Router().Name())
	// Output: 1 llm-d
}
