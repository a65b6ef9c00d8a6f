package routingtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
)

// LoraNow is the fixed time the adapter fixtures' routers and backends are at.
var LoraNow = time.Unix(1_700_000_000, 0)

// LoraState is a fresh backend with the given adapter signals.
func LoraState(name string, running, waiting []string, slots int) routing.BackendState {
	return routing.BackendState{
		Name: name, Health: routing.Healthy, UpdatedAt: LoraNow,
		Known:           routing.SignalQueued | routing.SignalAdapters,
		RunningAdapters: running, WaitingAdapters: waiting, MaxAdapters: slots,
	}
}

// NewLoraRouter returns a router at LoraNow with the profile given and the backends published.
func NewLoraRouter(tb testing.TB, p routing.Profile, states ...routing.BackendState) *routing.Router {
	tb.Helper()
	r, err := routing.New(routing.Options{Profile: p, Now: func() time.Time { return LoraNow }, Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.Update(states); err != nil {
		tb.Fatal(err)
	}
	return r
}

// LoraFleet returns n backends "vllm-0".. with adapters, slots each, every other one serving
// any model.
func LoraFleet(n, slots int) []routing.BackendState {
	states := make([]routing.BackendState, n)
	for i := range states {
		name := "vllm-" + strconv.Itoa(i)
		states[i] = LoraState(name, []string{"ad-" + strconv.Itoa(i), "ad-" + strconv.Itoa(i+1)}, []string{"ad-" + strconv.Itoa(i+2)}, slots)
		states[i].Known |= routing.SignalRunning | routing.SignalKVUtilization
		states[i].Queued, states[i].Running, states[i].KVUtilization = i%3, i%5, 0.1*float64(i%7)
		states[i].Models = []string{"llama", "ad-" + strconv.Itoa(i), "ad-" + strconv.Itoa(i+1), "ad-" + strconv.Itoa(i+2)}
	}
	for i := range states {
		if i%2 == 0 {
			states[i].Models = nil // serves any
		}
	}
	return states
}
