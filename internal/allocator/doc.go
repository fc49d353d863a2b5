// Package allocator runs the pure allocation core (packages ipam and
// nodealloc) against the typed store (package store, docs/STORAGE.md):
// StoreAllocator. An allocation or a release writes one node object (plus
// a claim per new block, and the lender's object for a borrowed address),
// each by compare-and-swap; a conflict re-reads and retries with jittered
// backoff.
package allocator
