package jinja

import (
	"testing"
)

// FuzzParse parses arbitrary templates and renders those that parse, under small limits:
// neither may panic, and a render stays within its limits.
func FuzzParse(f *testing.F) {
	for _, c := range refCases {
		f.Add(c.tmpl)
	}
	f.Add("{% for x in range(10) %}{% for y in range(10) %}{{ x * y }}{% endfor %}{% endfor %}")
	f.Add("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}")
	f.Add("{{ 'a' * 1000000 }}{{ [1][5] }}{{ x[::0] }}")
	f.Add("{% set ns = namespace(l=[1], s='ab') %}{% for i in range(200) %}{% set ns.l = ns.l + ns.l %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
	f.Add("{%- set ns = namespace(a=1) -%}{% set ns.a = ns.a ~ ns %}{{ ns.a|tojson(indent=2) }}")
	f.Fuzz(func(t *testing.T, src string) {
		tp, err := Parse(src)
		if err != nil {
			return
		}
		vars := map[string]any{
			"messages": []any{dictOf("role", "user", "content", "hi"), dictOf("role", "assistant", "content", nil)},
			"tools":    nil,
			"s":        "héllo",
			"n":        int64(3),
		}
		lim := Limits{Steps: 20000, Output: 1 << 20, Calls: 16}
		out, _ := tp.Render(nil, vars, lim)
		if len(out) > lim.Output+(1<<20)+64 {
			t.Fatalf("output %d bytes, limit %d", len(out), lim.Output)
		}
	})
}

func dictOf(kv ...any) *Dict {
	d := NewDict(len(kv) / 2)
	for i := 0; i+1 < len(kv); i += 2 {
		d.Set(kv[i].(string), kv[i+1])
	}
	return d
}
