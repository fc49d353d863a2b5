package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// The first layout's prefixes besides pools/ (firstPoolPrefix, fence.go):
// converted and, at the end, deleted.
const (
	firstBlockPrefix    = "blocks/"
	firstAffinityPrefix = "affinity/"
	firstHandlePrefix   = "handles/"
)

// Meta keys (kvbacked's): the layout marker and the highest version the
// conversion read, written together once every object is converted.
const (
	layoutKey    = kvbacked.MarkerKey
	convertedKey = kvbacked.ConvertedKey
	layoutTyped  = kvbacked.MarkerValue
)

// ErrLateWrite is wrapped by Run's error when a first-layout key was
// written after the conversion read it (a process of the earlier version
// still running): the key is left in place and `ipkeeperctl check`
// reports what it holds.
var ErrLateWrite = errors.New("first-layout key written during migration")

// Report says what Run did.
type Report struct {
	// Done is true when the store was already migrated and holds no
	// first-layout keys to delete, or is empty: Run changed nothing.
	Done bool
	// Nodes, Claims and Handles count the node objects, claims and handle
	// records of the converted state.
	Nodes, Claims, Handles int
	// Written counts the keys Run put or deleted to bring the typed
	// objects to the converted state (0 when a rerun found them there).
	Written int
	// DroppedBlocks are first-layout blocks affine to no node and empty:
	// not converted (an unclaimed block is free in this layout).
	DroppedBlocks []string
	// UnaffineBlocks are blocks affine to no node that hold addresses,
	// converted into store.UnaffineNode's object.
	UnaffineBlocks []string
	// Orphans are addresses a block gave to a handle that does not exist;
	// they stay allocated to a record of that handle ID (ipkeeperctl gc
	// or check then decide), never freed by the migration.
	Orphans []string
	// Strays are addresses a handle listed that its block did not give to
	// it; they are left out of the handle's record.
	Strays []string
	// Renamed lists handles stored under the legacy form of their ID,
	// converted under the canonical one ("old -> new";
	// nodealloc.CanonicalIDs).
	Renamed []string
	// Pools counts the first-layout pools copied to the typed pools by
	// the fence; Fenced the first-layout pool keys it marked Deleting.
	Pools, Fenced int
	// Deleted counts the first-layout keys deleted.
	Deleted int
	// Late lists first-layout keys written after the conversion read them,
	// left in place.
	Late []string
}

// Run converts a store written by the first layout (pools/, blocks/,
// affinity/, handles/) into this package's typed objects, then deletes the
// first layout's blocks, affinities and handles. It is idempotent and
// resumable:
//
//  1. the fence (see fence): every first-layout pool is copied as it is
//     to the typed pools, in the same transaction as its first-layout key
//     is marked Deleting, guarded by its version. From here on no process
//     of the earlier version can allocate (its allocator guards every
//     allocation by its pools' versions and refuses pools marked
//     Deleting), while its releases still work on the first layout;
//  2. one consistent read of the whole store (kv List at one revision),
//     after the fence;
//  3. the converted objects are a function of the first-layout keys
//     alone: node objects, claims and lends keys are put (or, left by an
//     earlier run that read other first-layout keys, deleted) per node in
//     transactions within kv.Limits, each guarded by the versions read,
//     first-layout keys untouched — a crash leaves them to convert again;
//  4. the first-layout keys are read again; when any changed since step 2
//     (a release by the earlier version) or a pool is no longer fenced,
//     the conversion starts over;
//  5. meta/layout = "2" and meta/converted = the highest version read,
//     in one transaction: from here on the typed objects are the truth;
//  6. the first-layout keys are deleted in bounded transactions, each
//     guarded by its version, only those at most meta/converted (a rerun
//     after a crash continues here); later ones are reported (ErrLateWrite).
//     The first layout's pool keys stay, marked: they are the fence.
//
// A failed condition anywhere (a concurrent Run, a release of the
// earlier version) starts over from a new read, at most 5 times, then
// fails with store.ErrConflict. A store holding no first-layout key is
// only marked (step 5), an empty one too.
//
// Until step 5 nothing may use the typed objects: the open path runs it
// through Ensure.
func Run(ctx context.Context, s kv.Store) (Report, error) {
	var pools, fenced int // the fence's writes, over every attempt
	for range 5 {
		rep, again, err := migrateOnce(ctx, s)
		pools, fenced = pools+rep.Pools, fenced+rep.Fenced
		rep.Pools, rep.Fenced = pools, fenced
		if err != nil || !again {
			return rep, err
		}
	}
	return Report{}, fmt.Errorf("%w: migrate: the first-layout keys kept changing during the conversion (stop processes of the earlier version)", store.ErrConflict)
}

func migrateOnce(ctx context.Context, s kv.Store) (rep Report, again bool, err error) {
	all, snap, maxv, err := readAll(ctx, s, "migrate: read the store")
	if err != nil {
		return rep, false, err
	}
	if m, ok := snap[layoutKey]; ok && string(m.Value) == kvbacked.WholeNodesMarkerValue {
		// Marked meanwhile by a migration of the earlier version: Ensure
		// splits its node objects.
		return rep, false, fmt.Errorf("%w: migrate: %s holds %q (the layout of whole node objects)", store.ErrConflict, layoutKey, m.Value)
	} else if ok && string(m.Value) != layoutTyped {
		return rep, false, fmt.Errorf("%w: migrate: %s holds %q, a layout this version does not know", store.ErrCorrupt, layoutKey, m.Value)
	} else if ok {
		converted, _ := strconv.ParseInt(string(snap[convertedKey].Value), 10, 64)
		again, err := deleteFirst(ctx, s, all, converted, &rep)
		rep.Done = rep.Deleted == 0 && len(rep.Late) == 0
		return rep, again, err
	}
	if !slices.ContainsFunc(all, func(e kv.KeyValue) bool { return isFirst(e.Key) || strings.HasPrefix(e.Key, firstPoolPrefix) }) {
		// An empty store, or typed objects only (written before markers
		// were written on empty stores): mark it, so that the store's
		// next open costs one read and a bad request after a valid one
		// finds nothing to write.
		again, err := conflicted("migrate: write the layout marker", writeMarker(ctx, s, snap, maxv))
		return rep, again, err
	}
	// 1. The fence, then the consistent read after it.
	n, err := fence(ctx, s, snap, &rep)
	if err != nil {
		again, err := conflicted("migrate: fence the first layout's pools", err)
		return rep, again, err
	}
	if n > 0 {
		if all, snap, maxv, err = readAll(ctx, s, "migrate: read the store after the fence"); err != nil {
			return rep, false, err
		}
		if !fenced(snap) {
			return rep, true, nil
		}
	}
	target, err := convert(all, &rep)
	if err != nil {
		return rep, false, err
	}
	if err := apply(ctx, s, snap, target, &rep); err != nil {
		again, err := conflicted("migrate: write converted objects", err)
		return rep, again, err
	}
	now, nowSnap, _, err := readAll(ctx, s, "migrate: read the store again")
	if err != nil {
		return rep, false, err
	}
	if !sameFirst(all, now) || !fenced(nowSnap) {
		return rep, true, nil
	}
	if again, err := conflicted("migrate: write the layout marker", writeMarker(ctx, s, snap, maxv)); err != nil || again {
		return rep, again, err
	}
	again, err = deleteFirst(ctx, s, now, maxv, &rep)
	return rep, again, err
}

// readAll lists the whole store: its entries, by key, and the highest
// version among them.
func readAll(ctx context.Context, s kv.Store, what string) ([]kv.KeyValue, map[string]kv.KeyValue, int64, error) {
	all, err := s.List(ctx, "")
	if err != nil {
		return nil, nil, 0, kvbacked.MapErr(what, err)
	}
	snap := make(map[string]kv.KeyValue, len(all))
	var maxv int64
	for _, e := range all {
		snap[e.Key] = e
		maxv = max(maxv, e.Version)
	}
	return all, snap, maxv, nil
}

// writeMarker writes meta/layout = "2" and meta/converted = maxv, guarded
// by the meta keys' versions in snap.
func writeMarker(ctx context.Context, s kv.Store, snap map[string]kv.KeyValue, maxv int64) error {
	_, err := kv.TxnRevision(ctx, s, []kv.Cond{{Key: layoutKey, Version: snap[layoutKey].Version}, {Key: convertedKey, Version: snap[convertedKey].Version}},
		[]kv.Op{{Key: layoutKey, Value: []byte(layoutTyped)}, {Key: convertedKey, Value: []byte(strconv.FormatInt(maxv, 10))}})
	return err
}

// conflicted maps a write's error: a failed condition (another process,
// a concurrent Run included, wrote meanwhile) means "start over".
func conflicted(what string, err error) (bool, error) {
	if errors.Is(err, store.ErrConflict) {
		return true, nil
	}
	return false, kvbacked.MapErr(what, err)
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// isFirst reports whether key belongs to the first layout only.
func isFirst(key string) bool {
	return strings.HasPrefix(key, firstBlockPrefix) || strings.HasPrefix(key, firstAffinityPrefix) || strings.HasPrefix(key, firstHandlePrefix)
}

// sameFirst reports whether two reads hold the same first-layout keys at the
// same versions.
func sameFirst(a, b []kv.KeyValue) bool {
	filter := func(es []kv.KeyValue) map[string]int64 {
		m := map[string]int64{}
		for _, e := range es {
			if isFirst(e.Key) {
				m[e.Key] = e.Version
			}
		}
		return m
	}
	return maps.Equal(filter(a), filter(b))
}

// apply brings the typed keys of snap to target: per node object, its
// claims (claim and index), lends keys and the node key; then deletes
// typed keys target does not hold. Every transaction is guarded by the
// versions of the keys it writes as snap read them.
func apply(ctx context.Context, s kv.Store, snap map[string]kv.KeyValue, target map[string][]byte, rep *Report) error {
	b := newBatch(ctx, s, &rep.Written)
	// The order does not matter for safety: nothing uses the typed keys
	// before the marker.
	for _, key := range slices.Sorted(maps.Keys(target)) {
		if e, ok := snap[key]; ok && string(e.Value) == string(target[key]) {
			continue
		}
		if err := b.add(kv.Cond{Key: key, Version: snap[key].Version}, kv.Op{Key: key, Value: target[key]}); err != nil {
			return err
		}
	}
	for _, key := range slices.Sorted(maps.Keys(snap)) {
		if _, keep := target[key]; !keep && kvbacked.IsObjectKey(key) {
			if err := b.add(kv.Cond{Key: key, Version: snap[key].Version}, kv.Op{Key: key, Delete: true}); err != nil {
				return err
			}
		}
	}
	return b.flush()
}

// batch gathers guarded writes into transactions within the store's
// limits, counting the operations it commits.
type batch struct {
	ctx     context.Context
	s       kv.Store
	lim     kv.Limits
	conds   []kv.Cond
	ops     []kv.Op
	written *int
}

func newBatch(ctx context.Context, s kv.Store, written *int) *batch {
	return &batch{ctx: ctx, s: s, lim: kv.LimitsOf(s), written: written}
}

// add queues op guarded by c, first committing what is queued when the
// two would not fit one transaction.
func (b *batch) add(c kv.Cond, op kv.Op) error {
	if len(b.ops) > 0 && !b.lim.Fits(append(b.conds, c), append(b.ops, op)) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.conds, b.ops = append(b.conds, c), append(b.ops, op)
	return nil
}

// flush commits what is queued.
func (b *batch) flush() error {
	if len(b.ops) == 0 {
		return nil
	}
	if _, err := kv.TxnRevision(b.ctx, b.s, b.conds, b.ops); err != nil {
		return err
	}
	*b.written += len(b.ops)
	b.conds, b.ops = nil, nil
	return nil
}

// deleteFirst deletes the first-layout keys of es at versions up to
// converted, in transactions within the store's limits, each key guarded
// by its version; later ones are reported. A key changed since es was
// read (a concurrent Run deleted it, or a process of the earlier
// version wrote it) fails its transaction: again is true, and a new read
// starts over.
func deleteFirst(ctx context.Context, s kv.Store, es []kv.KeyValue, converted int64, rep *Report) (again bool, err error) {
	b := newBatch(ctx, s, &rep.Deleted)
	for _, e := range es {
		if !isFirst(e.Key) {
			continue
		}
		if e.Version > converted {
			rep.Late = append(rep.Late, e.Key)
			continue
		}
		if err := b.add(kv.Cond{Key: e.Key, Version: e.Version}, kv.Op{Key: e.Key, Delete: true}); err != nil {
			return conflicted("migrate: delete first-layout keys", err)
		}
	}
	if err := b.flush(); err != nil {
		return conflicted("migrate: delete first-layout keys", err)
	}
	if len(rep.Late) > 0 {
		return false, fmt.Errorf("%w: %d keys left in place, first %s", ErrLateWrite, len(rep.Late), rep.Late[0])
	}
	return false, nil
}

// decodeFirst decodes a first-layout value.
func decodeFirst[T any](e kv.KeyValue) (T, error) {
	var v T
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return v, fmt.Errorf("%w: migrate: %s: %v", store.ErrCorrupt, e.Key, err)
	}
	return v, nil
}
