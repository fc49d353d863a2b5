package plugin

import (
	"context"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestStickyDelAndGCPark: the DEL of a sticky handle parks it, and CNI
// GC parks a live sticky handle the runtime no longer lists and leaves a
// parked one alone, IPv4 and IPv6; the store checks clean.
func TestStickyDelAndGCPark(t *testing.T) {
	for _, tc := range []struct{ name, ranges, pool string }{
		{"IPv4", v4Ranges, "net1-10.20.0.0-24"},
		{"IPv6", `"ranges":[[{"subnet":"fd00:20::/120"}]]`, "net1-fd00:20::-120"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", tc.ranges)
			if _, err := h.add("c0", stdin); err != nil { // creates the pool
				t.Fatal(err)
			}
			ctx := context.Background()
			ds := config.Datastore{Type: config.DatastoreLocal, Path: h.dir}
			withAlloc := func(f func(a *allocator.Allocator)) {
				s, err := datastore.Open(ctx, ds, datastore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				f(allocator.New(s, nil))
			}
			withAlloc(func(a *allocator.Allocator) {
				for _, c := range []string{"s1", "s2"} {
					if _, err := a.AllocateSticky(ctx, allocator.Request{Handle: ipam.Handle{ID: ipam.HandleID("net1", c, "eth0"), Network: "net1",
						ContainerID: c, IfName: "eth0", Node: "node-a", Namespace: "db", Pod: "pg-" + c, Sticky: "pod/db/pg-" + c},
						Sets: [][]string{{tc.pool}}}); err != nil {
						t.Fatal(err)
					}
				}
			})
			if err := h.p.Del(h.args("s2", stdin)); err != nil {
				t.Fatal(err)
			}
			gc := h.conf("1.1.0", tc.ranges, `"cni.dev/valid-attachments":[{"containerID":"c0","ifname":"eth0"}]`)
			for range 2 {
				if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
					t.Fatalf("GC: %v", err)
				}
			}
			withAlloc(func(a *allocator.Allocator) {
				for _, c := range []string{"s1", "s2"} {
					got, found, err := a.Handle(ctx, "node-a", ipam.HandleID("net1", c, "eth0"))
					if err != nil || !found || !got.IsParked() || len(got.IPs) != 1 {
						t.Fatalf("%s after DEL and GC: %+v %v %v", c, got, found, err)
					}
				}
				rep, err := consistency.CheckStore(ctx, a.Store())
				if err != nil || rep.Err() != nil {
					t.Fatalf("check: %v %v", rep.Err(), err)
				}
			})
		})
	}
}
