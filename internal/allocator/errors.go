package allocator

import "errors"

// Sentinel errors of the allocator. The plugin maps them to CNI codes.
var (
	// ErrExhausted means no pool of a range set has a free address (CNI 100).
	ErrExhausted = errors.New("pool exhausted")
	// ErrNoPool means no pool of a range set may be used on this node (CNI 101).
	ErrNoPool = errors.New("no pool usable on this node")
	// ErrAddrUnavailable means a requested address is taken (CNI 102).
	ErrAddrUnavailable = errors.New("requested address not available")
	// ErrContended means the retry budget ran out on conflicts (CNI 11).
	ErrContended = errors.New("datastore contended past the retry budget")
	// ErrPoolNotFound means a named pool does not exist.
	ErrPoolNotFound = errors.New("pool not found")
	// ErrPoolConflict means a pool exists with another definition.
	ErrPoolConflict = errors.New("pool exists with a different definition")
	// ErrPoolInUse means a pool still has allocations.
	ErrPoolInUse = errors.New("pool has addresses in use")
	// ErrNotAllocated means an address is not allocated.
	ErrNotAllocated = errors.New("address not allocated")
	// ErrCorrupt means a stored value could not be decoded, or a block is
	// inconsistent (ipam.Block.Validate) and is refused rather than used.
	ErrCorrupt = errors.New("corrupt datastore value")
	// ErrHandleChanged means a handle is not what the caller observed any
	// more: it was released, or released and allocated again, or
	// rewritten. Nothing was released.
	ErrHandleChanged = errors.New("handle changed since it was observed")
	// ErrHolderChanged means an address is no longer held by the handle
	// the caller checked before asking to release it.
	ErrHolderChanged = errors.New("address is no longer held by that handle")
	// ErrTakeoverRefused means the observed handle may not be taken over
	// by the request: it is not an earlier sandbox of the same pod and
	// interface on the same node, or its addresses do not satisfy the
	// request exactly. Nothing was changed.
	ErrTakeoverRefused = errors.New("allocation may not be taken over")
	// ErrBlockNotClaimed means a node object holds a block that the
	// cluster's claims do not give to that node (another node's block
	// written into it, or one no claim names): no address of it is handed
	// out, and nothing was written. 'ipkeeperctl check' reports the block.
	ErrBlockNotClaimed = errors.New("block not claimed by the node holding it")
)
