package backendspec

import (
	"errors"
	"reflect"
	"testing"
)

var testKeys = Keys{"engine": false, "role": false, "models": true, "kv-events": false}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
	}{
		{"http://a:8000", Spec{Target: "http://a:8000"}},
		{"http://a:8000,engine=sglang", Spec{"http://a:8000", []Option{{"engine", []string{"sglang"}}}}},
		{"http://a:8000,models=llama,qwen,role=decode", Spec{"http://a:8000", []Option{{"models", []string{"llama", "qwen"}}, {"role", []string{"decode"}}}}},
		{"10.0.0.1:80 models=llama qwen role=decode", Spec{"10.0.0.1:80", []Option{{"models", []string{"llama", "qwen"}}, {"role", []string{"decode"}}}}},
		{" http://a:8000 ,\tkv-events=tcp://a:5557 ", Spec{"http://a:8000", []Option{{"kv-events", []string{"tcp://a:5557"}}}}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in, testKeys)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		back, err := Parse(got.String(), testKeys)
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("Parse(%q.String() = %q) = %+v, %v: does not round-trip", tt.in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", " , ", "engine=vllm", "http://a:1,colour=red", "http://a:1,engine=", "http://a:1,engine=a,engine=b",
		"http://a:1,engine=vllm,extra", "http://a:1,bare", "http://a:1,Engine=vllm"} {
		if _, err := Parse(bad, testKeys); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", bad, err)
		}
	}
}

func TestRole(t *testing.T) {
	for _, s := range []string{"", "both", "prefill", "decode"} {
		if r, err := Role(s); err != nil || (s != "" && r.String() != s) {
			t.Errorf("Role(%q) = %v, %v", s, r, err)
		}
	}
	if _, err := Role("Decode"); !errors.Is(err, ErrSyntax) {
		t.Errorf("Role(Decode) = %v, want ErrSyntax", err)
	}
}

// FuzzParse: Parse never panics, and what it accepts writes back to a string it reads alike.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"http://a:8000,models=a,b,role=decode", "10.0.0.1:80 engine=x", ",,=", "a,models=,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := Parse(s, testKeys)
		if err != nil {
			return
		}
		back, err := Parse(sp.String(), testKeys)
		if err != nil || !reflect.DeepEqual(back, sp) {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, sp, sp.String(), back, err)
		}
	})
}
