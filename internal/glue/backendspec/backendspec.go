// Package backendspec parses usher's one syntax for a backend, shared by the gateway's
// -backend flag and JSON config (package gateway) and the endpoint picker's endpoint lists and
// files (proxy/extproc), and ready for pod labels:
//
//	TARGET[,key=value]...
//
// TARGET is the backend's URL or address; options follow, separated by commas or white
// space. A list option takes several values: the items after it that have no '=' continue
// it, so models=llama-3,qwen-2.5,role=decode and "models=llama-3 qwen-2.5 role=decode" say
// the same. Keys are case-sensitive; an unknown key, a repeated one, an empty value or a bare
// item after a single-valued option is an error naming it.
package backendspec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/usher-llm/usher/routing"
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("backend syntax")

// Spec is a parsed backend: its target and its options in the order given.
type Spec struct {
	Target  string
	Options []Option
}

// Option is one key and its values (one, or several for a list option).
type Option struct {
	Key    string
	Values []string
}

// Keys describes the options a consumer accepts: each key, and whether it is a list.
type Keys map[string]bool

// Parse parses s, accepting the keys of keys (true: a list). O(len(s)).
func Parse(s string, keys Keys) (Spec, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return Spec{}, fmt.Errorf("%w: empty backend", ErrSyntax)
	}
	sp := Spec{Target: fields[0]}
	if strings.Contains(sp.Target, "=") {
		return sp, fmt.Errorf("%w: %q: the backend's URL or address comes first", ErrSyntax, s)
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			if n := len(sp.Options); n > 0 && keys[sp.Options[n-1].Key] {
				sp.Options[n-1].Values = append(sp.Options[n-1].Values, f)
				continue
			}
			return sp, fmt.Errorf("%w: %q: option %q is not key=value", ErrSyntax, s, f)
		}
		_, known := keys[k]
		switch {
		case !known:
			return sp, fmt.Errorf("%w: %q: unknown option %q (%s)", ErrSyntax, s, k, names(keys))
		case v == "":
			return sp, fmt.Errorf("%w: %q: option %q has no value", ErrSyntax, s, k)
		case slices.ContainsFunc(sp.Options, func(o Option) bool { return o.Key == k }):
			return sp, fmt.Errorf("%w: %q: option %q given twice", ErrSyntax, s, k)
		}
		sp.Options = append(sp.Options, Option{Key: k, Values: []string{v}})
	}
	return sp, nil
}

// Get returns the value of a single-valued option, or "".
func (sp Spec) Get(key string) string {
	for _, o := range sp.Options {
		if o.Key == key {
			return o.Values[0]
		}
	}
	return ""
}

// List returns the values of a list option, or nil.
func (sp Spec) List(key string) []string {
	for _, o := range sp.Options {
		if o.Key == key {
			return o.Values
		}
	}
	return nil
}

// String writes sp back in the syntax Parse reads.
func (sp Spec) String() string {
	var b strings.Builder
	b.WriteString(sp.Target)
	for _, o := range sp.Options {
		b.WriteString("," + o.Key + "=" + strings.Join(o.Values, ","))
	}
	return b.String()
}

func names(keys Keys) string {
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// Role parses a role option: prefill, decode, both ("" is both) or kv_both (both, for a
// server with a KV connector both ways, whose role a planner sets: see KVBoth).
func Role(s string) (routing.Role, error) {
	for _, r := range []routing.Role{routing.RoleBoth, routing.RolePrefill, routing.RoleDecode} {
		if s == r.String() {
			return r, nil
		}
	}
	if s == "" || s == KVBothRole {
		return routing.RoleBoth, nil
	}
	return routing.RoleBoth, fmt.Errorf("%w: role %q: want prefill, decode, both or kv_both", ErrSyntax, s)
}

// KVBothRole is the role option of a server with a KV connector that sends and receives
// (vLLM's kv_role kv_both): routing.BackendState.KVBoth with Role both.
const KVBothRole = "kv_both"

// KVBoth reports whether a role option is KVBothRole.
func KVBoth(s string) bool { return s == KVBothRole }
