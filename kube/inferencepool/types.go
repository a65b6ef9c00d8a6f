package inferencepool

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The InferencePool API, as the Gateway API Inference Extension's CRDs define it. The types
// below are written from the CRD schemas (the extension's Go module is not a dependency):
// their JSON names are the schemas' names, and Decode refuses any other.
const (
	// Group and Version name the InferencePool API this package follows (GIE v1).
	Group   = "inference.networking.k8s.io"
	Version = "v1"
	// AlphaGroup and AlphaVersion name the older experimental API (GIE v1alpha2), which
	// Decode and Source accept too, converted to the v1 form.
	AlphaGroup   = "inference.networking.x-k8s.io"
	AlphaVersion = "v1alpha2"
	// Kind is the resource's kind, and Resource its plural name in URLs.
	Kind     = "InferencePool"
	Resource = "inferencepools"
)

// GroupVersionResource is the v1 resource, and AlphaGroupVersionResource the v1alpha2 one.
var (
	GroupVersionResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}
	AlphaGroupVersionResource = schema.GroupVersionResource{Group: AlphaGroup, Version: AlphaVersion, Resource: Resource}
)

// ErrInvalidPool is returned (wrapped) by Decode and Pool.Validate for a document that is not
// a valid InferencePool: unknown or misspelt fields, a wrong apiVersion or kind, values the
// CRD's schema refuses.
var ErrInvalidPool = errors.New("inferencepool: invalid InferencePool")

// Pool is an InferencePool (inference.networking.k8s.io/v1): the model-server pods an
// endpoint picker serves. It is a plain value (a runtime.Object for client-go's machinery);
// DeepCopy gives a copy that shares nothing.
type Pool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitzero"`
}

// PoolList is a list of InferencePools, as the API server answers a list.
type PoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pool `json:"items"`
}

// Spec is an InferencePool's desired state.
type Spec struct {
	// Selector selects the pool's pods, in the pool's namespace.
	Selector LabelSelector `json:"selector"`
	// TargetPorts are the ports of each pod the pool serves on: one endpoint per ready pod
	// and port (1 to 8 ports, each once).
	TargetPorts []Port `json:"targetPorts"`
	// AppProtocol is the protocol of the target ports: AppProtocolHTTP (the default when
	// empty) or AppProtocolH2C.
	AppProtocol AppProtocol `json:"appProtocol,omitempty"`
	// EndpointPickerRef names the pool's endpoint picker (the Service in front of usher).
	EndpointPickerRef *EndpointPickerRef `json:"endpointPickerRef,omitempty"`
}

// LabelSelector selects pods by labels: all of MatchLabels must match. Deliberately no
// matchExpressions — the CRD allows only what a Service selector can say.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Port is a port number, 1 to 65535.
type Port struct {
	Number int32 `json:"number"`
}

// AppProtocol is the application protocol of a pool's target ports.
type AppProtocol string

// The application protocols the CRD allows.
const (
	AppProtocolHTTP AppProtocol = "http"
	AppProtocolH2C  AppProtocol = "kubernetes.io/h2c"
)

// EndpointPickerRef refers to a pool's endpoint picker.
type EndpointPickerRef struct {
	// Group is the referent's API group; nil or "" is the core group.
	Group *string `json:"group,omitempty"`
	// Kind is the referent's kind; empty means Service.
	Kind string `json:"kind,omitempty"`
	// Name is the referent's name (required).
	Name string `json:"name"`
	// Port is the referent's port; required for a Service (its port, not the target port).
	Port *Port `json:"port,omitempty"`
	// FailureMode is what the gateway does when the picker does not answer: FailClose (the
	// default when empty) or FailOpen.
	FailureMode FailureMode `json:"failureMode,omitempty"`
}

// FailureMode is what a gateway does when the endpoint picker fails.
type FailureMode string

// The failure modes.
const (
	FailOpen  FailureMode = "FailOpen"
	FailClose FailureMode = "FailClose"
)

// Status is an InferencePool's observed state, written by the gateways that use it.
type Status struct {
	Parents []ParentStatus `json:"parents,omitempty"`
}

// ParentStatus is the pool's state as seen by one parent (usually a Gateway).
type ParentStatus struct {
	Conditions     []metav1.Condition `json:"conditions,omitempty"`
	ParentRef      ParentReference    `json:"parentRef"`
	ControllerName string             `json:"controllerName,omitempty"`
}

// ParentReference names a pool's parent.
type ParentReference struct {
	Group     *string `json:"group,omitempty"`
	Kind      string  `json:"kind,omitempty"`
	Name      string  `json:"name"`
	Namespace string  `json:"namespace,omitempty"`
}

// AlphaPool is an InferencePool of the older inference.networking.x-k8s.io/v1alpha2 API.
// Pool converts it to the v1 form.
type AlphaPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AlphaSpec   `json:"spec"`
	Status            AlphaStatus `json:"status,omitzero"`
}

// AlphaSpec is a v1alpha2 pool's desired state: a plain label map, one target port, and an
// extension reference in place of v1's endpointPickerRef.
type AlphaSpec struct {
	Selector         map[string]string `json:"selector"`
	TargetPortNumber int32             `json:"targetPortNumber"`
	ExtensionRef     *Extension        `json:"extensionRef,omitempty"`
}

// Extension is v1alpha2's reference to the endpoint picker.
type Extension struct {
	Group       *string      `json:"group,omitempty"`
	Kind        *string      `json:"kind,omitempty"`
	Name        string       `json:"name"`
	PortNumber  *int32       `json:"portNumber,omitempty"`
	FailureMode *FailureMode `json:"failureMode,omitempty"`
}

// AlphaStatus is a v1alpha2 pool's observed state (note the singular "parent").
type AlphaStatus struct {
	Parents []AlphaParentStatus `json:"parent,omitempty"`
}

// AlphaParentStatus is a v1alpha2 pool's state as seen by one gateway. Its parentRef has
// been an object reference and later a gateway reference; ParentRef holds the fields of
// both.
type AlphaParentStatus struct {
	ParentRef  AlphaParentReference `json:"parentRef"`
	Conditions []metav1.Condition   `json:"conditions,omitempty"`
}

// AlphaParentReference is the union of the v1alpha2 parent reference forms.
type AlphaParentReference struct {
	Group           *string `json:"group,omitempty"`
	APIVersion      string  `json:"apiVersion,omitempty"`
	Kind            string  `json:"kind,omitempty"`
	Name            string  `json:"name,omitempty"`
	Namespace       string  `json:"namespace,omitempty"`
	UID             string  `json:"uid,omitempty"`
	ResourceVersion string  `json:"resourceVersion,omitempty"`
	FieldPath       string  `json:"fieldPath,omitempty"`
}

// Pool returns a's v1 form: selector to matchLabels, targetPortNumber to one target port,
// extensionRef to endpointPickerRef (a Service's omitted portNumber becomes port 9002, the
// value the v1alpha2 CRD tells implementations to infer). Status conditions are kept; parent references keep
// group, kind, name and namespace. O(size of a).
func (a *AlphaPool) Pool() *Pool {
	p := &Pool{
		TypeMeta:   metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind},
		ObjectMeta: *a.ObjectMeta.DeepCopy(),
		Spec: Spec{
			Selector:    LabelSelector{MatchLabels: maps.Clone(a.Spec.Selector)},
			TargetPorts: []Port{{Number: a.Spec.TargetPortNumber}},
		},
	}
	if e := a.Spec.ExtensionRef; e != nil {
		r := &EndpointPickerRef{Name: e.Name, Group: clonePtr(e.Group)}
		if e.Kind != nil {
			r.Kind = *e.Kind
		}
		if e.PortNumber != nil {
			r.Port = &Port{Number: *e.PortNumber}
		} else if r.Kind == "" || r.Kind == "Service" {
			r.Port = &Port{Number: alphaPickerPort} // the CRD: infer 9002 for a Service
		}
		if e.FailureMode != nil {
			r.FailureMode = *e.FailureMode
		}
		p.Spec.EndpointPickerRef = r
	}
	for _, s := range a.Status.Parents {
		p.Status.Parents = append(p.Status.Parents, ParentStatus{
			Conditions: cloneConditions(s.Conditions),
			ParentRef: ParentReference{Group: clonePtr(s.ParentRef.Group), Kind: s.ParentRef.Kind,
				Name: s.ParentRef.Name, Namespace: s.ParentRef.Namespace},
		})
	}
	return p
}

// Decode decodes one InferencePool document, YAML or JSON, strictly: an unknown, misspelt
// (field names are case-sensitive) or repeated field is an error, as is an apiVersion other
// than inference.networking.k8s.io/v1 or inference.networking.x-k8s.io/v1alpha2 or a kind
// other than InferencePool. The spec is then checked as the document's CRD checks it: a v1
// pool by Pool.Validate (and its appProtocol, endpointPickerRef.kind and failureMode, when
// present, must not be empty); a v1alpha2 pool by the v1alpha2 CRD's rules (extensionRef
// required, portNumber optional), then returned in its v1 form (AlphaPool.Pool, which
// infers port 9002 for a Service without one). Errors wrap ErrInvalidPool and name the
// field. O(len(data)).
func Decode(data []byte) (*Pool, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPool, err)
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPool, err)
	}
	if tm.Kind != Kind {
		return nil, fmt.Errorf("%w: kind %q: want %s", ErrInvalidPool, tm.Kind, Kind)
	}
	var top struct {
		Spec *struct{} `json:"spec"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &top); err == nil && top.Spec == nil {
		return nil, fmt.Errorf("%w: spec is required", ErrInvalidPool)
	}
	var p *Pool
	switch tm.APIVersion {
	case Group + "/" + Version:
		p = new(Pool)
		if err = unmarshalStrict(js, p); err == nil {
			if err = checkPresent(js, p.Name); err == nil {
				err = p.Validate()
			}
		}
	case AlphaGroup + "/" + AlphaVersion:
		a := new(AlphaPool)
		if err = unmarshalStrict(js, a); err == nil {
			if err = a.validate(); err == nil {
				p = a.Pool()
			}
		}
	default:
		return nil, fmt.Errorf("%w: apiVersion %q: want %s/%s or %s/%s", ErrInvalidPool, tm.APIVersion, Group, Version, AlphaGroup, AlphaVersion)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// unmarshalStrict decodes JSON into v, refusing unknown, case-mismatched and repeated fields.
func unmarshalStrict(js []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPool, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidPool, errors.Join(strict...))
	}
	// A document must be one object: trailing data after it is refused by the decoder, but
	// a literal null decodes to nothing.
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return fmt.Errorf("%w: empty document", ErrInvalidPool)
	}
	return nil
}

// Validate checks what the v1 CRD's schema and validation rules check of the spec: a
// selector with 1 to 64 labels, valid label keys and values; 1 to 8 target ports, each
// 1..65535 and listed once; a known appProtocol; an endpointPickerRef, when present, with a
// name of at most 253 bytes, a group and kind of the CRD's forms, a port 1..65535 (required
// when the kind is Service or empty, which the CRD defaults to Service) and a known
// failureMode. An empty appProtocol, kind or failureMode is taken as unset (the CRD's
// default). Errors wrap ErrInvalidPool and name the field. O(labels + ports).
func (p *Pool) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidPool, p.Name, fmt.Sprintf(format, args...))
	}
	s := p.Spec
	if len(s.Selector.MatchLabels) == 0 {
		return bad("spec.selector.matchLabels is empty (it would select every pod)")
	}
	if n := len(s.Selector.MatchLabels); n > maxLabels {
		return bad("spec.selector.matchLabels has %d labels: want at most %d", n, maxLabels)
	}
	if err := checkLabels(s.Selector.MatchLabels); err != nil {
		return bad("spec.selector.matchLabels: %v", err)
	}
	if len(s.TargetPorts) < 1 || len(s.TargetPorts) > 8 {
		return bad("spec.targetPorts: %d target ports: want 1 to 8", len(s.TargetPorts))
	}
	for i, tp := range s.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			return bad("spec.targetPorts[%d].number: target port %d: want 1 to 65535", i, tp.Number)
		}
		if slices.Contains(s.TargetPorts[:i], tp) {
			return bad("spec.targetPorts: target port %d listed twice (port number must be unique)", tp.Number)
		}
	}
	switch s.AppProtocol {
	case "", AppProtocolHTTP, AppProtocolH2C:
	default:
		return bad("spec.appProtocol %q: want %s or %s", s.AppProtocol, AppProtocolHTTP, AppProtocolH2C)
	}
	if r := s.EndpointPickerRef; r != nil {
		if err := checkRef("spec.endpointPickerRef", r.Name, r.Group, &r.Kind, true); err != nil {
			return bad("%v", err)
		}
		switch {
		case r.Port != nil && (r.Port.Number < 1 || r.Port.Number > 65535):
			return bad("spec.endpointPickerRef.port.number %d: want 1 to 65535", r.Port.Number)
		case r.Port == nil && (r.Kind == "" || r.Kind == "Service"):
			return bad("spec.endpointPickerRef.port is required when kind is 'Service' or unspecified (defaults to 'Service')")
		}
		switch r.FailureMode {
		case "", FailOpen, FailClose:
		default:
			return bad("spec.endpointPickerRef.failureMode %q: want %s or %s", r.FailureMode, FailOpen, FailClose)
		}
	}
	return nil
}

// The CRDs' limits on the endpoint picker reference and the selector.
const (
	maxLabels       = 64   // v1 spec.selector.matchLabels maxProperties
	maxRefName      = 253  // name: maxLength
	maxRefGroup     = 253  // group: maxLength
	maxRefKind      = 63   // kind: maxLength
	alphaPickerPort = 9002 // the port v1alpha2 says to infer for a Service without portNumber
)

var (
	groupPattern = regexp.MustCompile(`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	kindPattern  = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
)

// checkRef checks an endpoint picker reference's name, group and kind as both CRDs do
// (field names under path). An empty *kind is unset when emptyKindUnset (v1's plain
// string), and refused otherwise (v1alpha2's pointer: present but empty).
func checkRef(path, name string, group, kind *string, emptyKindUnset bool) error {
	switch {
	case name == "":
		return fmt.Errorf("%s.name is empty (required)", path)
	case len(name) > maxRefName:
		return fmt.Errorf("%s.name is %d bytes: want at most %d", path, len(name), maxRefName)
	}
	if group != nil {
		if len(*group) > maxRefGroup {
			return fmt.Errorf("%s.group is %d bytes: want at most %d", path, len(*group), maxRefGroup)
		}
		if !groupPattern.MatchString(*group) {
			return fmt.Errorf("%s.group %q: want empty or a DNS subdomain (lower case)", path, *group)
		}
	}
	if kind != nil && (*kind != "" || !emptyKindUnset) {
		switch {
		case len(*kind) > maxRefKind:
			return fmt.Errorf("%s.kind is %d bytes: want 1 to %d", path, len(*kind), maxRefKind)
		case !kindPattern.MatchString(*kind):
			return fmt.Errorf("%s.kind %q: want a letter then letters, digits or '-' (not ending in '-')", path, *kind)
		}
	}
	return nil
}

// validate checks what the v1alpha2 CRD's schema checks of the spec: a selector (the CRD
// sets no lower bound; an empty one is refused here, as it would select every pod in the
// namespace) with valid label keys and values, a targetPortNumber 1..65535, an
// extensionRef with a name of at most 253 bytes, group and kind of the CRD's forms, a
// portNumber 1..65535 when given, and a known failureMode. O(labels).
func (a *AlphaPool) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidPool, a.Name, fmt.Sprintf(format, args...))
	}
	s := a.Spec
	if len(s.Selector) == 0 {
		return bad("spec.selector is empty or missing (it would select every pod)")
	}
	if err := checkLabels(s.Selector); err != nil {
		return bad("spec.selector: %v", err)
	}
	if s.TargetPortNumber == 0 {
		return bad("spec.targetPortNumber is required")
	}
	if s.TargetPortNumber < 1 || s.TargetPortNumber > 65535 {
		return bad("spec.targetPortNumber: target port %d: want 1 to 65535", s.TargetPortNumber)
	}
	e := s.ExtensionRef
	if e == nil {
		return bad("spec.extensionRef is required")
	}
	if err := checkRef("spec.extensionRef", e.Name, e.Group, e.Kind, false); err != nil {
		return bad("%v", err)
	}
	if e.PortNumber != nil && (*e.PortNumber < 1 || *e.PortNumber > 65535) {
		return bad("spec.extensionRef.portNumber %d: want 1 to 65535", *e.PortNumber)
	}
	if e.FailureMode != nil {
		switch *e.FailureMode {
		case FailOpen, FailClose:
		default:
			return bad("spec.extensionRef.failureMode %q: want %s or %s", *e.FailureMode, FailOpen, FailClose)
		}
	}
	return nil
}

// presence records which of v1's plain-string enum fields a document gives explicitly: the
// CRD refuses them present but empty (its defaults apply only to absent fields), while the
// Go types cannot tell empty from absent.
type presence struct {
	Spec struct {
		AppProtocol       *string `json:"appProtocol"`
		EndpointPickerRef *struct {
			Kind        *string `json:"kind"`
			FailureMode *string `json:"failureMode"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// checkPresent refuses v1's enum and kind fields given as empty strings.
func checkPresent(js []byte, name string) error {
	var pr presence
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &pr); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPool, err)
	}
	empty := func(s *string) bool { return s != nil && *s == "" }
	field := ""
	switch r := pr.Spec.EndpointPickerRef; {
	case empty(pr.Spec.AppProtocol):
		field = "spec.appProtocol"
	case r != nil && empty(r.Kind):
		field = "spec.endpointPickerRef.kind"
	case r != nil && empty(r.FailureMode):
		field = "spec.endpointPickerRef.failureMode"
	}
	if field != "" {
		return fmt.Errorf("%w: %s: %s is present but empty (omit it for the default)", ErrInvalidPool, name, field)
	}
	return nil
}

// DeepCopyInto copies p into out, sharing nothing. O(size of p).
func (p *Pool) DeepCopyInto(out *Pool) {
	*out = *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Selector.MatchLabels = maps.Clone(p.Spec.Selector.MatchLabels)
	out.Spec.TargetPorts = slices.Clone(p.Spec.TargetPorts)
	if r := p.Spec.EndpointPickerRef; r != nil {
		c := *r
		c.Group = clonePtr(r.Group)
		c.Port = clonePtr(r.Port)
		out.Spec.EndpointPickerRef = &c
	}
	if p.Status.Parents != nil {
		out.Status.Parents = make([]ParentStatus, len(p.Status.Parents))
		for i, s := range p.Status.Parents {
			s.Conditions = cloneConditions(s.Conditions)
			s.ParentRef.Group = clonePtr(s.ParentRef.Group)
			out.Status.Parents[i] = s
		}
	}
}

// DeepCopy returns a copy of p sharing nothing; nil for nil. O(size of p).
func (p *Pool) DeepCopy() *Pool {
	if p == nil {
		return nil
	}
	out := new(Pool)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (p *Pool) DeepCopyObject() runtime.Object {
	if c := p.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyObject implements runtime.Object. O(size of l).
func (l *PoolList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PoolList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Pool, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// checkLabels checks label keys and values as the API server does, in key order.
func checkLabels(m map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label %q: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, m[k], errs[0])
		}
	}
	return nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func cloneConditions(cs []metav1.Condition) []metav1.Condition {
	if cs == nil {
		return nil
	}
	out := make([]metav1.Condition, len(cs))
	for i := range cs {
		cs[i].DeepCopyInto(&out[i])
	}
	return out
}

var (
	_ runtime.Object = (*Pool)(nil)
	_ runtime.Object = (*PoolList)(nil)
)
