package kube

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// BenchmarkBlockBody measures building the body of an IPAMBlock's state
// (the agent's CPU per ADD and family, beside the request itself):
//
//	go test -run '^$' -bench BenchmarkBlockBody ./internal/store/kube/
func BenchmarkBlockBody(b *testing.B) {
	s := &Store{names: namer{prefix: "bench"}, prefix: "bench"}
	for _, pods := range []int{5, 50} {
		n := storetest.DualStackNode(b, "node-a", pods)
		ref := store.BlockRef{Pool: n.Blocks[0].Pool, CIDR: n.Blocks[0].CIDR}
		b.Run(fmt.Sprintf("handles=%d", pods), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := nodeBlockBody(s, n, ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nodeBlockBody is the body of a PUT of block ref of n.
func nodeBlockBody(s *Store, n store.Node, ref store.BlockRef) ([]byte, error) {
	bc, err := s.blockContent(n, ref, fragments(n, []store.BlockRef{ref})[ref])
	if err != nil {
		return nil, err
	}
	return s.blockBody(bc, "7")
}

// TestObjectBodySplice: the body newObjectSummary splices together is the
// JSON object json.Marshal makes of the whole object (but the write
// nonce, fresh each time), for every kind's spec.
func TestObjectBodySplice(t *testing.T) {
	s := &Store{names: namer{prefix: "p1"}, prefix: "p1"}
	n := storetest.DualStackNode(t, "node-a", 3)
	nodeBody, err := nodeBlockBody(s, n, store.BlockRef{Pool: n.Blocks[1].Pool, CIDR: n.Blocks[1].CIDR})
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
