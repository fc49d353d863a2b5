package plugin

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// TestGCKeepsBorrowedAddresses: node-b's pod holds an address borrowed
// from node-a's block (the pool is one block, strictAffinity is off, so
// node-b must borrow). Node-a's CNI GC with an empty valid-attachments
// list releases node-a's own attachment and keeps node-b's, although
// node-b's record lies in node-a's object; node-b's DEL then frees it,
// and the checker finds the store whole after each step. On the local
// store and on etcd, IPv4 and IPv6.
func TestGCKeepsBorrowedAddresses(t *testing.T) {
	etcd := etcdtest.ForTest(t, nil)
	for _, backend := range []string{config.DatastoreLocal, config.DatastoreEtcd} {
		for _, fam := range []struct{ name, ranges string }{
			{"IPv4", `"ranges":[[{"subnet":"10.47.0.0/28"}]],"blockSize":28`},
			{"IPv6", `"ranges":[[{"subnet":"fd00:47::/124"}]],"ipv6BlockSize":124`},
		} {
			t.Run(backend+"/"+fam.name, func(t *testing.T) {
				h := newHarness(t)
				ds := config.Datastore{Type: config.DatastoreLocal, Path: h.dir}
				dsJSON := fmt.Sprintf(`{"type":"local","path":%q}`, h.dir)
				if backend == config.DatastoreEtcd {
					t.Setenv("IPKEEPER_LOCK_DIR", t.TempDir())
					prefix := "/gc-borrowed-" + fam.name
					ds = config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{etcd.Endpoint}, Prefix: prefix}
					dsJSON = fmt.Sprintf(`{"type":"etcd","endpoints":[%q],"prefix":%q}`, etcd.Endpoint, prefix)
				}
				conf := func(node string, extra ...string) []byte {
					top := ""
					for _, e := range extra {
						top += "," + e
					}
					return fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"net1","type":"bridge"%s,
						"ipam":{"type":"ipkeeper","nodeName":%q,"datastore":%s,%s}}`, top, node, dsJSON, fam.ranges)
				}
				resA, err := h.add("a1", conf("node-a"))
				if err != nil {
					t.Fatal(err)
				}
				resB, err := h.add("b1", conf("node-b"))
				if err != nil {
					t.Fatal(err)
				}
				a1, b1 := addrs(resA)[0], addrs(resB)[0]

				// The setup is what the test is about: node-b's address is
				// a loan from node-a's block, recorded in node-a's object.
				withTypedStore(t, ds, func(s store.Store) {
					nb, err := s.GetNode(t.Context(), "node-b")
					if err != nil || len(nb.Blocks) != 0 || !slices.Contains(nb.Loans, store.Loan{Handle: "net1.b1.eth0", Lender: "node-a"}) {
						t.Fatalf("node-b's object %+v (%v): want no block and a loan of b1 from node-a", nb, err)
					}
					na, err := s.GetNode(t.Context(), "node-a")
					if err != nil {
						t.Fatal(err)
					}
					if r, ok := na.Handle("net1.b1.eth0"); !ok || r.Node != "node-b" {
						t.Fatalf("node-a's object holds no record of node-b's b1: %+v", na.Handles)
					}
				})
				held := func() map[string]netip.Addr { return heldAddrs(t, ds) }
				checkWhole(t, ds, "before GC")

				gc := conf("node-a", `"cni.dev/valid-attachments":[]`)
				if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
					t.Fatalf("node-a's GC: %v", err)
				}
				got := held()
				if got["net1.b1.eth0"] != b1 {
					t.Fatalf("node-a's GC released node-b's borrowed %v: held after it %v", b1, got)
				}
				if _, ok := got["net1.a1.eth0"]; ok {
					t.Fatalf("node-a's GC with an empty list kept its own a1 (%v): %v", a1, got)
				}
				checkWhole(t, ds, "after node-a's GC")

				// Node-b's DEL still finds the whole of its handle.
				if err := h.p.Del(h.args("b1", conf("node-b"))); err != nil {
					t.Fatal(err)
				}
				if got := held(); len(got) != 0 {
					t.Fatalf("after node-b's DEL of b1: held %v, want nothing", got)
				}
				checkWhole(t, ds, "after node-b's DEL")
			})
		}
	}
}

// withTypedStore runs f on the typed store ds names, closed afterwards (a
// local store admits one opener at a time).
func withTypedStore(t *testing.T, ds config.Datastore, f func(s store.Store)) {
	t.Helper()
	s, err := datastore.Open(t.Context(), ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f(s)
}

// heldAddrs returns the first address of every handle in ds, by handle
// ID (the zero address for a handle that holds none).
func heldAddrs(t *testing.T, ds config.Datastore) map[string]netip.Addr {
	t.Helper()
	out := map[string]netip.Addr{}
	withTypedStore(t, ds, func(s store.Store) {
		hs, err := allocator.New(s, nil).Handles(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			var a netip.Addr // none: a loan whose record is gone
			if len(h.IPs) > 0 {
				a = h.IPs[0].Addr
			}
			out[h.ID] = a
		}
	})
	return out
}

// checkWhole fails t when the checker finds a problem in ds.
func checkWhole(t *testing.T, ds config.Datastore, when string) {
	t.Helper()
	withTypedStore(t, ds, func(s store.Store) {
		rep, err := consistency.CheckStore(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.Err(); err != nil {
			t.Fatalf("check %s: %v", when, err)
		}
	})
}
