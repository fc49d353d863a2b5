package etcd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestWatchCreateAsEtcdReadsIt: the create request decodes with etcd's
// generated WatchRequest to the range and start revision meant.
func TestWatchCreateAsEtcdReadsIt(t *testing.T) {
	f := encodeWatchCreate("/p/", "/p0", 1234567890123)
	r := bufio.NewReader(bytes.NewReader(f))
	msg, err := readFrame(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(r); !errors.Is(err, io.EOF) {
		t.Fatalf("after the frame: %v, want io.EOF", err)
	}
	var got pb.WatchRequest
	if err := got.Unmarshal(msg); err != nil {
		t.Fatal(err)
	}
	c := got.GetCreateRequest()
	if c == nil || string(c.Key) != "/p/" || string(c.RangeEnd) != "/p0" || c.StartRevision != 1234567890123 ||
		c.WatchId != 0 || c.PrevKv || c.ProgressNotify || c.Fragment || len(c.Filters) != 0 {
		t.Fatalf("decoded %+v", got)
	}
}

// TestWatchResponsesAsEtcdWritesThem: decodeWatchResponse reads etcd's own
// generated messages: the header revision, events of both types, and the
// fields of a canceled or compacted watch.
func TestWatchResponsesAsEtcdWritesThem(t *testing.T) {
	big := bytes.Repeat([]byte{0, 0xff, 'x'}, 40000)
	msg, err := (&pb.WatchResponse{
		Header:  &pb.ResponseHeader{ClusterId: 9, MemberId: 8, Revision: 4242, RaftTerm: 3},
		WatchId: 7,
		Events: []*mvccpb.Event{
			{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/p/a"), Value: big, ModRevision: 4000, CreateRevision: 10, Version: 3}},
			{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/p/empty"), ModRevision: 4001}},
			{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("/p/b"), ModRevision: 4002}, PrevKv: &mvccpb.KeyValue{Key: []byte("/p/b"), Value: []byte("old")}},
		},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var got watchResponse
	if err := decodeWatchResponse(msg, &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 4242 || got.Created || got.Canceled || got.CompactRevision != 0 || len(got.Events) != 3 {
		t.Fatalf("decoded %+v", got)
	}
	e := got.Events
	if e[0].Delete || string(e[0].KV.Key) != "/p/a" || !bytes.Equal(e[0].KV.Value, big) || e[0].KV.ModRevision != 4000 {
		t.Errorf("event 0: %+v", e[0])
	}
	if e[1].Delete || string(e[1].KV.Key) != "/p/empty" || e[1].KV.Value != nil || e[1].KV.ModRevision != 4001 {
		t.Errorf("event 1: %+v", e[1])
	}
	if !e[2].Delete || string(e[2].KV.Key) != "/p/b" || e[2].KV.Value != nil || e[2].KV.ModRevision != 4002 {
		t.Errorf("event 2 (the previous value must not be read as the key's): %+v", e[2])
	}
	msg, _ = (&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 50}, Created: true, Canceled: true,
		CompactRevision: 40, CancelReason: "mvcc: required revision has been compacted"}).Marshal()
	got = watchResponse{}
	if err := decodeWatchResponse(msg, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Created || !got.Canceled || got.CompactRevision != 40 || got.CancelReason != "mvcc: required revision has been compacted" {
		t.Fatalf("canceled: %+v", got)
	}
}

// TestReadFrame: a compressed message, an oversized one and a stream cut
// inside a frame are errors, not messages.
func TestReadFrame(t *testing.T) {
	for name, b := range map[string][]byte{
		"compressed":         {1, 0, 0, 0, 1, 0},
		"oversized":          {0, 0xff, 0xff, 0xff, 0xff},
		"cut header":         {0, 0, 0},
		"cut message":        {0, 0, 0, 0, 9, 1, 2},
		"header, no message": {0, 0, 0, 0, 1},
	} {
		if _, err := readFrame(bufio.NewReader(bytes.NewReader(b))); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: readFrame = %v, want an error other than io.EOF", name, err)
		}
	}
}
