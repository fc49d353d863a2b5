package store

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Pool is a stored pool definition.
type Pool struct {
	// Spec is the definition; Spec.Name is the pool's name.
	Spec ipam.Pool
	// Version is the stored state's version ("" before it is stored).
	Version Version
}

// BlockRef names a block: pools may overlap (two networks may use one
// subnet), so a block is its pool and its CIDR.
type BlockRef struct {
	Pool string
	CIDR netip.Prefix
}

// String is "pool/cidr".
func (r BlockRef) String() string { return r.Pool + "/" + r.CIDR.String() }

// Compare orders refs by pool name, then CIDR.
func (r BlockRef) Compare(o BlockRef) int {
	return cmp.Or(cmp.Compare(r.Pool, o.Pool), r.CIDR.Addr().Compare(o.CIDR.Addr()), cmp.Compare(r.CIDR.Bits(), o.CIDR.Bits()))
}

// Claim records which node holds a block. Creating it is how a node claims
// the block; only the node a claim names may keep the block's state in its
// node object. On Kubernetes the claim's object holds that state too, so
// its Version changes with every write of the block, and taking the block
// out of the node object deletes the claim.
type Claim struct {
	BlockRef
	// Node is the node holding the block.
	Node string
	// Version is the stored state's version.
	Version Version
}

// ClaimSelector chooses claims to list. Set at most one field; the zero
// selector lists every claim.
type ClaimSelector struct {
	// Node lists the claims of one node.
	Node string
	// Pool lists the claims of one pool.
	Pool string
	// Cached lets the backend answer from a cache that may lag behind
	// the latest writes (the Kubernetes API server's watch cache, where a
	// current list waits for the cache to catch up with etcd, see
	// docs/BENCHMARKS.md): a claim
	// listed may be gone, one just created may be missing. A caller acts
	// only on what it confirms (GetClaim, or a create-if-absent that
	// fails). Backends that read current state ignore it.
	Cached bool
}

// Node is a node object: every block one node holds and the records of the
// handles whose addresses are in them. An allocation or release touching
// only this node's blocks is one update (one transaction on the local
// file and etcd; on Kubernetes a request per block it changes: see the
// package doc).
type Node struct {
	// Name is the node's name.
	Name string
	// Blocks are the node's blocks, at most one per BlockRef. Each has
	// Node == Name; Owners must agree with Handles exactly (EncodeNode
	// checks, DecodeNode rebuilds them from Handles).
	Blocks []ipam.Block
	// Handles are the records of the handles holding addresses in Blocks.
	// A record lists only its addresses in these blocks (a dual-stack
	// handle whose second address was borrowed from another node has a
	// record in each object) and holds at least one. A record whose Node
	// is not Name is a borrower's: the object lends to that node.
	Handles []ipam.Handle
	// Loans say where this node's handles hold addresses in other nodes'
	// blocks (borrowed when the pool had no block left to claim, or a
	// requested address in another node's block). An allocation writes
	// the loan here before the record in the lender's object, and a
	// release drops it after that record, so the node's own object always
	// knows every object its handles are in: an ADD retry or a DEL reads
	// another object only when a loan names it.
	Loans []Loan
	// Version is the stored state's version: for a node object stored in
	// parts, their composite (CompositeVersion).
	Version Version
	// stored is the state this copy was read or written with (AsStored).
	stored *stored
	// edits are the edits made since (nodeedit.go).
	edits *editLog
}

// Loan names the lender holding an address of one of the node's handles.
type Loan struct {
	Handle string
	Lender string
}

// NodeSelector chooses node objects to list; the zero selector lists all.
type NodeSelector struct {
	// LendsTo lists the objects holding a record of a handle of this node
	// (the lenders of its borrowed addresses).
	LendsTo string
	// Sticky lists the objects holding a record of a handle with this
	// sticky identity (ipam.Handle.Sticky), live or parked, found by an
	// index every write of such a record keeps in step with it; at most
	// one of LendsTo and Sticky is set.
	Sticky string
}

// StickyIDs returns the sticky identities of the records in n, sorted,
// each once.
func (n Node) StickyIDs() []string {
	var out []string
	for _, h := range n.Handles {
		if h.Sticky != "" && !slices.Contains(out, h.Sticky) {
			out = append(out, h.Sticky)
		}
	}
	slices.Sort(out)
	return out
}

// LendsTo returns the borrowers with records in n, sorted, each once.
func (n Node) LendsTo() []string {
	var out []string
	for _, h := range n.Handles {
		if h.Node != n.Name && !slices.Contains(out, h.Node) {
			out = append(out, h.Node)
		}
	}
	slices.Sort(out)
	return out
}

// Block returns the node's block ref, if it holds it.
func (n Node) Block(ref BlockRef) (ipam.Block, bool) {
	if i := n.blockIndexOf(ref); i >= 0 {
		return n.Blocks[i], true
	}
	return ipam.Block{}, false
}

// LendersOf returns the lenders n's loans name for handle id.
func (n Node) LendersOf(id string) []string {
	var out []string
	for _, l := range n.Loans {
		if l.Handle == id {
			out = append(out, l.Lender)
		}
	}
	return out
}

// Handle returns the record of handle id, if n holds one.
func (n Node) Handle(id string) (ipam.Handle, bool) {
	if i := n.recordIndex(id); i >= 0 {
		return n.Handles[i], true
	}
	return ipam.Handle{}, false
}

// Validate reports the first reason n cannot be stored, wrapping
// ErrInvalid: an empty name, an invalid or repeated block, a block of
// another node, a record without addresses or with an address outside
// this object's blocks, two records of one handle, blocks whose owners
// disagree with the records, or a loan without handle, from the node
// itself or given twice.
func (n Node) Validate() error {
	if decided, err := n.validate(false); decided {
		return err
	}
	_, err := n.validate(true)
	return err
}

// validate is Validate, in one of two ways of checking that the records
// agree with the blocks' owners. Exactly, it builds the owners the
// records say and compares them with each block's. Otherwise it only
// checks that each record's address belongs to the record's handle in
// its block, and appears once in the record, and counts them: handles
// being distinct, the records then list each owned address at most once,
// so the counts equal the blocks' numbers of owners just when the owners
// agree. It builds no owner maps, but it cannot say which of two records
// holding one address came first: when it finds a record that does not
// agree it gives up (decided false), and the exact way finds the error.
func (n Node) validate(exact bool) (decided bool, err error) {
	if err := ValidName("node", n.Name); err != nil {
		return true, err
	}
	c := ownerCheck{n: n, exact: exact}
	if err := c.indexBlocks(); err != nil {
		return true, err
	}
	if decided, err := c.tallyRecords(); !decided || err != nil {
		return decided, err
	}
	if err := n.validateLoans(); err != nil {
		return true, err
	}
	return c.compareOwners()
}

// invalid is an error wrapping ErrInvalid that names n.
func (n Node) invalid(format string, args ...any) error {
	return fmt.Errorf("%w: node object %q: %s", ErrInvalid, n.Name, fmt.Sprintf(format, args...))
}

// ownerCheck is validate's account of n's records against its blocks:
// index finds a block by its ref; owners[i] is who the records say owns
// block i's addresses (exact), counts[i] how many they list (not exact).
type ownerCheck struct {
	n      Node
	exact  bool
	index  map[BlockRef]int
	owners []map[int]string
	counts []int
}

// indexBlocks checks the blocks and indexes them.
func (c *ownerCheck) indexBlocks() error {
	n := c.n
	c.index = make(map[BlockRef]int, len(n.Blocks))
	if c.exact {
		c.owners = make([]map[int]string, len(n.Blocks))
	} else {
		c.counts = make([]int, len(n.Blocks))
	}
	for i, b := range n.Blocks {
		ref := BlockRef{b.Pool, b.CIDR}
		if err := ValidName("pool", b.Pool); err != nil {
			return n.invalid("block %s: %v", b.CIDR, err)
		}
		if b.Node != n.Name {
			return n.invalid("block %s is affine to node %q", ref, b.Node)
		}
		if _, dup := c.index[ref]; dup {
			return n.invalid("block %s twice", ref)
		}
		if err := b.Validate(); err != nil {
			return n.invalid("%v", err)
		}
		c.index[ref] = i
		if c.exact {
			c.owners[i] = make(map[int]string, len(b.Owners))
		}
	}
	return nil
}

// tallyRecords checks the handle records and notes the addresses they
// hold in c.owners or c.counts.
func (c *ownerCheck) tallyRecords() (decided bool, err error) {
	n := c.n
	seen := make(map[string]bool, len(n.Handles))
	// last[j] is the block of the previous record's j-th address, where
	// the next record's likely is (blocks fill in order): refs being
	// distinct, a block with the ref is the one index finds.
	var last [2]int
	for _, h := range n.Handles {
		switch {
		case h.ID == "":
			return true, n.invalid("a handle record without an ID")
		case seen[h.ID]:
			return true, n.invalid("handle %q recorded twice", h.ID)
		case h.Node == "":
			return true, n.invalid("handle %q names no node", h.ID)
		case len(h.IPs) == 0:
			return true, n.invalid("handle %q holds no address here", h.ID)
		}
		seen[h.ID] = true
		for j, ip := range h.IPs {
			ref := BlockRef{ip.Pool, ip.Block}
			var i int
			ok := j < len(last) && last[j] < len(n.Blocks) && n.Blocks[last[j]].Pool == ip.Pool && n.Blocks[last[j]].CIDR == ip.Block
			if ok {
				i = last[j]
			} else if i, ok = c.index[ref]; ok && j < len(last) {
				last[j] = i
			}
			if !ok || !ip.Block.Contains(ip.Addr) {
				return true, n.invalid("handle %q holds %s in block %s, which this object does not hold", h.ID, ip.Addr, ref)
			}
			ord, _ := n.Blocks[i].Ordinal(ip.Addr)
			if !c.exact {
				if n.Blocks[i].Owners[ord] != h.ID || slices.ContainsFunc(h.IPs[:j], func(o ipam.HandleIP) bool {
					return o.Pool == ip.Pool && o.Block == ip.Block && o.Addr == ip.Addr
				}) {
					return false, nil
				}
				c.counts[i]++
				continue
			}
			own := c.owners[i]
			if other, taken := own[ord]; taken {
				return true, n.invalid("%s held by handles %q and %q", ip.Addr, other, h.ID)
			}
			own[ord] = h.ID
		}
	}
	return true, nil
}

// validateLoans checks n's loans.
func (n Node) validateLoans() error {
	loans := make(map[Loan]bool, len(n.Loans))
	for _, l := range n.Loans {
		switch {
		case l.Handle == "":
			return n.invalid("a loan without a handle")
		case l.Lender == n.Name:
			return n.invalid("handle %q borrows from its own node", l.Handle)
		case loans[l]:
			return n.invalid("handle %q borrows from %q twice", l.Handle, l.Lender)
		}
		if err := ValidName("lender", l.Lender); err != nil {
			return n.invalid("loan of %q: %v", l.Handle, err)
		}
		loans[l] = true
	}
	return nil
}

// compareOwners compares what the records say with each block's owners.
func (c *ownerCheck) compareOwners() (decided bool, err error) {
	for i, b := range c.n.Blocks {
		if !c.exact {
			if c.counts[i] != len(b.Owners) {
				return false, nil
			}
			continue
		}
		own := c.owners[i]
		if len(own) != len(b.Owners) {
			return true, c.n.invalid("block %s/%s lists %d owners, the records %d", b.Pool, b.CIDR, len(b.Owners), len(own))
		}
		// In order, to report the same address each time (the exact
		// way runs only on a node found invalid).
		for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
			if id := b.Owners[ord]; own[ord] != id {
				return true, c.n.invalid("block %s/%s gives %s to %q, the records to %q", b.Pool, b.CIDR, b.Addr(ord), id, own[ord])
			}
		}
	}
	return true, nil
}

// ValidName refuses names no backend can key an object by: empty, over
// 253 bytes, or holding '/', NUL or other control characters. Backends
// with stricter naming (Kubernetes) map valid names to legal ones.
func ValidName(kind, name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %s name %q must be 1 to %d bytes", ErrInvalid, kind, name, MaxNameBytes)
	}
	for _, r := range name {
		if r == '/' || r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s name %q must not contain '/' or control characters", ErrInvalid, kind, name)
		}
	}
	return nil
}

// MaxNameBytes is the longest pool or node name (a Kubernetes object name).
const MaxNameBytes = 253

func itoa(n int) string { return strconv.Itoa(n) }

// UnaffineNode is the node object holding blocks that are affine to no
// node (blocks imported from whereabouts or Calico without a host, or a
// migrated store's blocks without an affinity) while they hold addresses,
// with the claims naming it.
// No Kubernetes node can have this name (':' is not allowed in one), so it
// never collides with a real node; nobody allocates in its blocks but by
// borrowing, and the controller frees them as blocks of a gone node once
// they are empty.
const UnaffineNode = "ipkeeper:unaffine"
