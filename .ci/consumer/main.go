// Command consumer is the consumer-floor check of .ci/run: a controller-runtime inference
// router's module, pinned to the versions such a project runs today, that imports every
// package of usher's library module. It must build and vet without go.mod raising any pin,
// because under minimal version selection every requirement of usher's go.mod is a floor for
// the module that imports it. internal/apicheck's TestConsumerFloor keeps the import list
// equal to the library's packages.
package main

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	_ "github.com/usher-llm/usher/fairness"
	_ "github.com/usher-llm/usher/flowcontrol"
	_ "github.com/usher-llm/usher/flowcontrol/flowcontroltest"
	_ "github.com/usher-llm/usher/gateway"
	_ "github.com/usher-llm/usher/gateway/replicaext"
	_ "github.com/usher-llm/usher/metrics"
	_ "github.com/usher-llm/usher/prefixcache"
	_ "github.com/usher-llm/usher/prefixcache/kvevents"
	_ "github.com/usher-llm/usher/proxy"
	_ "github.com/usher-llm/usher/proxy/extproc"
	_ "github.com/usher-llm/usher/proxy/healthcheck"
	_ "github.com/usher-llm/usher/proxy/kvfeed"
	_ "github.com/usher-llm/usher/proxy/openai"
	_ "github.com/usher-llm/usher/proxy/quota"
	_ "github.com/usher-llm/usher/proxy/tokenizer"
	_ "github.com/usher-llm/usher/replica"
	_ "github.com/usher-llm/usher/routing"
	_ "github.com/usher-llm/usher/routing/disagg"
	_ "github.com/usher-llm/usher/routing/latency"
	_ "github.com/usher-llm/usher/routing/load"
	_ "github.com/usher-llm/usher/routing/lora"
	_ "github.com/usher-llm/usher/routing/outlier"
	_ "github.com/usher-llm/usher/routing/pick"
	_ "github.com/usher-llm/usher/routing/prefix"
	_ "github.com/usher-llm/usher/routing/profiles"
	_ "github.com/usher-llm/usher/routing/saturation"
	_ "github.com/usher-llm/usher/routing/session"
)

func main() {
	// Touch each pinned dependency, so that the build links what such a project links.
	_ = ctrl.Options{}
	_ = rest.Config{}
	_ = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-0"}}
	_ = grpc.NewServer
	_ = prometheus.NewRegistry()
	var _ extprocv3.ExternalProcessorServer
	fmt.Println("ok")
}
