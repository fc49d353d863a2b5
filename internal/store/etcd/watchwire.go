package etcd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// The messages of etcd's Watch service (a bidirectional stream), encoded
// by hand from rpc.proto and kv.proto as the unary ones are
// (grpcwire.go).

const methodWatch = "/etcdserverpb.Watch/Watch"

// maxWatchFrame bounds one WatchResponse: etcd sends a batch of events
// unfragmented unless asked, and the largest batch holds many objects of
// up to its request size limit each.
const maxWatchFrame = 512 << 20

// encodeWatchCreate returns the gRPC frame of a WatchRequest that creates
// a watch of the keys in [key, rangeEnd) from revision start.
func encodeWatchCreate(key, rangeEnd string, start int64) []byte {
	var c []byte
	c = appendString(c, 1, key)
	c = appendString(c, 2, rangeEnd)
	c = appendInt(c, 3, start)
	b := appendBytes(make([]byte, 5, 5+8+len(c)), 1, c) // WatchRequest.create_request
	return frame(b)
}

// encodeWatchProgress returns the gRPC frame of a WatchRequest asking
// for the progress of the stream's watches (progress_request).
func encodeWatchProgress() []byte {
	return frame(appendBytes(make([]byte, 5, 7), 3, nil))
}

// watchEvent is an mvccpb.Event.
type watchEvent struct {
	Delete bool
	KV     rawKV
}

// watchResponse is a WatchResponse.
type watchResponse struct {
	Revision        int64 // of the header
	Created         bool
	Canceled        bool
	CompactRevision int64
	CancelReason    string
	Events          []watchEvent
}

func decodeWatchEvent(b []byte, e *watchEvent) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.wire == wireVarint:
			e.Delete = f.n == 1 // DELETE; PUT is 0
		case f.num == 2 && f.wire == wireBytes:
			return decodeKeyValue(f.data, &e.KV)
		}
		return nil
	})
}

func decodeWatchResponse(b []byte, r *watchResponse) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.wire == wireBytes:
			rev, err := decodeHeader(f.data)
			r.Revision = rev
			return err
		case f.num == 3 && f.wire == wireVarint:
			r.Created = f.n != 0
		case f.num == 4 && f.wire == wireVarint:
			r.Canceled = f.n != 0
		case f.num == 5 && f.wire == wireVarint:
			r.CompactRevision = int64(f.n)
		case f.num == 6 && f.wire == wireBytes:
			r.CancelReason = string(f.data)
		case f.num == 11 && f.wire == wireBytes:
			var e watchEvent
			if err := decodeWatchEvent(f.data, &e); err != nil {
				return err
			}
			r.Events = append(r.Events, e)
		}
		return nil
	})
}

// readFrame reads the next gRPC message of a stream: io.EOF when the
// stream ended between messages.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err // io.EOF only when no byte of a frame came
	}
	if h[0] != 0 {
		return nil, fmt.Errorf("%w: a compressed message", errProto)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxWatchFrame {
		return nil, fmt.Errorf("%w: a message of %d bytes", errProto, n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}
