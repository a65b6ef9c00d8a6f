package inferencepool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// doc is a pool document as a tree, edited by the rows of TestCRDRules.
type doc = map[string]any

func v1Doc() doc {
	return doc{"apiVersion": Group + "/" + Version, "kind": Kind, "metadata": doc{"name": "p"},
		"spec": doc{
			"selector":          doc{"matchLabels": doc{"app": "vllm"}},
			"targetPorts":       []any{doc{"number": 8000}},
			"endpointPickerRef": doc{"name": "epp", "port": doc{"number": 9002}},
		}}
}

func alphaDoc() doc {
	return doc{"apiVersion": AlphaGroup + "/" + AlphaVersion, "kind": Kind, "metadata": doc{"name": "p"},
		"spec": doc{
			"selector":         doc{"app": "vllm"},
			"targetPortNumber": 8000,
			"extensionRef":     doc{"name": "epp"},
		}}
}

// set sets the value at a dotted path (creating maps on the way); a nil value deletes it.
func set(d doc, path string, v any) doc {
	keys := strings.Split(path, ".")
	m := d
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(doc)
		if !ok {
			next = doc{}
			m[k] = next
		}
		m = next
	}
	if v == nil {
		delete(m, keys[len(keys)-1])
	} else {
		m[keys[len(keys)-1]] = v
	}
	return d
}

func nLabels(n int) doc {
	m := doc{}
	for i := range n {
		m[fmt.Sprintf("l%d", i)] = "v"
	}
	return m
}

func ports(ns ...int) []any {
	var out []any
	for _, n := range ns {
		out = append(out, doc{"number": n})
	}
	return out
}

// crdRule is one validation rule of a CRD, with an edit the CRD accepts and one it refuses
// (each applied to the version's minimal valid pool), and the text the refusal must carry.
type crdRule struct {
	version, rule string
	validDesc     string
	valid         func(doc) doc
	invalidDesc   string
	invalid       func(doc) doc
	want          string
}

func edit(path string, v any) func(doc) doc { return func(d doc) doc { return set(d, path, v) } }

func edits(fs ...func(doc) doc) func(doc) doc {
	return func(d doc) doc {
		for _, f := range fs {
			d = f(d)
		}
		return d
	}
}

var long254 = strings.Repeat("a", 254)

// crdRules lists the validation rules of the two CRDs (inference.networking.k8s.io v1 and
// inference.networking.x-k8s.io v1alpha2): required fields, minimum and maximum, lengths,
// patterns, enums and the v1 CRD's CEL rules (x-kubernetes-validations).
var crdRules = []crdRule{
	// v1
	{"v1", "spec is required", "spec given", nil, "no spec", edit("spec", nil), "spec is required"},
	{"v1", "spec.selector.matchLabels required, minProperties 1", "1 label", nil, "matchLabels: {}", edit("spec.selector.matchLabels", doc{}), "spec.selector.matchLabels is empty"},
	{"v1", "spec.selector.matchLabels maxProperties 64", "64 labels", edit("spec.selector.matchLabels", nLabels(64)), "65 labels", edit("spec.selector.matchLabels", nLabels(65)), "spec.selector.matchLabels has 65 labels"},
	{"v1", "label value maxLength 63", "63-byte value", edit("spec.selector.matchLabels.app", strings.Repeat("v", 63)), "64-byte value", edit("spec.selector.matchLabels.app", strings.Repeat("v", 64)), "spec.selector.matchLabels: label app value"},
	{"v1", "label value pattern ^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", `"" (empty allowed)`, edit("spec.selector.matchLabels.app", ""), `"-bad"`, edit("spec.selector.matchLabels.app", "-bad"), "spec.selector.matchLabels: label app value"},
	{"v1", "spec.targetPorts required, minItems 1", "1 port", nil, "targetPorts: []", edit("spec.targetPorts", []any{}), "spec.targetPorts: 0 target ports"},
	{"v1", "spec.targetPorts maxItems 8", "8 ports", edit("spec.targetPorts", ports(1, 2, 3, 4, 5, 6, 7, 8)), "9 ports", edit("spec.targetPorts", ports(1, 2, 3, 4, 5, 6, 7, 8, 9)), "spec.targetPorts: 9 target ports"},
	{"v1", "targetPorts[].number required, minimum 1", "number: 1", edit("spec.targetPorts", ports(1)), "number: 0", edit("spec.targetPorts", ports(0)), "spec.targetPorts[0].number"},
	{"v1", "targetPorts[].number maximum 65535", "number: 65535", edit("spec.targetPorts", ports(65535)), "number: 65536", edit("spec.targetPorts", ports(65536)), "spec.targetPorts[0].number"},
	{"v1", "CEL self.all(p1, self.exists_one(p2, p1.number==p2.number)): port number must be unique", "8000, 8001", edit("spec.targetPorts", ports(8000, 8001)), "8000, 8000", edit("spec.targetPorts", ports(8000, 8000)), "port number must be unique"},
	{"v1", "spec.appProtocol enum http, kubernetes.io/h2c", "kubernetes.io/h2c", edit("spec.appProtocol", "kubernetes.io/h2c"), "grpc", edit("spec.appProtocol", "grpc"), "spec.appProtocol"},
	{"v1", "spec.appProtocol enum (default http only when absent)", "absent", nil, `""`, edit("spec.appProtocol", ""), "spec.appProtocol is present but empty"},
	{"v1", "spec.endpointPickerRef optional", "absent", edit("spec.endpointPickerRef", nil), "-", nil, ""},
	{"v1", "endpointPickerRef.name required, minLength 1", "name: epp", nil, `name: ""`, edit("spec.endpointPickerRef.name", ""), "spec.endpointPickerRef.name is empty"},
	{"v1", "endpointPickerRef.name maxLength 253", "253 bytes", edit("spec.endpointPickerRef.name", long254[1:]), "254 bytes", edit("spec.endpointPickerRef.name", long254), "spec.endpointPickerRef.name is 254 bytes"},
	{"v1", "endpointPickerRef.group maxLength 253", `""`, edit("spec.endpointPickerRef.group", ""), "254 bytes", edit("spec.endpointPickerRef.group", long254), "spec.endpointPickerRef.group is 254 bytes"},
	{"v1", "endpointPickerRef.group pattern ^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", "example.com", edits(edit("spec.endpointPickerRef.group", "example.com"), edit("spec.endpointPickerRef.kind", "Picker")), "Example.com", edit("spec.endpointPickerRef.group", "Example.com"), "spec.endpointPickerRef.group"},
	{"v1", "endpointPickerRef.kind minLength 1 (default Service when absent)", "absent", nil, `""`, edit("spec.endpointPickerRef.kind", ""), "spec.endpointPickerRef.kind is present but empty"},
	{"v1", "endpointPickerRef.kind maxLength 63", "63 bytes", edit("spec.endpointPickerRef.kind", long254[:63]), "64 bytes", edit("spec.endpointPickerRef.kind", long254[:64]), "spec.endpointPickerRef.kind is 64 bytes"},
	{"v1", "endpointPickerRef.kind pattern ^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$", "Service", edit("spec.endpointPickerRef.kind", "Service"), "9Service", edit("spec.endpointPickerRef.kind", "9Service"), "spec.endpointPickerRef.kind"},
	{"v1", "CEL self.kind != 'Service' || has(self.port): port is required when kind is 'Service' or unspecified", "kind: Picker, no port", edits(edit("spec.endpointPickerRef.kind", "Picker"), edit("spec.endpointPickerRef.port", nil)), "no kind, no port", edit("spec.endpointPickerRef.port", nil), "port is required when kind is 'Service'"},
	{"v1", "CEL port rule applies whatever the group", "group example.com, kind Picker, no port", edits(edit("spec.endpointPickerRef.group", "example.com"), edit("spec.endpointPickerRef.kind", "Picker"), edit("spec.endpointPickerRef.port", nil)), "group example.com, kind Service, no port", edits(edit("spec.endpointPickerRef.group", "example.com"), edit("spec.endpointPickerRef.port", nil)), "port is required when kind is 'Service'"},
	{"v1", "endpointPickerRef.port.number minimum 1, maximum 65535", "65535", edit("spec.endpointPickerRef.port.number", 65535), "0", edit("spec.endpointPickerRef.port.number", 0), "spec.endpointPickerRef.port.number 0"},
	{"v1", "endpointPickerRef.failureMode enum FailOpen, FailClose", "FailOpen", edit("spec.endpointPickerRef.failureMode", "FailOpen"), "failopen", edit("spec.endpointPickerRef.failureMode", "failopen"), "spec.endpointPickerRef.failureMode"},
	{"v1", "endpointPickerRef.failureMode enum (default FailClose only when absent)", "absent", nil, `""`, edit("spec.endpointPickerRef.failureMode", ""), "spec.endpointPickerRef.failureMode is present but empty"},
	{"v1", "structural schema: no unknown fields", "known fields", nil, "spec.targetPortNumber (v1alpha2's)", edit("spec.targetPortNumber", 8000), "targetPortNumber"},

	// v1alpha2
	{"v1alpha2", "spec is required", "spec given", nil, "spec: null", edit("spec", json.RawMessage("null")), "spec is required"},
	{"v1alpha2", "spec.selector required", "1 label", nil, "no selector", edit("spec.selector", nil), "spec.selector is empty or missing"},
	{"v1alpha2", "selector value maxLength 63, pattern", "63-byte value", edit("spec.selector.app", strings.Repeat("v", 63)), "value bad_", edit("spec.selector.app", "bad_"), "spec.selector: label app value"},
	{"v1alpha2", "selector has no maxProperties", "65 labels", edit("spec.selector", nLabels(65)), "-", nil, ""},
	{"v1alpha2", "spec.targetPortNumber required", "8000", nil, "absent", edit("spec.targetPortNumber", nil), "spec.targetPortNumber is required"},
	{"v1alpha2", "targetPortNumber minimum 1, maximum 65535", "65535", edit("spec.targetPortNumber", 65535), "65536", edit("spec.targetPortNumber", 65536), "spec.targetPortNumber: target port 65536"},
	{"v1alpha2", "spec.extensionRef required", "given", nil, "absent", edit("spec.extensionRef", nil), "spec.extensionRef is required"},
	{"v1alpha2", "extensionRef.name required, minLength 1", "name: epp", nil, "absent", edit("spec.extensionRef.name", nil), "spec.extensionRef.name is empty"},
	{"v1alpha2", "extensionRef.name maxLength 253", "253 bytes", edit("spec.extensionRef.name", long254[1:]), "254 bytes", edit("spec.extensionRef.name", long254), "spec.extensionRef.name is 254 bytes"},
	{"v1alpha2", "extensionRef.group maxLength 253, pattern", `""`, edit("spec.extensionRef.group", ""), "a_b", edit("spec.extensionRef.group", "a_b"), "spec.extensionRef.group"},
	{"v1alpha2", "extensionRef.kind minLength 1 (default Service when absent)", "Service", edit("spec.extensionRef.kind", "Service"), `""`, edit("spec.extensionRef.kind", ""), "spec.extensionRef.kind"},
	{"v1alpha2", "extensionRef.kind maxLength 63, pattern", "Picker", edit("spec.extensionRef.kind", "Picker"), "Pick er", edit("spec.extensionRef.kind", "Pick er"), "spec.extensionRef.kind"},
	{"v1alpha2", "extensionRef.portNumber optional (infer 9002 for a Service)", "absent", nil, "-", nil, ""},
	{"v1alpha2", "extensionRef.portNumber minimum 1, maximum 65535", "1", edit("spec.extensionRef.portNumber", 1), "65536", edit("spec.extensionRef.portNumber", 65536), "spec.extensionRef.portNumber 65536"},
	{"v1alpha2", "extensionRef.failureMode enum FailOpen, FailClose", "FailClose", edit("spec.extensionRef.failureMode", "FailClose"), `""`, edit("spec.extensionRef.failureMode", ""), "spec.extensionRef.failureMode"},
	{"v1alpha2", "structural schema: no unknown fields", "known fields", nil, "spec.targetPorts (v1's)", edit("spec.targetPorts", ports(8000)), "targetPorts"},
}

// TestCRDRules checks every rule of both CRDs in both directions: the edit the CRD accepts
// is accepted by Decode, the one it refuses is refused with ErrInvalidPool naming the field.
// With -v it logs the table as Markdown.
func TestCRDRules(t *testing.T) {
	decode := func(d doc) (*Pool, error) {
		js, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return Decode(js)
	}
	base := func(version string) doc {
		if version == "v1" {
			return v1Doc()
		}
		return alphaDoc()
	}
	table := []string{"| CRD | rule | valid (accepted) | invalid (refused) | error |", "|---|---|---|---|---|"}
	for _, r := range crdRules {
		valid := base(r.version)
		if r.valid != nil {
			valid = r.valid(valid)
		}
		if _, err := decode(valid); err != nil {
			t.Errorf("%s %q: valid %s: Decode = %v, want accepted", r.version, r.rule, r.validDesc, err)
		}
		msg := "-"
		if r.invalid != nil {
			_, err := decode(r.invalid(base(r.version)))
			if !errors.Is(err, ErrInvalidPool) || !strings.Contains(err.Error(), r.want) {
				t.Errorf("%s %q: invalid %s: Decode = %v, want ErrInvalidPool naming %q", r.version, r.rule, r.invalidDesc, err, r.want)
			} else {
				msg = strings.TrimPrefix(err.Error(), ErrInvalidPool.Error()+": ")
				if len(msg) > 110 {
					msg = msg[:110] + "…"
				}
			}
		}
		table = append(table, fmt.Sprintf("| %s | %s | %s | %s | %s |", r.version, strings.ReplaceAll(r.rule, "|", `\|`),
			r.validDesc, r.invalidDesc, strings.ReplaceAll(msg, "|", `\|`)))
	}
	t.Log("\n" + strings.Join(table, "\n"))
}

// TestAlphaPickerPort checks the port v1alpha2's extensionRef gets: its portNumber when
// given, 9002 for a Service (kind absent or Service) without one, none for another kind.
func TestAlphaPickerPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(doc) doc
		want int32 // 0: no port
	}{
		{"given", edit("spec.extensionRef.portNumber", 9100), 9100},
		{"kind absent", nil, 9002},
		{"kind Service", edit("spec.extensionRef.kind", "Service"), 9002},
		{"other kind", edit("spec.extensionRef.kind", "Picker"), 0},
	} {
		d := alphaDoc()
		if tc.edit != nil {
			d = tc.edit(d)
		}
		js, _ := json.Marshal(d)
		p, err := Decode(js)
		if err != nil {
			t.Fatalf("%s: Decode = %v", tc.name, err)
		}
		r := p.Spec.EndpointPickerRef
		var got int32
		if r.Port != nil {
			got = r.Port.Number
		}
		if got != tc.want {
			t.Errorf("%s: endpointPickerRef.port = %d, want %d", tc.name, got, tc.want)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: the v1 form fails Validate: %v", tc.name, err)
		}
	}
}
