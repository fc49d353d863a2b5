package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestMaxBlockFits: a block of MaxBlockAddrs addresses, each held by a
// record with the longest names Kubernetes allows (pod 253 bytes,
// namespace 63, a 64-hex container ID, a network name of 253 bytes, a
// netns path of 128), borrowed (node= of 253 bytes) and timestamped,
// encodes to an IPAMBlock within MaxObjectBytes; a pool with blocks of
// twice the addresses is refused with ErrInvalid naming the block size
// (nothing sent: no server behind the store).
func TestMaxBlockFits(t *testing.T) {
	p := ipam.Pool{Name: strings.Repeat("p", 253), CIDR: netip.MustParsePrefix("fd00:1234:5678:9abc::/64"), BlockSize: 128 - 9}
	if 1<<(128-p.BlockSize) != MaxBlockAddrs {
		t.Fatal("fixture: a block of MaxBlockAddrs addresses")
	}
	b := ipam.NewBlock(p, p.BlockAt(0), "node-a")
	n := store.Node{Name: "node-a"}
	for i := 0; len(b.Free) > 0; i++ {
		c := fmt.Sprintf("%064x", i)
		h := ipam.Handle{ID: ipam.HandleID(strings.Repeat("n", 253), c, "eth0"), Network: strings.Repeat("n", 253), ContainerID: c, IfName: "eth0",
			Node: strings.Repeat("b", 253), NetNS: "/var/run/netns/" + strings.Repeat("x", 113), Namespace: strings.Repeat("s", 63),
			Pod: strings.Repeat("q", 253), PodUID: "8a1c5a3e-0000-4000-8000-000000000001", Created: time.Date(2026, 11, 27, 3, 20, 0, 123456789, time.UTC)}
		nb, a, err := b.Assign(p, h.ID)
		if err != nil {
			break // the addresses a pool never hands out
		}
		b = nb
		h.IPs = []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: b.CIDR}}
		n.Handles = append(n.Handles, h)
	}
	n.Blocks = []ipam.Block{b}
	s, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "p1")
	if err != nil {
		t.Fatal(err)
	}
	ref := store.BlockRef{Pool: p.Name, CIDR: b.CIDR}
	bc, err := s.blockContent(n, ref, fragments(n, []store.BlockRef{ref})[ref])
	if err != nil {
		t.Fatalf("a full block of %d addresses with the longest records: %v", MaxBlockAddrs, err)
	}
	t.Logf("a full block of %d addresses, %d records: %d bytes of spec (%d per record), the limit is %d", MaxBlockAddrs, len(n.Handles), len(bc.spec), len(bc.spec)/len(n.Handles), MaxObjectBytes)

	big := p
	big.BlockSize--
	_, err = s.CreatePool(ctxT(t), store.Pool{Spec: big})
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("/%d", big.BlockSize)) {
		t.Fatalf("a pool with blocks of %d addresses: %v; want ErrInvalid naming its block size", 2*MaxBlockAddrs, err)
	}
}
