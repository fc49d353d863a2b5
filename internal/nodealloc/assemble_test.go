package nodealloc_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// blockOf returns block i of p on node with the given owners (ordinal ->
// handle ID), every other ordinal free in order.
func blockOf(p ipam.Pool, i uint64, node string, owners map[int]string) ipam.Block {
	b := ipam.NewBlock(p, p.BlockAt(i), node)
	b.Free = slices.DeleteFunc(b.Free, func(o int) bool { _, taken := owners[o]; return taken })
	if len(owners) > 0 {
		b.Owners = maps.Clone(owners)
	}
	return b
}

// at is ordinal ord of b as a handle's address.
func at(b ipam.Block, ord int) ipam.HandleIP {
	return ipam.HandleIP{Addr: b.Addr(ord), Pool: b.Pool, Block: b.CIDR}
}

// handleOn is a handle of node listing ips.
func handleOn(container, node string, ips ...ipam.HandleIP) ipam.Handle {
	return ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0", Node: node, IPs: ips}
}

func id(container string) string { return ipam.HandleID("net", container, "eth0") }

// want is what one object of an Assembly must hold: its blocks, and per
// handle ID the record's node and addresses, and its loans.
type want struct {
	blocks  []netip.Prefix
	records map[string]recordWant
	loans   []store.Loan
}

type recordWant struct {
	node  string
	addrs []netip.Addr
}

func TestAssembleTable(t *testing.T) {
	type family struct {
		name        string
		pool, other ipam.Pool // other: the second family, for dual-stack
	}
	families := []family{{"IPv4", pool4, pool6}, {"IPv6", pool6, pool4}}
	type tc struct {
		name     string
		in       func(f family) ([]ipam.Block, []ipam.Handle)
		objects  func(f family) map[string]want
		orphans  int
		strays   int
		unaffine int
		dropped  int
	}
	cases := []tc{
		{
			name: "own handles only",
			in: func(f family) ([]ipam.Block, []ipam.Handle) {
				b := blockOf(f.pool, 0, "node-a", map[int]string{2: id("a1"), 3: id("a2")})
				return []ipam.Block{b}, []ipam.Handle{handleOn("a1", "node-a", at(b, 2)), handleOn("a2", "node-a", at(b, 3))}
			},
			objects: func(f family) map[string]want {
				b := f.pool.BlockAt(0)
				return map[string]want{"node-a": {blocks: []netip.Prefix{b}, records: map[string]recordWant{
					id("a1"): {"node-a", []netip.Addr{nth(b, 2)}}, id("a2"): {"node-a", []netip.Addr{nth(b, 3)}}}}}
			},
		},
		{
			name: "single-stack borrowed by a node holding no block",
			in: func(f family) ([]ipam.Block, []ipam.Handle) {
				b := blockOf(f.pool, 1, "node-a", map[int]string{4: id("b1")})
				return []ipam.Block{b}, []ipam.Handle{handleOn("b1", "node-b", at(b, 4))}
			},
			objects: func(f family) map[string]want {
				b := f.pool.BlockAt(1)
				return map[string]want{
					"node-a": {blocks: []netip.Prefix{b}, records: map[string]recordWant{id("b1"): {"node-b", []netip.Addr{nth(b, 4)}}}},
					"node-b": {loans: []store.Loan{{Handle: id("b1"), Lender: "node-a"}}},
				}
			},
		},
		{
			name: "dual-stack with this family borrowed",
			in: func(f family) ([]ipam.Block, []ipam.Handle) {
				lent := blockOf(f.pool, 0, "node-a", map[int]string{5: id("c1")})
				own := blockOf(f.other, 0, "node-c", map[int]string{6: id("c1")})
				return []ipam.Block{own, lent}, []ipam.Handle{handleOn("c1", "node-c", at(lent, 5), at(own, 6))}
			},
			objects: func(f family) map[string]want {
				lent, own := f.pool.BlockAt(0), f.other.BlockAt(0)
				return map[string]want{
					"node-a": {blocks: []netip.Prefix{lent}, records: map[string]recordWant{id("c1"): {"node-c", []netip.Addr{nth(lent, 5)}}}},
					"node-c": {blocks: []netip.Prefix{own}, records: map[string]recordWant{id("c1"): {"node-c", []netip.Addr{nth(own, 6)}}},
						loans: []store.Loan{{Handle: id("c1"), Lender: "node-a"}}},
				}
			},
		},
		{
			name: "blocks of no node: kept with an address, dropped empty, lending to a handle's node",
			in: func(f family) ([]ipam.Block, []ipam.Handle) {
				b := blockOf(f.pool, 2, "", map[int]string{7: id("w1"), 8: id("w2")})
				empty := blockOf(f.pool, 3, "", nil)
				return []ipam.Block{b, empty}, []ipam.Handle{handleOn("w1", "", at(b, 7)), handleOn("w2", "node-b", at(b, 8))}
			},
			objects: func(f family) map[string]want {
				b := f.pool.BlockAt(2)
				return map[string]want{
					store.UnaffineNode: {blocks: []netip.Prefix{b}, records: map[string]recordWant{
						id("w1"): {store.UnaffineNode, []netip.Addr{nth(b, 7)}}, id("w2"): {"node-b", []netip.Addr{nth(b, 8)}}}},
					"node-b": {loans: []store.Loan{{Handle: id("w2"), Lender: store.UnaffineNode}}},
				}
			},
			unaffine: 1, dropped: 1,
		},
		{
			name: "orphans stay allocated, strays are left out",
			in: func(f family) ([]ipam.Block, []ipam.Handle) {
				b := blockOf(f.pool, 0, "node-a", map[int]string{2: id("gone"), 3: id("o1"), 4: id("d1")})
				// o1 does not list ordinal 3 but lists the free ordinal 9;
				// s1 lists ordinal 2 (gone's) and nothing of its own; e1
				// lists nothing; d1 lists its ordinal 4 twice.
				return []ipam.Block{b}, []ipam.Handle{handleOn("o1", "node-a", at(b, 9)), handleOn("s1", "node-a", at(b, 2)), handleOn("e1", "node-a"),
					handleOn("d1", "node-a", at(b, 4), at(b, 4))}
			},
			objects: func(f family) map[string]want {
				b := f.pool.BlockAt(0)
				return map[string]want{"node-a": {blocks: []netip.Prefix{b}, records: map[string]recordWant{
					id("gone"): {"node-a", []netip.Addr{nth(b, 2)}}, id("o1"): {"node-a", []netip.Addr{nth(b, 3)}}, id("d1"): {"node-a", []netip.Addr{nth(b, 4)}}}}}
			},
			orphans: 2, strays: 4,
		},
	}
	for _, c := range cases {
		for _, f := range families {
			t.Run(c.name+"/"+f.name, func(t *testing.T) {
				blocks, handles := c.in(f)
				asm, err := nodealloc.Assemble(blocks, handles)
				if err != nil {
					t.Fatal(err)
				}
				if len(asm.Orphans) != c.orphans || len(asm.Strays) != c.strays || len(asm.Unaffine) != c.unaffine || len(asm.Dropped) != c.dropped {
					t.Errorf("orphans %v strays %v unaffine %v dropped %v; want %d, %d, %d, %d", asm.Orphans, asm.Strays, asm.Unaffine, asm.Dropped, c.orphans, c.strays, c.unaffine, c.dropped)
				}
				objects := c.objects(f)
				if got := names(asm.Nodes); !slices.Equal(got, slices.Sorted(maps.Keys(objects))) {
					t.Fatalf("objects %v, want %v", got, slices.Sorted(maps.Keys(objects)))
				}
				claims := 0
				for _, n := range asm.Nodes {
					w := objects[n.Name]
					if err := n.Validate(); err != nil {
						t.Error(err)
					}
					var cidrs []netip.Prefix
					for _, b := range n.Blocks {
						cidrs = append(cidrs, b.CIDR)
						if c, ok := claimOf(asm, b); !ok || c.Node != n.Name {
							t.Errorf("block %s of %s: claim %+v, %v", b.CIDR, n.Name, c, ok)
						}
						claims++
					}
					if !sameSet(cidrs, w.blocks, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }) {
						t.Errorf("%s holds blocks %v, want %v", n.Name, cidrs, w.blocks)
					}
					if len(n.Handles) != len(w.records) {
						t.Errorf("%s holds %d records, want %d", n.Name, len(n.Handles), len(w.records))
					}
					for hid, rw := range w.records {
						r, ok := n.Handle(hid)
						if !ok || r.Node != rw.node || !sameSet(addrsOf(r.IPs), rw.addrs, netip.Addr.Compare) {
							t.Errorf("%s: record of %s = %+v, %v; want node %s, %v", n.Name, hid, r, ok, rw.node, rw.addrs)
						}
					}
					if !slices.Equal(n.Loans, w.loans) {
						t.Errorf("%s: loans %v, want %v", n.Name, n.Loans, w.loans)
					}
				}
				if len(asm.Claims) != claims {
					t.Errorf("%d claims for %d blocks", len(asm.Claims), claims)
				}
			})
		}
	}
}

// TestAssembleRefuses: input that cannot make node objects is refused
// with store.ErrInvalid naming the offender.
func TestAssembleRefuses(t *testing.T) {
	for _, p := range []ipam.Pool{pool4, pool6} {
		b := blockOf(p, 0, "node-a", map[int]string{2: id("a1")})
		h := handleOn("a1", "node-a", at(b, 2))
		broken := blockOf(p, 1, "node-a", nil)
		broken.Free = broken.Free[1:] // an ordinal neither free nor taken
		for _, c := range []struct {
			name    string
			blocks  []ipam.Block
			handles []ipam.Handle
			mention string
		}{
			{"block twice", []ipam.Block{b, b}, []ipam.Handle{h}, "given twice"},
			{"handle twice", []ipam.Block{b}, []ipam.Handle{h, h}, id("a1")},
			{"handle without ID", []ipam.Block{b}, []ipam.Handle{h, {Node: "node-a"}}, "without an ID"},
			{"invalid block", []ipam.Block{b, broken}, []ipam.Handle{h}, broken.CIDR.String()},
			{"block node with '/'", []ipam.Block{blockOf(p, 0, "a/b", map[int]string{2: id("a1")})}, []ipam.Handle{h}, `"a/b"`},
			{"handle node with '/'", []ipam.Block{b}, []ipam.Handle{handleOn("a1", "x/y", at(b, 2))}, `"x/y"`},
			{"pool name with '/'", []ipam.Block{{CIDR: b.CIDR, Pool: "p/q", Node: "node-a", Free: b.Free, Owners: b.Owners}}, nil, `"p/q"`},
		} {
			t.Run(p.Name+"/"+c.name, func(t *testing.T) {
				_, err := nodealloc.Assemble(c.blocks, c.handles)
				if !errors.Is(err, store.ErrInvalid) || !contains(err, c.mention) {
					t.Fatalf("Assemble = %v, want ErrInvalid naming %s", err, c.mention)
				}
			})
		}
	}
}

// TestAssembleModel checks Assemble against a plain account of random
// blocks (of three nodes and of none, both families) and handles (own,
// borrowed, of no node, listing strays and missing addresses): every
// address the kept blocks give to a handle is in exactly one record, of
// that handle, in the object of the block's node; records hold nothing
// else; strays are exactly the listed addresses not given; every object
// passes Validate and survives its encoding; loans and borrowed records
// name each other; the input is not changed.
func TestAssembleModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	nodes := []string{"n1", "n2", "n3", ""}
	for round := range 200 {
		var blocks []ipam.Block
		handles := map[string]*ipam.Handle{}
		var order []string
		for i := range 20 {
			id := fmt.Sprintf("net.c%d.eth0", i)
			handles[id] = &ipam.Handle{ID: id, Network: "net", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Node: []string{"n1", "n2", "n3", "n4", ""}[rng.IntN(5)]}
			order = append(order, id)
		}
		for _, p := range []ipam.Pool{pool4, pool6} {
			for i := range uint64(1 + rng.IntN(4)) {
				owners := map[int]string{}
				for ord := range 16 {
					if rng.IntN(3) == 0 {
						owners[ord] = order[rng.IntN(len(order))]
						if rng.IntN(10) == 0 {
							owners[ord] = fmt.Sprintf("net.gone%d.eth0", ord) // a handle that does not exist
						}
					}
				}
				b := blockOf(p, i, nodes[rng.IntN(len(nodes))], owners)
				rng.Shuffle(len(b.Free), func(x, y int) { b.Free[x], b.Free[y] = b.Free[y], b.Free[x] })
				blocks = append(blocks, b)
				for ord, h := range owners {
					if hh, ok := handles[h]; ok && rng.IntN(8) != 0 { // most list it
						hh.IPs = append(hh.IPs, at(b, ord))
					}
				}
				if rng.IntN(3) == 0 && len(b.Free) > 0 { // a stray: a free address listed
					hh := handles[order[rng.IntN(len(order))]]
					hh.IPs = append(hh.IPs, at(b, b.Free[0]))
				}
			}
		}
		var hs []ipam.Handle
		for _, id := range order {
			hs = append(hs, *handles[id])
		}
		rng.Shuffle(len(hs), func(x, y int) { hs[x], hs[y] = hs[y], hs[x] })
		blocksCopy, hsCopy := deepCopy(blocks), deepCopyHandles(hs)
		asm, err := nodealloc.Assemble(blocks, hs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !reflect.DeepEqual(blocks, blocksCopy) || !reflect.DeepEqual(hs, hsCopy) {
			t.Fatalf("round %d: Assemble changed its input", round)
		}
		checkAssembly(t, round, blocks, hs, asm)
	}
}

func checkAssembly(t *testing.T, round int, blocks []ipam.Block, hs []ipam.Handle, asm nodealloc.Assembly) {
	t.Helper()
	objects := map[string]store.Node{}
	seen := map[netip.Addr]int{}
	for _, n := range asm.Nodes {
		objects[n.Name] = n
		if err := n.Validate(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		spec, err := store.EncodeNode(n)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if back, err := store.DecodeNode(n.Name, spec); err != nil || len(back.Handles) != len(n.Handles) || len(back.Loans) != len(n.Loans) {
			t.Fatalf("round %d: %s does not survive its encoding: %v", round, n.Name, err)
		}
		for _, r := range n.Handles {
			for _, ip := range r.IPs {
				seen[ip.Addr]++
			}
		}
	}
	byID := map[string]ipam.Handle{}
	for _, h := range hs {
		byID[h.ID] = h
	}
	dropped, unaffine := 0, 0
	for _, b := range blocks {
		node := b.Node
		if node == "" {
			if b.InUse() == 0 {
				dropped++
				if _, ok := claimOf(asm, b); ok {
					t.Fatalf("round %d: empty block %s of no node claimed", round, b.CIDR)
				}
				continue
			}
			unaffine++
			node = store.UnaffineNode
		}
		if c, ok := claimOf(asm, b); !ok || c.Node != node {
			t.Fatalf("round %d: block %s: claim %+v, %v; want node %s", round, b.CIDR, c, ok, node)
		}
		for ord, id := range b.Owners {
			a := b.Addr(ord)
			if seen[a] != 1 {
				t.Fatalf("round %d: %s (given to %s) is in %d records", round, a, id, seen[a])
			}
			r, ok := objects[node].Handle(id)
			if !ok || !slices.Contains(addrsOf(r.IPs), a) {
				t.Fatalf("round %d: %s of block %s is not in %s's record in %s", round, a, b.CIDR, id, node)
			}
			wantNode := byID[id].Node
			if wantNode == "" {
				wantNode = node
			}
			if r.Node != wantNode {
				t.Fatalf("round %d: record of %s in %s names node %q, want %q", round, id, node, r.Node, wantNode)
			}
		}
	}
	if len(asm.Dropped) != dropped || len(asm.Unaffine) != unaffine {
		t.Fatalf("round %d: dropped %d unaffine %d, want %d and %d", round, len(asm.Dropped), len(asm.Unaffine), dropped, unaffine)
	}
	total := 0
	for _, n := range seen {
		total += n
	}
	if total != len(seen) {
		t.Fatalf("round %d: records hold addresses no kept block gives", round)
	}
	strays := 0
	for _, h := range hs {
		if len(h.IPs) == 0 {
			strays++
		}
		for _, ip := range h.IPs {
			if !givesTo(blocks, ip, h.ID) {
				strays++
			}
		}
	}
	if len(asm.Strays) != strays {
		t.Fatalf("round %d: %d strays, want %d: %v", round, len(asm.Strays), strays, asm.Strays)
	}
	for _, n := range asm.Nodes {
		for _, r := range n.Handles {
			if r.Node != n.Name && !slices.Contains(objects[r.Node].LendersOf(r.ID), n.Name) {
				t.Fatalf("round %d: record of %s (node %s) in %s has no loan", round, r.ID, r.Node, n.Name)
			}
		}
		for _, l := range n.Loans {
			if r, ok := objects[l.Lender].Handle(l.Handle); !ok || r.Node != n.Name {
				t.Fatalf("round %d: loan %+v of %s without its record", round, l, n.Name)
			}
		}
	}
}

// givesTo reports whether a kept block gives ip to id.
func givesTo(blocks []ipam.Block, ip ipam.HandleIP, id string) bool {
	for _, b := range blocks {
		if b.Pool == ip.Pool && b.CIDR == ip.Block && (b.Node != "" || b.InUse() > 0) && b.Owner(ip.Addr) == id {
			return true
		}
	}
	return false
}

func claimOf(asm nodealloc.Assembly, b ipam.Block) (store.Claim, bool) {
	for _, c := range asm.Claims {
		if c.Pool == b.Pool && c.CIDR == b.CIDR {
			return c, true
		}
	}
	return store.Claim{}, false
}

func names(ns []store.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func nth(b netip.Prefix, ord int) netip.Addr {
	a := b.Addr()
	for range ord {
		a = a.Next()
	}
	return a
}

func addrsOf(ips []ipam.HandleIP) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		out = append(out, ip.Addr)
	}
	return out
}

func sameSet[T any](x, y []T, cmp func(a, b T) int) bool {
	return slices.EqualFunc(slices.SortedFunc(slices.Values(x), cmp), slices.SortedFunc(slices.Values(y), cmp), func(a, b T) bool { return cmp(a, b) == 0 })
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func deepCopy(bs []ipam.Block) []ipam.Block {
	out := make([]ipam.Block, len(bs))
	for i, b := range bs {
		b.Free, b.Owners = slices.Clone(b.Free), maps.Clone(b.Owners)
		out[i] = b
	}
	return out
}

func deepCopyHandles(hs []ipam.Handle) []ipam.Handle {
	out := make([]ipam.Handle, len(hs))
	for i, h := range hs {
		h.IPs = slices.Clone(h.IPs)
		out[i] = h
	}
	return out
}

// TestCanonicalIDs: a handle stored under the legacy form of its ID is
// renamed, in its block's owners too; one whose canonical ID is taken,
// and one that is no legacy form, stay; the inputs are not changed.
func TestCanonicalIDs(t *testing.T) {
	for _, c := range []struct {
		name string
		pool ipam.Pool
	}{{"IPv4", ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.3.0.0/24"), BlockSize: 28}},
		{"IPv6", ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:3::/120"), BlockSize: 124}}} {
		t.Run(c.name, func(t *testing.T) {
			b := ipam.NewBlock(c.pool, c.pool.BlockAt(1), "n")
			mk := func(id, container string) ipam.Handle {
				var a netip.Addr
				var err error
				if b, a, err = b.Assign(c.pool, id); err != nil {
					t.Fatal(err)
				}
				return ipam.Handle{ID: id, Network: "net", ContainerID: container, IfName: "eth0", Node: "n",
					IPs: []ipam.HandleIP{{Addr: a, Pool: c.pool.Name, Block: b.CIDR}}}
			}
			legacy := mk("net.a.b.eth0", "a.b")   // canonical net.a%2Eb.eth0, free
			clash := mk("net.c.d.eth0", "c.d")    // canonical net.c%2Ed.eth0, taken below
			taker := mk("net.c%2Ed.eth0", "c.d")  // already canonical
			plain := mk("k8s-pod-network.x", "x") // not a legacy form
			blocks, handles := []ipam.Block{b}, []ipam.Handle{legacy, clash, taker, plain}
			before := fmt.Sprint(blocks, handles)
			gotB, gotH, renamed := nodealloc.CanonicalIDs(blocks, handles)
			if fmt.Sprint(blocks, handles) != before {
				t.Fatal("CanonicalIDs changed its inputs")
			}
			if len(renamed) != 1 || renamed["net.a.b.eth0"] != "net.a%2Eb.eth0" {
				t.Fatalf("renamed %v, want only net.a.b.eth0 -> net.a%%2Eb.eth0", renamed)
			}
			ids := []string{gotH[0].ID, gotH[1].ID, gotH[2].ID, gotH[3].ID}
			if want := []string{"net.a%2Eb.eth0", "net.c.d.eth0", "net.c%2Ed.eth0", "k8s-pod-network.x"}; fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("IDs %v, want %v", ids, want)
			}
			if got := gotB[0].Owner(legacy.IPs[0].Addr); got != "net.a%2Eb.eth0" {
				t.Fatalf("the block gives %s to %q", legacy.IPs[0].Addr, got)
			}
			asm, err := nodealloc.Assemble(gotB, gotH)
			if err != nil || len(asm.Orphans) != 0 || len(asm.Strays) != 0 {
				t.Fatalf("Assemble of the renamed state: %+v, %v", asm, err)
			}
		})
	}
}
