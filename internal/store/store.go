// Package store is ipkeeper's datastore contract (docs/STORAGE.md):
// typed objects — pools, block claims and node objects — each read and
// written alone, with compare-and-swap on one object at a time, and
// listing by a typed selector instead of key prefixes. It is
// what the Kubernetes API offers, so the local file, etcd and the
// Kubernetes API implement the same contract and run one conformance suite
// (package storetest).
//
// A node object is every block one node holds, in every pool and family,
// the records of the handles whose addresses are in them, and the node's
// loans. An allocation from a node's own blocks — dual-stack included —
// is one UpdateNode; a block is claimed by creating its Claim, whose name
// is the block's uniqueness, and a node object holds only blocks its node
// claims; no write spans two node objects. Every backend stores a node
// object in parts (its head: the loans; each block; its records) and a
// write sends the parts it changes (Changes). How much of that is atomic
// is the backend's:
//
//   - the local file and etcd write a node object in one transaction that
//     compares its head: an UpdateNode is all or nothing, and fails when
//     anything of the object changed since it was read;
//   - Kubernetes keeps a block's state in its claim's object (IPAMBlock)
//     and the head in an IPAMNode, and an UpdateNode is one request per
//     object it changes, each a compare-and-swap at the version it was
//     read at (the head only when the loans change): a write fails when
//     an object it writes changed, and one that fails or dies after some
//     of its requests leaves those written — a dual-stack record in one
//     family's block only. Every such remnant is a partial handle of the
//     attachment being written, which an ADD's retry releases and
//     allocates again, and DEL, GC, the controller and `ipkeeperctl
//     check` find by its handle ID (docs/STORAGE.md, crash points).
//
// No address is ever given two owners by either: an address is owned by
// a record in the state of its block, which one compare-and-swap writes.
package store

import (
	"context"
	"errors"
)

// Errors every backend returns, wrapped with the object they concern.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create found the object already there.
	ErrExists = errors.New("already exists")
	// ErrConflict: an update or delete named a version the object no
	// longer has. Nothing was written; re-read and retry.
	ErrConflict = errors.New("changed meanwhile")
	// ErrStale is wrapped with ErrConflict by a write that a backend
	// guarded with state its caller remembered from an earlier process
	// (a plugin's hint file) when that memory turned out wrong: the caller
	// forgets every object it remembers (nodes, pools) before it retries.
	ErrStale = errors.New("remembered state is stale")
	// ErrUnavailable: the datastore could not be reached or used
	// (connection refused, timeouts, a lock not taken in time). The plugin
	// maps it to CNI error 11 (try again later).
	ErrUnavailable = errors.New("datastore unavailable")
	// ErrTooLarge: the encoded object, or one write of a node object,
	// exceeds the backend's Limits. Nothing was written.
	ErrTooLarge = errors.New("object too large for the datastore")
	// ErrInvalid: the object cannot be stored as given (a name the
	// backend cannot hold, a node object whose blocks and handles
	// disagree). Nothing was sent.
	ErrInvalid = errors.New("invalid object")
	// ErrCorrupt: a stored object cannot be decoded or fails validation.
	// `ipkeeperctl check` reports it.
	ErrCorrupt = errors.New("stored object is corrupt")
	// ErrDenied: the datastore refused the credentials or the request's
	// permissions. Retrying does not help; the plugin maps it to CNI
	// error 7 (the configuration names credentials that cannot work).
	ErrDenied = errors.New("datastore access denied")
	// ErrBadConfig: the datastore's configuration cannot be used (a
	// credentials file that cannot be loaded). Nothing was sent.
	ErrBadConfig = errors.New("datastore configuration cannot be used")
)

// Version identifies one state of one object. It is opaque: compare it
// for equality only. Every write gives the object a new Version; the
// empty Version means "not stored".
type Version string

// Limits says how big an object, and how big one write of a node object,
// a backend stores. Zero means no limit of that kind.
type Limits struct {
	// MaxObjectBytes bounds the encoding of an object the backend stores
	// as one value: a pool's; on Kubernetes also one block's state with
	// its claim (the records of the block's addresses), so that a pool
	// whose blocks could exceed it is refused there.
	MaxObjectBytes int
	// MaxNodeBytes bounds a node object's encoding (EncodeNode) where the
	// backend stores it as one object; zero where it stores a node in
	// parts (its head, one part per block and per handle record), so that
	// a node object has no size limit and one write of it is bounded
	// instead (MaxWriteParts, MaxWriteBytes).
	MaxNodeBytes int
	// MaxWriteParts bounds the parts one write of a node object puts or
	// deletes: its head, each block and handle record it changes and,
	// for each other node a changed record belongs to, an index entry.
	MaxWriteParts int
	// MaxWriteBytes bounds the bytes one write of a node object carries:
	// the names and encodings of the parts it puts or deletes.
	MaxWriteBytes int
}

// Store is a datastore of pools, block claims, node objects and
// reservations.
//
// Every write is durable: when it returns nil the object is stored and
// survives a crash. A write of a pool or a claim, and of a node object on
// a backend that writes it in one transaction, is atomic: when it returns
// an error other than one whose outcome is unknown (a context deadline
// while the request was in flight, wrapped in ErrUnavailable), nothing
// was written. A write of a node object whose parts are objects of their
// own (Kubernetes) is such writes in turn, and an error may leave the
// first of them (see the package doc). Every write returns the object as
// stored, with its new Version, so a caller can keep what it wrote and
// compare-and-swap against it later without reading it back.
//
// Updates and deletes are compare-and-swap: they succeed only when the
// object is at the Version the caller passes, and return ErrConflict
// otherwise (ErrNotFound when it is gone). For a node object stored in
// parts, an UpdateNode compares the parts it writes, at the versions its
// caller read them at (the whole object on the local file and etcd, where
// every write compares the head); one that changes nothing, a fence,
// compares and writes every part. Lists are sorted by name
// (pools, nodes) or by pool then CIDR (claims), and hold exactly the
// objects the selector names: a backend that indexes by a hashed label
// filters what it lists by the objects' content.
type Store interface {
	// GetPool returns the pool named name, or ErrNotFound.
	GetPool(ctx context.Context, name string) (Pool, error)
	// ListPools returns every pool.
	ListPools(ctx context.Context) ([]Pool, error)
	// CreatePool stores a new pool (ErrExists when the name is taken).
	CreatePool(ctx context.Context, p Pool) (Pool, error)
	// UpdatePool replaces the pool at p.Version.
	UpdatePool(ctx context.Context, p Pool) (Pool, error)
	// DeletePool deletes the pool at p.Version.
	DeletePool(ctx context.Context, p Pool) error

	// CreateClaim records that c.Node holds block c.CIDR of pool c.Pool.
	// Of concurrent creates of one block exactly one succeeds; the others
	// get ErrExists.
	CreateClaim(ctx context.Context, c Claim) (Claim, error)
	// GetClaim returns the claim of block cidr of pool, or ErrNotFound.
	GetClaim(ctx context.Context, ref BlockRef) (Claim, error)
	// ListClaims returns the claims sel names.
	ListClaims(ctx context.Context, sel ClaimSelector) ([]Claim, error)
	// DeleteClaim deletes the claim at c.Version.
	DeleteClaim(ctx context.Context, c Claim) error

	// GetNode returns the node object named name, or ErrNotFound.
	GetNode(ctx context.Context, name string) (Node, error)
	// CreateNode stores a new node object (ErrExists when present).
	CreateNode(ctx context.Context, n Node) (Node, error)
	// UpdateNode replaces the node object at n.Version.
	UpdateNode(ctx context.Context, n Node) (Node, error)
	// DeleteNode deletes the node object at n.Version.
	DeleteNode(ctx context.Context, n Node) error
	// ListNodes returns the node objects sel names.
	ListNodes(ctx context.Context, sel NodeSelector) ([]Node, error)

	// CreateReservation stores a reservation of pool r.Pool, which must
	// exist (ErrNotFound otherwise); ErrExists when that pool has a
	// reservation of r.CIDR. Every read of the pool from then on carries
	// it (ipam.Pool.Reserved). Creating or deleting a reservation may
	// give its pool a new version; DeletePool deletes its reservations.
	CreateReservation(ctx context.Context, r Reservation) (Reservation, error)
	// ListReservations returns the reservations sel names, sorted by
	// pool, then CIDR.
	ListReservations(ctx context.Context, sel ReservationSelector) ([]Reservation, error)
	// DeleteReservation deletes the reservation at r.Version.
	DeleteReservation(ctx context.Context, r Reservation) error

	// Limits returns the backend's size limits.
	Limits() Limits
	// Close releases the store (and any lock or connection it holds).
	Close() error
}

// Fits reports an error wrapping ErrTooLarge when an encoding of n bytes
// of what exceeds l.MaxObjectBytes.
func (l Limits) Fits(what string, n int) error {
	if l.MaxObjectBytes > 0 && n > l.MaxObjectBytes {
		return &tooLarge{what: what, size: n, max: l.MaxObjectBytes}
	}
	return nil
}

type tooLarge struct {
	what      string
	size, max int
}

func (e *tooLarge) Error() string {
	return ErrTooLarge.Error() + ": " + e.what + " encodes to " + itoa(e.size) + " bytes, the limit is " + itoa(e.max)
}

func (e *tooLarge) Unwrap() error { return ErrTooLarge }
