package etcd

import (
	"bytes"
	"encoding/binary"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestGRPCRequestsAsEtcdReadsThem: what encodeRequest writes decodes with
// etcd's own generated messages to the request meant.
func TestGRPCRequestsAsEtcdReadsThem(t *testing.T) {
	big := bytes.Repeat([]byte{0, 0xff, 'x'}, 50000)
	req := txnRequest{
		Compare: []compare{
			{Key: "/p/nodes/a", ModRevision: 0},
			{Key: "/p/meta/layout", ModRevision: 1234567890123},
			{Key: "/p/meta/layout", ByValue: true, Value: []byte("2")},
		},
		Success: []requestOp{
			{RequestPut: &putRequest{Key: "/p/nodes/a", Value: big}},
			{RequestDeleteRange: &deleteRequest{Key: "/p/lends/b/a"}},
			{RequestRange: &rangeRequest{Key: "/p/pools/blue", Revision: 77, Serializable: true}},
		},
	}
	frame, err := encodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if frame[0] != 0 || int(binary.BigEndian.Uint32(frame[1:5])) != len(frame)-5 {
		t.Fatalf("frame header % x for %d bytes", frame[:5], len(frame)-5)
	}
	var got pb.TxnRequest
	if err := got.Unmarshal(frame[5:]); err != nil {
		t.Fatal(err)
	}
	if len(got.Compare) != 3 || len(got.Success) != 3 || len(got.Failure) != 0 {
		t.Fatalf("decoded %+v", got)
	}
	c0, c1, c2 := got.Compare[0], got.Compare[1], got.Compare[2]
	mod0, ok0 := c0.TargetUnion.(*pb.Compare_ModRevision)
	if c0.Result != pb.Compare_EQUAL || c0.Target != pb.Compare_MOD || string(c0.Key) != "/p/nodes/a" || !ok0 || mod0.ModRevision != 0 {
		t.Errorf("compare 0: %+v (a zero mod_revision must still be set: the oneof's presence)", c0)
	}
	if c1.GetModRevision() != 1234567890123 || c1.Target != pb.Compare_MOD {
		t.Errorf("compare 1: %+v", c1)
	}
	if v, ok := c2.TargetUnion.(*pb.Compare_Value); c2.Target != pb.Compare_VALUE || !ok || string(v.Value) != "2" {
		t.Errorf("compare 2: %+v", c2)
	}
	if p := got.Success[0].GetRequestPut(); p == nil || string(p.Key) != "/p/nodes/a" || !bytes.Equal(p.Value, big) {
		t.Errorf("op 0: not the put")
	}
	if d := got.Success[1].GetRequestDeleteRange(); d == nil || string(d.Key) != "/p/lends/b/a" || d.RangeEnd != nil {
		t.Errorf("op 1: %+v", got.Success[1])
	}
	if r := got.Success[2].GetRequestRange(); r == nil || string(r.Key) != "/p/pools/blue" || r.Revision != 77 || !r.Serializable || r.Limit != 0 {
		t.Errorf("op 2: %+v", got.Success[2])
	}

	rr := rangeRequest{Key: "/p/nodes/", RangeEnd: prefixEnd("/p/nodes/"), Limit: 500}
	frame, err = encodeRequest(rr)
	if err != nil {
		t.Fatal(err)
	}
	var gr pb.RangeRequest
	if err := gr.Unmarshal(frame[5:]); err != nil {
		t.Fatal(err)
	}
	if string(gr.Key) != "/p/nodes/" || string(gr.RangeEnd) != "/p/nodes0" || gr.Limit != 500 || gr.Revision != 0 || gr.Serializable {
		t.Errorf("range: %+v", gr)
	}
}

// TestGRPCAnswersAsEtcdWritesThem: decodeResponse reads etcd's own
// generated messages.
func TestGRPCAnswersAsEtcdWritesThem(t *testing.T) {
	big := bytes.Repeat([]byte{1, 2, 0xfe}, 40000)
	txn := pb.TxnResponse{
		Header:    &pb.ResponseHeader{ClusterId: 9, MemberId: 8, Revision: 4242, RaftTerm: 3},
		Succeeded: true,
		Responses: []*pb.ResponseOp{
			{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{
				Header: &pb.ResponseHeader{Revision: 4242},
				Kvs: []*mvccpb.KeyValue{
					{Key: []byte("/p/nodes/a"), Value: big, ModRevision: 4000, CreateRevision: 10, Version: 7, Lease: 5},
					{Key: []byte("/p/nodes/b"), ModRevision: 1},
				},
				More: true, Count: 9,
			}}},
			{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 4242}}}},
			{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{}}},
		},
	}
	msg, err := txn.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var got txnResponse
	if err := decodeResponse(frameOf(msg), &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 4242 || !got.Succeeded || len(got.Responses) != 3 {
		t.Fatalf("decoded %+v", got)
	}
	r := got.Responses[0].ResponseRange
	if r == nil || len(r.KVs) != 2 || !r.More {
		t.Fatalf("response 0: %+v", r)
	}
	if string(r.KVs[0].Key) != "/p/nodes/a" || !bytes.Equal(r.KVs[0].Value, big) || r.KVs[0].ModRevision != 4000 || r.KVs[1].Value != nil || r.KVs[1].ModRevision != 1 {
		t.Errorf("key-values: %+v", r.KVs)
	}
	if got.Responses[1].ResponseRange != nil || got.Responses[2].ResponseRange == nil || len(got.Responses[2].ResponseRange.KVs) != 0 {
		t.Errorf("responses 1, 2: %+v", got.Responses[1:])
	}
	// A failed transaction: succeeded is absent (false).
	msg, _ = (&pb.TxnResponse{Header: &pb.ResponseHeader{Revision: 5}}).Marshal()
	got = txnResponse{}
	if err := decodeResponse(frameOf(msg), &got); err != nil || got.Succeeded || got.Revision != 5 {
		t.Fatalf("failed txn: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 0}, {0, 0, 0, 0, 9, 1}, frameOf([]byte{0x0a, 0x05, 0x18})} {
		if err := decodeResponse(bad, &got); err == nil {
			t.Errorf("decodeResponse(% x) accepted", bad)
		}
	}
}

func frameOf(msg []byte) []byte {
	f := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
	return append(f, msg...)
}

// FuzzDecodeResponse: no input makes the decoder panic or loop, and what
// it accepts etcd's generated code accepts too.
func FuzzDecodeResponse(f *testing.F) {
	msg, _ := (&pb.TxnResponse{Header: &pb.ResponseHeader{Revision: 5}, Succeeded: true, Responses: []*pb.ResponseOp{
		{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("k"), Value: []byte("v"), ModRevision: 3}}}}},
	}}).Marshal()
	f.Add(msg)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var got txnResponse
		if err := decodeResponse(frameOf(msg), &got); err != nil {
			return
		}
		var want pb.TxnResponse
		if err := want.Unmarshal(msg); err != nil {
			// etcd's decoder checks more (e.g. types of fields this
			// client skips); accepting more is harmless.
			return
		}
		if got.Succeeded != want.Succeeded || len(got.Responses) != len(want.Responses) {
			t.Fatalf("% x: decoded %+v, etcd's code %+v", msg, got, want)
		}
	})
}
