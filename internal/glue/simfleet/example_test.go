package simfleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/usher-llm/usher/internal/glue/simfleet"
)

// Start two simulated vLLM servers on loopback ports and ask one of them twice: the second
// request finds the shared system prompt in the prefix cache.
func ExampleStartFleet() {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()

	ask := func(question string) {
		body := `{"model": "usher/demo", "max_tokens": 3, "ignore_eos": true, "messages": [
			{"role": "system", "content": "You are a terse assistant who answers every question in three words."},
			{"role": "user", "content": "` + question + `"}]}`
		resp, err := http.Post(fleet.URLs()[0]+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			panic(err)
		}
		fmt.Printf("%q: %d prompt tokens, %d cached\n", out.Choices[0].Message.Content,
			out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens)
	}
	ask("What is a KV cache?")
	ask("Why route by prefix?")
	fmt.Println(len(fleet.URLs()), "servers")
	// Output:
	// "think story best": 34 prompt tokens, 0 cached
	// "first across years": 33 prompt tokens, 16 cached
	// 2 servers
}

// A Server is an http.Handler: serve it with httptest and drive its engine with Run.
func ExampleServer() {
	s, err := simfleet.New(simfleet.Options{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.Close()

	resp, err := http.Post(ts.URL+"/tokenize", "application/json", strings.NewReader(`{"prompt": "Hello, simulated world"}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var tok struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	fmt.Println(tok.Count, tok.Tokens[0] == simfleet.Tokenize("Hello")[0])
	// Output:
	// 5 true
}

// Equal text prefixes give equal token prefixes.
func ExampleTokenize() {
	a := simfleet.Tokenize("You are a helpful assistant. Summarise this file.")
	b := simfleet.Tokenize("You are a helpful assistant. Review this patch.")
	shared := 0
	for shared < len(a) && shared < len(b) && a[shared] == b[shared] {
		shared++
	}
	fmt.Println(len(a), len(b), shared)
	// Output:
	// 12 11 7
}

// Disaggregated serving between two servers: the first prefills the prompt and answers the
// kv_transfer_params of its pending KV; the second, given them, pulls the KV over the side
// channel and decodes without a prefill of its own.
func ExampleServer_KVTransferStats() {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()
	prefill, decode := fleet.URLs()[0], fleet.URLs()[1]
	prompt := strings.Repeat("Summarise the quarterly ledger line by line. ", 20)

	type answer struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	complete := func(url string, maxTokens int, params any) answer {
		body, _ := json.Marshal(map[string]any{"model": "usher/demo", "prompt": prompt, "max_tokens": maxTokens,
			"ignore_eos": true, "kv_transfer_params": params})
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var a answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			panic(err)
		}
		return a
	}

	pre := complete(prefill, 1, map[string]any{"do_remote_decode": true})
	dec := complete(decode, 4, pre.KVTransferParams)
	fmt.Printf("decode: %d prompt tokens, %d cached here, %d generated\n",
		dec.Usage.PromptTokens, dec.Usage.PromptTokensDetails.CachedTokens, dec.Usage.CompletionTokens)
	p, d := fleet.Servers()[0].KVTransferStats(), fleet.Servers()[1].KVTransferStats()
	fmt.Printf("prefill server: %d prefill, %d pull served, %d pending\n", p.Prefills, p.PullsServed, p.Pending)
	fmt.Printf("decode server: %d decode, %d pull failed\n", d.Decodes, d.PullsFailed)
	// Output:
	// decode: 201 prompt tokens, 0 cached here, 4 generated
	// prefill server: 1 prefill, 1 pull served, 0 pending
	// decode server: 1 decode, 0 pull failed
}
