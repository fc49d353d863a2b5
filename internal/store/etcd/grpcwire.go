package etcd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Unary calls go to etcd's gRPC service itself (HTTP/2, protobuf
// messages in gRPC's length-prefixed frames), not to its JSON gateway:
// the gateway decodes a request's JSON, then its base64 value, before the
// same gRPC call, which costs a write of a large node object several
// times the CPU (docs/BENCHMARKS.md). The messages are encoded here
// by hand from etcd's rpc.proto field numbers (api/etcdserverpb), for the
// few fields this client sends and reads, so that the plugin links no
// gRPC or protobuf runtime (their package initialisation alone costs more
// than a local ADD).

// The gRPC methods called.
const (
	methodRange = "/etcdserverpb.KV/Range"
	methodTxn   = "/etcdserverpb.KV/Txn"
)

// Protobuf wire types.
const (
	wireVarint = 0
	wireBytes  = 2
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendBytes(b []byte, field int, s []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendInt(b []byte, field int, v int64) []byte {
	b = appendTag(b, field, wireVarint)
	return appendVarint(b, uint64(v))
}

func appendString(b []byte, field int, s string) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// varintLen is the length of v as a varint.
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// bytesFieldLen is the length of a length-delimited field of n bytes
// (field numbers below 16: a one-byte tag).
func bytesFieldLen(n int) int { return 1 + varintLen(uint64(n)) + n }

func appendRange(b []byte, r *rangeRequest) []byte {
	b = appendString(b, 1, r.Key)
	if r.RangeEnd != "" {
		b = appendString(b, 2, r.RangeEnd)
	}
	if r.Limit != 0 {
		b = appendInt(b, 3, r.Limit)
	}
	if r.Revision != 0 {
		b = appendInt(b, 4, r.Revision)
	}
	if r.Serializable {
		b = appendInt(b, 7, 1)
	}
	return b
}

// Compare's target values in rpc.proto; its result is EQUAL (0).
const (
	targetMod   = 2
	targetValue = 3
)

func appendCompare(b []byte, c *compare) []byte {
	var m []byte
	m = appendInt(m, 1, 0) // EQUAL
	if c.ByValue {
		m = appendInt(m, 2, targetValue)
		m = appendString(m, 3, c.Key)
		m = appendBytes(m, 7, c.Value) // a oneof: sent even when empty
	} else {
		m = appendInt(m, 2, targetMod)
		m = appendString(m, 3, c.Key)
		m = appendInt(m, 6, c.ModRevision) // a oneof: sent even when 0
	}
	return appendBytes(b, 1, m)
}

// appendOp appends op as field of a TxnRequest, copying a put's value
// once, straight into b.
func appendOp(b []byte, field int, op *requestOp) ([]byte, error) {
	var kind int
	var body []byte // the op's message, when small
	size := 0
	switch {
	case op.RequestRange != nil:
		kind, body = 1, appendRange(nil, op.RequestRange)
		size = len(body)
	case op.RequestPut != nil:
		kind = 2
		size = bytesFieldLen(len(op.RequestPut.Key)) + bytesFieldLen(len(op.RequestPut.Value))
	case op.RequestDeleteRange != nil:
		kind, body = 3, appendString(nil, 1, op.RequestDeleteRange.Key)
		size = len(body)
	default:
		return nil, errors.New("etcd: empty request op")
	}
	// RequestOp{kind: the op} as a length-delimited field of its own.
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(bytesFieldLen(size)))
	b = appendTag(b, kind, wireBytes)
	b = appendVarint(b, uint64(size))
	if p := op.RequestPut; p != nil {
		b = appendString(b, 1, p.Key)
		return appendBytes(b, 2, p.Value), nil
	}
	return append(b, body...), nil
}

func appendTxn(b []byte, t *txnRequest) ([]byte, error) {
	for i := range t.Compare {
		b = appendCompare(b, &t.Compare[i])
	}
	var err error
	for _, list := range []struct {
		field int
		ops   []requestOp
	}{{2, t.Success}, {3, t.Failure}} {
		for i := range list.ops {
			if b, err = appendOp(b, list.field, &list.ops[i]); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// encodeRequest returns the gRPC frame of in, a rangeRequest or a
// txnRequest, in one buffer.
func encodeRequest(in any) ([]byte, error) {
	switch r := in.(type) {
	case rangeRequest:
		b := appendRange(make([]byte, 5, 5+64+len(r.Key)+len(r.RangeEnd)), &r)
		return frame(b), nil
	case txnRequest:
		size := 64 * (len(r.Compare) + len(r.Success) + len(r.Failure))
		for _, list := range [][]requestOp{r.Success, r.Failure} {
			for _, op := range list {
				if op.RequestPut != nil {
					size += len(op.RequestPut.Key) + len(op.RequestPut.Value)
				}
			}
		}
		b, err := appendTxn(make([]byte, 5, 5+size), &r)
		if err != nil {
			return nil, err
		}
		return frame(b), nil
	}
	return nil, fmt.Errorf("etcd: no gRPC encoding of %T", in)
}

// frame writes the gRPC frame header (uncompressed, the length) into the
// first five bytes of b, which the message follows.
func frame(b []byte) []byte {
	b[0] = 0
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b
}

// errProto is wrapped by every decoding error.
var errProto = errors.New("etcd: undecodable gRPC answer")

// field is one decoded protobuf field.
type field struct {
	num  int
	wire int
	n    uint64 // a varint's value
	data []byte // a length-delimited field's bytes
}

// nextField decodes the field at the start of b and returns the rest.
func nextField(b []byte) (field, []byte, error) {
	tag, k := binary.Uvarint(b)
	if k <= 0 {
		return field{}, nil, errProto
	}
	b = b[k:]
	f := field{num: int(tag >> 3), wire: int(tag & 7)}
	switch f.wire {
	case wireVarint:
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return field{}, nil, errProto
		}
		f.n, b = v, b[k:]
	case wireBytes:
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return field{}, nil, errProto
		}
		f.data, b = b[k:k+int(l)], b[k+int(l):]
	case 1: // 64-bit
		if len(b) < 8 {
			return field{}, nil, errProto
		}
		b = b[8:]
	case 5: // 32-bit
		if len(b) < 4 {
			return field{}, nil, errProto
		}
		b = b[4:]
	default:
		return field{}, nil, fmt.Errorf("%w: wire type %d", errProto, f.wire)
	}
	return f, b, nil
}

// eachField calls fn for every field of message b.
func eachField(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// decodeHeader returns the revision of a ResponseHeader.
func decodeHeader(b []byte) (int64, error) {
	var rev int64
	err := eachField(b, func(f field) error {
		if f.num == 3 && f.wire == wireVarint {
			rev = int64(f.n)
		}
		return nil
	})
	return rev, err
}

func decodeKeyValue(b []byte, kv *rawKV) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.wire == wireBytes:
			kv.Key = f.data
		case f.num == 3 && f.wire == wireVarint:
			kv.ModRevision = int64(f.n)
		case f.num == 5 && f.wire == wireBytes:
			kv.Value = f.data
		}
		return nil
	})
}

func decodeRange(b []byte, r *rangeResponse) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.wire == wireBytes:
			rev, err := decodeHeader(f.data)
			r.Revision = rev
			return err
		case f.num == 2 && f.wire == wireBytes:
			var kv rawKV
			if err := decodeKeyValue(f.data, &kv); err != nil {
				return err
			}
			r.KVs = append(r.KVs, kv)
		case f.num == 3 && f.wire == wireVarint:
			r.More = f.n != 0
		}
		return nil
	})
}

func decodeTxn(b []byte, t *txnResponse) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.wire == wireBytes:
			rev, err := decodeHeader(f.data)
			t.Revision = rev
			return err
		case f.num == 2 && f.wire == wireVarint:
			t.Succeeded = f.n != 0
		case f.num == 3 && f.wire == wireBytes:
			var op responseOp
			err := eachField(f.data, func(g field) error {
				if g.num == 1 && g.wire == wireBytes {
					op.ResponseRange = &rangeResponse{}
					return decodeRange(g.data, op.ResponseRange)
				}
				return nil
			})
			if err != nil {
				return err
			}
			t.Responses = append(t.Responses, op)
		}
		return nil
	})
}

// decodeResponse decodes a gRPC answer's frames into out (a
// *rangeResponse or *txnResponse).
func decodeResponse(data []byte, out any) error {
	if len(data) < 5 || data[0] != 0 {
		return fmt.Errorf("%w: no uncompressed message frame", errProto)
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if uint64(n) != uint64(len(data)-5) {
		return fmt.Errorf("%w: frame of %d bytes in %d", errProto, n, len(data)-5)
	}
	msg := data[5:]
	switch o := out.(type) {
	case *rangeResponse:
		return decodeRange(msg, o)
	case *txnResponse:
		return decodeTxn(msg, o)
	}
	return fmt.Errorf("etcd: no gRPC decoding of %T", out)
}
