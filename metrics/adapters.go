package metrics

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// AdapterInfo says where a server with LoRA enabled lists its adapters: an info gauge whose
// labels carry the comma-separated names of the adapters of its running and waiting requests
// and its number of adapter slots, and whose value is the time the server wrote it. vLLM's is
//
//	vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="tax"} 1.7e9
//
// vLLM keeps a series per label set it ever wrote, each with the time it last set it, so the
// newest series is the current state (with data parallelism, the newest of each engine: their
// lists are merged and their slots added). A zero AdapterInfo reads nothing.
type AdapterInfo struct {
	// Name is the gauge's family name; empty means the server publishes no adapters.
	Name string
	// Running, Waiting and Max are the labels holding the running adapters, the waiting
	// adapters and the slot count.
	Running, Waiting, Max string
}

// validate reports a malformed AdapterInfo. O(1).
func (a *AdapterInfo) validate(profile string) error {
	if a.Name == "" {
		return nil
	}
	if a.Running == "" || a.Waiting == "" || a.Max == "" {
		return fmt.Errorf("%w: profile %q: Adapters %q needs the Running, Waiting and Max labels", ErrInvalidOptions, profile, a.Name)
	}
	return nil
}

// vllmAdapters is the vLLM engine's AdapterInfo.
var vllmAdapters = AdapterInfo{
	Name:    "vllm:lora_requests_info",
	Running: "running_lora_adapters",
	Waiting: "waiting_lora_adapters",
	Max:     "max_lora",
}

// maxAdapterNames bounds the names read from one label: a server lists at most a few hundred
// adapters, and an exposition is not allowed to make a scrape allocate without bound.
const maxAdapterNames = 4096

// extractAdapters sets r's adapter fields from fam when the profile reads adapters: the newest
// usable series per rank (rankLabel; every series is one rank without it), restricted to
// rank when set. A series is usable when its value is a finite time ≥ 0 and its Max label is an
// integer ≥ 1. O(series × labels + names).
func extractAdapters(r *Reading, fam *dto.MetricFamily, a *AdapterInfo, rankLabel, rank string) {
	if fam == nil || a.Name == "" {
		return
	}
	type best struct {
		rank string
		t    float64
		m    *dto.Metric
		max  int
	}
	var newest []best
	for _, m := range fam.GetMetric() {
		if m == nil {
			continue
		}
		t, ok := sampleValue(m, "")
		if !ok {
			continue
		}
		rk := ""
		if rankLabel != "" {
			rk = labelValue(m, rankLabel)
			if rank != "" && rk != rank {
				continue
			}
		}
		slots, err := strconv.Atoi(strings.TrimSpace(labelValue(m, a.Max)))
		if err != nil || slots < 1 || slots > maxAdapterNames {
			continue
		}
		i := slices.IndexFunc(newest, func(b best) bool { return b.rank == rk })
		switch {
		case i < 0:
			newest = append(newest, best{rk, t, m, slots})
		case t > newest[i].t, t == newest[i].t && busier(m, slots, newest[i].m, newest[i].max, a):
			newest[i] = best{rk, t, m, slots}
		}
	}
	if len(newest) == 0 {
		return
	}
	var running, waiting []string
	slots := 0
	for _, b := range newest {
		running = appendNames(running, labelValue(b.m, a.Running))
		waiting = appendNames(waiting, labelValue(b.m, a.Waiting))
		slots += b.max
	}
	r.RunningAdapters, r.WaitingAdapters = running, waiting
	r.MaxAdapters = float64(min(slots, math.MaxInt32))
	r.Found |= HasAdapters
}

// busier breaks a tie between two series stamped with the same time (a server that stamps
// whole seconds wrote both within one): it reports whether x describes the busier state than
// y — more adapters named (running and waiting), then more slots — and, between two states
// alike in that, whether x's running, waiting and slot labels come first in lexical order. The
// choice depends on the series' content only, never on the order the exposition lists them.
//
// Busier, because the two ways to be wrong do not cost the same: a router that counts an
// adapter slot as taken when it was freed a moment ago sends a new adapter elsewhere or
// waits a scrape; one that counts a taken slot as free sends a request whose adapter must
// then wait for a slot. O(labels + names), no allocation.
func busier(x *dto.Metric, xSlots int, y *dto.Metric, ySlots int, a *AdapterInfo) bool {
	xr, xw := labelValue(x, a.Running), labelValue(x, a.Waiting)
	yr, yw := labelValue(y, a.Running), labelValue(y, a.Waiting)
	if nx, ny := countNames(xr)+countNames(xw), countNames(yr)+countNames(yw); nx != ny {
		return nx > ny
	}
	if xSlots != ySlots {
		return xSlots > ySlots
	}
	if xr != yr {
		return xr < yr
	}
	if xw != yw {
		return xw < yw
	}
	return labelValue(x, a.Max) < labelValue(y, a.Max)
}

// countNames counts the non-empty comma-separated names of list, up to maxAdapterNames.
func countNames(list string) int {
	n := 0
	for name := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(name) != "" && n < maxAdapterNames {
			n++
		}
	}
	return n
}

// appendNames appends the non-empty, trimmed, comma-separated names of list to dst, skipping
// names already there, up to maxAdapterNames.
func appendNames(dst []string, list string) []string {
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" || len(dst) >= maxAdapterNames || slices.Contains(dst, name) {
			continue
		}
		dst = append(dst, name)
	}
	return dst
}

// labelValue returns the value of the label name, "" when absent. O(labels).
func labelValue(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}
