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
	byID, err := indexHandles(handles)
	if err != nil {
		return Assembly{}, err
	}
	a := assembler{
		byID:    byID,
		nodes:   map[string]*store.Node{},
		records: map[string]map[string]*ipam.Handle{},
		owned:   map[store.BlockRef]ipam.Block{},
	}
	if err := a.placeBlocks(blocks); err != nil {
		return Assembly{}, err
	}
	a.recordListed()
	a.recordOrphans()
	a.recordLoans()
	if err := a.finish(); err != nil {
		return Assembly{}, err
	}
	return a.out, nil
}

// assembler is Assemble's work in progress.
type assembler struct {
	out   Assembly
	byID  map[string]ipam.Handle
	nodes map[string]*store.Node
	// records are the handle records of each object: object -> handle
	// ID -> record.
	records map[string]map[string]*ipam.Handle
	// owned are the blocks kept, by reference.
	owned map[store.BlockRef]ipam.Block
}

// invalidInput is an error wrapping store.ErrInvalid.
func invalidInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}

// indexHandles checks handles and returns them by ID.
func indexHandles(handles []ipam.Handle) (map[string]ipam.Handle, error) {
	byID := make(map[string]ipam.Handle, len(handles))
	for _, h := range handles {
		if h.ID == "" {
			return nil, invalidInput("a handle without an ID")
		}
		if _, dup := byID[h.ID]; dup {
			return nil, invalidInput("handle %q given twice", h.ID)
		}
		if h.Node != "" {
			if err := store.ValidName("node", h.Node); err != nil {
				return nil, invalidInput("handle %q: %v", h.ID, err)
			}
		}
		byID[h.ID] = h
	}
	return byID, nil
}

// placeBlocks checks blocks and puts each in its node's object (a copy),
// dropping those of no node that hold no address.
func (a *assembler) placeBlocks(blocks []ipam.Block) error {
	for _, b := range blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		if err := b.Validate(); err != nil {
			return invalidInput("%v", err)
		}
		if err := store.ValidName("pool", b.Pool); err != nil {
			return invalidInput("block %s: %v", b.CIDR, err)
		}
		if _, dup := a.owned[ref]; dup {
			return invalidInput("block %s given twice", ref)
		}
		if b.Node == "" {
			if b.InUse() == 0 {
				a.out.Dropped = append(a.out.Dropped, ref)
				continue
			}
			a.out.Unaffine = append(a.out.Unaffine, ref)
			b.Node = store.UnaffineNode
		} else if err := store.ValidName("node", b.Node); err != nil {
			return invalidInput("block %s: %v", ref, err)
		}
		b.Free, b.Owners = slices.Clone(b.Free), maps.Clone(b.Owners)
		a.owned[ref] = b
		n := a.nodes[b.Node]
		if n == nil {
			n = &store.Node{Name: b.Node}
			a.nodes[b.Node], a.records[b.Node] = n, map[string]*ipam.Handle{}
		}
		n.Blocks = append(n.Blocks, b)
	}
	return nil
}

// recordListed records every address a handle lists that its block gives
// it, in its order; the others are strays.
func (a *assembler) recordListed() {
	for _, id := range slices.Sorted(maps.Keys(a.byID)) {
		h := a.byID[id]
		if len(h.IPs) == 0 {
			a.out.Strays = append(a.out.Strays, Finding{Handle: id})
		}
		for _, ip := range h.IPs {
			b, ok := a.owned[store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}]
			if !ok || b.Owner(ip.Addr) != id {
				a.out.Strays = append(a.out.Strays, Finding{Handle: id, Addr: ip.Addr})
				continue
			}
			r := record(a.records[b.Node], h, b.Node)
			if slices.Contains(r.IPs, ip) {
				a.out.Strays = append(a.out.Strays, Finding{Handle: id, Addr: ip.Addr}) // listed twice
				continue
			}
			r.IPs = append(r.IPs, ip)
		}
	}
}

// recordOrphans records the addresses blocks give to handles that do not
// list them (or do not exist): they stay theirs.
func (a *assembler) recordOrphans() {
	for _, ref := range slices.SortedFunc(maps.Keys(a.owned), store.BlockRef.Compare) {
		b := a.owned[ref]
		for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
			id, ip := b.Owners[ord], ipam.HandleIP{Addr: b.Addr(ord), Pool: b.Pool, Block: b.CIDR}
			h, exists := a.byID[id]
			if exists && slices.Contains(h.IPs, ip) {
				continue
			}
			if !exists {
				h = ipam.Handle{ID: id}
				h.Network, h.ContainerID, h.IfName, _ = ipam.ParseHandleID(id)
			}
			a.out.Orphans = append(a.out.Orphans, Finding{Handle: id, Addr: ip.Addr})
			r := record(a.records[b.Node], h, b.Node)
			r.IPs = append(r.IPs, ip)
		}
	}
}

// recordLoans gives each record in another node's object to its node as
// a loan from that object.
func (a *assembler) recordLoans() {
	for _, lender := range slices.Sorted(maps.Keys(a.records)) {
		for _, id := range slices.Sorted(maps.Keys(a.records[lender])) {
			borrower := a.records[lender][id].Node
			if borrower == lender {
				continue
			}
			n := a.nodes[borrower]
			if n == nil {
				n = &store.Node{Name: borrower}
				a.nodes[borrower] = n
			}
			n.Loans = append(n.Loans, store.Loan{Handle: id, Lender: lender})
		}
	}
}

// finish sorts and validates the node objects and lists them, their
// claims and the blocks of no node in a.out.
func (a *assembler) finish() error {
	for _, name := range slices.Sorted(maps.Keys(a.nodes)) {
		n := a.nodes[name]
		slices.SortFunc(n.Blocks, func(x, y ipam.Block) int {
			return store.BlockRef{Pool: x.Pool, CIDR: x.CIDR}.Compare(store.BlockRef{Pool: y.Pool, CIDR: y.CIDR})
		})
		for _, id := range slices.Sorted(maps.Keys(a.records[name])) {
			n.Handles = append(n.Handles, *a.records[name][id])
		}
		slices.SortFunc(n.Loans, func(x, y store.Loan) int {
			return cmp.Or(cmp.Compare(x.Handle, y.Handle), cmp.Compare(x.Lender, y.Lender))
		})
		if err := n.Validate(); err != nil {
			return fmt.Errorf("the blocks of node %q do not make a node object: %w", name, err)
		}
		for _, b := range n.Blocks {
			a.out.Claims = append(a.out.Claims, store.Claim{BlockRef: store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}, Node: name})
		}
		a.out.Nodes = append(a.out.Nodes, *n)
	}
	slices.SortFunc(a.out.Claims, func(x, y store.Claim) int { return x.BlockRef.Compare(y.BlockRef) })
	slices.SortFunc(a.out.Unaffine, store.BlockRef.Compare)
	slices.SortFunc(a.out.Dropped, store.BlockRef.Compare)
	return nil
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
