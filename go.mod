module github.com/usher-llm/usher

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/envoyproxy/go-control-plane/envoy v1.35.0
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/prometheus/client_golang v1.20.4
	github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common v0.66.0
	github.com/redis/go-redis/v9 v9.0.0
	github.com/vmihailenco/msgpack/v5 v5.3.4
	golang.org/x/sync v0.16.0
	golang.org/x/text v0.28.0
	google.golang.org/grpc v1.73.0
	google.golang.org/protobuf v1.36.8
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cncf/xds/go v0.0.0-20250326154945-ae57f3c0d45f // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/envoyproxy/protoc-gen-validate v1.2.1 // indirect
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/grafana/regexp v0.0.0-20240518133315-a468a5bfb3bc // indirect
	github.com/klauspost/compress v1.17.9 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250528174236-200df99c418a // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)
