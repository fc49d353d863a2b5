package kube

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// BenchmarkOps measures one request of each kind the allocation path
// sends, with the datastore's RBAC on the test API server, over
// a warm connection (ns/op is the latency of one sequential request;
// apiserver-ms/op the kube-apiserver process's CPU per request, its etcd
// not included):
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) \
//	  go test -run '^$' -bench BenchmarkOps -benchtime 200x ./internal/store/kube/
//
// The node object is the dual-stack fixture (3 records, ~1.3 KB); the
// claims list selects 4 claims of the node among 4 claims of 20 others.
func BenchmarkOps(b *testing.B) {
	st := openStore(b)
	ctx := ctxT(b)
	n, err := st.CreateNode(ctx, claimed(b, st, dualStackNode(b, "node-a", "node-b")))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 21 {
		node := "node-" + strconv.Itoa(i)
		if i == 0 {
			node = "node-a"
		}
		for j := range 4 {
			c := store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), byte(64 * j)}), 26)}, Node: node}
			if _, err := st.CreateClaim(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool4}); err != nil {
		b.Fatal(err)
	}
	b.Run("GetNode", func(b *testing.B) {
		defer apiserverCPU(b)()
		for b.Loop() {
			if _, err := st.GetNode(ctx, "node-a"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetPool", func(b *testing.B) {
		defer apiserverCPU(b)()
		for b.Loop() {
			if _, err := st.GetPool(ctx, pool4.Name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetPoolCached", func(b *testing.B) {
		defer apiserverCPU(b)()
		for b.Loop() {
			if _, err := st.GetPoolCached(ctx, pool4.Name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UpdateNode", func(b *testing.B) {
		defer apiserverCPU(b)()
		p := pool4
		for i := 0; b.Loop(); i++ {
			// Alternate one address in and out: the allocation path's write.
			blk := n.Blocks[0]
			h := n.Handles[0]
			a := blk.Addr(10 + i%2)
			if i%2 == 0 || len(h.IPs) == 2 {
				var err error
				if len(h.IPs) == 3 {
					blk, err = blk.Release(h.IPs[2].Addr, h.ID)
					h.IPs = h.IPs[:2]
				} else {
					blk, err = blk.AssignAddr(p, a, h.ID)
					h.IPs = append(h.IPs[:2:2], ipam.HandleIP{Addr: a, Pool: p.Name, Block: blk.CIDR})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			n.Blocks = []ipam.Block{blk, n.Blocks[1]}
			n.Handles = append([]ipam.Handle{h}, n.Handles[1:]...)
			var err error
			if n, err = st.UpdateNode(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CreateClaim", func(b *testing.B) {
		defer apiserverCPU(b)()
		pool := "green" + strconv.FormatInt(partitions.Add(1), 10) // a fresh pool per run (-count)
		for i := 0; b.Loop(); i++ {
			c := store.Claim{BlockRef: store.BlockRef{Pool: pool, CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 10), byte(i >> 2), byte(64 * (i % 4))}), 26)}, Node: "node-a"}
			if _, err := st.CreateClaim(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListClaimsNode", func(b *testing.B) {
		defer apiserverCPU(b)()
		for b.Loop() {
			if _, err := st.ListClaims(ctx, store.ClaimSelector{Node: "node-3"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListClaimsNodeCached", func(b *testing.B) {
		defer apiserverCPU(b)()
		for b.Loop() {
			if _, err := st.ListClaims(ctx, store.ClaimSelector{Node: "node-3", Cached: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// apiserverCPU reports, when the returned func runs at the end of b, the
// kube-apiserver's CPU per op since it was called.
func apiserverCPU(b *testing.B) func() {
	s := kubetest.Require(b, srv)
	before, err := s.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		after, err := s.CPU()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64((after-before).Microseconds())/1000/float64(b.N), "apiserver-ms/op")
	}
}
