package nodealloc

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Assembly is the node objects and claims that hold a set of blocks and
// handles kept apart (the first storage layout, an import plan), with what
// Assemble did not take as given.
type Assembly struct {
	// Nodes are the node objects, sorted by name, Version "": one per
	// node holding a block, and one per node whose handles borrow in
	// another node's block (holding its loans; no block when it holds
	// none). Each passes store.Node.Validate.
	Nodes []store.Node
	// Claims are the claims of every block kept, sorted by pool and CIDR,
	// each naming the object holding the block.
	Claims []store.Claim
	// Unaffine are the blocks of no node that hold addresses: kept in
	// store.UnaffineNode's object.
	Unaffine []store.BlockRef
	// Dropped are the blocks of no node that hold no address: not kept
	// (an unclaimed block is free).
	Dropped []store.BlockRef
	// Orphans are addresses a block gives to a handle that does not exist
	// or does not list them: they stay that handle ID's, in a record of
	// it (made from the ID when the handle does not exist).
	Orphans []Finding
	// Strays are addresses a handle lists that its block does not give it
	// (left out of its records), and handles listing no address.
	Strays []Finding
}

// Finding is an address Assemble did not take as given, or (Addr invalid)
// a handle holding no address.
type Finding struct {
	Handle string
	Addr   netip.Addr
}

// String says what was found: "10.0.0.5 (handle h)" or "handle h holds
// no address".
func (f Finding) String() string {
	if !f.Addr.IsValid() {
		return fmt.Sprintf("handle %s holds no address", f.Handle)
	}
	return fmt.Sprintf("%s (handle %s)", f.Addr, f.Handle)
}

// Node returns the assembled object named name.
func (a Assembly) Node(name string) (store.Node, bool) {
	i := slices.IndexFunc(a.Nodes, func(n store.Node) bool { return n.Name == name })
	if i < 0 {
		return store.Node{}, false
	}
	return a.Nodes[i], true
}

// Assemble turns blocks and handles kept apart into node objects. The
// blocks are the truth about ownership: every address a block gives to a
// handle ends in exactly one record of that handle, in the object of the
// block's node (store.UnaffineNode's for a block of no node, which is
// dropped instead when it holds no address); an address a handle lists
// that its block does not give it is left out. A record keeps its
// handle's node, or takes the object's when the handle names none; a
// record in another node's object is borrowed, and the borrower's object
// (made when the borrower holds no block) gets a loan naming the lender,
// as an allocation would have written it.
//
// It is pure: no I/O, the inputs are not changed. It fails, wrapping
// store.ErrInvalid and naming the offender, when a block is invalid or
// given twice, a handle ID is empty or given twice, or a node name cannot
// name an object.
func Assemble(blocks []ipam.Block, handles []ipam.Handle) (Assembly, error) {
	var out Assembly
	bad := func(format string, args ...any) (Assembly, error) {
		return Assembly{}, fmt.Errorf("%w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
	}
	byID := make(map[string]ipam.Handle, len(handles))
	for _, h := range handles {
		if h.ID == "" {
			return bad("a handle without an ID")
		}
		if _, dup := byID[h.ID]; dup {
			return bad("handle %q given twice", h.ID)
		}
		if h.Node != "" {
			if err := store.ValidName("node", h.Node); err != nil {
				return bad("handle %q: %v", h.ID, err)
			}
		}
		byID[h.ID] = h
	}
	nodes := map[string]*store.Node{}
	records := map[string]map[string]*ipam.Handle{} // object -> handle ID -> record
	owned := map[store.BlockRef]ipam.Block{}
	for _, b := range blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		if err := b.Validate(); err != nil {
			return bad("%v", err)
		}
		if err := store.ValidName("pool", b.Pool); err != nil {
			return bad("block %s: %v", b.CIDR, err)
		}
		if _, dup := owned[ref]; dup {
			return bad("block %s given twice", ref)
		}
		if b.Node == "" {
			if b.InUse() == 0 {
				out.Dropped = append(out.Dropped, ref)
				continue
			}
			out.Unaffine = append(out.Unaffine, ref)
			b.Node = store.UnaffineNode
		} else if err := store.ValidName("node", b.Node); err != nil {
			return bad("block %s: %v", ref, err)
		}
		b.Free, b.Owners = slices.Clone(b.Free), maps.Clone(b.Owners)
		owned[ref] = b
		n := nodes[b.Node]
		if n == nil {
			n = &store.Node{Name: b.Node}
			nodes[b.Node], records[b.Node] = n, map[string]*ipam.Handle{}
		}
		n.Blocks = append(n.Blocks, b)
	}
	// Every address a handle lists that its block gives it, in its order.
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		h := byID[id]
		if len(h.IPs) == 0 {
			out.Strays = append(out.Strays, Finding{Handle: id})
		}
		for _, ip := range h.IPs {
			b, ok := owned[store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}]
			if !ok || b.Owner(ip.Addr) != id {
				out.Strays = append(out.Strays, Finding{Handle: id, Addr: ip.Addr})
				continue
			}
			r := record(records[b.Node], h, b.Node)
			if slices.Contains(r.IPs, ip) {
				out.Strays = append(out.Strays, Finding{Handle: id, Addr: ip.Addr}) // listed twice
				continue
			}
			r.IPs = append(r.IPs, ip)
		}
	}
	// Addresses blocks give to handles that do not list them (or do not
	// exist) stay theirs.
	for _, ref := range slices.SortedFunc(maps.Keys(owned), store.BlockRef.Compare) {
		b := owned[ref]
		for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
			id, ip := b.Owners[ord], ipam.HandleIP{Addr: b.Addr(ord), Pool: b.Pool, Block: b.CIDR}
			h, exists := byID[id]
			if exists && slices.Contains(h.IPs, ip) {
				continue
			}
			if !exists {
				h = ipam.Handle{ID: id}
				h.Network, h.ContainerID, h.IfName, _ = ipam.ParseHandleID(id)
			}
			out.Orphans = append(out.Orphans, Finding{Handle: id, Addr: ip.Addr})
			r := record(records[b.Node], h, b.Node)
			r.IPs = append(r.IPs, ip)
		}
	}
	// Loans: a record in another node's object is borrowed by its node.
	for _, lender := range slices.Sorted(maps.Keys(records)) {
		for _, id := range slices.Sorted(maps.Keys(records[lender])) {
			borrower := records[lender][id].Node
			if borrower == lender {
				continue
			}
			n := nodes[borrower]
			if n == nil {
				n = &store.Node{Name: borrower}
				nodes[borrower] = n
			}
			n.Loans = append(n.Loans, store.Loan{Handle: id, Lender: lender})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		slices.SortFunc(n.Blocks, func(x, y ipam.Block) int {
			return store.BlockRef{Pool: x.Pool, CIDR: x.CIDR}.Compare(store.BlockRef{Pool: y.Pool, CIDR: y.CIDR})
		})
		for _, id := range slices.Sorted(maps.Keys(records[name])) {
			n.Handles = append(n.Handles, *records[name][id])
		}
		slices.SortFunc(n.Loans, func(x, y store.Loan) int {
			return cmp.Or(cmp.Compare(x.Handle, y.Handle), cmp.Compare(x.Lender, y.Lender))
		})
		if err := n.Validate(); err != nil {
			return Assembly{}, fmt.Errorf("the blocks of node %q do not make a node object: %w", name, err)
		}
		for _, b := range n.Blocks {
			out.Claims = append(out.Claims, store.Claim{BlockRef: store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}, Node: name})
		}
		out.Nodes = append(out.Nodes, *n)
	}
	slices.SortFunc(out.Claims, func(x, y store.Claim) int { return x.BlockRef.Compare(y.BlockRef) })
	slices.SortFunc(out.Unaffine, store.BlockRef.Compare)
	slices.SortFunc(out.Dropped, store.BlockRef.Compare)
	return out, nil
}

// record returns the record of h in an object's records, made (without
// addresses) when missing; a handle of no node is the object's own.
func record(recs map[string]*ipam.Handle, h ipam.Handle, object string) *ipam.Handle {
	if r, ok := recs[h.ID]; ok {
		return r
	}
	r := h
	r.IPs = nil
	r.Node = cmp.Or(h.Node, object)
	recs[h.ID] = &r
	return &r
}

// CanonicalIDs renames every handle stored under the legacy form of its
// attachment's ID (ipam.CanonicalID) to the ID ipam.HandleID gives it, in
// the handle and in the owners of the blocks, unless another handle holds
// that ID already (then both stay as they are). Later versions look
// handles up by the canonical ID only — a runtime's DEL and its GC's list
// of valid attachments name that one — so a migration renames them once.
// It returns the renames made, old ID to new; its inputs are not changed.
func CanonicalIDs(blocks []ipam.Block, handles []ipam.Handle) ([]ipam.Block, []ipam.Handle, map[string]string) {
	taken := make(map[string]bool, len(handles))
	for _, h := range handles {
		taken[h.ID] = true
	}
	renamed := map[string]string{}
	outH := make([]ipam.Handle, len(handles))
	for i, h := range handles {
		if id, legacy := ipam.CanonicalID(h); legacy && !taken[id] {
			renamed[h.ID] = id
			taken[id] = true
			h.ID = id
		}
		outH[i] = h
	}
	if len(renamed) == 0 {
		return blocks, handles, renamed
	}
	outB := make([]ipam.Block, len(blocks))
	for i, b := range blocks {
		b.Owners = maps.Clone(b.Owners)
		for ord, id := range b.Owners {
			if to, ok := renamed[id]; ok {
				b.Owners[ord] = to
			}
		}
		outB[i] = b
	}
	return outB, outH, renamed
}
