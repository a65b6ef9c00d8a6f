package inferencepool_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy/extproc"
)

// Example decodes a pool manifest, then follows it on a fake API server holding one ready
// pod. In a cluster, Clients come from inferencepool.Connect.
func Example() {
	manifest := []byte(`apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: llama, namespace: serving}
spec:
  selector: {matchLabels: {app: vllm}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: usher-epp, port: {number: 9002}}
`)
	pool, err := inferencepool.Decode(manifest)
	if err != nil {
		fmt.Println(err)
		return
	}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	pods := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-0", Namespace: "serving", Labels: map[string]string{"app": "vllm", inferencepool.DefaultRoleLabel: "decode"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})
	pools := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList"}, &unstructured.Unstructured{Object: obj})

	src, err := inferencepool.New(inferencepool.Options{
		Clients: inferencepool.Clients{Pods: pods, Pools: pools}, Name: "llama", Namespace: "serving", Debounce: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []extproc.Endpoint, 1)
	done := make(chan error)
	go func() { done <- src.Run(ctx, func(eps []extproc.Endpoint) { got <- eps }) }()
	for _, e := range <-got {
		fmt.Println(e.Address, e.Role)
	}
	cancel()
	<-done
	fmt.Println("connected:", src.Stats().Connected)
	// Output:
	// 10.0.0.7:8000 decode
	// connected: true
}
