package inferencepool

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const v1Pool = `apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: llama
  namespace: serving
spec:
  targetPorts:
  - number: 8000
  appProtocol: http
  selector:
    matchLabels: {app: vllm-llama}
  endpointPickerRef:
    name: usher-epp
    kind: Service
    port: {number: 9002}
    failureMode: FailClose
status:
  parents:
  - parentRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}
    controllerName: example.net/gateway
    conditions:
    - {type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}
`

const alphaPool = `apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferencePool
metadata: {name: llama}
spec:
  targetPortNumber: 8000
  selector: {app: vllm-llama}
  extensionRef: {name: usher-epp, portNumber: 9002, failureMode: FailOpen}
`

func TestDecode(t *testing.T) {
	p, err := Decode([]byte(v1Pool))
	if err != nil {
		t.Fatalf("Decode(v1) = %v", err)
	}
	if got := p.Spec.Selector.MatchLabels["app"]; got != "vllm-llama" {
		t.Errorf("selector app = %q, want vllm-llama", got)
	}
	if got := p.Spec.TargetPorts; len(got) != 1 || got[0].Number != 8000 {
		t.Errorf("targetPorts = %v, want [8000]", got)
	}
	if r := p.Spec.EndpointPickerRef; r == nil || r.Name != "usher-epp" || r.Port == nil || r.Port.Number != 9002 || r.FailureMode != FailClose {
		t.Errorf("endpointPickerRef = %+v", r)
	}
	if got := p.Status.Parents; len(got) != 1 || got[0].ParentRef.Name != "gw" || len(got[0].Conditions) != 1 {
		t.Errorf("status.parents = %+v", got)
	}
	if c := p.DeepCopy(); !reflect.DeepEqual(c, p) {
		t.Errorf("DeepCopy differs: %+v", c)
	}

	a, err := Decode([]byte(alphaPool))
	if err != nil {
		t.Fatalf("Decode(v1alpha2) = %v", err)
	}
	if a.APIVersion != Group+"/"+Version || a.Spec.TargetPorts[0].Number != 8000 || a.Spec.Selector.MatchLabels["app"] != "vllm-llama" ||
		a.Spec.EndpointPickerRef.Port.Number != 9002 || a.Spec.EndpointPickerRef.FailureMode != FailOpen {
		t.Errorf("v1alpha2 converted = %+v", a)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown field", "appProtocol: http", "appProtocol: http\n  extra: 1", "extra"},
		{"case", "targetPorts:", "TargetPorts:", "TargetPorts"},
		{"v1alpha2 field in v1", "targetPorts:\n  - number: 8000", "targetPortNumber: 8000", "targetPortNumber"},
		{"old port field", "port: {number: 9002}", "portNumber: 9002", "portNumber"},
		{"repeated field", "appProtocol: http", "appProtocol: http\n  appProtocol: http", "appProtocol"},
		{"kind", "kind: InferencePool", "kind: InferenceModel", "kind"},
		{"apiVersion", "inference.networking.k8s.io/v1", "inference.networking.k8s.io/v2", "apiVersion"},
		{"port range", "number: 8000", "number: 70000", "target port"},
		{"no selector", "matchLabels: {app: vllm-llama}", "matchLabels: {}", "selector"},
		{"bad label", "{app: vllm-llama}", "{app: -bad-}", "label"},
		{"failure mode", "FailClose", "FailSometimes", "failureMode"},
		{"app protocol", "appProtocol: http", "appProtocol: grpc", "appProtocol"},
		{"no picker port", "port: {number: 9002}", "", "port is required"},
	} {
		doc := strings.Replace(v1Pool, tc.old, tc.new, 1)
		_, err := Decode([]byte(doc))
		if !errors.Is(err, ErrInvalidPool) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Decode = %v, want ErrInvalidPool naming %q", tc.name, err, tc.want)
		}
	}
	for _, doc := range []string{"", "null", "[]", "{", "kind: InferencePool"} {
		if _, err := Decode([]byte(doc)); !errors.Is(err, ErrInvalidPool) {
			t.Errorf("Decode(%q) = %v, want ErrInvalidPool", doc, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(v1Pool))
	f.Add([]byte(alphaPool))
	// The rows of TestCRDRules as seeds, but for the long ones (the YAML parser is slow on
	// some mutations of them, which stalls the fuzzer without finding anything).
	for _, r := range crdRules {
		for _, e := range []func(doc) doc{r.valid, r.invalid} {
			if e == nil {
				continue
			}
			d := v1Doc()
			if r.version != "v1" {
				d = alphaDoc()
			}
			if js, err := json.Marshal(e(d)); err == nil && len(js) < 300 {
				f.Add(js)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidPool) {
				t.Fatalf("Decode error does not wrap ErrInvalidPool: %v", err)
			}
			return
		}
		// A v1alpha2 pool may carry more labels than v1 allows; anything else Decode
		// accepts is a valid v1 pool, with a port for a Service picker.
		if err := p.Validate(); err != nil && len(p.Spec.Selector.MatchLabels) <= maxLabels {
			t.Fatalf("Decode accepted a pool Validate refuses: %v", err)
		}
		if r := p.Spec.EndpointPickerRef; r != nil && r.Port == nil && (r.Kind == "" || r.Kind == "Service") {
			t.Fatalf("Decode accepted a Service picker without a port: %+v", r)
		}
		// The v1 form, encoded again, decodes to the same pool.
		if len(p.Spec.Selector.MatchLabels) <= maxLabels {
			js, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			q, err := Decode(js)
			if err != nil {
				t.Fatalf("the v1 form of an accepted pool is refused: %v\n%s", err, js)
			}
			if !reflect.DeepEqual(q.Spec, p.Spec) {
				t.Fatalf("re-decoded spec differs: %+v, want %+v", q.Spec, p.Spec)
			}
		}
		_ = p.DeepCopyObject()
	})
}
