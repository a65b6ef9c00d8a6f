package main

import (
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

// With -trust-objective-header the picker has objectiveBands bands and ordinary requests
// (priority 0, no objective, an unknown one) go to objectiveDefaultBand: band 0 is left for
// positive priorities, bands 2 and 3 for negative ones (sheddable: served last, so the first
// to wait out -ttl under pressure).
const (
	objectiveBands       = 4
	objectiveDefaultBand = 1
)

// objectiveKeyer is the picker's keyer when the objective header is trusted: the inner
// keyer's identity, with the band of the InferenceObjective the header names. A request
// naming none keeps the inner keyer's band (objectiveDefaultBand, or its tenant's); one
// naming an unknown objective gets objectiveDefaultBand, as the reference picker gives it
// its default priority (not an error), and is logged at most once a minute.
type objectiveKeyer struct {
	inner   proxy.FlowKeyer
	objs    *inferencepool.Objectives
	lastLog atomic.Int64 // unix nanoseconds of the last unknown-objective log line
}

// Key implements proxy.FlowKeyer.
func (k *objectiveKeyer) Key(r *http.Request, req *openai.Request) (proxy.Identity, error) {
	id, err := k.inner.Key(r, req)
	if err != nil {
		return id, err
	}
	name := r.Header.Get(inferencepool.ObjectiveHeader)
	if name == "" {
		return id, nil
	}
	b, ok := k.objs.Band(name)
	if !ok {
		now, last := time.Now().UnixNano(), k.lastLog.Load()
		if now-last >= int64(time.Minute) && k.lastLog.CompareAndSwap(last, now) {
			log.Printf("epp: %s %.64q names no InferenceObjective of the pool: default band %d (logged once a minute)",
				inferencepool.ObjectiveHeader, name, b)
		}
	}
	id.Band = b
	return id, nil
}
