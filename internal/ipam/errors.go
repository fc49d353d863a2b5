package ipam

import "errors"

// Sentinel errors of the allocation core. Callers match them with errors.Is.
var (
	// ErrInvalidPool means a pool definition is unusable.
	ErrInvalidPool = errors.New("invalid pool")
	// ErrBlockFull means a block has no free address the pool permits.
	ErrBlockFull = errors.New("block has no free address")
	// ErrNotInBlock means an address lies outside the block asked.
	ErrNotInBlock = errors.New("address not in block")
	// ErrNotOwner means the address is not held by the handle named.
	ErrNotOwner = errors.New("address not held by this handle")
	// ErrInvalidBlock means a block's content is inconsistent (see
	// Block.Validate): it must be repaired, not used.
	ErrInvalidBlock = errors.New("invalid block")
	// ErrUnavailable means a specifically requested address is taken or
	// not permitted by its pool.
	ErrUnavailable = errors.New("address not available")
)
