// Package consistency checks the allocation state in a datastore against
// its invariants and repairs what can be repaired without risking the
// product's guarantees.
//
// The invariants: every allocated address of a block names a handle that
// exists and lists it; every address a handle lists is given to it by its
// block; a block's free queue and its allocations together cover each of
// its addresses exactly once; a block affine to a node has that node's
// affinity record and every affinity record has its block; no handle is
// empty; every block belongs to a stored pool.
//
// Check reads the whole datastore in one List (one consistent snapshot) and
// writes nothing. Repair applies only the fixes documented on the Kind
// constants, each as a compare-and-swap transaction guarded by the version
// of every key the decision read, so a concurrent allocation or release
// makes the fix fail and be re-planned from a fresh snapshot instead of
// acting on stale state.
//
// Two rules decide what is safe to repair (SPEC guarantees 1 and 3):
//
//   - Never make an address allocatable while any record (a block's owner
//     entry or a handle) still claims it: a claim may belong to a live pod,
//     and handing the address out again would give two pods one address.
//   - Never leave an address taken without a handle that DEL, gc or
//     `ipkeeperctl ip release` can find and release: every address a repair
//     keeps taken ends up owned by a stored handle that lists it.
//
// Repairs that would need to pick a winner between two claims that may
// both be live are not made; the problem is reported for a person.
package consistency

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Kind names a kind of problem. The values are stable: scripts match them.
type Kind string

// The kinds of problems Check reports.
const (
	// KindDuplicate: an address is claimed by more than one handle — a
	// handle lists it while its block gives it to another handle, or
	// several handles list an address their block gives to none of them.
	//
	// Repair, when the block gives the address to a handle that exists:
	// the block is the record allocation and release act on, so the other
	// handles' stale entries are dropped from them. This does not change
	// which addresses can be handed out (only blocks decide that), and the
	// owner named by the block stays able to release it. When the block's
	// owner has no handle record and exactly one handle lists the address,
	// the block entry is moved to that handle: the address stays taken and
	// becomes releasable. When the block gives the address to nobody and
	// several handles list it, nothing is done: giving it to one of them
	// could let gc free it while the other's pod still uses it.
	KindDuplicate Kind = "duplicate-address"
	// KindHandleAddr: a handle lists an address its block does not hold
	// for anybody (the address is free there, or the block does not exist).
	//
	// Repair: the address is taken back for the handle in its block (a
	// missing block is recreated, affine to the handle's node, when its
	// pool exists and holds it). The handle may belong to a live pod
	// still using the address, so freeing it would risk guarantee 1;
	// taking it keeps it out of the free queue until the handle is
	// released by DEL or gc, which frees it again (guarantee 3). When the
	// handle names a pool that does not exist or a block that cannot hold
	// the address, no pool can hand the address out under that name, and
	// the entry is dropped from the handle.
	KindHandleAddr Kind = "handle-address-not-in-block"
	// KindOrphanAddr: a block gives an address to a handle that does not
	// exist, that does not list it, or to an empty handle name.
	//
	// Repair: the address stays taken (its pod may be live) and the
	// handle is made to list it — recreated from its ID and the block's
	// node when missing, or named "repair.unknown.<addr>" when the block
	// names no handle — so DEL, gc or `ip release` can free it later.
	KindOrphanAddr Kind = "address-without-handle"
	// KindEmptyHandle: a handle lists no address.
	//
	// Repair: the handle is deleted. It holds nothing, so no address
	// changes hands.
	KindEmptyHandle Kind = "handle-without-addresses"
	// KindMissingAffinity: a block is affine to a node that has no
	// affinity record for it, so that node does not find the block among
	// its own and claims others.
	//
	// Repair: the affinity record is written. Affinity only steers which
	// block a node allocates from first; ownership of every address stays
	// in the block.
	KindMissingAffinity Kind = "block-without-affinity"
	// KindOrphanAffinity: an affinity record names a block that does not
	// exist or is affine to another node. A leftover record for a missing
	// block makes every later claim of that block by the node fail.
	//
	// Repair: the record is deleted; no address changes hands.
	KindOrphanAffinity Kind = "affinity-without-block"
	// KindCounts: a block's free queue and allocations do not add up to
	// its addresses: an address both free and allocated, twice in the free
	// queue, in neither, or an ordinal outside the block.
	//
	// Repair: an address both free and allocated leaves the free queue
	// (the allocation may be live); duplicate and out-of-range free
	// entries are removed (a duplicate would let the address be handed
	// out twice); an out-of-range allocation, which names no address, is
	// removed. An address in neither is given to the handle that lists it
	// if exactly one does, else — when no handle claims it at all — put at
	// the back of the free queue, so it is handed out last; when several
	// handles claim it nothing is done.
	KindCounts Kind = "count-mismatch"
	// KindBlockWithoutPool: a block's pool does not exist. Reported only:
	// the pool's definition is unknown.
	KindBlockWithoutPool Kind = "block-without-pool"
	// KindKeyMismatch: a stored value disagrees with its key (a block
	// whose CIDR or pool differs from its key, a pool whose name differs,
	// an affinity record naming another block). Reported only.
	KindKeyMismatch Kind = "key-mismatch"
	// KindCorrupt: a value that cannot be decoded, or a key that does not
	// follow the layout. Reported only; nothing else is checked against it.
	KindCorrupt Kind = "corrupt-value"

	// The kinds below concern the typed store (CheckStore, RepairStore:
	// pools, block claims and node objects, docs/STORAGE.md). There,
	// KindCorrupt is an object that cannot be decoded (named by its
	// object), KindDuplicate an address held by records in two blocks of
	// one pool (two objects, or overlapping blocks of one object), and
	// KindBlockWithoutPool a node object's block or a claim of a pool that
	// does not exist; all three are reported only.

	// KindBlockWithoutClaim: a node object holds a block that no claim
	// names, so another node may claim the block and hand out addresses
	// this object's records hold.
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
	// another node. Reported only: the claimant may be an ADD between its
	// claim and its node write, and either side may hold live addresses.
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
	KindCorrupt, KindKeyMismatch, KindBlockWithoutPool, KindCounts, KindDuplicate,
	KindHandleAddr, KindOrphanAddr, KindEmptyHandle, KindMissingAffinity, KindOrphanAffinity,
	KindPoolDeleting, KindDuplicateBlock, KindClaimMismatch, KindBlockWithoutClaim, KindClaimWithoutBlock,
	KindLoanWithoutRecord, KindRecordWithoutLoan,
}

// Problem is one inconsistency. Fields that do not apply are empty.
type Problem struct {
	Kind Kind `json:"kind"`
	// Key is the datastore key the problem was found at; for the typed
	// store, the object: "pool/<name>", "claim/<pool>/<cidr>",
	// "node/<name>" (or "pools", "claims", "nodes" for a list that could
	// not be read).
	Key    string `json:"key,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Block  string `json:"block,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Handle string `json:"handle,omitempty"`
	Node   string `json:"node,omitempty"`
	// Detail says what is wrong, for a person.
	Detail string `json:"detail"`
	// Repairable says whether Repair would fix it.
	Repairable bool `json:"repairable"`
}

// Action is one change Repair made.
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

// Counts summarizes what a check looked at.
type Counts struct {
	Pools      int `json:"pools"`
	Blocks     int `json:"blocks"`
	Handles    int `json:"handles"`
	Affinities int `json:"affinities"`
	Allocated  int `json:"allocated"`
	// Claims and Nodes count block claims and node objects (typed store
	// only; Handles then counts handle records, Blocks node objects'
	// blocks).
	Claims int `json:"claims,omitempty"`
	Nodes  int `json:"nodes,omitempty"`
}

// Report is the result of Check.
type Report struct {
	Counts   Counts    `json:"counts"`
	Problems []Problem `json:"problems"`
}

// RepairResult is the result of Repair: what was found first, what was
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

func prefixString(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
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
