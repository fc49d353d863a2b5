// Package kvbacked implements the typed datastore contract (package store,
// docs/STORAGE.md) on any kv.Store. The local file (bbolt) and etcd both
// offer multi-key compare-and-swap transactions, so they keep package kv as
// their lower layer and share this one implementation of the contract;
// only the Kubernetes backend implements store.Store directly.
//
// # Layout
//
// Every key is relative to the kv.Store (etcd adds its prefix). Keys and
// values stay inside this package and its migrate subpackage (layout.go
// exports what that needs); callers see typed objects only.
//
//	pools2/<pool>                      ipam.Pool JSON (store.MarshalPool), exactly
//	                                   what the first layout wrote under pools/
//	claims/<pool>/<block>              store.ClaimSpec JSON
//	nodeclaims/<node>/<pool>/<block>   the same JSON: the claim indexed by node
//	nodes/<node>/head                  the node's loans (JSON); put by every write
//	                                   of the node, so its version is the node's
//	nodes/<node>/block/<pool>/<block>  store.BlockSpec JSON: one block's free queue
//	nodes/<node>/record/<id>           store.FormatRecord: one handle's record
//	lends/<borrower>/<lender>          empty: lender's object may lend to borrower
//	reservations/<pool>                store.MarshalReservations: the pool's reservations,
//	                                   written with the pool's key (reservations.go)
//	meta/layout                        "3" once package migrate has run (ReadLayout;
//	                                   "2": node objects whole under nodes/<node>,
//	                                   split into parts by package migrate)
//	meta/converted                     the highest version the migration read
//
// <block> is the CIDR with its "/" replaced by "-" (10.0.0.64-26,
// fd00::40-122), as the first layout named blocks. Pool and node names
// never hold "/" (store.ValidName), so every prefix above names exactly
// one pool, node or borrower. None of these prefixes is a prefix of the
// first layout's pools/, blocks/, affinity/ or handles/ keys, or the other
// way round.
//
// # The first layout
//
// Stores the first layout wrote (pools/, blocks/, affinity/, handles/)
// are converted to these objects by package migrate, which the datastore's
// open path runs on a store without the layout marker; the first layout's
// pools/<pool> keys stay, marked Deleting (the upgrade fence). Nothing in
// this package reads or writes first-layout keys.
//
// A claim and its index key are put and deleted in one kv transaction,
// so they exist together or not at all, and (kv.RevisionTxner: every key
// of a transaction gets its version) have the same version:
// ListClaims{Node} lists the index alone, ListClaims{Pool} the claims'
// prefix.
//
// A node object is read with one list of nodes/<node>/ and written as
// what changed (store.Changes against the parts it was read with): one kv
// transaction that compares the head at the node's version, puts the head
// and the changed blocks and records, and deletes the dropped ones. The
// bytes of a write are therefore those of what it changed, not of the
// node. One write holds at most store.Limits' parts and bytes (etcd's
// transaction limits, which the local file enforces too); callers that
// change many records of one node split their writes.
//
// The same transaction puts lends/<b>/<node> for every borrower b of a
// changed record, and reads nothing.
// Entries of borrowers the object no longer lends to are therefore left
// behind; ListNodes{LendsTo} filters what it lists by the objects' content
// and deletes such a stale entry in a transaction guarded by the lender
// object's version (a lender written meanwhile may lend again; its write
// put the entry back).
//
// # Versions and errors
//
// A Version is the kv version (etcd's mod revision, the local file's
// revision) of the object's key (a node's head) as a decimal string. Every write returns
// it from kv.TxnRevision; only when the backend cannot tell (etcd after a
// lost answer) is the key read back. A failed compare-and-swap is told
// apart (not found, exists, changed) by a read of the key on the failure
// path only. The kv.Store's errors are the store package's sentinels
// already (a failed condition is store.ErrConflict, a backend that cannot
// be used store.ErrUnavailable); a failed condition is reported as
// store.ErrConflict, store.ErrNotFound or store.ErrExists, and the
// backends' own errors (a corrupt file, a refused request) are wrapped
// with the store sentinel they mean. Invalid and oversized objects are
// refused before anything is sent.
package kvbacked
