package simfleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Disaggregated serving: a Server acts, per request, as the prefill or the decode server of
// vLLM's KV-transfer protocol (its NIXL connector), from the request's kv_transfer_params.
//
// A prefill request (do_remote_decode) is served as usual — it generates its one token — and
// its whole answer carries kv_transfer_params naming this server (remote_engine_id,
// remote_host, remote_port) and the prompt's blocks (remote_block_ids); the server keeps a
// pending transfer for them until a decode server pulls it or TransferTimeout passes. A
// decode request (do_remote_prefill, with those parameters) pulls the KV over the side
// channel — POST http://remote_host:remote_port/kv_transfer/pull with the engine id and the
// block ids, simfleet's stand-in for NIXL's RDMA read — waits the transfer's time, and starts
// with every prompt token computed (engine.Request.RemotePrefill). A pull that fails (the
// prefill server is gone, the transfer unknown or expired) makes the decode server recompute
// the prompt itself, vLLM's default kv_load_failure_policy.

// kvTransferParams are the keys of kv_transfer_params the simulator reads; others are
// ignored, since connectors add their own.
type kvTransferParams struct {
	DoRemoteDecode  bool     `json:"do_remote_decode"`
	DoRemotePrefill bool     `json:"do_remote_prefill"`
	RemoteEngineID  *string  `json:"remote_engine_id"`
	RemoteBlockIDs  []uint64 `json:"remote_block_ids"`
	RemoteHost      *string  `json:"remote_host"`
	RemotePort      *int     `json:"remote_port"`
	TPSize          *int     `json:"tp_size"`
}

// maxTransferBlocks bounds remote_block_ids: a prompt of MaxModelLen tokens in blocks of one.
const maxTransferBlocks = 1 << 20

// parseTransferParams decodes and checks kv_transfer_params; a nil result means none. An error
// names the field.
func parseTransferParams(raw json.RawMessage) (*kvTransferParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var p kvTransferParams
	if err := json.Unmarshal(raw, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("kv_transfer_params.%s: want %v, got %s", te.Field, te.Type, te.Value)
		}
		return nil, fmt.Errorf("kv_transfer_params: %v", err)
	}
	switch {
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return nil, errors.New("kv_transfer_params: do_remote_decode and do_remote_prefill are exclusive")
	case !p.DoRemotePrefill:
		return &p, nil
	case p.RemoteEngineID == nil || *p.RemoteEngineID == "":
		return nil, errors.New("kv_transfer_params.remote_engine_id: a non-empty string is required with do_remote_prefill")
	case len(p.RemoteBlockIDs) == 0 || len(p.RemoteBlockIDs) > maxTransferBlocks:
		return nil, fmt.Errorf("kv_transfer_params.remote_block_ids: want 1 to %d block ids", maxTransferBlocks)
	case p.RemoteHost == nil || *p.RemoteHost == "":
		return nil, errors.New("kv_transfer_params.remote_host: a non-empty string is required with do_remote_prefill")
	case p.RemotePort == nil || *p.RemotePort < 1 || *p.RemotePort > 65535:
		return nil, errors.New("kv_transfer_params.remote_port: want 1..65535")
	case p.TPSize != nil && *p.TPSize < 1:
		return nil, errors.New("kv_transfer_params.tp_size: want a positive integer")
	}
	return &p, nil
}

// transfers holds a prefill server's pending transfers, bounded in number and age.
type transfers struct {
	mu      sync.Mutex
	next    uint64 // the first block id of the next transfer
	pending map[uint64]pendingTransfer
}

type pendingTransfer struct {
	blocks  int // block ids first .. first+blocks-1
	tokens  int
	expires time.Time
}

// maxPendingTransfers bounds the transfers a prefill server keeps for decode servers.
const maxPendingTransfers = 4096

// add records a transfer of a prompt of tokens tokens in blocks blocks and returns its block
// ids. The oldest expired transfers make room; when none has expired, the oldest is dropped.
func (t *transfers) add(tokens, blocks int, ttl time.Duration, now time.Time) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = make(map[uint64]pendingTransfer)
	}
	for id, p := range t.pending {
		if now.After(p.expires) {
			delete(t.pending, id)
		}
	}
	if len(t.pending) >= maxPendingTransfers {
		var oldest uint64
		first := true
		for id := range t.pending {
			if first || id < oldest {
				oldest, first = id, false
			}
		}
		delete(t.pending, oldest)
	}
	first := t.next
	t.next += uint64(blocks)
	t.pending[first] = pendingTransfer{blocks: blocks, tokens: tokens, expires: now.Add(ttl)}
	ids := make([]uint64, blocks)
	for i := range ids {
		ids[i] = first + uint64(i)
	}
	return ids
}

// take removes and returns the transfer whose block ids are ids.
func (t *transfers) take(ids []uint64, now time.Time) (pendingTransfer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(ids) == 0 {
		return pendingTransfer{}, false
	}
	p, ok := t.pending[ids[0]]
	if !ok || p.blocks != len(ids) || now.After(p.expires) {
		return pendingTransfer{}, false
	}
	for i, id := range ids {
		if id != ids[0]+uint64(i) {
			return pendingTransfer{}, false
		}
	}
	delete(t.pending, ids[0])
	return p, true
}

func (t *transfers) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// KVTransferStats counts what a Server did as a prefill and as a decode server.
type KVTransferStats struct {
	// Prefills are requests served with do_remote_decode; Decodes requests served with
	// do_remote_prefill.
	Prefills, Decodes uint64
	// PullsServed are transfers decode servers pulled from this server; PullsFailed the pulls
	// this server made that failed (it recomputed the prompt).
	PullsServed, PullsFailed uint64
	// Pending is the transfers kept for decode servers now.
	Pending int
	// TransferTime is the time this server's decodes spent receiving KV.
	TransferTime time.Duration
}

// kvStats are a Server's transfer counters and their series.
type kvStats struct {
	mu    sync.Mutex
	st    KVTransferStats
	descs [6]*prometheus.Desc
}

func newKVStats() *kvStats {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &kvStats{descs: [6]*prometheus.Desc{
		d("simfleet:kv_transfer_prefills_total", "Requests served as the prefill step of disaggregated serving (do_remote_decode)."),
		d("simfleet:kv_transfer_decodes_total", "Requests served as the decode step of disaggregated serving (do_remote_prefill)."),
		d("simfleet:kv_transfer_pulls_served_total", "KV transfers decode servers pulled from this server."),
		d("simfleet:kv_transfer_pulls_failed_total", "KV pulls of this server's decodes that failed; the prompt was recomputed."),
		d("simfleet:kv_transfer_pending", "KV transfers kept for decode servers to pull."),
		d("simfleet:kv_transfer_seconds_total", "Time this server's decodes spent receiving KV."),
	}}
}

func (k *kvStats) add(f func(*KVTransferStats)) {
	k.mu.Lock()
	f(&k.st)
	k.mu.Unlock()
}

// kvCollector exports a Server's transfer counters.
type kvCollector struct{ s *Server }

func (c kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.s.kv.descs {
		ch <- d
	}
}

func (c kvCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.KVTransferStats()
	d := c.s.kv.descs
	ch <- prometheus.MustNewConstMetric(d[0], prometheus.CounterValue, float64(st.Prefills))
	ch <- prometheus.MustNewConstMetric(d[1], prometheus.CounterValue, float64(st.Decodes))
	ch <- prometheus.MustNewConstMetric(d[2], prometheus.CounterValue, float64(st.PullsServed))
	ch <- prometheus.MustNewConstMetric(d[3], prometheus.CounterValue, float64(st.PullsFailed))
	ch <- prometheus.MustNewConstMetric(d[4], prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(d[5], prometheus.CounterValue, st.TransferTime.Seconds())
}

// KVTransferStats returns the server's transfer counters.
func (s *Server) KVTransferStats() KVTransferStats {
	s.kv.mu.Lock()
	st := s.kv.st
	s.kv.mu.Unlock()
	st.Pending = s.transfers.count()
	return st
}

// engineID names this server's engine in kv_transfer_params.
func (s *Server) engineID() string { return fmt.Sprintf("simfleet-%016x", s.idSalt) }

// prefillParams returns the kv_transfer_params of a prefill answer: this server, reached at
// host (its advertised side channel, or the address the request came to), and the prompt's
// blocks, kept for a decode server to pull.
func (s *Server) prefillParams(r *http.Request, promptLen int) map[string]any {
	host, port := s.sideChannel(r)
	bs := s.profile.BlockSize
	ids := s.transfers.add(promptLen, (promptLen+bs-1)/bs, s.transferTTL, time.Now())
	s.kv.add(func(st *KVTransferStats) { st.Prefills++ })
	return map[string]any{
		"do_remote_prefill": true, "do_remote_decode": false,
		"remote_engine_id": s.engineID(), "remote_block_ids": ids,
		"remote_host": host, "remote_port": port, "tp_size": 1,
	}
}

// sideChannel is the host and port decode servers pull KV from: Options.SideChannel, or the
// address the request was sent to.
func (s *Server) sideChannel(r *http.Request) (string, int) {
	addr := s.side
	if addr == "" {
		addr = r.Host
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			addr = la.String()
		}
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 80
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// pullRequest is the side channel's request: which transfer to pull.
type pullRequest struct {
	EngineID string   `json:"remote_engine_id"`
	BlockIDs []uint64 `json:"remote_block_ids"`
}

// handlePull serves a decode server's pull of a pending transfer: 200 with the prompt's
// token count, or 404 when this server keeps no such transfer.
func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	var req pullRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	p, ok := s.transfers.take(req.BlockIDs, time.Now())
	if !ok || req.EngineID != s.engineID() {
		writeError(w, http.StatusNotFound, "NotFoundError", "no such KV transfer")
		return
	}
	s.kv.add(func(st *KVTransferStats) { st.PullsServed++ })
	writeJSON(w, http.StatusOK, map[string]int{"tokens": p.tokens})
}

// pull fetches a transfer from its prefill server over the side channel and waits the
// transfer's time for the prompt's tokens not cached here. It reports whether the KV arrived;
// ctx's end is an error.
func (s *Server) pull(ctx context.Context, p *kvTransferParams, prompt []uint32) (bool, error) {
	start := time.Now()
	body, _ := json.Marshal(pullRequest{EngineID: *p.RemoteEngineID, BlockIDs: p.RemoteBlockIDs})
	url := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/kv_transfer/pull"
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.pullClient.Do(req)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	ok := err == nil && resp.StatusCode == http.StatusOK
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}
	if !ok {
		s.kv.add(func(st *KVTransferStats) { st.PullsFailed++ })
		return false, nil
	}
	missing := len(prompt) - s.CachedPrefix(prompt)*s.profile.BlockSize
	wait := s.transferLatency + time.Duration(max(missing, 0))*s.transferPerToken
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	s.kv.add(func(st *KVTransferStats) { st.TransferTime += time.Since(start) })
	return true, nil
}
