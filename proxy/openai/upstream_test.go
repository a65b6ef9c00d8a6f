package openai_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

func TestAppendUpstream(t *testing.T) {
	const m = `"messages":` + hi
	for _, tc := range []struct {
		name       string
		ep         openai.API // 0: Chat
		body, want string     // want "": the body unchanged
	}{
		{name: "nothing to do", body: `{"model":"m",` + m + `}`},
		{name: "stream false", body: `{"model":"m",` + m + `,"stream":false}`},
		{name: "include_usage true", body: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "include_usage true, escaped", body: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_\u0075sage":true}}`},

		{name: "priority first", body: `{"priority":1,"model":"m",` + m + `}`, want: `{"model":"m",` + m + `}`},
		{name: "priority first, spaced", body: "{ \"priority\" : 1 ,\n \"model\":\"m\"," + m + `}`, want: "{ \"model\":\"m\"," + m + `}`},
		{name: "priority middle", body: `{"model":"m" , "priority": -3 ,` + m + `}`, want: `{"model":"m" ,` + m + `}`},
		{name: "priority last", body: `{"model":"m",` + m + `,"priority":null}`, want: `{"model":"m",` + m + `}`},
		{name: "priority last, spaced", body: `{"model":"m",` + m + " ,\n\t\"priority\" : 2\n}", want: `{"model":"m",` + m + "\n}"},
		{name: "priority escaped", body: `{"model":"m","pr\u0069ority":7,` + m + `}`, want: `{"model":"m",` + m + `}`},
		{name: "Priority is not priority", body: `{"model":"m","Priority":7,` + m + `}`},

		{name: "stream_options absent", body: `{"model":"m",` + m + `,"stream":true}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "stream_options absent, spaced", body: `{"model":"m",` + m + ` , "stream" : true  }`,
			want: `{"model":"m",` + m + ` , "stream" : true,"stream_options":{"include_usage":true}  }`},
		{name: "stream_options null", body: `{"model":"m",` + m + `,"stream":true,"stream_options":null}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "stream_options empty", body: `{"model":"m",` + m + `,"stream_options":{ },"stream":true}`,
			want: `{"model":"m",` + m + `,"stream_options":{"include_usage":true },"stream":true}`},
		{name: "stream_options other member", body: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_obfuscation":false}}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}`},
		{name: "include_usage false", body: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":false}}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "include_usage null", body: `{"model":"m",` + m + `,"stream":true,"stream_options":{"a":1, "include_usage" : null }}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"a":1, "include_usage" : true }}`},

		{name: "both, priority last", body: `{"model":"m",` + m + `,"stream":true,"priority":1}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "both, priority first", body: `{"priority":1,"stream":true,"model":"m",` + m + `}`,
			want: `{"stream":true,"model":"m",` + m + `,"stream_options":{"include_usage":true}}`},
		{name: "both, priority after null stream_options", body: `{"model":"m",` + m + `,"stream":true,"stream_options":null,"priority":1}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "both, priority before stream_options", body: `{"model":"m",` + m + `,"stream":true,"priority":1,"stream_options":{}}`,
			want: `{"model":"m",` + m + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "both, priority first before stream_options", body: `{"priority":1,"stream_options":{"include_usage":false},"stream":true,"model":"m",` + m + `}`,
			want: `{"stream_options":{"include_usage":true},"stream":true,"model":"m",` + m + `}`},
		{name: "completions", ep: openai.Completions, body: `{"model":"m","prompt":[1,2],"priority":0,"stream":true}`,
			want: `{"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.ep
			if ep == 0 {
				ep = openai.Chat
			}
			r, err := openai.Parse([]byte(tc.body), ep, openai.ParseLimits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := tc.want
			if want == "" {
				want = tc.body
			}
			got := openaiwire.AppendUpstream(r, []byte("prefix:"))
			if string(got) != "prefix:"+want {
				t.Errorf("AppendUpstream:\n got %s\nwant prefix:%s", got, want)
			}
			got = got[len("prefix:"):]
			if !json.Valid(got) {
				t.Errorf("AppendUpstream is not valid JSON: %s", got)
			}
			if tc.want == "" && !bytes.Equal(got, r.Body) {
				t.Errorf("AppendUpstream changed the body: %s", got)
			}
			// What the backend reads of it: the same request, streaming with usage.
			up, err := openai.Parse(got, ep, openai.ParseLimits{})
			if err != nil {
				t.Fatalf("Parse(AppendUpstream): %v", err)
			}
			if up.HasPriority || up.Stream != r.Stream || up.Stream && !up.IncludeUsage {
				t.Errorf("Parse(AppendUpstream) = HasPriority %v, Stream %v, IncludeUsage %v", up.HasPriority, up.Stream, up.IncludeUsage)
			}
		})
	}
}

// Upstream is AppendUpstream without the copy when nothing changes.
func TestUpstream(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","priority":3,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		r, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		up, want := openaiwire.Upstream(r), openaiwire.AppendUpstream(r, nil)
		if string(up) != string(want) {
			t.Errorf("Upstream(%s) = %s, want %s", body, up, want)
		}
		if same := &up[0] == &r.Body[0]; same != (string(want) == body) {
			t.Errorf("Upstream(%s) shares the body: %v, want %v (only when unchanged)", body, same, !same)
		}
	}
}
