package allocator

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// TestCommitTogetherOverOneWrite: a batch of queued allocations larger
// than one write of the node object may hold is committed whole, in
// several writes, none left to run alone.
func TestCommitTogetherOverOneWrite(t *testing.T) {
	pool := ipam.Pool{Name: "wide", CIDR: netip.MustParsePrefix("10.21.0.0/22"), BlockSize: 23}
	kvbackedtest.Backends(t, func(t *testing.T, s *kvbacked.Store) {
		ctx := t.Context()
		a := New(s, nil)
		if _, err := a.EnsurePool(ctx, pool); err != nil {
			t.Fatal(err)
		}
		req := func(c string) Request {
			return Request{Handle: ipam.Handle{ID: ipam.HandleID("net", c, "eth0"), Network: "net", ContainerID: c, IfName: "eth0", Node: "node-a"},
				Sets: [][]string{{pool.Name}}}
		}
		if _, err := a.Allocate(ctx, req("first")); err != nil {
			t.Fatal(err)
		}
		const k = 200
		batch := make([]*pendingAlloc, k)
		for i := range batch {
			batch[i] = &pendingAlloc{ctx: ctx, req: req(fmt.Sprintf("c%03d", i))}
		}
		q := a.queueOf("node-a")
		if alone := a.commitTogether(ctx, q, batch); len(alone) != 0 {
			t.Fatalf("%d of %d allocations left to run alone", len(alone), k)
		}
		seen := map[netip.Addr]string{}
		for _, p := range batch {
			if !p.done || p.err != nil || len(p.h.IPs) != 1 {
				t.Fatalf("allocation %s: done %v, %v, %v", p.req.Handle.ID, p.done, p.h.IPs, p.err)
			}
			if prev, dup := seen[p.h.IPs[0].Addr]; dup {
				t.Fatalf("%s given to %s and %s", p.h.IPs[0].Addr, prev, p.h.ID)
			}
			seen[p.h.IPs[0].Addr] = p.h.ID
		}
		n, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Handles) != k+1 {
			t.Fatalf("the node object holds %d records, want %d", len(n.Handles), k+1)
		}
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
