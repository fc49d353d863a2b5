// Package allocator runs the pure allocation core (packages ipam and
// nodealloc) against the store (package store, docs/STORAGE.md). Its
// Allocator writes one node object per allocation or release (plus a
// claim per new block, and the lender's object for a borrowed address),
// each by compare-and-swap; a conflict re-reads and retries with jittered
// backoff.
package allocator
