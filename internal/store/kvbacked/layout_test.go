package kvbacked_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// families are the IPv4 and IPv6 cases the tables run side by side.
var families = []struct {
	name string
	pool ipam.Pool
}{
	{"IPv4", ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26}},
	{"IPv6", ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:20::/48"), BlockSize: 122}},
}

// raw returns the entries of s under prefix as key -> version.
func raw(t *testing.T, s kv.Store, prefix string) map[string]int64 {
	t.Helper()
	es, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range es {
		out[e.Key] = e.Version
	}
	return out
}

// A claim and its node index key appear in one transaction, with one
// version and the same content, and disappear together; a delete naming
// another node than the claim's deletes neither.
func TestClaimAndIndexTogether(t *testing.T) {
	for _, b := range backends {
		for _, f := range families {
			t.Run(b.Name+"/"+f.name, func(t *testing.T) {
				ctx := t.Context()
				kvs := b.Open(t)
				s := kvbacked.New(kvs)
				defer s.Close()
				cidr := f.pool.BlockAt(3)
				blk := strings.Replace(cidr.String(), "/", "-", 1) // 10.20.0.192-26, fd00:20::c0-122
				claimKey, idxKey := "claims/"+f.pool.Name+"/"+blk, "nodeclaims/node-a/"+f.pool.Name+"/"+blk
				c, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: f.pool.Name, CIDR: cidr}, Node: "node-a"})
				if err != nil {
					t.Fatal(err)
				}
				es, err := kvs.Get(ctx, claimKey, idxKey)
				if err != nil {
					t.Fatal(err)
				}
				if es[0].Version == 0 || es[1].Version != es[0].Version || string(es[0].Value) != string(es[1].Value) {
					t.Fatalf("claim %s at %d %q, index %s at %d %q: want both, same version and value",
						claimKey, es[0].Version, es[0].Value, idxKey, es[1].Version, es[1].Value)
				}
				if string(c.Version) != fmt.Sprint(es[0].Version) {
					t.Fatalf("CreateClaim returned version %q, the key has %d", c.Version, es[0].Version)
				}
				if got := raw(t, kvs, ""); len(got) != 2 {
					t.Fatalf("store holds %v, want only the claim and its index", got)
				}
				wrong := c
				wrong.Node = "node-b"
				if err := s.DeleteClaim(ctx, wrong); !errors.Is(err, store.ErrConflict) {
					t.Fatalf("DeleteClaim naming node-b: %v, want ErrConflict", err)
				}
				if got := raw(t, kvs, ""); got[claimKey] == 0 || got[idxKey] == 0 || len(got) != 2 {
					t.Fatalf("after a refused delete the store holds %v", got)
				}
				if err := s.DeleteClaim(ctx, c); err != nil {
					t.Fatal(err)
				}
				if got := raw(t, kvs, ""); len(got) != 0 {
					t.Fatalf("after DeleteClaim the store holds %v", got)
				}
			})
		}
	}
}

// lenderNode is a node object holding one block of each family, one own
// handle and one handle of each borrower.
func lenderNode(t *testing.T, name string, pods int, borrowers ...string) store.Node {
	t.Helper()
	n := store.Node{Name: name}
	for _, f := range families {
		n.Blocks = append(n.Blocks, ipam.NewBlock(f.pool, f.pool.BlockAt(1), name))
	}
	for i := range pods + len(borrowers) {
		node := name
		if i >= pods {
			node = borrowers[i-pods]
		}
		c := fmt.Sprintf("c%03d", i)
		h := ipam.Handle{ID: ipam.HandleID("net1", c, "eth0"), Network: "net1", ContainerID: c, IfName: "eth0", Node: node,
			NetNS: "/var/run/netns/cni-" + c, Namespace: "default", Pod: "pod-" + c, PodUID: "6f0c7e1a-2b1d-4c55-9e0a-" + c,
			Created: time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)}
		for bi, f := range families {
			nb, a, err := n.Blocks[bi].Assign(f.pool, h.ID)
			if err != nil {
				t.Fatal(err)
			}
			n.Blocks[bi] = nb
			h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: f.pool.Name, Block: nb.CIDR})
		}
		n.Handles = append(n.Handles, h)
	}
	return n
}

// withoutHandle returns n without the handle of borrower (its addresses
// freed).
func withoutHandle(t *testing.T, n store.Node, node string) store.Node {
	t.Helper()
	out := n
	out.Blocks = slices.Clone(n.Blocks)
	out.Handles = nil
	for _, h := range n.Handles {
		if h.Node != node {
			out.Handles = append(out.Handles, h)
			continue
		}
		for _, ip := range h.IPs {
			for i, b := range out.Blocks {
				if b.CIDR == ip.Block {
					nb, err := b.Release(ip.Addr, h.ID)
					if err != nil {
						t.Fatal(err)
					}
					out.Blocks[i] = nb
				}
			}
		}
	}
	return out
}

// UpdateNode of a node object the store returned is one kv transaction
// and reads nothing: the node's head, the parts that changed and the
// lends key of each borrower of a changed record, put together.
func TestUpdateNodeOneTxnNoRead(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			cs := &counting{Store: b.Open(t)}
			s := kvbacked.New(cs)
			defer s.Close()
			n, err := s.CreateNode(ctx, lenderNode(t, "node-a", 3, "node-b", "node-c"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				cs.Reset()
				fresh := lenderNode(t, "node-a", 4+i, "node-b", "node-c")
				next := n // as read: what changed is written
				next.Blocks, next.Handles, next.Loans = fresh.Blocks, fresh.Handles, fresh.Loans
				if n, err = s.UpdateNode(ctx, next); err != nil {
					t.Fatal(err)
				}
				if gets, lists, txns := cs.Counts(); gets != 0 || lists != 0 || txns != 1 {
					t.Fatalf("UpdateNode: %d gets, %d lists, %d txns; want 0, 0, 1", gets, lists, txns)
				}
				var keys []string
				for _, op := range cs.Ops()[0] {
					keys = append(keys, op.Key)
				}
				if len(keys) == 0 || keys[0] != "nodes/node-a/head" {
					t.Fatalf("UpdateNode wrote %q, want the head first", keys)
				}
				for _, k := range keys {
					if !strings.HasPrefix(k, "nodes/node-a/") && !strings.HasPrefix(k, "lends/") {
						t.Fatalf("UpdateNode wrote %q, which is no part of node-a and no lends key", k)
					}
				}
				for _, want := range []string{"lends/node-b/node-a", "lends/node-c/node-a"} {
					if !slices.Contains(keys, want) {
						t.Fatalf("UpdateNode wrote %q, without %q", keys, want)
					}
				}
			}
			got, err := s.GetNode(ctx, "node-a")
			if err != nil || got.Version != n.Version || len(got.Handles) != 8 {
				t.Fatalf("GetNode after the updates: %d handles at %q (%v), want 8 at %q", len(got.Handles), got.Version, err, n.Version)
			}
		})
	}
}

// A lends entry left behind when the lender stops lending (or is deleted
// by a caller that did not name the borrower) is not listed, and
// ListNodes{LendsTo} deletes it; one whose lender lends again by the time
// the delete commits stays.
func TestStaleLendsEntries(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			cs := &counting{Store: b.Open(t)}
			s := kvbacked.New(cs)
			defer s.Close()
			a, err := s.CreateNode(ctx, lenderNode(t, "node-a", 1, "node-b"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := s.CreateNode(ctx, lenderNode(t, "node-c", 1, "node-b"))
			if err != nil {
				t.Fatal(err)
			}
			lenders := func(want ...string) {
				t.Helper()
				got, err := s.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"})
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, n := range got {
					names = append(names, n.Name)
				}
				if !slices.Equal(names, want) {
					t.Fatalf("lenders of node-b: %q, want %q", names, want)
				}
			}
			entries := func(want ...string) {
				t.Helper()
				var got []string
				for k := range raw(t, cs.Store, "lends/") {
					got = append(got, k)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("lends entries %q, want %q", got, want)
				}
			}
			lenders("node-a", "node-c")
			// node-a stops lending, node-c is deleted by a caller that
			// passes only its name and version: both entries stay.
			upd := withoutHandle(t, a, "node-b")
			if a, err = s.UpdateNode(ctx, upd); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteNode(ctx, store.Node{Name: "node-c", Version: c.Version}); err != nil {
				t.Fatal(err)
			}
			entries("lends/node-b/node-a", "lends/node-b/node-c")
			// A listing filters both out and deletes them, unless the
			// lender is written meanwhile: node-a lends again between the
			// read and the delete of its entry.
			var relent store.Node
			cs.BeforeTxn = func(_ []kv.Cond, ops []kv.Op) {
				if len(ops) == 1 && ops[0].Key == "lends/node-b/node-a" && ops[0].Delete && relent.Name == "" {
					again := lenderNode(t, "node-a", 1, "node-b")
					again.Version = a.Version
					if relent, err = s.UpdateNode(ctx, again); err != nil {
						t.Error(err)
					}
				}
			}
			lenders()
			cs.BeforeTxn = nil
			if relent.Name == "" {
				t.Fatal("no delete of node-a's stale entry was tried")
			}
			entries("lends/node-b/node-a")
			lenders("node-a")
			// It stops lending again: the next listing removes the entry.
			if _, err = s.UpdateNode(ctx, withoutHandle(t, relent, "node-b")); err != nil {
				t.Fatal(err)
			}
			lenders()
			entries()
		})
	}
}
