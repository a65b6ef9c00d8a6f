package proxy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// A fleet may serve several models, and LoRA adapters on them. The Handler keeps a catalog of
// what each backend serves — from Backend.Models and Backend.Adapters, or else from the
// backend's own GET /v1/models, where vLLM lists each adapter with its base model as
// "parent" — and routes a request only to the backends that serve the model it names
// (routing.Request.Model against routing.BackendState.Models). A request naming an adapter
// also carries the adapter (routing.Request.Adapter) for adapter-aware scorers, and its
// prompt is hashed under (base model, adapter, cache_salt), the key vLLM caches it under.

// catalog is what the fleet serves. It is immutable once published.
type catalog struct {
	lists  [][]listed           // per Backend: what it serves; nil: not known
	models map[string]modelInfo // every model a request may name; nil: any
	served [][]string           // per member (Handler.members): the names it serves; nil: any
	body   []byte               // GET /v1/models; nil: no list known yet
	object map[string][]byte    // GET /v1/models/{id}: each model's object, as in body
}

// listed is one entry of a backend's model list.
type listed struct {
	id, parent string
	raw        json.RawMessage // the backend's own object; nil for a configured name
}

// modelInfo is what a model name means.
type modelInfo struct {
	base    string // the base model: the name itself, or an adapter's parent
	adapter bool   // the name is a LoRA adapter of base
}

// resolve returns what model means and whether requests may name it. With nothing known
// yet, any model is accepted as a base model of its own name.
func (c *catalog) resolve(model string) (modelInfo, bool) {
	if c == nil || c.models == nil {
		return modelInfo{base: model}, true
	}
	mi, ok := c.models[model]
	return mi, ok
}

// staticLists returns what the configuration says each backend serves (nil where it does
// not say).
func staticLists(backends []Backend) [][]listed {
	lists := make([][]listed, len(backends))
	for i, b := range backends {
		if len(b.Models) == 0 {
			continue
		}
		for _, m := range b.Models {
			lists[i] = append(lists[i], listed{id: m})
		}
		for _, a := range b.Adapters {
			lists[i] = append(lists[i], listed{id: a, parent: b.Models[0]})
		}
	}
	return lists
}

// newCatalog builds the catalog of lists (per Backend), allowed (Options.Models; nil: the
// union of the lists) and members.
func newCatalog(lists [][]listed, allowed []string, backends []Backend, members []member) *catalog {
	c := &catalog{lists: lists, served: make([][]string, len(members))}
	byURL := make(map[string]int, len(backends))
	for i, b := range backends {
		byURL[b.URL] = i
	}
	for i, m := range members {
		if l := lists[byURL[m.url]]; l != nil {
			names := make([]string, len(l))
			for j, e := range l {
				names[j] = e.id
			}
			c.served[i] = names
		}
	}
	var entries []listed
	seen := map[string]bool{}
	for _, l := range lists {
		for _, e := range l {
			if !seen[e.id] {
				seen[e.id] = true
				entries = append(entries, e)
			}
		}
	}
	if allowed != nil {
		known := make(map[string]listed, len(entries))
		for _, e := range entries {
			known[e.id] = e
		}
		entries = entries[:0]
		for _, m := range allowed {
			e, ok := known[m]
			if !ok {
				e = listed{id: m}
			}
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return c
	}
	slices.SortFunc(entries, func(a, b listed) int {
		return bytes.Compare([]byte(a.id), []byte(b.id))
	})
	c.models = make(map[string]modelInfo, len(entries))
	for _, e := range entries {
		mi := modelInfo{base: e.id}
		if e.parent != "" && e.parent != e.id {
			mi = modelInfo{base: e.parent, adapter: true}
		}
		c.models[e.id] = mi
	}
	c.object = make(map[string][]byte, len(entries))
	for _, e := range entries {
		c.object[e.id] = modelObject(e)
	}
	c.body = modelListBody(entries, c.object)
	return c
}

// catalogEpoch is the "created" of the model objects the Handler writes itself (for
// configured names): when the process started.
var catalogEpoch = time.Now().Unix()

// modelObject is a model's object: as the first backend that listed it wrote it, or for a
// configured name OpenAI's fields (id, object "model", created, owned_by "usher") and
// vLLM's root and parent (the base model of an adapter, null otherwise).
func modelObject(e listed) []byte {
	if e.raw != nil {
		return e.raw
	}
	var parent *string
	if e.parent != "" && e.parent != e.id {
		parent = &e.parent
	}
	raw, _ := json.Marshal(struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		OwnedBy string  `json:"owned_by"`
		Root    string  `json:"root"`
		Parent  *string `json:"parent"`
	}{e.id, "model", catalogEpoch, "usher", e.id, parent})
	return raw
}

// modelListBody renders GET /v1/models: the objects of entries, in their order.
func modelListBody(entries []listed, objects map[string][]byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(objects[e.id])
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// parseModelList reads an OpenAI model list ({"data":[{"id":..., "parent":...}, ...]}),
// as vLLM serves it (adapters name their base model in "parent").
func parseModelList(body []byte) ([]listed, error) {
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	out := make([]listed, 0, len(list.Data))
	for _, raw := range list.Data {
		var m struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == "" || len(m.ID) > 256 {
			continue
		}
		e := listed{id: m.ID, raw: raw}
		if m.Parent != nil && len(*m.Parent) <= 256 {
			e.parent = *m.Parent
		}
		out = append(out, e)
	}
	return out, nil
}

// resolveModel returns what a request's model means, and whether requests may name it.
func (h *Handler) resolveModel(model string) (modelInfo, bool) {
	return h.catalog.Load().resolve(model)
}

// listedCatalog returns the catalog once it lists models, asking the backends for theirs
// (for at most 5 s) when none is known yet; it answers 503 itself and returns nil when none
// could be.
func (h *Handler) listedCatalog(w http.ResponseWriter, r *http.Request) *catalog {
	c := h.catalog.Load()
	if c.body == nil && h.discovering() {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		h.refreshModels(ctx)
		cancel()
		c = h.catalog.Load()
	}
	if c.body == nil {
		openaiwire.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable,
			Code: "no_backend", Message: "no backend listed its models"})
		return nil
	}
	return c
}

// serveModels answers GET /v1/models: the union of what the backends serve (or the
// configured models).
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	if c := h.listedCatalog(w, r); c != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(c.body)
	}
}

// modelsPrefix is the path of a model's object, GET /v1/models/{id} (the id may hold '/').
const modelsPrefix = "/v1/models/"

// serveModel answers GET /v1/models/{id}: the model's object as GET /v1/models lists it, or
// 404 in OpenAI's shape naming the model (model_not_found, as OpenAI answers).
func (h *Handler) serveModel(w http.ResponseWriter, r *http.Request, id string) {
	c := h.listedCatalog(w, r)
	if c == nil {
		return
	}
	obj, ok := c.object[id]
	if !ok {
		openaiwire.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "model_not_found",
			Param: "model", Message: fmt.Sprintf("the model %q does not exist here", clip(id))})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(obj)))
	_, _ = w.Write(obj)
}

// discovering reports whether some backend's models are learnt from its GET /v1/models.
func (h *Handler) discovering() bool {
	return slices.ContainsFunc(h.backends, func(b Backend) bool { return len(b.Models) == 0 })
}

func (h *Handler) refreshModelsEvery(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			h.refreshModels(ctx)
		}
	}
}

// refreshModels asks every backend without configured models for its list. A backend that
// does not answer keeps the list it gave last.
func (h *Handler) refreshModels(ctx context.Context) {
	if !h.discovering() {
		return
	}
	h.modelsMu.Lock()
	defer h.modelsMu.Unlock()
	old := h.catalog.Load()
	lists := slices.Clone(old.lists)
	changed := false
	for i, b := range h.backends {
		if len(b.Models) > 0 {
			continue
		}
		l, err := fetchModels(ctx, h.transport, b.URL)
		if err != nil {
			continue
		}
		lists[i], changed = l, true
	}
	if changed {
		h.catalog.Store(newCatalog(lists, h.allowedModels, h.backends, h.members))
		if h.scraper != nil && h.scraped.Load() {
			h.publishStates() // the router learns what each backend serves now
		}
	}
}

func fetchModels(ctx context.Context, rt http.RoundTripper, base string) ([]listed, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/v1/models: %s", base, resp.Status)
	}
	l, err := parseModelList(body)
	if err != nil || len(l) == 0 {
		return nil, fmt.Errorf("%s/v1/models: no models listed", base)
	}
	return l, nil
}

// setServed writes what each member serves into the states handed to the router.
func (h *Handler) setServed(states []routing.BackendState) {
	c := h.catalog.Load()
	for i := range states {
		if j, ok := h.memberIndex[states[i].Name]; ok {
			states[i].Models = c.served[j]
		}
	}
}

// PoolLimits configures the admission of one model pool: the backends that serve a base
// model (and its adapters), when the fleet's backends serve different models.
type PoolLimits struct {
	// MaxInFlight bounds the pool's requests in flight. Zero: 64 per backend of the pool.
	MaxInFlight int
	// Saturation, if positive, holds the pool's admission while llm-d's saturation estimate
	// over the pool's backends is at or above it. Zero: Options.Saturation.
	Saturation float64
}

// pool is the admission of one base model's backends.
type pool struct {
	base    string
	members []int // indexes into Handler.members
	queue   *flowcontrol.Queue
	limit   int           // MaxInFlight
	level   atomic.Uint64 // math.Float64bits of its saturation estimate
	scraped atomic.Bool
}

// Saturation returns the pool's saturation estimate as last scraped (1 before the first).
func (p *pool) saturation() float64 {
	if !p.scraped.Load() {
		return 1
	}
	return math.Float64frombits(p.level.Load())
}

// basesOf returns the base models the configuration says each backend serves (nil: not said).
func basesOf(backends []Backend) [][]string {
	out := make([][]string, len(backends))
	for i, b := range backends {
		out[i] = b.Models
	}
	return out
}

// newPools makes one queue per base model when the configured backends do not all serve the
// same models; nil when they do (the Handler's one queue admits everything).
func (h *Handler) newPools(opts Options) (map[string]*pool, error) {
	for model := range opts.Pools {
		if !slices.ContainsFunc(opts.Backends, func(b Backend) bool { return slices.Contains(b.Models, model) }) {
			return nil, fmt.Errorf("%w: Pools names %q, which no backend lists in Models", ErrInvalidOptions, model)
		}
	}
	bases := basesOf(opts.Backends)
	same := true
	for _, b := range bases[1:] {
		if !sameModels(bases[0], b) {
			same = false
		}
	}
	if same && len(opts.Pools) == 0 {
		return nil, nil
	}
	if opts.Queue != nil {
		return nil, fmt.Errorf("%w: backends serve different models, which get a queue each; Options.Queue cannot be one for all", ErrInvalidOptions)
	}
	for i, b := range opts.Backends {
		if len(b.Models) == 0 {
			return nil, fmt.Errorf("%w: backend %q lists no models while others do; with pools by model each backend must list its models", ErrInvalidOptions, opts.Backends[i].URL)
		}
	}
	pools := map[string]*pool{}
	for i, m := range h.members {
		b := opts.Backends[slices.IndexFunc(opts.Backends, func(b Backend) bool { return b.URL == m.url })]
		for _, model := range b.Models {
			p := pools[model]
			if p == nil {
				p = &pool{base: model}
				pools[model] = p
			}
			p.members = append(p.members, i)
		}
	}
	for model, p := range pools {
		o := opts
		lim := opts.Pools[model]
		if lim.MaxInFlight < 0 || lim.Saturation < 0 || math.IsNaN(lim.Saturation) {
			return nil, fmt.Errorf("%w: pool %q: negative limit", ErrInvalidOptions, model)
		}
		o.MaxInFlight = cmp.Or(lim.MaxInFlight, 64*len(p.members))
		if lim.Saturation > 0 {
			o.Saturation = lim.Saturation
		}
		var err error
		if p.queue, p.limit, err = h.newQueue(o, p.saturation); err != nil {
			return nil, err
		}
	}
	return pools, nil
}

// queueFor returns the queue that admits requests for base.
func (h *Handler) queueFor(base string) *flowcontrol.Queue {
	if p := h.pools[base]; p != nil {
		return p.queue
	}
	return h.queue
}

// publishPools refreshes each pool's saturation estimate from states and wakes its queue
// when it has room again.
func (h *Handler) publishPools(states []routing.BackendState, now time.Time) {
	if len(h.pools) == 0 {
		return
	}
	var sub []routing.BackendState
	for _, p := range h.pools {
		sub = sub[:0]
		for _, i := range p.members {
			for j := range states {
				if states[j].Name == h.members[i].name {
					sub = append(sub, states[j])
					break
				}
			}
		}
		level := fleetSaturation(sub, now)
		old := math.Float64frombits(p.level.Swap(math.Float64bits(level)))
		if first := !p.scraped.Swap(true); first || level < old {
			p.queue.Notify()
		}
	}
}
