package kvpub_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// A batch in the tagged-map encoding newer vLLM versions use.
func ExampleEncoding() {
	b := &kvevents.Batch{Timestamp: 2, Events: []kvevents.BlockEvent{{Kind: kvevents.AllBlocksCleared}}}
	payload := kvpub.Encoding{MapBatch: true, MapEvents: true}.Append(nil, b)
	var v any
	msgpack.Unmarshal(payload, &v)
	fmt.Println(v)
	// Output: map[events:[map[type:AllBlocksCleared]] ts:2]
}

// What a replay client sees: vLLM's replay protocol, spoken to a Publisher's ROUTER socket.
func Example() {
	pub, err := kvpub.New(kvpub.Options{
		Endpoint: "tcp://127.0.0.1:0",
		Topic:    kvpub.Topic("pod-0", "m"), ReplayEndpoint: "tcp://127.0.0.1:0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pub.Run(ctx)

	for i := range 3 {
		pub.Publish(&kvevents.Batch{Timestamp: float64(i), Events: []kvevents.BlockEvent{{Kind: kvevents.AllBlocksCleared}}})
	}

	// Ask for everything from sequence number 1: an empty delimiter, then 8 bytes big-endian.
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(pub.ReplayEndpoint()); err != nil {
		fmt.Println(err)
		return
	}
	dealer.SendMulti(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 1)))
	d := new(kvevents.Decoder)
	var b kvevents.Batch
	for {
		msg, err := dealer.Recv()
		if err != nil {
			fmt.Println(err)
			return
		}
		seq := binary.BigEndian.Uint64(msg.Frames[1]) // Frames[0] is the delimiter
		if seq == kvevents.EndOfReplay {
			fmt.Println("end of replay")
			return
		}
		d.Decode(msg.Frames[2], &b)
		fmt.Println("seq", seq, "ts", b.Timestamp, b.Events[0].Kind)
	}
	// Output:
	// seq 1 ts 1 AllBlocksCleared
	// seq 2 ts 2 AllBlocksCleared
	// end of replay
}
