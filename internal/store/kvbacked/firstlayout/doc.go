// Package firstlayout is the previous version's allocator, frozen: it
// allocates and releases addresses in the first datastore layout (keys
// pools/, blocks/, affinity/ and handles/ over a kv.Store, one
// multi-key compare-and-swap transaction per operation, hints in memory or
// in files). It is kept only so that the tests of package kvbacked can
// write first-layout stores with the real writer and race it against
// Migrate and the upgrade fence (TestMigrateFencesTodaysAllocator); it is
// test support and never linked into a binary.
//
// It keeps the previous version's allocation, release, pool and read
// paths as they were (the takeover, observed-release, node-cleanup and
// pool-removal paths are gone with their callers) and uses package
// allocator's Request and sentinel errors, which it shared. Do not change
// its behaviour: a migration test is only as good as its writer is the
// one that ran in production.
package firstlayout
