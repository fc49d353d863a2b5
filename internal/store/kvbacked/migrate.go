package kvbacked

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
)

// The first layout's prefixes (internal/allocator/keys.go): pools/ is
// shared with this layout; the others are converted and, at the end,
// deleted.
const (
	v1BlockPrefix    = "blocks/"
	v1AffinityPrefix = "affinity/"
	v1HandlePrefix   = "handles/"
)

// Meta keys: the layout marker ("2") and the highest version the
// conversion read, written together once every object is converted.
const (
	layoutKey    = metaPrefix + "layout"
	convertedKey = metaPrefix + "converted"
	layoutV2     = "2"
)

// UnaffineNode is store.UnaffineNode: the node object Migrate puts the
// first layout's blocks of no node in while they hold addresses.
const UnaffineNode = store.UnaffineNode

// ErrLateWrite is wrapped by Migrate's error when a first-layout key was
// written after the conversion read it (a process of the earlier version
// still running): the key is left in place and `ipkeeperctl check`
// reports what it holds.
var ErrLateWrite = errors.New("first-layout key written during migration")

// Report says what Migrate did.
type Report struct {
	// Done is true when the store was already migrated and holds no
	// first-layout keys: Migrate changed nothing.
	Done bool
	// Nodes, Claims and Handles count the node objects, claims and handle
	// records of the converted state.
	Nodes, Claims, Handles int
	// Written counts the keys Migrate put or deleted to bring the typed
	// objects to the converted state (0 when a rerun found them there).
	Written int
	// DroppedBlocks are first-layout blocks affine to no node and empty:
	// not converted (an unclaimed block is free in this layout).
	DroppedBlocks []string
	// UnaffineBlocks are blocks affine to no node that hold addresses,
	// converted into UnaffineNode's object.
	UnaffineBlocks []string
	// Orphans are addresses a block gave to a handle that does not exist;
	// they stay allocated to a record of that handle ID (ipkeeperctl gc
	// or check then decide), never freed by the migration.
	Orphans []string
	// Strays are addresses a handle listed that its block did not give to
	// it; they are left out of the handle's record.
	Strays []string
	// Deleted counts the first-layout keys deleted.
	Deleted int
	// Late lists first-layout keys written after the conversion read them,
	// left in place.
	Late []string
}

// Migrate converts a store written by the first layout (pools/, blocks/,
// affinity/, handles/) into this package's typed objects, then deletes the
// first layout's blocks, affinities and handles (pool definitions are
// shared and stay). It is idempotent and resumable:
//
//  1. one consistent read of the whole store (kv List at one revision);
//  2. the converted objects are a function of the first-layout keys
//     alone: node objects, claims and lends keys are put (or, left by an
//     earlier run that read other first-layout keys, deleted) per node in
//     transactions within kv.Limits, each guarded by the versions read,
//     first-layout keys untouched — a crash leaves them to convert again;
//  3. the first-layout keys are read again; when any changed since step 1
//     the conversion starts over (at most 3 times);
//  4. meta/layout = "2" and meta/converted = the highest version read,
//     in one transaction: from here on the typed objects are the truth;
//  5. the first-layout keys are deleted in bounded transactions, each
//     guarded by its version, only those at most meta/converted (a rerun
//     after a crash continues here); later ones are reported (ErrLateWrite).
//
// Until step 4 nothing may use the typed objects: the allocator opens the
// store through Migrate. Processes of the earlier version must not write
// meanwhile (the installer replaces the plugin first); a write caught in
// step 3 restarts the conversion, one after it is reported in step 5.
func Migrate(ctx context.Context, s kv.Store) (Report, error) {
	for range 3 {
		rep, again, err := migrateOnce(ctx, s)
		if err != nil || !again {
			return rep, err
		}
	}
	return Report{}, fmt.Errorf("%w: migrate: the first-layout keys kept changing during the conversion (stop processes of the earlier version)", store.ErrConflict)
}

func migrateOnce(ctx context.Context, s kv.Store) (rep Report, again bool, err error) {
	all, err := s.List(ctx, "")
	if err != nil {
		return rep, false, mapErr("migrate: read the store", err)
	}
	snap := make(map[string]kv.KeyValue, len(all))
	var maxv int64
	for _, e := range all {
		snap[e.Key] = e
		maxv = max(maxv, e.Version)
	}
	if m, ok := snap[layoutKey]; ok && string(m.Value) == layoutV2 {
		converted, _ := strconv.ParseInt(string(snap[convertedKey].Value), 10, 64)
		err := deleteV1(ctx, s, all, converted, &rep)
		rep.Done = rep.Deleted == 0 && len(rep.Late) == 0
		return rep, false, err
	}
	target, err := convert(all, &rep)
	if err != nil {
		return rep, false, err
	}
	if err := apply(ctx, s, snap, target, &rep); err != nil {
		return rep, false, err
	}
	now, err := s.List(ctx, "")
	if err != nil {
		return rep, false, mapErr("migrate: read the store again", err)
	}
	if !sameV1(all, now) {
		return rep, true, nil
	}
	_, err = kv.TxnRevision(ctx, s, []kv.Cond{{Key: layoutKey, Version: snap[layoutKey].Version}, {Key: convertedKey, Version: snap[convertedKey].Version}},
		[]kv.Op{{Key: layoutKey, Value: []byte(layoutV2)}, {Key: convertedKey, Value: []byte(strconv.FormatInt(maxv, 10))}})
	if err != nil {
		return rep, false, mapErr("migrate: write the layout marker", err)
	}
	return rep, false, deleteV1(ctx, s, now, maxv, &rep)
}

// isV1 reports whether key belongs to the first layout only.
func isV1(key string) bool {
	return strings.HasPrefix(key, v1BlockPrefix) || strings.HasPrefix(key, v1AffinityPrefix) || strings.HasPrefix(key, v1HandlePrefix)
}

// sameV1 reports whether two reads hold the same first-layout keys at the
// same versions.
func sameV1(a, b []kv.KeyValue) bool {
	filter := func(es []kv.KeyValue) map[string]int64 {
		m := map[string]int64{}
		for _, e := range es {
			if isV1(e.Key) {
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
	lim := kv.LimitsOf(s)
	var conds []kv.Cond
	var ops []kv.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := kv.TxnRevision(ctx, s, conds, ops); err != nil {
			return mapErr("migrate: write converted objects", err)
		}
		rep.Written += len(ops)
		conds, ops = nil, nil
		return nil
	}
	add := func(op kv.Op) error {
		c := kv.Cond{Key: op.Key, Version: snap[op.Key].Version}
		if len(ops) > 0 && !lim.Fits(append(conds, c), append(ops, op)) {
			if err := flush(); err != nil {
				return err
			}
		}
		conds, ops = append(conds, c), append(ops, op)
		return nil
	}
	// The order does not matter for safety: nothing uses the typed keys
	// before the marker.
	for _, key := range slices.Sorted(maps.Keys(target)) {
		if e, ok := snap[key]; ok && string(e.Value) == string(target[key]) {
			continue
		}
		if err := add(kv.Op{Key: key, Value: target[key]}); err != nil {
			return err
		}
	}
	for _, key := range slices.Sorted(maps.Keys(snap)) {
		if _, keep := target[key]; !keep && isTyped(key) {
			if err := add(kv.Op{Key: key, Delete: true}); err != nil {
				return err
			}
		}
	}
	return flush()
}

// isTyped reports whether key is one of this layout's object keys.
func isTyped(key string) bool {
	for _, p := range []string{claimPrefix, nodeClaimPrefix, nodePrefix, lendsPrefix} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// deleteV1 deletes the first-layout keys of es at versions up to
// converted, in transactions within the store's limits, each key guarded
// by its version; later ones are reported.
func deleteV1(ctx context.Context, s kv.Store, es []kv.KeyValue, converted int64, rep *Report) error {
	lim := kv.LimitsOf(s)
	var conds []kv.Cond
	var ops []kv.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := kv.TxnRevision(ctx, s, conds, ops); err != nil {
			if errors.Is(err, kv.ErrConflict) {
				return fmt.Errorf("%w: migrate: %w: a first-layout key changed while it was deleted; run the migration again", ErrLateWrite, err)
			}
			return mapErr("migrate: delete first-layout keys", err)
		}
		rep.Deleted += len(ops)
		conds, ops = nil, nil
		return nil
	}
	for _, e := range es {
		if !isV1(e.Key) {
			continue
		}
		if e.Version > converted {
			rep.Late = append(rep.Late, e.Key)
			continue
		}
		c, op := kv.Cond{Key: e.Key, Version: e.Version}, kv.Op{Key: e.Key, Delete: true}
		if len(ops) > 0 && !lim.Fits(append(conds, c), append(ops, op)) {
			if err := flush(); err != nil {
				return err
			}
		}
		conds, ops = append(conds, c), append(ops, op)
	}
	if err := flush(); err != nil {
		return err
	}
	if len(rep.Late) > 0 {
		return fmt.Errorf("%w: %d keys left in place, first %s", ErrLateWrite, len(rep.Late), rep.Late[0])
	}
	return nil
}

// claimValue is a claim's stored value.
func claimValue(c store.Claim) []byte {
	b, _ := json.Marshal(store.ClaimSpec{Pool: c.Pool, CIDR: c.CIDR, Node: c.Node})
	return b
}

// decodeV1 decodes a first-layout value.
func decodeV1[T any](e kv.KeyValue) (T, error) {
	var v T
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return v, fmt.Errorf("%w: migrate: %s: %v", store.ErrCorrupt, e.Key, err)
	}
	return v, nil
}
