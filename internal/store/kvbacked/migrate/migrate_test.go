package migrate_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// checkMigrated fails unless the typed store holds every handle, address
// and block of want, and no first-layout key is left.
func checkMigrated(t *testing.T, kvs kv.Store, want firstState) {
	t.Helper()
	ctx := context.Background()
	// A handle stored under its legacy ID is converted under the
	// canonical one, which DEL and GC name.
	var renamed map[string]string
	want.Blocks, want.Handles, renamed = nodealloc.CanonicalIDs(want.Blocks, want.Handles)
	if len(renamed) == 0 {
		t.Fatal("the first-layout store holds no handle under a legacy ID to rename")
	}
	s := kvbacked.New(kvs)
	nodes, err := s.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	records := map[string][]ipam.Handle{}
	for _, n := range nodes {
		for _, h := range n.Handles {
			records[h.ID] = append(records[h.ID], h)
		}
	}
	for _, h := range want.Handles {
		var ips []ipam.HandleIP
		for _, r := range records[h.ID] {
			ips = append(ips, r.IPs...)
			r.IPs, h.IPs = nil, nil
			node := h.Node
			if node == "" {
				node = store.UnaffineNode // whereabouts' handle of no node
			}
			hh := h
			hh.Node = node
			if r.Created.Equal(hh.Created) {
				r.Created = hh.Created
			}
			if fmt.Sprint(r) != fmt.Sprint(hh) {
				t.Errorf("handle %s: record %+v, want %+v", h.ID, r, hh)
			}
		}
		delete(records, h.ID)
		cmpIP := func(x, y ipam.HandleIP) int { return x.Addr.Compare(y.Addr) }
		got, wantIPs := slices.SortedFunc(slices.Values(ips), cmpIP), slices.SortedFunc(slices.Values(want.handleIPs(h.ID)), cmpIP)
		if !slices.Equal(got, wantIPs) {
			t.Errorf("handle %s holds %v in the typed store, %v before", h.ID, got, wantIPs)
		}
	}
	if len(records) > 0 {
		t.Errorf("records of handles the first layout did not have: %v", slices.Sorted(maps.Keys(records)))
	}
	blocks := 0
	for _, b := range want.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		node := b.Node
		if node == "" {
			if b.InUse() == 0 {
				if _, err := s.GetClaim(ctx, ref); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("empty block %s of no node: claim %v, want none", ref, err)
				}
				continue
			}
			node = store.UnaffineNode
		}
		blocks++
		c, err := s.GetClaim(ctx, ref)
		if err != nil || c.Node != node {
			t.Errorf("claim of %s: %+v, %v; want node %s", ref, c, err, node)
			continue
		}
		n, err := s.GetNode(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := n.Block(ref)
		b.Node = node
		if !ok || !slices.Equal(got.Free, b.Free) || !maps.Equal(got.Owners, b.Owners) || got.Node != b.Node {
			t.Errorf("block %s in node object %s: %+v, want %+v", ref, node, got, b)
		}
	}
	claims, err := s.ListClaims(ctx, store.ClaimSelector{})
	if err != nil || len(claims) != blocks {
		t.Errorf("%d claims (%v), want %d", len(claims), err, blocks)
	}
	lenders, err := s.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"})
	if err != nil || len(lenders) != 1 || lenders[0].Name != "node-a" {
		t.Errorf("lenders of node-b: %v, %v; want node-a", lenders, err)
	}
	checkLoans(t, nodes)
	// The allocator finds every handle whole from its node's object
	// and the lenders its loans name.
	a := allocator.New(s, nil)
	for _, h := range want.Handles {
		node := cmp.Or(h.Node, store.UnaffineNode)
		got, ok, err := a.Handle(ctx, node, h.ID)
		if err != nil || !ok || !ipam.SameAddrs(got.IPs, want.handleIPs(h.ID)) {
			t.Errorf("Allocator.Handle(%s, %s) = %v, %v, %v; want %v", node, h.ID, got.IPs, ok, err, want.handleIPs(h.ID))
		}
	}
	for _, p := range []string{"blocks/", "affinity/", "handles/"} {
		if left := raw(t, kvs, p); len(left) > 0 {
			t.Errorf("first-layout keys left: %v", left)
		}
	}
	if m := raw(t, kvs, "meta/layout"); len(m) != 1 {
		t.Errorf("layout marker: %v", m)
	}
	if pools, err := s.ListPools(ctx); err != nil || len(pools) != 4 {
		t.Errorf("pools after migration: %v, %v", pools, err)
	} else {
		for _, p := range pools {
			if p.Spec.Deleting {
				t.Errorf("typed pool %s marked Deleting: %+v", p.Spec.Name, p.Spec)
			}
		}
	}
	// The fence: every first-layout pool key stays, marked Deleting.
	old := snapshot(t, kvs, "pools/")
	if len(old) != 4 {
		t.Errorf("first-layout pool keys after migration: %v", slices.Sorted(maps.Keys(old)))
	}
	for k, e := range old {
		var p ipam.Pool
		if err := json.Unmarshal(e.Value, &p); err != nil || !p.Deleting || p.Origin == "import" {
			t.Errorf("first-layout pool %s not fenced: %s (%v)", k, e.Value, err)
		}
	}
}

// checkLoans fails unless every record in another node's object is a loan
// in its node's object, and every loan has its record in the lender.
func checkLoans(t *testing.T, nodes []store.Node) {
	t.Helper()
	objects := map[string]store.Node{}
	for _, n := range nodes {
		objects[n.Name] = n
	}
	for _, n := range nodes {
		for _, h := range n.Handles {
			if h.Node != n.Name && !slices.Contains(objects[h.Node].LendersOf(h.ID), n.Name) {
				t.Errorf("%s's object holds a record of %s of node %s, whose object has no loan naming it (loans %v)", n.Name, h.ID, h.Node, objects[h.Node].Loans)
			}
		}
		for _, l := range n.Loans {
			if r, ok := objects[l.Lender].Handle(l.Handle); !ok || r.Node != n.Name {
				t.Errorf("loan %+v of %s: no record of it in the lender (%+v, %v)", l, n.Name, r, ok)
			}
		}
	}
}

// The checked-in first-layout stores (the bbolt file, the etcd dump)
// migrate with every handle, address and block the same through the typed
// store, the pools fenced; a second run changes nothing; the migrated
// handles holding borrowed addresses release cleanly.
func TestMigrateFirstLayout(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			kvs, want := openFirstLayout(t, b)
			defer kvs.Close()
			if !slices.ContainsFunc(want.Handles, func(h ipam.Handle) bool { return strings.HasPrefix(h.ID, "net.old.dot.") }) {
				t.Fatal("no legacy handle in the first-layout store")
			}
			rep, err := migrate.Run(t.Context(), kvs)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Done || rep.Nodes != 5 || rep.Fenced != 4 || rep.Pools != 4 || len(rep.UnaffineBlocks) != 1 || len(rep.DroppedBlocks) != 1 ||
				len(rep.Orphans)+len(rep.Strays) != 0 {
				t.Errorf("report %+v", rep)
			}
			checkMigrated(t, kvs, want)
			before := snapshot(t, kvs, "")
			rep, err = migrate.Run(t.Context(), kvs)
			if err != nil || !rep.Done || rep.Written+rep.Deleted != 0 {
				t.Fatalf("second run: %+v, %v", rep, err)
			}
			if after := snapshot(t, kvs, ""); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
				t.Fatal("a second run changed the store")
			}
			releaseBorrowed(t, kvbacked.New(kvs), want)
		})
	}
}

// releaseBorrowed releases the migrated handles holding borrowed
// addresses through the allocator: each one's addresses are free
// afterwards, and no record or loan of it is left anywhere.
func releaseBorrowed(t *testing.T, s store.Store, want firstState) {
	t.Helper()
	ctx := t.Context()
	a := allocator.New(s, nil)
	for _, c := range []struct{ node, container string }{
		{"node-b", "btiny"}, // single-stack, borrowed
		{"node-c", "cdual"}, // dual-stack, IPv4 borrowed
		{"node-d", "dtiny"}, // borrowed by a node holding no block
	} {
		id := ipam.HandleID("net", c.container, "eth0")
		freed, err := a.Release(ctx, c.node, id)
		if err != nil || len(freed) == 0 || !ipam.SameAddrs(want.handleIPs(id), ipsOf(freed)) {
			t.Errorf("Release(%s, %s) = %v, %v; want %v", c.node, id, freed, err, want.handleIPs(id))
		}
		nodes, err := s.ListNodes(ctx, store.NodeSelector{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if _, ok := n.Handle(id); ok || len(n.LendersOf(id)) > 0 {
				t.Errorf("after releasing %s, %s's object still holds its record or a loan (lenders %v)", id, n.Name, n.LendersOf(id))
			}
			for _, b := range n.Blocks {
				for _, ip := range want.handleIPs(id) {
					if ip.Pool == b.Pool && b.CIDR.Contains(ip.Addr) && b.Owner(ip.Addr) != "" {
						t.Errorf("after releasing %s, %s is still held by %q", id, ip.Addr, b.Owner(ip.Addr))
					}
				}
			}
		}
	}
}

// ipsOf wraps addresses as HandleIPs (for sameAddrs).
func ipsOf(as []netip.Addr) []ipam.HandleIP {
	out := make([]ipam.HandleIP, len(as))
	for i, a := range as {
		out[i] = ipam.HandleIP{Addr: a}
	}
	return out
}

// A migration that dies before any one of its transactions (with
// transactions kept small, so there are many) and is run again ends in the
// same state as one that never died.
func TestMigrateResumes(t *testing.T) {
	small := kv.Limits{MaxOps: 4}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			txns := 0
			for crash := 1; crash <= 60; crash++ { // bounded: ends when a run needs fewer transactions
				kvs, want := openFirstLayout(t, b)
				cs := &kvbackedtest.Counting{Store: kvs, TxnLimits: &small, FailTxn: crash}
				_, err := migrate.Run(t.Context(), cs)
				_, _, n := cs.Counts()
				if err == nil {
					if crash == 1 {
						t.Fatal("no transaction failed")
					}
					cs.Close()
					break
				}
				if !errors.Is(err, kvbackedtest.ErrCrash) {
					t.Fatalf("crash before txn %d: %v", crash, err)
				}
				txns = max(txns, n)
				cs.FailTxn = 0
				if _, err := migrate.Run(t.Context(), cs); err != nil {
					t.Fatalf("run after a crash before txn %d: %v", crash, err)
				}
				checkMigrated(t, cs.Store, want)
				cs.Close()
			}
			if txns < 10 {
				t.Fatalf("only %d crash points: transactions not bounded by the limits", txns)
			}
		})
	}
}
