package kvbacked

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// Key prefixes of the layout (see the package doc).
const (
	poolPrefix      = "pools2/"
	claimPrefix     = "claims/"
	nodeClaimPrefix = "nodeclaims/"
	nodePrefix      = "nodes/"
	lendsPrefix     = "lends/"
	// stickyPrefix keys the index of sticky identities:
	// sticky/<identity>/<node> for each node object holding a record of
	// the identity.
	stickyPrefix = "sticky/"
	metaPrefix   = "meta/"
	// reservationPrefix keys one value per pool: its reservations.
	reservationPrefix = "reservations/"
)

// keyReserve is what MaxObjectBytes leaves of a transaction's byte limit
// for the keys and conditions of the write of an object stored as one
// value.
const keyReserve = 16 << 10

// maxObjectBytes bounds the objects stored as one value (pools) on every
// kv.Store, also one without a transaction limit (the local file): etcd's
// default request limit (1.5 MiB) less its etcd package's reserve and
// keyReserve, which is what the Kubernetes API's etcd bounds too. An
// object one backend accepts then fits the others, so a store can be
// copied between backends. A node object is kept in parts and has no
// bound; one write of it is bounded by portable.
const maxObjectBytes = 3<<19 - 64<<10 - keyReserve

// portable are the transaction limits of every kv.Store, also of one
// that sets none (the local file): etcd's defaults, as package etcd
// reports them (128 operations, 1.5 MiB less its reserve). A write one
// backend accepts the other accepts too, so that a program behaves the
// same on both and a store can be copied between them write by write.
var portable = kv.Limits{MaxOps: 128, MaxValueBytes: 3<<19 - 64<<10, MaxTxnBytes: 3<<19 - 64<<10}

// tighter returns the tighter of each of a's and b's limits.
func tighter(a, b kv.Limits) kv.Limits {
	least := func(x, y int) int {
		if x <= 0 || y > 0 && y < x {
			return y
		}
		return x
	}
	return kv.Limits{
		MaxOps:        least(a.MaxOps, b.MaxOps),
		MaxKeyBytes:   least(a.MaxKeyBytes, b.MaxKeyBytes),
		MaxValueBytes: least(a.MaxValueBytes, b.MaxValueBytes),
		MaxTxnBytes:   least(a.MaxTxnBytes, b.MaxTxnBytes),
	}
}

// Store is store.Store on a kv.Store. It is safe for concurrent use when
// the kv.Store is.
type Store struct {
	kv kv.Store
	// revs: every key one transaction puts gets the same version
	// (kv.RevisionTxner), so a claim's index key has the claim's version.
	revs bool
	lim  kv.Limits
	max  int
	// track is what Track asked to remember of one node object.
	track tracker
	// guard is what TakeHint took on trust.
	guard guard
}

var _ store.Store = (*Store)(nil)

// New returns the typed store kept in s. The Store owns s: Close closes it.
func New(s kv.Store) *Store {
	_, revs := s.(kv.RevisionTxner)
	lim := tighter(kv.LimitsOf(s), portable)
	m := min(maxObjectBytes, lim.MaxValueBytes, max(lim.MaxTxnBytes-keyReserve, 1))
	return &Store{kv: s, revs: revs, lim: lim, max: m}
}

// KV returns the kv.Store the objects are kept in (for migration and
// tests; callers of the contract never need keys).
func (s *Store) KV() kv.Store { return s.kv }

// Limits implements store.Store: a pool's encoding must fit one value and
// one transaction of the kv.Store, less room for its keys, and
// maxObjectBytes. A node object is kept in parts and has no limit; one
// write of it is one transaction, bounded as the kv.Store's and etcd's
// transactions are (portable).
func (s *Store) Limits() store.Limits {
	return store.Limits{MaxObjectBytes: s.max, MaxWriteParts: s.lim.MaxOps, MaxWriteBytes: s.lim.MaxTxnBytes}
}

// Close closes the kv.Store.
func (s *Store) Close() error { return s.kv.Close() }

// blockName is how a key names a block: its CIDR with "/" replaced by "-".
func blockName(cidr netip.Prefix) string {
	return strings.Replace(cidr.String(), "/", "-", 1)
}

func poolKey(name string) string { return poolPrefix + name }
func claimKey(r store.BlockRef) string {
	return claimPrefix + r.Pool + "/" + blockName(r.CIDR)
}
func nodeClaimKey(node string, r store.BlockRef) string {
	return nodeClaimPrefix + node + "/" + r.Pool + "/" + blockName(r.CIDR)
}
func reservationsKey(pool string) string      { return reservationPrefix + pool }
func nodeKey(name string) string              { return nodePrefix + name }
func lendsKey(borrower, lender string) string { return lendsPrefix + borrower + "/" + lender }

// stickyKey is the index entry saying that node object holds a record of
// sticky identity id ("<kind>/<namespace>/<name>": names without '/').
func stickyKey(id, node string) string { return stickyPrefix + id + "/" + node }

// version is the Version of kv version v.
func version(v int64) store.Version { return store.Version(strconv.FormatInt(v, 10)) }

// unknownVersion is returned for an object this store wrote when the
// backend could not tell the version and the object had been written again
// before it was read back: no state has it, so a compare-and-swap against
// it conflicts and the caller re-reads.
const unknownVersion store.Version = "0"

// parseVersion returns the kv version v names; ok is false for a version
// no stored state can have ("" included).
func parseVersion(v store.Version) (int64, bool) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil && n > 0 && string(version(n)) == string(v)
}

// txn checks that a transaction fits the kv.Store's limits and runs it,
// returning the version of the keys it put (read back from key when the
// backend cannot tell; 0 when nothing is put).
func (s *Store) txn(ctx context.Context, what string, conds []kv.Cond, ops []kv.Op) (int64, error) {
	guards := s.guarded()
	if guards != nil {
		conds = append(slices.Clone(guards), conds...)
	}
	if !s.lim.Fits(conds, ops) {
		return 0, fmt.Errorf("%w: %s: %d keys and %d bytes of keys and values exceed the datastore's transaction limits (%+v)",
			store.ErrTooLarge, what, len(ops), kv.TxnBytes(conds, ops), s.lim)
	}
	rev, err := kv.TxnRevision(ctx, s.kv, conds, ops)
	if guards != nil {
		err = s.settle(ctx, what, err)
	}
	if err != nil || rev > 0 {
		return rev, err
	}
	for _, op := range ops {
		if op.Delete {
			continue
		}
		es, err := s.kv.Get(ctx, op.Key)
		if err != nil || es[0].Version == 0 || !bytes.Equal(es[0].Value, op.Value) {
			return -1, nil // written, then written again (or unreadable now)
		}
		return es[0].Version, nil
	}
	return 0, nil
}

// stored returns the Version of a write's result.
func stored(rev int64) store.Version {
	if rev <= 0 {
		return unknownVersion
	}
	return version(rev)
}

// mapErr maps an error of the kv.Store that is not a failed condition,
// wrapping both the store sentinel and the original (which wraps
// store.ErrUnavailable itself when the backend could not be used).
func mapErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, local.ErrCorrupt):
		return fmt.Errorf("%w: %s: %w", store.ErrCorrupt, what, err)
	case errors.Is(err, local.ErrInvalidKey):
		return fmt.Errorf("%w: %s: %w", store.ErrInvalid, what, err)
	case errors.Is(err, etcd.ErrTooLarge):
		return fmt.Errorf("%w: %s: %w", store.ErrTooLarge, what, err)
	case errors.Is(err, etcd.ErrDenied):
		return fmt.Errorf("%w: %s: %w", store.ErrDenied, what, err)
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrInvalid):
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// failedCond reports whether err is the kv.Store's failed condition, not
// a write that settle has already explained (stale remembered state, also
// a conflict).
func failedCond(err error) bool {
	return errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrStale)
}

// casErr explains a failed compare-and-swap of key: by a read on this
// failure path only, ErrNotFound when the key is gone, else ErrConflict.
func (s *Store) casErr(ctx context.Context, what, key string, err error) error {
	if err != nil && !failedCond(err) {
		return mapErr(what, err)
	}
	if err == nil {
		err = store.ErrConflict
	}
	es, rerr := s.kv.Get(ctx, key)
	if rerr == nil && es[0].Version == 0 {
		// Not wrapping err: a missing object is not a conflict.
		return fmt.Errorf("%w: %s: %v", store.ErrNotFound, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// createErr explains a failed create-if-absent: the key existed (not
// wrapping the failed condition: an existing object is not a conflict).
func createErr(what string, err error) error {
	if failedCond(err) {
		return fmt.Errorf("%w: %s: %v", store.ErrExists, what, err)
	}
	return mapErr(what, err)
}

// get reads one key.
func (s *Store) get(ctx context.Context, what, key string) (kv.KeyValue, error) {
	if err := s.checkRead(ctx); err != nil {
		return kv.KeyValue{}, err
	}
	es, err := s.kv.Get(ctx, key)
	if err != nil {
		return kv.KeyValue{}, mapErr(what, err)
	}
	if es[0].Version == 0 {
		return kv.KeyValue{}, fmt.Errorf("%w: %s", store.ErrNotFound, what)
	}
	return es[0], nil
}

// list reads every key under prefix.
func (s *Store) list(ctx context.Context, what, prefix string) ([]kv.KeyValue, error) {
	if err := s.checkRead(ctx); err != nil {
		return nil, err
	}
	es, err := s.kv.List(ctx, prefix)
	if err != nil {
		return nil, mapErr(what, err)
	}
	return es, nil
}

// claimValue is a claim's stored value (of its key and its index key).
func claimValue(c store.Claim) []byte {
	b, _ := json.Marshal(store.ClaimSpec{Pool: c.Pool, CIDR: c.CIDR, Node: c.Node})
	return b
}
