package e2e_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/proxy"
)

// A server with two data-parallel ranks is two backends: each rank's load is read from its own
// series, the router places requests on a rank, the header pins them there, and a client
// cannot choose the rank itself.
func TestDataParallelRanks(t *testing.T) {
	var mu sync.Mutex
	ranks := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Rank 1 is busy: the router should prefer rank 0.
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\n"+
			"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\nvllm:num_requests_running{engine=\"1\",model_name=\"m\"} 60\n"+
			"# TYPE vllm:num_requests_waiting gauge\n"+
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\nvllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 40\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\n"+
			"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.1\nvllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.95\n")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranks[r.Header.Get("X-Data-Parallel-Rank")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	h, base := startHandler(t, testOptions([]proxy.Backend{{URL: srv.URL, Ranks: 2}}))

	var names []string
	for _, b := range h.Router().Backends(nil) {
		names = append(names, b.Name)
	}
	if want := []string{srv.URL + "#dp=0", srv.URL + "#dp=1"}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("router backends = %v, want %v", names, want)
	}
	for _, b := range h.Router().Backends(nil) {
		if strings.HasSuffix(b.Name, "#dp=1") && b.Running != 60 || strings.HasSuffix(b.Name, "#dp=0") && b.Running != 0 {
			t.Errorf("%s: running %d, want its own rank's series", b.Name, b.Running)
		}
	}
	for i := range 20 {
		resp, e := post(t, base+"/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"q%d"}]}`, i),
			http.Header{"X-Data-Parallel-Rank": {"1"}}) // the client's wish is not honoured
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %+v", resp.StatusCode, e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ranks["0"] < 15 || ranks[""] != 0 {
		t.Errorf("requests per rank header = %v, want most on the idle rank 0 and every one pinned", ranks)
	}
	closedExactlyOnce(t, h)
}

func TestRanksConfig(t *testing.T) {
	o := proxy.Options{Backends: []proxy.Backend{{URL: "http://10.0.0.7:8000", KVEvents: "tcp://10.0.0.7:5557", Replay: "tcp://10.0.0.7:5600", Ranks: 4}}}
	withKV(&o, "")
	h, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var got []string
	for _, s := range proxyseam.FollowKVEvents(h) {
		got = append(got, s.Backend+" "+s.Endpoint+" "+s.Replay)
	}
	want := []string{
		"http://10.0.0.7:8000#dp=0 tcp://10.0.0.7:5557 tcp://10.0.0.7:5600",
		"http://10.0.0.7:8000#dp=1 tcp://10.0.0.7:5558 tcp://10.0.0.7:5601",
		"http://10.0.0.7:8000#dp=2 tcp://10.0.0.7:5559 tcp://10.0.0.7:5602",
		"http://10.0.0.7:8000#dp=3 tcp://10.0.0.7:5560 tcp://10.0.0.7:5603",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("KV-event sources:\n%s\nwant (one publisher per rank, ports offset by the rank, as vLLM publishes):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []proxy.Backend{{URL: "http://a:1", Ranks: 2, KVEvents: "ipc:///tmp/kv"}, {URL: "http://a:1", Ranks: -1}} {
		if _, err := proxy.New(proxy.Options{Backends: []proxy.Backend{bad}}); err == nil {
			t.Errorf("New accepted %+v", bad)
		}
	}
}

// SGLang publishes the events of all its ranks on one endpoint, each batch naming its rank:
// one source, applied per rank.
func TestRanksSharedPublisher(t *testing.T) {
	sglang, _ := metrics.EngineOf("sglang")
	o := proxy.Options{Backends: []proxy.Backend{{URL: "http://10.0.0.9:30000", Engine: sglang, Ranks: 2, KVEvents: "tcp://10.0.0.9:5557", SharedKVPublisher: true}}}
	withKV(&o, "")
	h, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	src := proxyseam.FollowKVEvents(h)
	if len(src) != 1 || src[0].Endpoint != "tcp://10.0.0.9:5557" ||
		fmt.Sprint(src[0].Ranks) != fmt.Sprint([]string{"http://10.0.0.9:30000#dp=0", "http://10.0.0.9:30000#dp=1"}) {
		t.Errorf("sources = %+v, want one shared publisher applied per rank", src)
	}
}
