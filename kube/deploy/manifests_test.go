package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/version"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/usher-llm/usher/gateway"
	"github.com/usher-llm/usher/internal/glue/builtin"
	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/proxy/extproc"
)

// image is a container image the manifests run: the Dockerfile that builds it, the main
// package it builds, the name the manifests and README.md give it, and the directories whose
// Go sources define its flags.
type image struct {
	Dockerfile string   // relative to deploy/
	Main       string   // the main package, relative to the repository's root
	Repo       string   // the image's name without a tag
	FlagDirs   []string // relative to the repository's root
}

var images = []image{
	{Dockerfile: "images/epp.Dockerfile", Main: "examples/epp", Repo: "usher/epp", FlagDirs: []string{"examples/epp"}},
	{Dockerfile: "images/gateway.Dockerfile", Main: "examples/gateway", Repo: "usher/gateway", FlagDirs: []string{"examples/gateway", "gateway"}},
}

// imageUID is the user the images run as (distroless's nonroot) and the manifests ask for.
const imageUID = 65532

// object is one decoded document of a manifest file.
type object struct {
	File  string // relative to deploy/
	Kind  string
	Name  string
	Value any // *appsv1.Deployment, *corev1.Service, ..., *inferencepool.Pool
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.Kind, o.Name, o.File) }

// kustomization is the part of kustomize's Kustomization these manifests use; a field
// outside it fails the strict decode, so a new one is a deliberate change here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	// Patches are JSON patches (RFC 6902, in YAML) of one object each.
	Patches []struct {
		Path   string `json:"path"`
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
	} `json:"patches"`
}

// manifests is everything kustomization.yaml reaches from deploy/.
type manifests struct {
	objects []object
	// generated maps a configMapGenerator's ConfigMap name to its files (key: file name,
	// value: path relative to deploy/).
	generated map[string]map[string]string
}

func (m *manifests) all(kind string) []object {
	var out []object
	for _, o := range m.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m *manifests) get(kind, name string) (object, bool) {
	for _, o := range m.objects {
		if o.Kind == kind && o.Name == name {
			return o, true
		}
	}
	return object{}, false
}

// load reads the kustomization in deploy/ and every file and directory it names, decoding
// each document strictly; it fails the test on the first error.
func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{generated: map[string]map[string]string{}}
	if err := m.loadDir("."); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *manifests) loadDir(dir string) error {
	kpath := path.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(kpath)
	if err != nil {
		return err
	}
	var k kustomization
	if err := decodeStrict(data, &k); err != nil {
		return fmt.Errorf("%s: %w", kpath, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return fmt.Errorf("%s: apiVersion %q kind %q: want kustomize.config.k8s.io/v1beta1 Kustomization", kpath, k.APIVersion, k.Kind)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	first := len(m.objects) // this kustomization's objects: m.objects[first:]
	for _, r := range k.Resources {
		p := path.Join(dir, r)
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: resource %s: %w", kpath, r, err)
		}
		listed[r] = true
		if fi.IsDir() {
			err = m.loadDir(p)
		} else {
			err = m.loadFile(p)
		}
		if err != nil {
			return err
		}
	}
	for _, g := range k.ConfigMapGenerator {
		if _, dup := m.generated[g.Name]; dup || g.Name == "" {
			return fmt.Errorf("%s: configMapGenerator %q: empty or generated twice", kpath, g.Name)
		}
		files := map[string]string{}
		for _, f := range g.Files {
			p := path.Join(dir, f)
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%s: configMapGenerator %s: %w", kpath, g.Name, err)
			}
			files[path.Base(f)] = p
			listed[f] = true
		}
		m.generated[g.Name] = files
	}
	for _, pt := range k.Patches {
		listed[pt.Path] = true
		if err := m.patch(m.objects[first:], path.Join(dir, pt.Path), pt.Target.Kind, pt.Target.Name); err != nil {
			return fmt.Errorf("%s: patch %s: %w", kpath, pt.Path, err)
		}
	}
	// A manifest beside the kustomization that it does not name would never be applied.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ext := path.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") && !listed[e.Name()] {
			return fmt.Errorf("%s: %s is not in the kustomization", dir, e.Name())
		}
	}
	return nil
}

// patch applies the JSON patch in file to the one object of objs of that kind and name, and
// decodes the result strictly, as kustomize's patches do.
func (m *manifests) patch(objs []object, file, kind, name string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	p, err := jsonpatch.DecodePatch(js)
	if err != nil {
		return err
	}
	n := 0
	for i, o := range objs {
		if o.Kind != kind || o.Name != name {
			continue
		}
		n++
		doc, err := json.Marshal(o.Value)
		if err != nil {
			return err
		}
		if doc, err = p.Apply(doc); err != nil {
			return fmt.Errorf("%v: %w", o, err)
		}
		v := reflect.New(reflect.TypeOf(o.Value).Elem()).Interface()
		if err := unmarshalStrict(doc, v); err != nil {
			return fmt.Errorf("%v patched: %w", o, err)
		}
		objs[i].Value = v
	}
	if n != 1 {
		return fmt.Errorf("%d objects %s %s, want 1", n, kind, name)
	}
	return nil
}

func (m *manifests) loadFile(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	objs, err := decodeAll(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for i := range objs {
		objs[i].File = file
	}
	m.objects = append(m.objects, objs...)
	return nil
}

// decodeAll decodes every document of a YAML stream strictly with the real types; a
// document that is only comments is skipped.
func decodeAll(r io.Reader) ([]object, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []object
	for i := 0; ; i++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		o, err := decodeObject(doc)
		if errors.Is(err, errEmpty) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, o)
	}
}

var errEmpty = errors.New("empty document")

// decodeObject decodes one document by its apiVersion and kind.
func decodeObject(doc []byte) (object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, err
	}
	if string(bytes.TrimSpace(js)) == "null" {
		return object{}, errEmpty
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return object{}, err
	}
	var v any
	switch tm.APIVersion + " " + tm.Kind {
	case inferencepool.Group + "/" + inferencepool.Version + " " + inferencepool.Kind:
		// The pool package's own strict decoder, which also checks what the CRD's schema
		// checks.
		p, err := inferencepool.Decode(doc)
		if err != nil {
			return object{}, err
		}
		return object{Kind: tm.Kind, Name: p.Name, Value: p}, nil
	case "apps/v1 Deployment":
		v = new(appsv1.Deployment)
	case "v1 Service":
		v = new(corev1.Service)
	case "v1 ServiceAccount":
		v = new(corev1.ServiceAccount)
	case "v1 ConfigMap":
		v = new(corev1.ConfigMap)
	case "rbac.authorization.k8s.io/v1 Role":
		v = new(rbacv1.Role)
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		v = new(rbacv1.RoleBinding)
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		v = new(rbacv1.ClusterRole)
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		v = new(rbacv1.ClusterRoleBinding)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v = new(serviceMonitor)
	default:
		return object{}, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use (add it to decodeObject)", tm.APIVersion, tm.Kind)
	}
	if err := unmarshalStrict(js, v); err != nil {
		return object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return object{Kind: tm.Kind, Name: v.(interface{ GetName() string }).GetName(), Value: v}, nil
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1)
// the optional manifests in servicemonitor/ use, with the operator's field names; a field
// outside it fails the strict decode. (The operator's Go module is not a dependency for this.)
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			// BearerTokenFile sends a file's token (deprecated by the operator in favour of
			// authorization, which takes only Secrets; still the way to send Prometheus's own,
			// rotated, service-account token).
			BearerTokenFile string `json:"bearerTokenFile"`
			Authorization   *struct {
				Type        string                   `json:"type"`
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// decodeStrict decodes a YAML or JSON document into v as the API server's strict field
// validation does: unknown fields, fields whose case differs from the type's, and repeated
// fields are errors.
func decodeStrict(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	return unmarshalStrict(js, v)
}

func unmarshalStrict(js []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// TestStrictDecoding checks that the decoder refuses what the API server's strict field
// validation refuses, so that the manifests' tests below mean something.
func TestStrictDecoding(t *testing.T) {
	const ok = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: 80\n"
	if _, err := decodeObject([]byte(ok)); err != nil {
		t.Fatalf("valid Service: %v", err)
	}
	for _, tc := range []struct{ name, doc string }{
		{"unknown field", strings.Replace(ok, "  ports:", "  portz:", 1)},
		{"field of the wrong case", strings.Replace(ok, "  ports:", "  Ports:", 1)},
		{"repeated field", ok + "  type: ClusterIP\n  type: NodePort\n"},
		{"wrong type", strings.Replace(ok, "port: 80", "port: eighty", 1)},
		{"unknown kind", strings.Replace(ok, "kind: Service", "kind: Servise", 1)},
		{"unknown ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: m\nspec:\n  selector:\n    matchLabels: {app: x}\n  endpoints:\n  - prot: http-metrics\n"},
		{"unknown pool field", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n  name: p\nspec:\n  selector:\n    matchLabels: {app: x}\n  targetPorts: [{number: 8000}]\n  endpointPickerRef: {name: e, port: {number: 9002}, failMode: FailOpen}\n"},
	} {
		if _, err := decodeObject([]byte(tc.doc)); err == nil {
			t.Errorf("%s: decoded without error, want one", tc.name)
		}
	}
}

// TestManifests checks every object on its own: names, namespaces, labels, and for each
// Deployment its pods' security, resources, images and probes.
func TestManifests(t *testing.T) {
	m := load(t)
	kinds := map[string]int{}
	for _, o := range m.objects {
		kinds[o.Kind]++
		meta := metaOf(o)
		if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
			t.Errorf("%v: name: %s", o, errs[0])
		}
		if meta.GetNamespace() != "" {
			t.Errorf("%v: namespace %q: want none (the namespace is the one kubectl applies to)", o, meta.GetNamespace())
		}
		checkLabels(t, o.String()+": labels", meta.GetLabels())
	}
	want := map[string]int{"Deployment": 2, "Service": 2, "ServiceAccount": 2, "Role": 1, "RoleBinding": 1, "InferencePool": 1,
		"ClusterRole": 2, "ClusterRoleBinding": 2} // -metrics-endpoint-auth's, one pair each
	if !maps.Equal(kinds, want) {
		t.Errorf("objects by kind = %v, want %v", kinds, want)
	}
	for _, o := range m.all("Service") {
		if errs := validation.IsDNS1035Label(o.Name); len(errs) > 0 {
			t.Errorf("%v: a Service's name must be a DNS label: %s", o, errs[0])
		}
	}
	used := map[string]bool{}
	for _, o := range m.all("Deployment") {
		d := o.Value.(*appsv1.Deployment)
		sel := d.Spec.Selector
		if sel == nil || len(sel.MatchLabels) == 0 || len(sel.MatchExpressions) > 0 {
			t.Errorf("%v: want a selector of matchLabels", o)
		} else if !subset(sel.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("%v: selector %v does not select its own pod labels %v", o, sel.MatchLabels, d.Spec.Template.Labels)
		}
		checkLabels(t, o.String()+": pod labels", d.Spec.Template.Labels)
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%v: %d containers, want 1", o, len(d.Spec.Template.Spec.Containers))
		}
		c := d.Spec.Template.Spec.Containers[0]
		img, ok := imageOf(c.Image)
		if !ok {
			t.Errorf("%v: image %q is none of the images kube/deploy/images builds", o, c.Image)
			continue
		}
		used[img.Repo] = true
		checkSecurity(t, o, &d.Spec.Template.Spec, c)
		checkResources(t, o, c)
		checkProbes(t, o, c)
	}
	for _, img := range images {
		if !used[img.Repo] {
			t.Errorf("image %s is built by %s but no Deployment runs it", img.Repo, img.Dockerfile)
		}
	}
}

func metaOf(o object) interface {
	GetNamespace() string
	GetLabels() map[string]string
} {
	if p, ok := o.Value.(*inferencepool.Pool); ok {
		return &p.ObjectMeta
	}
	return o.Value.(interface {
		GetNamespace() string
		GetLabels() map[string]string
	})
}

func checkLabels(t *testing.T, what string, labels map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s: key %q: %s", what, k, errs[0])
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			t.Errorf("%s: %s=%q: %s", what, k, labels[k], errs[0])
		}
	}
}

// imageOf finds the image a container runs: its name is an image's Repo and a tag.
func imageOf(ref string) (image, bool) {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || tag == "" {
		return image{}, false
	}
	for _, img := range images {
		if img.Repo == repo {
			return img, true
		}
	}
	return image{}, false
}

// checkSecurity checks a container's effective security context (the container's
// settings, else the pod's): non-root as the images' user, read-only root file system, no
// privilege escalation, every capability dropped, the runtime's default seccomp profile.
func checkSecurity(t *testing.T, o object, pod *corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		t.Errorf("%v: container %s has no securityContext", o, c.Name)
		return
	}
	runAsNonRoot := cmpOr(csc.RunAsNonRoot, psc.RunAsNonRoot)
	runAsUser := cmpOr(csc.RunAsUser, psc.RunAsUser)
	seccomp := cmpOr(csc.SeccompProfile, psc.SeccompProfile)
	switch {
	case runAsNonRoot == nil || !*runAsNonRoot:
		t.Errorf("%v: runAsNonRoot is not true", o)
	case runAsUser == nil || *runAsUser != imageUID:
		t.Errorf("%v: runAsUser is not %d, the images' user", o, imageUID)
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Errorf("%v: readOnlyRootFilesystem is not true", o)
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Errorf("%v: allowPrivilegeEscalation is not false", o)
	case csc.Privileged != nil && *csc.Privileged:
		t.Errorf("%v: privileged", o)
	case csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0:
		t.Errorf("%v: capabilities %+v: want drop [ALL], add none", o, csc.Capabilities)
	case seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%v: seccompProfile is not RuntimeDefault", o)
	case pod.HostNetwork || pod.HostPID || pod.HostIPC:
		t.Errorf("%v: shares the host's namespaces", o)
	}
}

func cmpOr[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// checkResources checks that a container requests CPU and memory, is limited in memory and
// not in CPU,
// requests no more than its limits, and gives the Go runtime a soft memory limit below the
// container's.
func checkResources(t *testing.T, o object, c corev1.Container) {
	t.Helper()
	req, lim := c.Resources.Requests, c.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := req[r]
		if !ok || q.Sign() <= 0 {
			t.Errorf("%v: no %s request", o, r)
		}
		if l, ok := lim[r]; ok && q.Cmp(l) > 0 {
			t.Errorf("%v: %s request %s above its limit %s", o, r, q.String(), l.String())
		}
	}
	if l, ok := lim[corev1.ResourceCPU]; ok {
		t.Errorf("%v: CPU limit %s: want none (throttling stalls the pick path; the request reserves the share)", o, l.String())
	}
	memLimit, ok := lim[corev1.ResourceMemory]
	if !ok {
		t.Errorf("%v: no memory limit", o)
		return
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		n, err := parseGoMemLimit(e.Value)
		if err != nil {
			t.Errorf("%v: GOMEMLIMIT: %v", o, err)
		} else if n >= memLimit.Value() {
			t.Errorf("%v: GOMEMLIMIT %s is not below the memory limit %s", o, e.Value, memLimit.String())
		}
		return
	}
	t.Errorf("%v: no GOMEMLIMIT", o)
}

// parseGoMemLimit parses GOMEMLIMIT's syntax: a byte count with an optional unit, B, KiB,
// MiB, GiB or TiB.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive byte count with an optional unit", s)
	}
	return n << shift, nil
}

// checkProbes checks that a container has readiness and liveness probes, on its own ports:
// the picker's on its gRPC health service (readiness as the reference picker's probes ask,
// extproc.HealthInferenceExtension; liveness on extproc.HealthLiveness, which stays SERVING
// while the picker drains), the gateway's on GET /health.
func checkProbes(t *testing.T, o object, c corev1.Container) {
	t.Helper()
	img, _ := imageOf(c.Image)
	for _, p := range []struct {
		what    string
		probe   *corev1.Probe
		service string
	}{
		{"readinessProbe", c.ReadinessProbe, extproc.HealthInferenceExtension},
		{"livenessProbe", c.LivenessProbe, extproc.HealthLiveness},
		{"startupProbe", c.StartupProbe, extproc.HealthLiveness},
	} {
		if p.probe == nil {
			if p.what != "startupProbe" {
				t.Errorf("%v: no %s", o, p.what)
			}
			continue
		}
		switch img.Repo {
		case "usher/epp":
			g := p.probe.GRPC
			if g == nil || g.Service == nil || *g.Service != p.service {
				t.Errorf("%v: %s: want a gRPC probe of service %q", o, p.what, p.service)
			} else if _, ok := containerPort(c, intstr.FromInt32(g.Port)); !ok {
				t.Errorf("%v: %s: port %d is not a port of the container", o, p.what, g.Port)
			}
		case "usher/gateway":
			h := p.probe.HTTPGet
			if h == nil || h.Path != "/health" {
				t.Errorf("%v: %s: want GET /health", o, p.what)
			} else if _, ok := containerPort(c, h.Port); !ok {
				t.Errorf("%v: %s: port %s is not a port of the container", o, p.what, h.Port.String())
			}
		}
	}
}

// containerPort resolves a port by name or number among a container's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// TestServices checks that each Service selects the pods of exactly one Deployment and that
// its ports reach ports of that Deployment's container.
func TestServices(t *testing.T) {
	m := load(t)
	for _, o := range m.all("Service") {
		s := o.Value.(*corev1.Service)
		d, err := selected(m, s.Spec.Selector)
		if err != nil {
			t.Errorf("%v: %v", o, err)
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			if _, ok := containerPort(c, target); !ok {
				t.Errorf("%v: port %s targets %s, which is no port of Deployment %s", o, p.Name, target.String(), d.Name)
			}
		}
	}
}

// selected returns the one Deployment whose pods a selector selects.
func selected(m *manifests, sel map[string]string) (*appsv1.Deployment, error) {
	if len(sel) == 0 {
		return nil, errors.New("empty selector")
	}
	var found []*appsv1.Deployment
	for _, o := range m.all("Deployment") {
		if d := o.Value.(*appsv1.Deployment); subset(sel, d.Spec.Template.Labels) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("selector %v selects the pods of %d Deployments, want 1", sel, len(found))
	}
	return found[0], nil
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if w, ok := labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// deploymentOf returns the Deployment that runs an image.
func deploymentOf(t *testing.T, m *manifests, repo string) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, o := range m.all("Deployment") {
		d := o.Value.(*appsv1.Deployment)
		for _, c := range d.Spec.Template.Spec.Containers {
			if img, ok := imageOf(c.Image); ok && img.Repo == repo {
				return d, c
			}
		}
	}
	t.Fatalf("no Deployment runs %s", repo)
	return nil, corev1.Container{}
}

// serviceOf returns the Service that selects a Deployment's pods.
func serviceOf(t *testing.T, m *manifests, d *appsv1.Deployment) *corev1.Service {
	t.Helper()
	for _, o := range m.all("Service") {
		s := o.Value.(*corev1.Service)
		if len(s.Spec.Selector) > 0 && subset(s.Spec.Selector, d.Spec.Template.Labels) {
			return s
		}
	}
	t.Fatalf("no Service selects Deployment %s", d.Name)
	return nil
}

// TestPicker checks the endpoint picker's wiring: its RBAC is exactly read access to
// InferencePools, InferenceObjectives and pods, bound to the ServiceAccount it runs as; the InferencePool it
// follows names its Service and ext_proc port; its arguments name that pool and its own
// namespace.
func TestPicker(t *testing.T) {
	m := load(t)
	d, c := deploymentOf(t, m, "usher/epp")
	pod := d.Spec.Template.Spec
	args := parseArgs(t, c)

	// RBAC: the Role, its binding, the account.
	sa := pod.ServiceAccountName
	if sa == "" || sa == "default" {
		t.Fatalf("Deployment %s runs as ServiceAccount %q: want its own", d.Name, sa)
	}
	if _, ok := m.get("ServiceAccount", sa); !ok {
		t.Errorf("ServiceAccount %s (of Deployment %s) is not in the manifests", sa, d.Name)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Errorf("Deployment %s does not mount its token: the pool watch needs it", d.Name)
	}
	bindings := m.all("RoleBinding")
	if len(bindings) != 1 {
		t.Fatalf("%d RoleBindings, want 1", len(bindings))
	}
	rb := bindings[0].Value.(*rbacv1.RoleBinding)
	wantSubject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa}}
	if !slices.Equal(rb.Subjects, wantSubject) {
		t.Errorf("RoleBinding %s subjects = %+v, want %+v (no namespace: the binding's own)", rb.Name, rb.Subjects, wantSubject)
	}
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.RoleRef.Kind != "Role" {
		t.Errorf("RoleBinding %s roleRef = %+v: want a Role of %s", rb.Name, rb.RoleRef, rbacv1.GroupName)
	}
	ro, ok := m.get("Role", rb.RoleRef.Name)
	if !ok {
		t.Fatalf("RoleBinding %s binds Role %s, which is not in the manifests", rb.Name, rb.RoleRef.Name)
	}
	type rule struct{ group, resource, verbs string }
	var got []rule
	for _, r := range ro.Value.(*rbacv1.Role).Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("Role %s: rule %+v: want no resourceNames or nonResourceURLs", ro.Name, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got = append(got, rule{g, res, strings.Join(slices.Sorted(slices.Values(r.Verbs)), ",")})
			}
		}
	}
	want := []rule{{"", "pods", "get,list,watch"}, {inferencepool.Group, inferencepool.Resource, "get,list,watch"},
		{inferencepool.AlphaGroup, inferencepool.Resource, "get,list,watch"},          // either -pool-group
		{inferencepool.AlphaGroup, inferencepool.ObjectiveResource, "get,list,watch"}} // -trust-objective-header
	byName := func(a, b rule) int { return strings.Compare(a.group+"/"+a.resource, b.group+"/"+b.resource) }
	slices.SortFunc(got, byName)
	slices.SortFunc(want, byName)
	if !slices.Equal(got, want) {
		t.Errorf("Role %s grants %+v, want exactly %+v", ro.Name, got, want)
	}

	// The pool and its reference to the picker's Service.
	pools := m.all("InferencePool")
	if len(pools) != 1 {
		t.Fatalf("%d InferencePools, want 1", len(pools))
	}
	pool := pools[0].Value.(*inferencepool.Pool)
	if got := args["pool-name"]; got != pool.Name {
		t.Errorf("epp -pool-name=%q, want the InferencePool's name %q", got, pool.Name)
	}
	checkOwnNamespace(t, c, "pool-namespace", args["pool-namespace"])
	ref := pool.Spec.EndpointPickerRef
	svc := serviceOf(t, m, d)
	grpcPort := listenPort(t, "epp -listen", args["listen"])
	switch {
	case ref == nil:
		t.Fatalf("InferencePool %s has no endpointPickerRef", pool.Name)
	case ref.Group != nil && *ref.Group != "":
		t.Errorf("InferencePool %s refers to an object of group %q, want a Service (the core group)", pool.Name, *ref.Group)
	case ref.Kind != "" && ref.Kind != "Service":
		t.Errorf("InferencePool %s refers to a %s, want a Service", pool.Name, ref.Kind)
	case ref.Name != svc.Name:
		t.Errorf("InferencePool %s endpointPickerRef.name = %s, want the picker's Service %s", pool.Name, ref.Name, svc.Name)
	case ref.Port == nil:
		t.Errorf("InferencePool %s endpointPickerRef has no port", pool.Name)
	case ref.FailureMode == "":
		t.Errorf("InferencePool %s: give failureMode explicitly (FailClose or FailOpen)", pool.Name)
	default:
		var sp *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Port == ref.Port.Number {
				sp = &svc.Spec.Ports[i]
			}
		}
		if sp == nil {
			t.Fatalf("InferencePool %s endpointPickerRef port %d is not a port of Service %s", pool.Name, ref.Port.Number, svc.Name)
		}
		cp, ok := containerPort(c, sp.TargetPort)
		if !ok || cp.ContainerPort != grpcPort {
			t.Errorf("Service %s port %d reaches container port %v, want the picker's -listen port %d", svc.Name, sp.Port, sp.TargetPort.String(), grpcPort)
		}
	}
	// The pool selects model servers, not usher's own pods.
	for _, o := range m.all("Deployment") {
		if dd := o.Value.(*appsv1.Deployment); subset(pool.Spec.Selector.MatchLabels, dd.Spec.Template.Labels) {
			t.Errorf("InferencePool %s selects the pods of %v", pool.Name, o)
		}
	}

	// The rest of the picker's arguments: metrics on the port the reference names
	// http-metrics (in the container and the Service), health alone on the reference's 9003,
	// where the probes go.
	if p, ok := args["metrics-listen"]; !ok {
		t.Errorf("epp has no -metrics-listen")
	} else if port := listenPort(t, "epp -metrics-listen", p); !hasContainerPort(c, port) {
		t.Errorf("epp -metrics-listen port %d is not a container port", port)
	} else if cp, _ := containerPort(c, intstr.FromInt32(port)); cp.Name != "http-metrics" {
		t.Errorf("epp metrics container port %d is named %q, want http-metrics (the reference picker's name)", port, cp.Name)
	} else if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
		return sp.Name == "http-metrics" && sp.TargetPort.String() == "http-metrics"
	}) {
		t.Errorf("Service %s has no port http-metrics to the picker's metrics port", svc.Name)
	}
	if p, ok := args["health-listen"]; !ok {
		t.Errorf("epp has no -health-listen")
	} else if port := listenPort(t, "epp -health-listen", p); port != 9003 || !hasContainerPort(c, port) {
		t.Errorf("epp -health-listen port %d: want 9003 (the reference's), a container port", port)
	} else {
		for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if pr != nil && pr.GRPC != nil && pr.GRPC.Port != port {
				t.Errorf("epp probe on port %d, want the health port %d (kept up while draining)", pr.GRPC.Port, port)
			}
		}
	}
	if !hasContainerPort(c, grpcPort) {
		t.Errorf("epp -listen port %d is not a container port", grpcPort)
	}
	if p := args["policy"]; !slices.Contains(builtin.PolicyNames(), p) {
		t.Errorf("epp -policy=%q: want one of %v", p, builtin.PolicyNames())
	}
	if r := args["router"]; !slices.Contains(builtin.ProfileNames(), r) {
		t.Errorf("epp -router=%q: want one of %v", r, builtin.ProfileNames())
	}
	if _, ok := metrics.EngineOf(args["engine"]); !ok {
		t.Errorf("epp -engine=%q: not an engine", args["engine"])
	}
	checkGrace(t, d, args)
	checkMetricsAuth(t, m, d, args)
}

// checkMetricsAuth checks that a Deployment guards its metrics with -metrics-endpoint-auth
// and may ask for the reviews: its ServiceAccount's token is mounted, and a
// ClusterRoleBinding binds that account (in a namespace given explicitly: kubectl's -n does
// not reach subjects) to a ClusterRole granting exactly create on tokenreviews and
// subjectaccessreviews.
func checkMetricsAuth(t *testing.T, m *manifests, d *appsv1.Deployment, args map[string]string) {
	t.Helper()
	if args["metrics-endpoint-auth"] != "true" || args["metrics-listen"] == "" {
		t.Errorf("Deployment %s: -metrics-endpoint-auth=%q, -metrics-listen=%q: want true, and a listener", d.Name, args["metrics-endpoint-auth"], args["metrics-listen"])
	}
	pod := d.Spec.Template.Spec
	sa := pod.ServiceAccountName
	if _, ok := m.get("ServiceAccount", sa); !ok || sa == "default" {
		t.Errorf("Deployment %s runs as ServiceAccount %q, want its own of the manifests", d.Name, sa)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Errorf("Deployment %s does not mount its token: the reviews need it", d.Name)
	}
	var bound []string
	for _, o := range m.all("ClusterRoleBinding") {
		crb := o.Value.(*rbacv1.ClusterRoleBinding)
		if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa }) {
			continue
		}
		if len(crb.Subjects) != 1 || crb.Subjects[0].Namespace == "" {
			t.Errorf("%v: subjects %+v: want the one ServiceAccount %s, with its namespace", o, crb.Subjects, sa)
		}
		if crb.RoleRef.APIGroup != rbacv1.GroupName || crb.RoleRef.Kind != "ClusterRole" {
			t.Errorf("%v: roleRef %+v: want a ClusterRole", o, crb.RoleRef)
			continue
		}
		cr, ok := m.get("ClusterRole", crb.RoleRef.Name)
		if !ok {
			t.Errorf("%v binds ClusterRole %s, which is not in the manifests", o, crb.RoleRef.Name)
			continue
		}
		for _, r := range cr.Value.(*rbacv1.ClusterRole).Rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("%v: rule %+v: want no resourceNames or nonResourceURLs", cr, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					bound = append(bound, g+"/"+res+":"+strings.Join(slices.Sorted(slices.Values(r.Verbs)), ","))
				}
			}
		}
	}
	slices.Sort(bound)
	if want := []string{"authentication.k8s.io/tokenreviews:create", "authorization.k8s.io/subjectaccessreviews:create"}; !slices.Equal(bound, want) {
		t.Errorf("ServiceAccount %s (Deployment %s) is granted %q cluster-wide, want exactly %q", sa, d.Name, bound, want)
	}
}

// TestPickerHA checks the active-standby variant in epp-ha/: kube/deploy/epp's objects with
// two replicas that campaign for a Lease (-ha-enable-leader-election, every other argument
// the base's), each named in it by its pod's name, a rollout that can stop the old leader
// before a new pod is ready (none is while the old one holds the lease), and a Role of its
// own for the Lease and the events on it, bound to the picker's account.
func TestPickerHA(t *testing.T) {
	base := load(t)
	m := &manifests{generated: map[string]map[string]string{}}
	if err := m.loadDir("epp-ha"); err != nil {
		t.Fatal(err)
	}
	d, c := deploymentOf(t, m, "usher/epp")
	_, bc := deploymentOf(t, base, "usher/epp")
	args, baseArgs := parseArgs(t, c), parseArgs(t, bc)
	if got := args["ha-enable-leader-election"]; got != "true" {
		t.Errorf("epp-ha: -ha-enable-leader-election=%q, want true", got)
	}
	delete(args, "ha-enable-leader-election")
	if !maps.Equal(args, baseArgs) {
		t.Errorf("epp-ha: arguments %v besides -ha-enable-leader-election, want the base's %v", args, baseArgs)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("epp-ha: replicas %v, want at least 2", d.Spec.Replicas)
	}
	named := false
	for _, e := range c.Env {
		named = named || (e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !named {
		t.Error("epp-ha: no POD_NAME from metadata.name (the picker's identity in the lease)")
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "100%" {
		t.Errorf("epp-ha: strategy %+v: want RollingUpdate with maxUnavailable 100%% (one pod is ready at a time: a new one only once the old leader is gone)", d.Spec.Strategy)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Service == nil ||
		*c.ReadinessProbe.GRPC.Service != extproc.HealthInferenceExtension {
		t.Errorf("epp-ha: readiness probe %+v: want the health port's %s (the leader's alone)", c.ReadinessProbe, extproc.HealthInferenceExtension)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.GRPC == nil || c.LivenessProbe.GRPC.Service == nil ||
		*c.LivenessProbe.GRPC.Service != extproc.HealthLiveness {
		t.Errorf("epp-ha: liveness probe %+v: want %s (a standby must not be restarted)", c.LivenessProbe, extproc.HealthLiveness)
	}

	// The leader election's Role, bound to the picker's account; the base's, as it was.
	if got, want := len(m.objects), len(eppObjects(t))+2; got != want { // + the Role and its binding
		t.Errorf("epp-ha: %d objects, want %d (kube/deploy/epp's and a Role and RoleBinding)", got, want)
	}
	ro, ok := m.get("Role", "usher-epp-leader-election")
	if !ok {
		t.Fatal("epp-ha: no Role usher-epp-leader-election")
	}
	type rule struct{ group, resource, verbs string }
	var got []rule
	for _, r := range ro.Value.(*rbacv1.Role).Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got = append(got, rule{g, res, strings.Join(slices.Sorted(slices.Values(r.Verbs)), ",")})
			}
		}
	}
	want := []rule{{"coordination.k8s.io", "leases", "create,get,list,patch,update,watch"},
		{"", "events", "create,patch"}, {"events.k8s.io", "events", "create,patch"}}
	byName := func(a, b rule) int { return strings.Compare(a.group+"/"+a.resource, b.group+"/"+b.resource) }
	slices.SortFunc(got, byName)
	slices.SortFunc(want, byName)
	if !slices.Equal(got, want) {
		t.Errorf("Role %s grants %+v, want exactly %+v", ro.Name, got, want)
	}
	bound := false
	for _, o := range m.all("RoleBinding") {
		rb := o.Value.(*rbacv1.RoleBinding)
		if rb.RoleRef.Kind == "Role" && rb.RoleRef.Name == ro.Name {
			bound = slices.Equal(rb.Subjects, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: d.Spec.Template.Spec.ServiceAccountName}})
		}
	}
	if !bound {
		t.Errorf("Role %s is not bound to the picker's ServiceAccount %s alone", ro.Name, d.Spec.Template.Spec.ServiceAccountName)
	}

	checkKustomize(t, "epp-ha", m)
}

// eppObjects returns kube/deploy/epp's objects, what its variants patch.
func eppObjects(t *testing.T) []object {
	t.Helper()
	m := &manifests{generated: map[string]map[string]string{}}
	if err := m.loadDir("epp"); err != nil {
		t.Fatal(err)
	}
	return m.objects
}

// checkKustomize checks, where kubectl is installed, that kustomize renders the objects of
// dir as m holds them (its patches as applied here).
func checkKustomize(t *testing.T, dir string, m *manifests) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.Bytes())
	}
	rendered, err := decodeAll(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("kubectl kustomize %s's output: %v", dir, err)
	}
	if len(rendered) != len(m.objects) {
		t.Errorf("kustomize rendered %d objects of %s, want %d", len(rendered), dir, len(m.objects))
	}
	for _, r := range rendered {
		o, ok := m.get(r.Kind, r.Name)
		if !ok {
			t.Errorf("kustomize rendered %s %s, which %s's files do not give", r.Kind, r.Name, dir)
			continue
		}
		a, _ := json.Marshal(r.Value)
		b, _ := json.Marshal(o.Value)
		if !bytes.Equal(a, b) {
			t.Errorf("%v: kustomize renders\n%s\nwant\n%s", o, a, b)
		}
	}
}

// TestPickerRedis checks the active-active variant in epp-redis/: kube/deploy/epp's objects
// with three replicas that share their state through Redis, each named by its pod, every one
// ready (the base's probes and rollout), and no leader election.
func TestPickerRedis(t *testing.T) {
	base := load(t)
	m := &manifests{generated: map[string]map[string]string{}}
	if err := m.loadDir("epp-redis"); err != nil {
		t.Fatal(err)
	}
	d, c := deploymentOf(t, m, "usher/epp")
	bd, bc := deploymentOf(t, base, "usher/epp")
	args, baseArgs := parseArgs(t, c), parseArgs(t, bc)
	if got := args["redis"]; got == "" {
		t.Error("epp-redis: no -redis")
	}
	if _, ha := args["ha-enable-leader-election"]; ha {
		t.Error("epp-redis: -ha-enable-leader-election with -redis (the picker refuses the two together)")
	}
	named := false
	for _, e := range c.Env {
		named = named || ("$("+e.Name+")" == args["replica-id"] && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !named {
		t.Errorf("epp-redis: -replica-id=%q, want $(VAR) of the pod's name", args["replica-id"])
	}
	delete(args, "redis")
	delete(args, "replica-id")
	if !maps.Equal(args, baseArgs) {
		t.Errorf("epp-redis: arguments %v besides -redis and -replica-id, want the base's %v", args, baseArgs)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("epp-redis: replicas %v, want at least 2", d.Spec.Replicas)
	}
	sa, _ := json.Marshal(d.Spec.Strategy)
	sb, _ := json.Marshal(bd.Spec.Strategy)
	if !bytes.Equal(sa, sb) {
		t.Errorf("epp-redis: strategy %s, want the base's %s (every replica ready: a rollout one at a time)", sa, sb)
	}
	if got, want := len(m.objects), len(eppObjects(t)); got != want {
		t.Errorf("epp-redis: %d objects, want %d (kube/deploy/epp's)", got, want)
	}
	checkKustomize(t, "epp-redis", m)
}

// checkOwnNamespace checks that a flag's value is $(VAR) for an environment variable that the
// downward API sets to the pod's namespace.
func checkOwnNamespace(t *testing.T, c corev1.Container, name, value string) {
	t.Helper()
	for _, e := range c.Env {
		if "$("+e.Name+")" == value && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			return
		}
	}
	t.Errorf("-%s=%q: want $(VAR) of an env var set from metadata.namespace", name, value)
}

func hasContainerPort(c corev1.Container, port int32) bool {
	_, ok := containerPort(c, intstr.FromInt32(port))
	return ok
}

// listenPort returns the port of a listen address such as ":9002".
func listenPort(t *testing.T, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", what, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		t.Fatalf("%s=%q: want a fixed port", what, addr)
	}
	return int32(n)
}

// checkGrace checks that the pod's termination grace period leaves the binary its
// -shutdown-grace, with time to spare.
func checkGrace(t *testing.T, d *appsv1.Deployment, args map[string]string) {
	t.Helper()
	g, err := time.ParseDuration(args["shutdown-grace"])
	if err != nil {
		t.Errorf("Deployment %s: -shutdown-grace: %v", d.Name, err)
		return
	}
	tg := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if p := d.Spec.Template.Spec.TerminationGracePeriodSeconds; p != nil {
		tg = time.Duration(*p) * time.Second
	}
	if tg < g+5*time.Second {
		t.Errorf("Deployment %s: termination grace period %v: want at least -shutdown-grace (%v) + 5s", d.Name, tg, g)
	}
}

// minStreamGrace is the least -shutdown-grace the picker's and the gateway's Deployments may
// give: long generations stream through both, and a rollout must not cut them (the reference
// picker gives 130s).
const minStreamGrace = 120 * time.Second

// TestStreamGrace checks that the picker's and the gateway's Deployments let streams of two
// minutes finish on a rollout.
func TestStreamGrace(t *testing.T) {
	m := load(t)
	for _, image := range []string{"usher/epp", "usher/gateway"} {
		d, c := deploymentOf(t, m, image)
		g, err := time.ParseDuration(parseArgs(t, c)["shutdown-grace"])
		if err != nil || g < minStreamGrace {
			t.Errorf("Deployment %s: -shutdown-grace %v (%v): want at least %v", d.Name, g, err, minStreamGrace)
		}
	}
}

// TestServiceMonitors decodes the optional ServiceMonitors in servicemonitor/ strictly and
// checks that each selects exactly one of the manifests' Services, by a label it carries,
// and scrapes /metrics on named ports of it — the picker's on http-metrics, its metrics port.
func TestServiceMonitors(t *testing.T) {
	m := load(t)
	opt := &manifests{generated: map[string]map[string]string{}}
	if err := opt.loadDir("servicemonitor"); err != nil {
		t.Fatal(err)
	}
	sms := opt.all("ServiceMonitor")
	if len(sms) != 2 || len(opt.objects) != 4 {
		t.Fatalf("servicemonitor/ has %d objects, %d ServiceMonitors: want 4: ServiceMonitors for the picker and the gateway, the scraper's ClusterRole and binding", len(opt.objects), len(sms))
	}
	checkMetricsReader(t, opt)
	scraped := map[string]bool{}
	for _, o := range sms {
		sm := o.Value.(*serviceMonitor)
		checkLabels(t, o.String()+": labels", sm.Labels)
		if len(sm.Spec.Selector.MatchExpressions) > 0 || len(sm.Spec.Selector.MatchLabels) == 0 {
			t.Errorf("%v: want a selector of matchLabels", o)
			continue
		}
		var svcs []*corev1.Service
		for _, so := range m.all("Service") {
			if s := so.Value.(*corev1.Service); subset(sm.Spec.Selector.MatchLabels, s.Labels) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) != 1 {
			t.Errorf("%v: selects %d Services, want 1", o, len(svcs))
			continue
		}
		svc := svcs[0]
		scraped[svc.Name] = true
		if len(sm.Spec.Endpoints) != 1 {
			t.Errorf("%v: %d endpoints, want 1", o, len(sm.Spec.Endpoints))
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Path != "/metrics" {
				t.Errorf("%v: path %q, want /metrics", o, ep.Path)
			}
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == ep.Port }) {
				t.Errorf("%v: port %q is no named port of Service %s", o, ep.Port, svc.Name)
			}
			if d, _ := selected(m, svc.Spec.Selector); d != nil {
				if ep.Port != "http-metrics" {
					t.Errorf("%v: scrapes port %q of %s, want http-metrics (its metrics listener)", o, ep.Port, d.Name)
				}
			}
			// -metrics-endpoint-auth: Prometheus sends its own service account's token.
			if ep.BearerTokenFile != serviceAccountToken || ep.Authorization != nil {
				t.Errorf("%v: bearerTokenFile %q, authorization %v: want the scraper's service-account token, %s", o, ep.BearerTokenFile, ep.Authorization, serviceAccountToken)
			}
			if _, err := time.ParseDuration(ep.Interval); ep.Interval != "" && err != nil {
				t.Errorf("%v: interval %q: %v", o, ep.Interval, err)
			}
		}
	}
	if len(scraped) != 2 {
		t.Errorf("ServiceMonitors scrape Services %v, want the picker's and the gateway's", slices.Sorted(maps.Keys(scraped)))
	}
}

// serviceAccountToken is where a pod finds its service account's token.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// checkMetricsReader checks the scraper's RBAC in servicemonitor/: a ClusterRole granting
// exactly get on the non-resource URL /metrics, bound to one ServiceAccount with its
// namespace.
func checkMetricsReader(t *testing.T, opt *manifests) {
	t.Helper()
	crbs := opt.all("ClusterRoleBinding")
	if len(crbs) != 1 {
		t.Fatalf("servicemonitor/ has %d ClusterRoleBindings, want 1 (the scraper's)", len(crbs))
	}
	crb := crbs[0].Value.(*rbacv1.ClusterRoleBinding)
	checkLabels(t, crbs[0].String()+": labels", crb.Labels)
	if len(crb.Subjects) != 1 || crb.Subjects[0].Kind != rbacv1.ServiceAccountKind || crb.Subjects[0].Namespace == "" {
		t.Errorf("%v: subjects %+v: want one ServiceAccount, with its namespace", crbs[0], crb.Subjects)
	}
	cr, ok := opt.get("ClusterRole", crb.RoleRef.Name)
	if crb.RoleRef.Kind != "ClusterRole" || !ok {
		t.Fatalf("%v: roleRef %+v: want the ClusterRole of servicemonitor/", crbs[0], crb.RoleRef)
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if got := cr.Value.(*rbacv1.ClusterRole).Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("%v: rules %+v, want exactly %+v", cr, got, want)
	}
}

// TestGateway checks the plain-HTTP gateway's wiring: its arguments parse with the
// gateway's own flags, its -config file is the generated ConfigMap's, mounted where the
// argument says, and that file loads and builds the gateway's options.
func TestGateway(t *testing.T) {
	m := load(t)
	d, c := deploymentOf(t, m, "usher/gateway")
	args := parseArgs(t, c)
	pod := d.Spec.Template.Spec

	// Where -config points: a mount of a volume of a generated ConfigMap.
	cfgPath := args["config"]
	var local string
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(cfgPath, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			files, ok := m.generated[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: ConfigMap %s is not generated by the kustomization", v.Name, v.ConfigMap.Name)
			}
			if local = files[rel]; local == "" {
				t.Fatalf("-config=%s: ConfigMap %s has no key %s (keys: %v)", cfgPath, v.ConfigMap.Name, rel, slices.Sorted(maps.Keys(files)))
			}
		}
	}
	if local == "" {
		t.Fatalf("-config=%q is not in a ConfigMap volume of the container", cfgPath)
	}

	// The arguments, in order, through the gateway's own flags; the program's own flags
	// are checked by name (parseArgs) and value below.
	cfg := gateway.DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	fs.Func("config", "", func(string) error { return cfg.LoadFile(local) })
	var own []string
	for name := range args {
		if fs.Lookup(name) == nil {
			fs.String(name, "", "")
			own = append(own, name)
		}
	}
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("gateway args %q: %v", c.Args, err)
	}
	if _, err := cfg.Options(); err != nil {
		t.Fatalf("gateway options from %s and the args: %v", local, err)
	}
	if len(cfg.Backends) == 0 {
		t.Errorf("%s: no backends (the gateway would start its simulated fleet)", local)
	}
	slices.Sort(own)
	if want := []string{"listen", "metrics-endpoint-auth", "shutdown-grace"}; !slices.Equal(own, want) {
		t.Errorf("gateway program flags given = %v, want %v", own, want)
	}
	port := listenPort(t, "gateway -listen", args["listen"])
	if !hasContainerPort(c, port) {
		t.Errorf("gateway -listen port %d is not a container port", port)
	}
	// Metrics on a listener of their own, the API's port left to the clients.
	if p := args["metrics-listen"]; p == "" {
		t.Errorf("gateway has no -metrics-listen")
	} else if mport := listenPort(t, "gateway -metrics-listen", p); mport == port {
		t.Errorf("gateway -metrics-listen is the API's port %d", port)
	} else if cp, ok := containerPort(c, intstr.FromInt32(mport)); !ok || cp.Name != "http-metrics" {
		t.Errorf("gateway -metrics-listen port %d: want a container port named http-metrics", mport)
	} else if svc := serviceOf(t, m, d); !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
		return sp.Name == "http-metrics" && sp.TargetPort.String() == "http-metrics"
	}) {
		t.Errorf("Service %s has no port http-metrics to the gateway's metrics port", svc.Name)
	}
	checkGrace(t, d, args)
	checkMetricsAuth(t, m, d, args)
}

// parseArgs checks a container's arguments against the flags its image's binary defines
// and returns them by name. Every argument must be -name=value (or --name=value), one flag
// at most once, and a $(VAR) in a value must name an env var of the container.
func parseArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	img, ok := imageOf(c.Image)
	if !ok {
		t.Fatalf("container %s: image %q is not built here", c.Name, c.Image)
	}
	if len(c.Command) > 0 {
		t.Errorf("container %s: command %q replaces the image's entry point", c.Name, c.Command)
	}
	defined := flagNames(t, img.FlagDirs...)
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	out := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || !ok {
			t.Errorf("%s: argument %q: want -name=value", img.Repo, a)
			continue
		}
		if !defined[name] {
			t.Errorf("%s: argument %q: %s defines no flag %q", img.Repo, a, img.Main, name)
		}
		if _, dup := out[name]; dup {
			t.Errorf("%s: flag -%s given twice", img.Repo, name)
		}
		for _, ref := range envRef.FindAllStringSubmatch(value, -1) {
			if !env[ref[1]] {
				t.Errorf("%s: argument %q refers to $(%s), which is not an env var of the container", img.Repo, a, ref[1])
			}
		}
		out[name] = value
	}
	return out
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// flagDefiners are the flag.FlagSet (and package flag) methods that define a flag, with the
// index of the argument that names it.
var flagDefiners = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Func": 0, "BoolFunc": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1, "UintVar": 1, "Uint64Var": 1, "TextVar": 1, "Var": 1,
}

// flagNames reads the names of the flags that the non-test Go files of dirs (relative to
// the repository's root) define with string literals. Reading the source builds nothing;
// a flag defined under a computed name would be missed, and fail the test, which is the
// safe side.
func flagNames(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := flagDefiners[sel.Sel.Name]
				if !ok || len(call.Args) <= i {
					return true
				}
				if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						names[s] = true
					}
				}
				return true
			})
		}
	}
	return names
}

// TestImages checks each Dockerfile: a pinned Go toolchain no older than go.mod's go line,
// a static build (CGO_ENABLED=0, -trimpath) of a main package, a distroless static or
// scratch final stage running as the manifests' user; and that README.md builds it under
// the name the manifests run.
func TestImages(t *testing.T) {
	goLine := goModGo(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		data, err := os.ReadFile(img.Dockerfile)
		if err != nil {
			t.Fatal(err)
		}
		ins := dockerInstructions(string(data))
		var froms, runs []string
		var user, entry string
		for _, in := range ins {
			switch in[0] {
			case "FROM":
				froms = append(froms, in[1])
			case "RUN":
				runs = append(runs, in[1])
			case "USER":
				user = in[1]
			case "ENTRYPOINT":
				entry = in[1]
			}
		}
		if len(froms) < 2 {
			t.Errorf("%s: %d stages, want a build stage and a final one", img.Dockerfile, len(froms))
			continue
		}
		builder := regexp.MustCompile(`(?:^|\s)golang:(\d+\.\d+\.\d+)(?:-\S+)?\s+AS\s+\S+$`).FindStringSubmatch(froms[0])
		if builder == nil {
			t.Errorf("%s: first stage %q: want golang:X.Y.Z AS name (a pinned toolchain)", img.Dockerfile, froms[0])
		} else if version.Compare("go"+builder[1], goLine) < 0 {
			t.Errorf("%s: golang:%s is older than go.mod's %s", img.Dockerfile, builder[1], goLine)
		}
		final := froms[len(froms)-1]
		if !regexp.MustCompile(`^(gcr\.io/distroless/static(-debian\d+)?:nonroot|scratch)$`).MatchString(final) {
			t.Errorf("%s: final stage %q: want gcr.io/distroless/static…:nonroot or scratch", img.Dockerfile, final)
		}
		build := ""
		for _, r := range runs {
			if strings.Contains(r, "go build") {
				build = r
			}
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", " ./" + img.Main} {
			if !strings.Contains(build, want) {
				t.Errorf("%s: the go build step %q lacks %q", img.Dockerfile, build, want)
			}
		}
		if u, _, _ := strings.Cut(user, ":"); u != strconv.Itoa(imageUID) && u != "nonroot" {
			t.Errorf("%s: USER %q: want %d (nonroot), the manifests' runAsUser", img.Dockerfile, user, imageUID)
		}
		if entry == "" {
			t.Errorf("%s: no ENTRYPOINT", img.Dockerfile)
		}
		checkMainPackage(t, img.Main)
		cmd := fmt.Sprintf("docker build -f kube/deploy/%s -t %s:dev .", img.Dockerfile, img.Repo)
		if !bytes.Contains(readme, []byte(cmd)) {
			t.Errorf("README.md does not build %s with %q", img.Repo, cmd)
		}
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatalf("the build context's .dockerignore: %v", err)
	}
	patterns := strings.Fields(string(regexp.MustCompile(`(?m)#.*$`).ReplaceAll(ignore, nil)))
	if !slices.Contains(patterns, ".git") {
		t.Errorf(".dockerignore does not leave out .git")
	}
	for _, p := range patterns {
		for _, keep := range []string{"go.mod", "go.sum", "examples", "gateway", "proxy", "internal"} {
			if strings.TrimPrefix(p, "/") == keep || p == "*" || p == "**" {
				t.Errorf(".dockerignore leaves out %s, which the build needs", p)
			}
		}
	}
}

// dockerInstructions splits a Dockerfile into instructions and their arguments, joining
// continued lines and dropping comments and FROM's --platform option.
func dockerInstructions(s string) [][2]string {
	var out [][2]string
	var cur strings.Builder
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		args = strings.TrimSpace(args)
		if strings.EqualFold(op, "FROM") && strings.HasPrefix(args, "--platform=") {
			_, args, _ = strings.Cut(args, " ")
		}
		out = append(out, [2]string{strings.ToUpper(op), strings.Join(strings.Fields(args), " ")})
	}
	return out
}

// goModGo returns go.mod's go line as a go/version string ("go1.26.0").
func goModGo(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mm := regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`).FindSubmatch(data)
	if mm == nil {
		t.Fatal("go.mod has no go line")
	}
	return "go" + string(mm[1])
}

// checkMainPackage checks that dir (relative to the repository's root) is a main package
// with a main function, reading its source.
func checkMainPackage(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
	fset := token.NewFileSet()
	hasMain := false
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "main" {
			t.Errorf("%s: package %s, want main", file, f.Name.Name)
			return
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
				hasMain = true
			}
		}
	}
	if !hasMain {
		t.Errorf("%s: no func main", dir)
	}
}

// TestReadme checks that the steps name what exists: the kustomization, and the top-level
// README's link here.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("kubectl apply -k kube/deploy/")) {
		t.Error("README.md does not apply the kustomization (kubectl apply -k kube/deploy/)")
	}
	top, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(top, []byte("(kube/deploy/README.md)")) {
		t.Error("the top-level README.md does not link deploy/README.md")
	}
}

// TestKustomizeBuild renders the kustomization with kubectl's built-in kustomize, where
// kubectl is installed, and decodes the result strictly: kustomize accepts the files, and
// the ConfigMap it generates is the one the gateway mounts.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", ".")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.Bytes())
	}
	rendered, err := decodeAll(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("kubectl kustomize's output: %v", err)
	}
	m := load(t)
	if got, want := len(rendered), len(m.objects)+len(m.generated); got != want {
		t.Errorf("kustomize rendered %d objects, want %d (the files' and the generated ConfigMaps)", got, want)
	}
	var cms []*corev1.ConfigMap
	var deployment *appsv1.Deployment
	for _, o := range rendered {
		switch v := o.Value.(type) {
		case *corev1.ConfigMap:
			cms = append(cms, v)
		case *appsv1.Deployment:
			for _, c := range v.Spec.Template.Spec.Containers {
				if img, _ := imageOf(c.Image); img.Repo == "usher/gateway" {
					deployment = v
				}
			}
		}
	}
	if len(cms) != 1 || deployment == nil {
		t.Fatalf("rendered %d ConfigMaps and gateway Deployment %v, want one each", len(cms), deployment != nil)
	}
	found := false
	for _, v := range deployment.Spec.Template.Spec.Volumes {
		found = found || (v.ConfigMap != nil && v.ConfigMap.Name == cms[0].Name)
	}
	if !found {
		t.Errorf("the rendered gateway Deployment does not mount the generated ConfigMap %s", cms[0].Name)
	}
	for name, file := range m.generated["usher-gateway"] {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if cms[0].Data[name] != string(data) {
			t.Errorf("generated ConfigMap key %s differs from %s", name, file)
		}
	}
}
