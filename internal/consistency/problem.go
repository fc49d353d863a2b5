// Package consistency checks the allocation state in the typed store
// (package store: pools, block claims and node objects, docs/STORAGE.md)
// against its invariants and repairs what can be repaired without risking
// the product's guarantees.
//
// Each node object is consistent on its own when it decodes
// (store.Node.Validate: its blocks' free queues and its handle records
// cover every address exactly once); what is checked is how objects agree
// with each other: every block a node object holds is claimed for that
// node and by no other object, every claim's node holds its block, every
// loan has its record in the lender and every borrowed record its loan,
// no address is held in two blocks, and every block and claim belongs to
// a stored pool.
//
// CheckStore reads the objects one at a time while allocations go on and
// reports a problem only when a second look at the objects involved shows
// it again; it writes nothing. RepairStore applies only the fixes
// documented on the Kind constants, each a compare-and-swap of one object
// at the version the second look read, and none of them frees an address.
//
// Two rules decide what is safe to repair (SPEC guarantees 1 and 3):
//
//   - Never make an address allocatable while any record still claims it:
//     a claim may belong to a live pod, and handing the address out again
//     would give two pods one address.
//   - Never leave an address taken without a handle that DEL, gc or
//     `ipkeeperctl ip release` can find and release.
//
// Repairs that would need to pick a winner between two claims that may
// both be live are not made; the problem is reported for a person.
package consistency

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Kind names a kind of problem. The values are stable: scripts match them.
type Kind string

// The kinds of problems CheckStore reports.
const (
	// KindDuplicate: an address is held by handle records in two blocks
	// of one pool (in two node objects, or in overlapping blocks of one).
	// Reported only: either record may be a live pod's.
	KindDuplicate Kind = "duplicate-address"
	// KindBlockWithoutPool: a node object's block or a claim names a pool
	// that does not exist. Reported only: the pool's definition is
	// unknown.
	KindBlockWithoutPool Kind = "block-without-pool"
	// KindCorrupt: an object that cannot be decoded, named by its object.
	// Reported only; the other objects are still checked.
	KindCorrupt Kind = "corrupt-value"
	// KindBlockWithoutClaim: a node object holds a block that no claim
	// names, so another node may claim the block and hand out addresses
	// this object's records hold. The node's allocations hand out none of
	// its addresses meanwhile (allocator.ErrBlockNotClaimed).
	//
	// Repair, when exactly one node object holds the block and no other
	// block of its pool overlaps it: the claim is
	// created naming that object's node (create-if-absent, so a claim
	// created meanwhile by another node wins and the problem turns into
	// KindClaimMismatch). Nothing is freed.
	KindBlockWithoutClaim Kind = "block-without-claim"
	// KindClaimWithoutBlock: a claim names a node whose object does not
	// hold the block: what an ADD that stopped after claiming leaves (or a
	// pool removal that stopped between a node write and the claim's
	// delete).
	//
	// Repair: the node adopts the block, as its next ADD would — the
	// block is added empty to the node's object (created when absent),
	// compare-and-swap at the version a second look saw. The claim is not
	// deleted: an ADD of that node may be adopting it at this moment and
	// would then hold a block nobody claims. Not repaired when the pool is
	// missing, marked Deleting (`pool rm` finishes it) or does not have
	// that block, or when another object holds or overlaps the block, or
	// some node object could not be read.
	KindClaimWithoutBlock Kind = "claim-without-block"
	// KindClaimMismatch: a node object holds a block whose claim names
	// another node (what an object rewritten with another node's block in
	// it shows). The object's node hands out none of its addresses
	// (allocator.ErrBlockNotClaimed).
	//
	// Repair, when the object holds no address of the block: the block
	// leaves that object (compare-and-swap at the version the second look
	// saw). Nothing is freed — the claimant's object is not touched — and
	// the node allocates from its own blocks again. Otherwise reported
	// only: the claimant may be an ADD between its claim and its node
	// write, and either side may hold live addresses.
	KindClaimMismatch Kind = "block-claimed-by-other-node"
	// KindDuplicateBlock: two node objects hold the same block, or blocks
	// of one pool overlap. Reported only: both may hand out or hold the
	// same addresses, and which one is live cannot be told from the store.
	KindDuplicateBlock Kind = "duplicate-block"
	// KindLoanWithoutRecord: a node object's loan names a lender whose
	// object holds no record of the handle for that node: what an ADD that
	// stopped between its own write and the lender's leaves, or a DEL that
	// stopped between the lender's write and its own.
	//
	// Repair: the lender's object is written unchanged at the version the
	// second look saw (so that an ADD still on its way to it fails and
	// undoes itself), then the loan is dropped at the borrower's second-look
	// version. A loan holds no address: nothing is freed.
	KindLoanWithoutRecord Kind = "loan-without-record"
	// KindRecordWithoutLoan: a lender's object holds a record of a handle
	// of another node whose object has no loan naming that lender, so the
	// handle's DEL and ADD retries do not find that part.
	//
	// Repair: the loan is added to the borrower's object (created when
	// absent), at the version the second look saw. The record, which may
	// be a live pod's, is kept: DEL, GC or the controller free it.
	KindRecordWithoutLoan Kind = "record-without-loan"
	// KindPoolDeleting: a pool is marked Deleting: an interrupted `pool
	// rm`. Reported only: `ipkeeperctl pool rm` finishes the removal,
	// `pool rm --cancel` keeps the pool; which one is meant is the
	// operator's call.
	KindPoolDeleting Kind = "pool-deleting"
)

// Kinds lists every kind, in the order reports sort them.
var Kinds = []Kind{
	KindCorrupt, KindBlockWithoutPool, KindDuplicate, KindPoolDeleting, KindDuplicateBlock, KindClaimMismatch, KindBlockWithoutClaim, KindClaimWithoutBlock,
	KindLoanWithoutRecord, KindRecordWithoutLoan,
}

// Problem is one inconsistency. Fields that do not apply are empty.
type Problem struct {
	Kind Kind `json:"kind"`
	// Key names the object the problem was found at: "pool/<name>",
	// "claim/<pool>/<cidr>", "node/<name>" (or "pools", "claims", "nodes"
	// for a list that could not be read).
	Key    string `json:"key,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Block  string `json:"block,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Handle string `json:"handle,omitempty"`
	Node   string `json:"node,omitempty"`
	// Detail says what is wrong, for a person.
	Detail string `json:"detail"`
	// Repairable says whether RepairStore would fix it.
	Repairable bool `json:"repairable"`
}

// Action is one change RepairStore made.
type Action struct {
	Kind   Kind   `json:"kind"`
	Pool   string `json:"pool,omitempty"`
	Block  string `json:"block,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Handle string `json:"handle,omitempty"`
	Node   string `json:"node,omitempty"`
	// Did says what was changed, for a person.
	Did string `json:"did"`
}

// Counts summarizes what a check looked at: pools, the blocks node
// objects hold, handle records, allocated addresses, block claims and node
// objects.
type Counts struct {
	Pools     int `json:"pools"`
	Blocks    int `json:"blocks"`
	Handles   int `json:"handles"`
	Allocated int `json:"allocated"`
	Claims    int `json:"claims,omitempty"`
	Nodes     int `json:"nodes,omitempty"`
}

// Report is the result of CheckStore.
type Report struct {
	Counts   Counts    `json:"counts"`
	Problems []Problem `json:"problems"`
	// Findings are what is worth knowing but is no inconsistency:
	// allocations inside reservations (KindReserved). They do not make
	// the check fail.
	Findings []Problem `json:"findings,omitempty"`
}

// RepairResult is the result of RepairStore: what was found first, what was
// done, and what a check afterwards still finds.
type RepairResult struct {
	Found     []Problem `json:"found"`
	Actions   []Action  `json:"actions"`
	Remaining []Problem `json:"remaining"`
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// Err returns the problems as one error naming each, or nil when there
// are none; tests and fault checks fail with it.
func (r Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	const show = 20
	var b strings.Builder
	fmt.Fprintf(&b, "datastore inconsistent: %d problems:", len(r.Problems))
	for i, p := range r.Problems {
		if i == show {
			fmt.Fprintf(&b, "\n... and %d more", len(r.Problems)-show)
			break
		}
		fmt.Fprintf(&b, "\n%s %s %s %s: %s", p.Kind, p.Key, p.Addr, p.Handle, p.Detail)
	}
	return errors.New(b.String())
}

func act(p Problem, did string) Action {
	return Action{Kind: p.Kind, Pool: p.Pool, Block: p.Block, Addr: p.Addr, Handle: p.Handle, Node: p.Node, Did: did}
}

// sortProblems puts problems in the order every report uses: by kind (in
// the order of Kinds), pool, block, address, handle, key.
func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(
			cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)),
			cmp.Compare(a.Pool, b.Pool),
			comparePrefix(a.Block, b.Block),
			compareAddr(a.Addr, b.Addr),
			cmp.Compare(a.Handle, b.Handle),
			cmp.Compare(a.Key, b.Key),
		)
	})
}

func comparePrefix(a, b string) int {
	pa, ea := netip.ParsePrefix(a)
	pb, eb := netip.ParsePrefix(b)
	if ea != nil || eb != nil {
		return cmp.Compare(a, b)
	}
	return cmp.Or(pa.Addr().Compare(pb.Addr()), cmp.Compare(pa.Bits(), pb.Bits()))
}

func compareAddr(a, b string) int {
	aa, ea := netip.ParseAddr(a)
	ab, eb := netip.ParseAddr(b)
	if ea != nil || eb != nil {
		return cmp.Compare(a, b)
	}
	return aa.Compare(ab)
}
