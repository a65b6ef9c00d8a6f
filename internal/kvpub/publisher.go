// Package kvpub is a KV-event publisher that speaks vLLM's ZMQ protocol: what the package
// kvevents tests run its Subscriber against and what the simulated fleet
// (internal/glue/simfleet) embeds in its model servers. It is kept out of kvevents' API, which
// is the gateway's side of the protocol. The batches it encodes are kvevents' (see Encode).
package kvpub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// EndOfReplay is the sequence number that ends a replay: all ones, which is
// what vLLM sends as (-1).to_bytes(8, "big", signed=True).
const EndOfReplay = ^uint64(0)

// DefaultHistory is the number of batches a Publisher keeps for replay
// when Options.History is zero; it is vLLM's default buffer_steps.
const DefaultHistory = 10000

// The errors of package kvevents, defined here so that both sides of the protocol return the
// same values: kvevents' ErrClosed, ErrInvalidOptions and ErrReplay are these.
var (
	// ErrClosed is returned by operations on a closed Publisher or Subscriber.
	ErrClosed = errors.New("kvevents: closed")
	// ErrInvalidOptions reports options that New or kvevents.New rejects.
	ErrInvalidOptions = errors.New("kvevents: invalid options")
	// ErrReplay wraps the errors of a replay exchange.
	ErrReplay = errors.New("kvevents: replay")
)

// Topic returns the vLLM KV-event topic for a pod and a model: kv@<pod>@<model>.
func Topic(pod, model string) string { return "kv@" + pod + "@" + model }

// Options configures a Publisher. Endpoint is required; the zero
// values of the other fields bind it and publish with the empty topic from
// sequence number 0, no replay endpoint, a history of DefaultHistory
// batches and the legacy positional encoding.
type Options struct {
	// Endpoint is the ZMQ endpoint the PUB socket binds (e.g.
	// "tcp://127.0.0.1:0" for any free port; see Publisher.Endpoint), or
	// dials with Connect.
	Endpoint string
	// Connect makes the PUB socket dial the endpoint, a listening
	// Subscriber (Options.Listen), instead of binding it. vLLM does this
	// when its endpoint names a concrete host ("tcp://gateway:5557") and
	// binds only for a wildcard host ("tcp://*:5557"), ipc:// and
	// inproc://. A dropped connection is redialled. (zmq4 makes 10
	// attempts 250 ms apart, for the first dial and for every redial,
	// then gives up; libzmq retries forever.) The replay endpoint is
	// bound in either case, as vLLM binds it.
	Connect bool
	// Topic is sent as the first frame of every message, e.g.
	// Topic("pod-0", "llama"). vLLM's default topic is empty.
	Topic string
	// ReplayEndpoint, when set, is bound by a ROUTER socket that serves
	// the buffered history (see Run), e.g. "tcp://127.0.0.1:0".
	ReplayEndpoint string
	// History is the number of most recent batches kept for replay;
	// 0 means DefaultHistory.
	History int
	// ReplayWithTopic adds the topic frame before [seq, payload] in replay
	// replies, as some servers do.
	ReplayWithTopic bool
	// Encoding is the wire encoding of published batches.
	Encoding Encoding
	// FirstSequence is the sequence number of the first batch. vLLM
	// starts at 0; some servers start at 1.
	FirstSequence uint64
	// OnError, if set, is called with the errors the Publisher survives:
	// a replay reply it could not send (the client went away before the
	// end-of-replay message, for instance), wrapping ErrReplay. Errors
	// caused by stopping Run or closing the Publisher are not reported.
	// zmq4 writes a frame's header and its body separately, even an empty
	// one, so a client that closes as soon as it has read the
	// end-of-replay message (empty payload, the last frame) can make the
	// write of that empty body fail: "send end-of-replay: zmq4: error
	// sending frame n/n" with n the message's last frame is reported
	// although the client received everything. It runs on Run's goroutine
	// and must not block. Nil ignores them.
	OnError func(err error)
}

type entry struct {
	seq     uint64
	payload []byte
}

// Publisher publishes KV-event batches exactly as vLLM's ZMQ publisher
// does: a PUB socket sends three frames per batch (topic, 8-byte
// big-endian sequence number starting at 0, msgpack payload), and an
// optional ROUTER socket answers replay requests from its history. It is
// the real publisher the package's tests run against, and what a simulated
// model server embeds.
//
// A Publisher is safe for concurrent use. Publish order is sequence order.
type Publisher struct {
	// Immutable after New.
	topic     []byte
	enc       Encoding
	withTopic bool
	endpoint  string // as dialled, with Connect
	onError   func(error)
	pub       zmq4.Socket
	router    zmq4.Socket // nil without a replay endpoint
	// closeRouter closes router exactly once; a concurrent caller waits
	// until it is closed (see Close).
	closeRouter func() error

	mu     sync.Mutex
	seq    uint64  // next sequence number
	hist   []entry // ring of the last len(hist) batches
	head   int     // index of the oldest entry once the ring is full
	closed bool
}

// quiet discards the zmq4 library's own log lines.
var quiet = log.New(io.Discard, "", 0)

// New binds a PUB socket to opts.Endpoint, or with opts.Connect
// dials it, and binds the ROUTER replay socket if configured. It starts no
// goroutine of its own (zmq4 runs its own per socket and connection); call
// Run to serve replay requests. With Connect it returns an error if the
// endpoint cannot be reached within zmq4's dial retries. Options without
// an Endpoint or with a negative History are an error wrapping
// ErrInvalidOptions.
func New(opts Options) (*Publisher, error) {
	endpoint := opts.Endpoint
	switch {
	case endpoint == "":
		return nil, fmt.Errorf("%w: no Endpoint", ErrInvalidOptions)
	case opts.History < 0:
		return nil, fmt.Errorf("%w: History %d < 0", ErrInvalidOptions, opts.History)
	}
	if opts.History == 0 {
		opts.History = DefaultHistory
	}
	p := &Publisher{
		topic:     []byte(opts.Topic),
		enc:       opts.Encoding,
		withTopic: opts.ReplayWithTopic,
		onError:   opts.OnError,
		seq:       opts.FirstSequence,
		hist:      make([]entry, 0, opts.History),
	}
	if opts.Connect {
		p.endpoint = endpoint
		p.pub = zmq4.NewPub(context.Background(), zmq4.WithLogger(quiet), zmq4.WithAutomaticReconnect(true))
		if err := p.pub.Dial(endpoint); err != nil {
			p.pub.Close()
			return nil, fmt.Errorf("kvevents: publisher: %w", err)
		}
	} else {
		p.pub = zmq4.NewPub(context.Background(), zmq4.WithLogger(quiet))
		if err := p.pub.Listen(endpoint); err != nil {
			p.pub.Close()
			return nil, fmt.Errorf("kvevents: publisher: %w", err)
		}
	}
	if opts.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(context.Background(), zmq4.WithLogger(quiet))
		if err := p.router.Listen(opts.ReplayEndpoint); err != nil {
			p.pub.Close()
			p.router.Close()
			return nil, fmt.Errorf("kvevents: publisher replay: %w", err)
		}
		p.closeRouter = sync.OnceValue(p.router.Close)
	}
	return p, nil
}

// Endpoint returns the address the PUB socket is bound to, with the port
// resolved ("tcp://127.0.0.1:40123"), or with Connect the endpoint it
// dialled.
func (p *Publisher) Endpoint() string {
	if p.endpoint != "" {
		return p.endpoint
	}
	return "tcp://" + p.pub.Addr().String()
}

// ReplayEndpoint returns the address of the ROUTER replay socket, or ""
// without one.
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return "tcp://" + p.router.Addr().String()
}

// Publish encodes b, a *kvevents.Batch, assigns it the next sequence number, keeps it for
// replay and sends it to the subscribers connected now (a PUB socket does
// not queue for absent subscribers). It returns the sequence number. It is
// O(size of b); the socket sends from its own goroutine, so Publish does
// not wait for slow subscribers.
func (p *Publisher) Publish(b any) (uint64, error) {
	return p.PublishPayload(p.enc.Append(nil, b))
}

// PublishPayload publishes an already encoded payload (which need not be
// valid: tests use it to send garbage). The publisher keeps payload; the
// caller must not modify it afterwards.
func (p *Publisher) PublishPayload(payload []byte) (uint64, error) {
	return p.publish(payload, true)
}

// Drop assigns b, a *kvevents.Batch, the next sequence number and keeps it for replay without
// sending it: what subscribers observe when a PUB socket drops a message at
// its high-water mark. Tests use it to open a sequence gap.
func (p *Publisher) Drop(b any) (uint64, error) {
	return p.publish(p.enc.Append(nil, b), false)
}

func (p *Publisher) publish(payload []byte, send bool) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	seq := p.seq
	p.seq++
	if len(p.hist) < cap(p.hist) {
		p.hist = append(p.hist, entry{seq, payload})
	} else {
		p.hist[p.head] = entry{seq, payload}
		p.head = (p.head + 1) % len(p.hist)
	}
	if !send {
		return seq, nil
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	// The PUB socket queues the message and sends it from its own writer,
	// so the frames must not be reused: they are fresh per message.
	msg := zmq4.NewMsgFrom(p.topic, append([]byte(nil), sb[:]...), payload)
	if err := p.pub.SendMulti(msg); err != nil {
		return seq, fmt.Errorf("kvevents: publish seq %d: %w", seq, err)
	}
	return seq, nil
}

// Sequence returns the sequence number the next batch will get.
func (p *Publisher) Sequence() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// history returns the kept entries with seq >= start, oldest first. It is
// O(History).
func (p *Publisher) history(start uint64) []entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []entry
	for i := range p.hist {
		e := p.hist[(p.head+i)%len(p.hist)]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

// Run serves replay requests on the ROUTER socket until ctx is done or
// the Publisher is closed, then closes the replay socket. A request is an
// 8-byte big-endian start sequence (after vLLM's empty delimiter frame when
// the client sends one); the reply is one message [seq, payload] per kept
// batch with seq >= start (preceded by the topic with ReplayWithTopic),
// then [EndOfReplay, ""]. Malformed requests are ignored; a reply that
// cannot be sent ends that exchange and goes to Options.OnError.
// Without a replay endpoint Run just waits for ctx. It returns nil when
// stopped by ctx or Close, once the replay socket is closed: a Publisher
// started next can bind the same endpoint.
func (p *Publisher) Run(ctx context.Context) error {
	if p.router == nil {
		<-ctx.Done()
		return nil
	}
	defer p.closeRouter()
	stop := context.AfterFunc(ctx, func() { p.closeRouter() })
	defer stop()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil || p.isClosed() {
				return nil
			}
			continue
		}
		p.serve(ctx, msg.Frames)
	}
}

func (p *Publisher) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// serve answers one replay request. Errors are reported unless Run is
// stopping: a reply cut short by closing the socket is no client's fault.
func (p *Publisher) serve(ctx context.Context, frames [][]byte) {
	// [identity, "", start] from a vLLM-style client, [identity, start]
	// from a bare DEALER.
	if len(frames) < 2 {
		return
	}
	id, rest := frames[0], frames[1:]
	var delim bool
	if len(rest) == 2 && len(rest[0]) == 0 {
		delim, rest = true, rest[1:]
	}
	if len(rest) != 1 || len(rest[0]) != 8 {
		return
	}
	start := binary.BigEndian.Uint64(rest[0])
	reply := func(seq uint64, payload []byte) error {
		fr := make([][]byte, 0, 5)
		fr = append(fr, id)
		if delim {
			fr = append(fr, nil)
		}
		if p.withTopic {
			fr = append(fr, p.topic)
		}
		fr = append(fr, binary.BigEndian.AppendUint64(nil, seq), payload)
		return p.router.SendMulti(zmq4.NewMsgFrom(fr...))
	}
	for _, e := range p.history(start) {
		if err := reply(e.seq, e.payload); err != nil {
			p.report(ctx, fmt.Errorf("%w: send seq %d: %w", ErrReplay, e.seq, err))
			return
		}
	}
	if err := reply(EndOfReplay, nil); err != nil {
		p.report(ctx, fmt.Errorf("%w: send end-of-replay: %w", ErrReplay, err))
	}
}

func (p *Publisher) report(ctx context.Context, err error) {
	if p.onError != nil && ctx.Err() == nil && !p.isClosed() {
		p.onError(err)
	}
}

// Close closes both sockets; subscribers see the connection drop. Close is
// idempotent, and returns once both are closed, even when Run's context
// began closing the replay socket first: zmq4 removes an ipc:// socket's
// file when it closes it, so a close still in progress (or a second one)
// would remove the file of a new Publisher bound to the same endpoint,
// which nobody could then reach. (zmq4 v0.17.0 leaves the idle writer
// goroutine of a closed PUB socket behind: one per Publisher ever closed.)
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.closeRouter(); err == nil {
			err = e
		}
	}
	return err
}
