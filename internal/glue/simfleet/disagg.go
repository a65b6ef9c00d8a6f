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
	"sync/atomic"
	"time"
)

// Disaggregated serving: a Server acts, per request, as the prefill or the decode server of
// vLLM's KV-transfer protocol (its NIXL connector), from the request's kv_transfer_params.
// doc.go tells the protocol; this file holds its parts: the parameters' decoder, the prefill
// server's pending transfers, the side channel's handler and the decode server's pull.

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

// maxTransferBlocks bounds remote_block_ids: a prompt of a million tokens in blocks of one.
const maxTransferBlocks = 1 << 20

// parseTransferParams decodes and checks kv_transfer_params; a nil result means none (absent
// or null). A value of the wrong type is an error naming its field, such as
// "kv_transfer_params.remote_port: want int, got string"; so are do_remote_decode and
// do_remote_prefill both true, and, with do_remote_prefill, a missing or empty
// remote_engine_id or remote_host, no remote_block_ids, a port outside 1..65535 or a tp_size
// below 1. Keys are matched exactly, as a connector reads them from its dict; unknown keys are
// ignored. O(len(raw)).
func parseTransferParams(raw json.RawMessage) (*kvTransferParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("kv_transfer_params: want an object")
	}
	var p kvTransferParams
	if err := decodeExact(raw, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("kv_transfer_params.%s: want %v, got %s", te.Field, te.Type, te.Value)
		}
		return nil, fmt.Errorf("kv_transfer_params: %v", err)
	}
	switch {
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return nil, errors.New("kv_transfer_params.do_remote_decode: do_remote_decode and do_remote_prefill are exclusive")
	case !p.DoRemotePrefill:
		return &p, nil
	case p.RemoteEngineID == nil || *p.RemoteEngineID == "":
		return nil, errors.New("kv_transfer_params.remote_engine_id: a non-empty string is required with do_remote_prefill")
	case len(p.RemoteBlockIDs) == 0 || len(p.RemoteBlockIDs) > maxTransferBlocks:
		return nil, fmt.Errorf("kv_transfer_params.remote_block_ids: want 1 to %d block ids with do_remote_prefill", maxTransferBlocks)
	case p.RemoteHost == nil || *p.RemoteHost == "":
		return nil, errors.New("kv_transfer_params.remote_host: a non-empty string is required with do_remote_prefill")
	case p.RemotePort == nil || *p.RemotePort < 1 || *p.RemotePort > 65535:
		return nil, errors.New("kv_transfer_params.remote_port: want a port, 1..65535, with do_remote_prefill")
	case p.TPSize != nil && *p.TPSize < 1:
		return nil, errors.New("kv_transfer_params.tp_size: want a positive integer")
	}
	return &p, nil
}

// maxPendingTransfers bounds the transfers a prefill server keeps for decode servers.
const maxPendingTransfers = 4096

// transfers holds a prefill server's pending transfers: at most maxPendingTransfers, each
// for ttl. A transfer is named by its first block id; block ids are never reused.
//
// Every transfer lives equally long, so the order of arrival is the order of expiry: a FIFO
// queue finds the expired transfers at its head, each in O(1), and names the oldest to drop
// when the bound is reached. (A heap ordered by expiry would cost O(log n) for nothing; a
// scan of the map on every add, O(n).) Transfers pulled early stay in the queue, absent from
// the map, until they reach its head, so the queue holds at most the transfers of the last
// ttl.
type transfers struct {
	ttl time.Duration // immutable after New

	mu      sync.Mutex
	next    uint64 // the first block id of the next transfer
	pending map[uint64]pendingTransfer
	queue   []uint64 // first block ids in order of arrival; queue[head:] is live
	head    int
	dropped uint64 // transfers expired or evicted unpulled
}

type pendingTransfer struct {
	blocks  int // block ids first .. first+blocks-1
	tokens  int // the prompt's length
	expires time.Time
}

// add records a transfer of a prompt of tokens tokens in blocks blocks and returns its block
// ids. When maxPendingTransfers are pending, the oldest is dropped. O(blocks) amortized.
func (t *transfers) add(tokens, blocks int, now time.Time) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = make(map[uint64]pendingTransfer)
	}
	t.expireLocked(now)
	for len(t.pending) >= maxPendingTransfers {
		if _, ok := t.pending[t.queue[t.head]]; ok {
			delete(t.pending, t.queue[t.head])
			t.dropped++
		}
		t.popLocked()
	}
	first := t.next
	t.next += uint64(blocks)
	t.pending[first] = pendingTransfer{blocks: blocks, tokens: tokens, expires: now.Add(t.ttl)}
	t.queue = append(t.queue, first)
	ids := make([]uint64, blocks)
	for i := range ids {
		ids[i] = first + uint64(i)
	}
	return ids
}

// take releases the transfer whose block ids are ids, of a prompt of tokens tokens, and
// reports whether it was pending. A transfer of another prompt length stays pending: the
// decode server asking for it holds another prompt. O(len(ids)).
func (t *transfers) take(ids []uint64, tokens int, now time.Time) (found, match bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	if len(ids) == 0 {
		return false, false
	}
	p, ok := t.pending[ids[0]]
	if !ok || p.blocks != len(ids) {
		return false, false
	}
	for i, id := range ids {
		if id != ids[0]+uint64(i) {
			return false, false
		}
	}
	if p.tokens != tokens {
		return true, false
	}
	delete(t.pending, ids[0])
	return true, true
}

// stats returns the number of transfers pending and the number dropped unpulled.
func (t *transfers) stats(now time.Time) (pending int, dropped uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	return len(t.pending), t.dropped
}

// expireLocked drops the transfers expired at now, and forgets the pulled ones ahead of them
// in the queue.
func (t *transfers) expireLocked(now time.Time) {
	for t.head < len(t.queue) {
		p, ok := t.pending[t.queue[t.head]]
		if ok && !now.After(p.expires) {
			break
		}
		if ok {
			delete(t.pending, t.queue[t.head])
			t.dropped++
		}
		t.popLocked()
	}
}

// popLocked removes the queue's head, compacting the queue when half of it is dead.
func (t *transfers) popLocked() {
	t.head++
	switch {
	case t.head == len(t.queue):
		t.queue, t.head = t.queue[:0], 0
	case t.head > 64 && t.head*2 > len(t.queue):
		k := copy(t.queue, t.queue[t.head:])
		t.queue, t.head = t.queue[:k], 0
	}
}

// KVTransferStats counts what a Server did as a prefill and as a decode server of
// disaggregated serving. Its counters only grow.
type KVTransferStats struct {
	// Prefills are requests answered as a prefill step (do_remote_decode), each leaving a
	// pending transfer; Decodes are requests served as a decode step (do_remote_prefill),
	// whether their pull succeeded or not.
	Prefills, Decodes uint64
	// PullsServed are the transfers decode servers pulled from this server; PullsFailed are
	// the pulls this server's decodes made that failed, after which it recomputed the prompt.
	PullsServed, PullsFailed uint64
	// Pending is the number of transfers this server keeps for decode servers now; Dropped
	// counts those that expired (Options.TransferTimeout) or were evicted unpulled.
	Pending int
	Dropped uint64
	// TransferTime is the time this server's decodes spent on successful pulls: the side
	// channel's round trip and the modelled transfer.
	TransferTime time.Duration
}

// kvCounters are a Server's transfer counters other than the pending transfers'.
type kvCounters struct {
	prefills, decodes, pullsServed, pullsFailed atomic.Uint64
	transferNanos                               atomic.Int64
}

// KVTransferStats returns the server's transfer counters. Safe for concurrent use. O(1)
// amortized.
func (s *Server) KVTransferStats() KVTransferStats {
	pending, dropped := s.transfers.stats(time.Now())
	return KVTransferStats{
		Prefills:     s.kv.prefills.Load(),
		Decodes:      s.kv.decodes.Load(),
		PullsServed:  s.kv.pullsServed.Load(),
		PullsFailed:  s.kv.pullsFailed.Load(),
		Pending:      pending,
		Dropped:      dropped,
		TransferTime: time.Duration(s.kv.transferNanos.Load()),
	}
}

// prefillParams keeps a pending transfer of a prefill step's prompt and returns the
// kv_transfer_params of its answer: this server's engine, the prompt's blocks, and the side
// channel decode servers pull them from.
func (s *Server) prefillParams(r *http.Request, promptLen int) map[string]any {
	host, port := s.sideChannel(r)
	bs := s.profile.BlockSize
	ids := s.transfers.add(promptLen, (promptLen+bs-1)/bs, time.Now())
	s.kv.prefills.Add(1)
	return map[string]any{
		"do_remote_prefill": true, "do_remote_decode": false,
		"remote_engine_id": s.engineID, "remote_block_ids": ids,
		"remote_host": host, "remote_port": port, "tp_size": 1,
	}
}

// sideChannel is the host and port decode servers pull KV from: Options.SideChannel, or the
// local address of the connection the request came on, which is this server's listener.
func (s *Server) sideChannel(r *http.Request) (string, int) {
	if s.sideHost != "" {
		return s.sideHost, s.sidePort
	}
	addr := r.Host
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		addr = la.String()
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return addr, 80
	}
	return host, port
}

// splitHostPort splits host:port, with a port in 1..65535.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not in 1..65535", p)
	}
	return host, port, nil
}

// pullRequest is the body of a pull on the side channel, POST /kv_transfer/pull.
type pullRequest struct {
	EngineID string   `json:"remote_engine_id"`
	BlockIDs []uint64 `json:"remote_block_ids"`
	Tokens   int      `json:"prompt_tokens"`
}

// pullAnswer is the body of a successful pull.
type pullAnswer struct {
	Tokens int `json:"prompt_tokens"`
}

// handlePull serves the side channel: a decode server's pull of a pending transfer. 200
// releases it; 404 means this server keeps no such transfer (another engine id, unknown or
// expired block ids, already pulled); 409 means the transfer is of a prompt of another
// length, and it stays pending.
func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	var req pullRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	if req.EngineID != s.engineID {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("no engine %q here: this is %s", req.EngineID, s.engineID))
		return
	}
	found, match := s.transfers.take(req.BlockIDs, req.Tokens, time.Now())
	switch {
	case !found:
		writeError(w, http.StatusNotFound, "NotFoundError", "no such KV transfer: unknown, expired or already pulled")
	case !match:
		writeError(w, http.StatusConflict, "ConflictError", fmt.Sprintf("the KV transfer is not of a prompt of %d tokens", req.Tokens))
	default:
		s.kv.pullsServed.Add(1)
		writeJSON(w, http.StatusOK, pullAnswer{Tokens: req.Tokens})
	}
}

// pullTransport is the side channel's transport: direct (no proxy from the environment),
// keeping a few connections to each prefill server alive.
func pullTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: pullTimeout}).DialContext,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
	}
}

// pullTimeout bounds a pull's round trip on the side channel: a prefill server that does not
// answer within it (frozen, or unreachable) counts as gone.
const pullTimeout = 5 * time.Second

// pull fetches a decode step's KV from its prefill server over the side channel, then waits
// the transfer's time: TransferLatency plus TransferPerToken for each prompt token this
// server does not hold in its prefix cache. It reports whether the KV arrived; a pull that
// failed is counted and the caller recomputes the prompt. The error is ctx's, when the client
// left.
func (s *Server) pull(ctx context.Context, p *kvTransferParams, prompt []uint32) (bool, error) {
	start := time.Now()
	ok, err := s.pullRemote(ctx, p, len(prompt))
	if err != nil {
		return false, err
	}
	if !ok {
		s.kv.pullsFailed.Add(1)
		return false, nil
	}
	missing := len(prompt) - s.CachedPrefix(prompt)*s.profile.BlockSize
	wait := s.transferLatency + time.Duration(max(missing, 0))*s.transferPerToken
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	s.kv.transferNanos.Add(int64(time.Since(start)))
	return true, nil
}

// pullRemote makes the side channel's request and reports whether the prefill server released
// the transfer.
func (s *Server) pullRemote(ctx context.Context, p *kvTransferParams, tokens int) (bool, error) {
	body, err := json.Marshal(pullRequest{EngineID: *p.RemoteEngineID, BlockIDs: p.RemoteBlockIDs, Tokens: tokens})
	if err != nil {
		return false, nil
	}
	url := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/kv_transfer/pull"
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.pullClient.Do(req)
	if err != nil {
		return false, ctx.Err()
	}
	defer resp.Body.Close()
	var ans pullAnswer
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ans) != nil {
		return false, ctx.Err()
	}
	return ans.Tokens == tokens, nil
}
