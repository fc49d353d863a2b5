package kube

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// nodeOf returns node name holding one IPv4 /26 of pool4 with handles
// pods in it, as an agent's node object looks.
func nodeOf(tb testing.TB, name string, pods int) store.Node {
	tb.Helper()
	p := ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix("10.64.0.0/16"), BlockSize: 25}
	b := ipam.NewBlock(p, netip.MustParsePrefix("10.64.0.0/25"), name)
	n := store.Node{Name: name}
	created := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range pods {
		id := fmt.Sprintf("c%05d", i)
		h := ipam.Handle{ID: ipam.HandleID("bench", id, "eth0"), Network: "bench", ContainerID: id, IfName: "eth0", Node: name,
			NetNS: "/var/run/netns/" + id, Namespace: "bench", Pod: "pod-" + id, PodUID: fmt.Sprintf("8a1c5a3e-0000-4000-8000-%012d", i), Created: created}
		nb, a, err := b.Assign(p, h.ID)
		if err != nil {
			tb.Fatal(err)
		}
		b = nb
		h.IPs = []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: b.CIDR}}
		n.Handles = append(n.Handles, h)
	}
	n.Blocks = []ipam.Block{b}
	n.Version = "12345"
	return n
}

// BenchmarkNodeBody measures building the body of an IPAMNode update (the
// agent's CPU per ADD, beside the request itself):
//
//	go test -run '^$' -bench BenchmarkNodeBody ./internal/store/kube/
func BenchmarkNodeBody(b *testing.B) {
	s := &Store{names: namer{prefix: "bench"}, prefix: "bench"}
	for _, pods := range []int{5, 60} {
		n := nodeOf(b, "node-a", pods)
		b.Run(fmt.Sprintf("handles=%d", pods), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.nodeBody(n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestObjectBodySplice: the body newObjectSummary splices together is the
// JSON object json.Marshal makes of the whole object (but the write
// nonce, fresh each time), for every kind's spec.
func TestObjectBodySplice(t *testing.T) {
	s := &Store{names: namer{prefix: "p1"}, prefix: "p1"}
	n := nodeOf(t, "node-a", 3)
	_, nodeBody, err := s.nodeBody(n)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := store.MarshalPool(store.Pool{Spec: ipam.Pool{Name: "blue", CIDR: netip.MustParsePrefix("fd00::/64"), BlockSize: 122}})
	if err != nil {
		t.Fatal(err)
	}
	poolBody, err := s.newObject(kindPool, "p1.blue", nil, spec, "7")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{nodeBody, poolBody} {
		var got object
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		want, err := json.Marshal(object{APIVersion: got.APIVersion, Kind: got.Kind, Metadata: got.Metadata, Spec: got.Spec, Summary: got.Summary})
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(body, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) || got.Metadata.Annotations[AnnotationWrite] == "" || got.Metadata.Labels[LabelPartition] != "p1" {
			t.Fatalf("spliced body\n%s\nwant the object\n%s", body, want)
		}
	}
}
