package datastore

import (
	"fmt"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// TestOpenWarmADD: an open that names the node and the config's pools
// reads them with the layout marker (one Get in all), and an ADD on the
// allocator told of them costs that Get, one list of the node's claims
// (the claim guard's, which an open without a hint has nothing to take
// from) and one transaction — the plugin's ADD on etcd without a hint in
// three round trips. A node object changed by another process
// since the warm read costs a conflict and a read, never an address given
// twice. A store of the first layout is migrated and reads nothing warm.
func TestOpenWarmADD(t *testing.T) {
	for _, b := range typedBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ds := b.ds(t)
			req := func(node, container string) allocator.Request {
				return allocator.Request{
					Handle: ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0", Node: node},
					Sets:   [][]string{{osV4.Name}, {osV6.Name}}, Define: []ipam.Pool{osV4, osV6},
				}
			}
			// A first ADD makes the pools, the node's blocks and its object.
			func() {
				s, err := Open(ctx, ds, Options{Plugin: true})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if _, err := allocator.New(s, nil).Allocate(ctx, req("node-a", "first")); err != nil {
					t.Fatal(err)
				}
			}()
			warm := Warm{Node: "node-a", Pools: []string{osV4.Name, osV6.Name, "no-such-pool", "bad/name"}}
			held := map[string]string{}
			for i, stale := range []bool{false, true} {
				kvs, err := openKV(ctx, ds)
				if err != nil {
					t.Fatal(err)
				}
				c := &kvCounter{Store: kvs}
				ts, warmed, err := openTyped(ctx, c, warm)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.counts(); got != [3]int{1, 0, 0} {
					t.Fatalf("warm open: %d gets, %d lists, %d transactions; want 1, 0, 0", got[0], got[1], got[2])
				}
				n, err := ts.GetNode(ctx, "node-a")
				if err != nil {
					t.Fatal(err)
				}
				if !warmed.OK || warmed.Node.Version != n.Version || len(warmed.Node.Handles) != len(n.Handles) || len(warmed.Pools) != 2 {
					t.Fatalf("warmed %+v; want node-a at version %s with %d handles and the two pools", warmed, n.Version, len(n.Handles))
				}
				if stale {
					// Another process's ADD after the warm read.
					if _, err := allocator.New(kvbacked.New(kvs), nil).Allocate(ctx, req("node-a", "other")); err != nil {
						t.Fatal(err)
					}
				}
				a := allocator.New(ts, nil)
				a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
				before := c.counts()
				h, err := a.Allocate(ctx, req("node-a", fmt.Sprint("warm", i)))
				if err != nil {
					t.Fatal(err)
				}
				got := c.counts()
				d := [3]int{got[0] - before[0], got[1] - before[1], got[2] - before[2]}
				switch {
				case !stale && d != [3]int{0, 1, 1}:
					t.Errorf("ADD after a warm open: %d gets, %d lists, %d transactions; want one list and one transaction", d[0], d[1], d[2])
				case stale && (d[2] < 2 || d[0]+d[1] == 0):
					// The write on the remembered version conflicts; the
					// retry reads and writes again.
					t.Errorf("ADD after a stale warm open: %d gets, %d lists, %d transactions; want a conflict, reads and a write", d[0], d[1], d[2])
				}
				for _, ip := range h.IPs {
					if prev, dup := held[ip.Addr.String()]; dup {
						t.Fatalf("%s given to %s and %s", ip.Addr, prev, h.ID)
					}
					held[ip.Addr.String()] = h.ID
				}
				// Every handle of node-a holds addresses of its own.
				all, err := a.Handles(ctx)
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]string{}
				for _, x := range all {
					for _, ip := range x.IPs {
						if prev, dup := seen[ip.Addr.String()]; dup {
							t.Fatalf("%s held by %s and %s", ip.Addr, prev, x.ID)
						}
						seen[ip.Addr.String()] = x.ID
					}
				}
				_ = kvs.Close()
			}
		})
	}
}

// TestOpenWarmFirstLayout: a warm open of a store of the first layout
// migrates it and reads nothing warm (its objects did not exist before).
func TestOpenWarmFirstLayout(t *testing.T) {
	for _, b := range typedBackends {
		t.Run(b.name, func(t *testing.T) {
			ds := b.ds(t)
			writeFirstLayout(t, ds)
			kvs, err := openKV(t.Context(), ds)
			if err != nil {
				t.Fatal(err)
			}
			defer kvs.Close()
			_, warmed, err := openTyped(t.Context(), kvs, Warm{Node: "node-a", Pools: []string{osV4.Name}})
			if err != nil {
				t.Fatal(err)
			}
			if warmed.OK {
				t.Fatalf("warm read of a store being migrated: %+v", warmed)
			}
		})
	}
}
