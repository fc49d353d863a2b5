package allocator

import "net/netip"

// NodeBlock is one block of a node: its pool and prefix.
type NodeBlock struct {
	Pool  string
	Block netip.Prefix
}

// NodeCleanup is what FreeNodeBlocks did for a node.
type NodeCleanup struct {
	// Freed are the empty blocks taken out of the node's object, their
	// claims deleted.
	Freed []NodeBlock
	// Dropped are claims of the node deleted whose block its object did
	// not hold.
	Dropped []NodeBlock
	// Kept are the node's blocks that still hold addresses: they stay,
	// with their claims, until those are released.
	Kept []NodeBlock
}
