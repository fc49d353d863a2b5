package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// splitBatchOps bounds the operations of one transaction of the split on
// stores that set no bound of their own (the local file): etcd's default.
const splitBatchOps = 128

// splitAttempts bounds how often one node is split again because its whole
// key changed meanwhile, and how often Split reads every node again.
const splitAttempts = 8

// SplitReport says what Split did.
type SplitReport struct {
	// Nodes counts the node objects split (fenced by this run).
	Nodes int
	// Written counts the parts and lends keys put or deleted.
	Written int
	// Marked is true when this run wrote the layout marker.
	Marked bool
	// Deleted counts the whole keys deleted after the marker.
	Deleted int
	// Late lists whole keys of node objects written after the marker
	// (by a process of the earlier version that read the old marker) that
	// could not be split because the node has a head already: left in
	// place for `ipkeeperctl check`.
	Late []string
}

// ErrLateNode is wrapped by Split's error when a node's whole key was
// written after the marker and the node has parts of its own by then.
var ErrLateNode = errors.New("node object of the earlier layout written after the split")

// Split brings a store of the layout that keeps each node object whole
// under nodes/<node> (meta/layout = kvbacked.WholeNodesMarkerValue) to
// this one, which keeps it in parts under nodes/<node>/. A process of
// the earlier version reads nodes/<node> whole and writes it back with a
// compare of that key's version (its create: on condition that the key
// is absent; its writes from a hint: also on the marker at its version
// with the earlier value), so per node:
//
//  1. the node's parts (blocks, records; kvbacked.ObjectKeys) and the
//     lends keys of its borrowers are put, and parts it does not hold
//     deleted, in transactions within the store's limits, each guarded by
//     the whole key's version as read: a write of the earlier version
//     meanwhile fails them, and the node is split again from its new
//     state;
//  2. the fence, one transaction guarded by the same version: the whole
//     key becomes kvbacked.MovedNodeValue, which the earlier version
//     cannot decode (its reads of the node fail and its creates find the
//     key taken), and the head is put. A node's head exists exactly when
//     it is fenced.
//
// Every write before the marker is also guarded by the marker as read,
// so that a Split that read it before another one finished writes
// nothing. Parts of nodes whose whole key is gone (deleted by the earlier
// version) are deleted on condition that it is still absent. When every
// whole key holds the fence and no parts of a gone node are left,
// meta/layout = kvbacked.MarkerValue, guarded by the marker's version
// (the fences cannot change: the earlier version cannot decode them, so
// never learns their versions): from here on the parts are the truth, and
// the earlier version fails every open and every write from a hint. Then
// the whole keys are deleted, each guarded by its version. A whole key
// written after the marker — by a process of the earlier version that
// read the old marker before it and writes without a hint: it creates a
// node new to the store, or, once the whole keys are gone, one it found
// gone — is split first, guarded by the node having no head yet, else
// left and reported (ErrLateNode). Only such a process, still running
// after the marker, escapes the fence; stop the earlier version's
// controllers before the upgrade.
//
// Each step is idempotent: a crash anywhere leaves the store to a rerun
// (Ensure runs Split on a store marked with either value; a store marked
// with this layout's value reads as split, ListNodes passing over whole
// keys left behind). Conditions failed by another Split running meanwhile
// make Split read again; after splitAttempts reads it fails with
// store.ErrConflict, and Ensure reads the marker again.
func Split(ctx context.Context, s kv.Store) (SplitReport, error) {
	var rep SplitReport
	for range splitAttempts {
		marker, err := s.Get(ctx, layoutKey)
		if err != nil {
			return rep, kvbacked.MapErr("split: read the layout marker", err)
		}
		m := marker[0]
		es, err := s.List(ctx, kvbacked.NodesPrefix)
		if err != nil {
			return rep, kvbacked.MapErr("split: read the node objects", err)
		}
		whole, parts := byNode(es)
		switch string(m.Value) {
		case layoutTyped:
			err := dropWhole(ctx, s, whole, &rep)
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			return rep, err
		case kvbacked.WholeNodesMarkerValue:
		default:
			return rep, fmt.Errorf("%w: split: %s holds %q, not the layout of whole node objects", store.ErrCorrupt, layoutKey, m.Value)
		}
		// Every write before the marker is also guarded by the marker as
		// read: a Split that marked the store meanwhile has deleted the
		// whole keys, and their parts are the truth.
		before := kv.Cond{Key: layoutKey, Version: m.Version, Value: m.Value}
		done := true
		for _, name := range sortedKeys(parts) {
			if _, ok := whole[name]; !ok {
				done = false
				if err := dropParts(ctx, s, before, name, parts[name], &rep); err != nil {
					return rep, err
				}
			}
		}
		for _, name := range sortedKeys(whole) {
			if kvbacked.IsMovedNode(whole[name]) {
				continue
			}
			done = false
			if err := splitNode(ctx, s, name, before, &rep); err != nil && !errors.Is(err, store.ErrConflict) {
				return rep, err
			}
		}
		if !done {
			continue // read every node again: all fenced, nothing else left?
		}
		// The fences cannot change (the earlier version cannot decode
		// them, so never learns their versions): the marker alone is
		// guarded.
		_, err = kv.TxnRevision(ctx, s, []kv.Cond{before}, []kv.Op{{Key: layoutKey, Value: []byte(layoutTyped)}})
		switch {
		case errors.Is(err, store.ErrConflict):
			continue
		case err != nil:
			return rep, kvbacked.MapErr("split: write the layout marker", err)
		}
		rep.Marked = true
	}
	return rep, fmt.Errorf("%w: split: the node objects kept changing (stop processes of the earlier version)", store.ErrConflict)
}

// byNode sorts a listing of nodes/ into whole keys and parts, by node.
func byNode(es []kv.KeyValue) (whole map[string]kv.KeyValue, parts map[string][]kv.KeyValue) {
	whole, parts = map[string]kv.KeyValue{}, map[string][]kv.KeyValue{}
	for _, e := range es {
		name, _, isPart := strings.Cut(strings.TrimPrefix(e.Key, kvbacked.NodesPrefix), "/")
		if isPart {
			parts[name] = append(parts[name], e)
		} else {
			whole[name] = e
		}
	}
	return whole, parts
}

// splitNode writes node name's parts from its whole key and fences it
// (see Split), again from a new read each time the whole key changed
// meanwhile. Every write is also guarded by phase: the marker as read
// before the store is marked; after (late), by the node having no head
// (a node of this version), and one that has is ErrLateNode.
func splitNode(ctx context.Context, s kv.Store, name string, phase kv.Cond, rep *SplitReport) error {
	late := phase.Key == kvbacked.NodeHeadKey(name)
	key := kvbacked.WholeNodeKey(name)
	for range splitAttempts {
		es, err := s.Get(ctx, key, kvbacked.NodeHeadKey(name), phase.Key)
		if err != nil {
			return kvbacked.MapErr("split: read node "+name, err)
		}
		w, head := es[0], es[1]
		switch {
		case !late && es[2].Version != phase.Version:
			return fmt.Errorf("%w: split: %s changed meanwhile", store.ErrConflict, phase.Key)
		case w.Version == 0 || kvbacked.IsMovedNode(w):
			return nil // gone (its parts are dropped by the next pass), or fenced
		case late && head.Version != 0:
			rep.Late = append(rep.Late, key)
			return fmt.Errorf("%w: %s and %s both exist", ErrLateNode, key, head.Key)
		}
		n, err := store.UnmarshalNode(name, w.Value)
		if err != nil {
			return fmt.Errorf("split: %s: %w", key, err)
		}
		target, err := kvbacked.ObjectKeys([]store.Node{n}, nil)
		if err != nil {
			return fmt.Errorf("%w: split: %s: %w", store.ErrCorrupt, key, err)
		}
		stored, err := s.List(ctx, kvbacked.NodePartsPrefix(name))
		if err != nil {
			return kvbacked.MapErr("split: read the parts of node "+name, err)
		}
		guard := []kv.Cond{phase, {Key: key, Version: w.Version}}
		err = writeParts(ctx, s, guard, name, target, stored, rep)
		if err == nil {
			_, err = kv.TxnRevision(ctx, s, guard, []kv.Op{
				{Key: key, Value: kvbacked.MovedNodeValue},
				{Key: head.Key, Value: target[head.Key]},
			})
		}
		switch {
		case err == nil:
			rep.Nodes++
			return nil
		case !errors.Is(err, store.ErrConflict):
			return kvbacked.MapErr("split node "+name, err)
		}
	}
	return fmt.Errorf("%w: split: %s kept changing (stop processes of the earlier version)", store.ErrConflict, key)
}

// writeParts puts node name's parts and lends keys of target, but its
// head, that stored (the parts as listed) does not hold as they are, and
// deletes those stored holds beyond target, in transactions within the
// store's limits each guarded by guard.
func writeParts(ctx context.Context, s kv.Store, guard []kv.Cond, name string, target map[string][]byte, stored []kv.KeyValue, rep *SplitReport) error {
	have := map[string][]byte{}
	for _, e := range stored {
		have[e.Key] = e.Value
	}
	var ops []kv.Op
	head := kvbacked.NodeHeadKey(name)
	for _, k := range sortedKeys(target) {
		if v, ok := have[k]; k != head && (!ok || !bytes.Equal(v, target[k])) {
			ops = append(ops, kv.Op{Key: k, Value: target[k]})
		}
	}
	for _, e := range stored {
		if _, keep := target[e.Key]; !keep {
			ops = append(ops, kv.Op{Key: e.Key, Delete: true})
		}
	}
	return guarded(ctx, s, guard, ops, &rep.Written)
}

// dropParts deletes parts of node name whose whole key is gone, on
// condition that it is still absent (the earlier version deleted the
// node; a create of it meanwhile fails the deletes, and the next pass
// splits it) and that the store is not marked meanwhile (before).
func dropParts(ctx context.Context, s kv.Store, before kv.Cond, name string, parts []kv.KeyValue, rep *SplitReport) error {
	ops := make([]kv.Op, len(parts))
	for i, e := range parts {
		ops[i] = kv.Op{Key: e.Key, Delete: true}
	}
	err := guarded(ctx, s, []kv.Cond{before, {Key: kvbacked.WholeNodeKey(name)}}, ops, &rep.Written)
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return kvbacked.MapErr("split: delete the parts of gone node "+name, err)
	}
	return nil
}

// dropWhole finishes a split store (marked with this layout's value): a
// whole key written since the marker is split first (guarded by the node
// having no head), then every fenced whole key is deleted, guarded by its
// version, in transactions within the store's limits. store.ErrConflict
// (wrapped) when a key changed meanwhile: read again.
func dropWhole(ctx context.Context, s kv.Store, whole map[string]kv.KeyValue, rep *SplitReport) error {
	rep.Late = nil
	var lateErr error
	var conds []kv.Cond
	for _, name := range sortedKeys(whole) {
		e := whole[name]
		if !kvbacked.IsMovedNode(e) {
			err := splitNode(ctx, s, name, kv.Cond{Key: kvbacked.NodeHeadKey(name)}, rep)
			switch {
			case errors.Is(err, ErrLateNode):
				lateErr = err
				continue
			case err != nil:
				return err
			}
			es, err := s.Get(ctx, e.Key)
			if err != nil {
				return kvbacked.MapErr("split: read node "+name, err)
			}
			if e = es[0]; !kvbacked.IsMovedNode(e) {
				continue // deleted meanwhile
			}
		}
		conds = append(conds, kv.Cond{Key: e.Key, Version: e.Version})
	}
	lim := limitsOf(s)
	for len(conds) > 0 {
		n := min(len(conds), lim.MaxOps)
		ops := make([]kv.Op, n)
		for i, c := range conds[:n] {
			ops[i] = kv.Op{Key: c.Key, Delete: true}
		}
		if err := guarded(ctx, s, conds[:n], ops, &rep.Deleted); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("split: delete the whole keys of split nodes: %w", err)
			}
			return kvbacked.MapErr("split: delete the whole keys of split nodes", err)
		}
		conds = conds[n:]
	}
	if lateErr != nil {
		return fmt.Errorf("split: %d whole keys left: %w", len(rep.Late), lateErr)
	}
	return nil
}

// limitsOf returns s's limits with at most splitBatchOps operations.
func limitsOf(s kv.Store) kv.Limits {
	lim := kv.LimitsOf(s)
	if lim.MaxOps <= 0 || lim.MaxOps > splitBatchOps {
		lim.MaxOps = splitBatchOps
	}
	return lim
}

// guarded runs ops in transactions within s's limits (limitsOf), each
// guarded by guard, counting the operations committed in written.
func guarded(ctx context.Context, s kv.Store, guard []kv.Cond, ops []kv.Op, written *int) error {
	lim := limitsOf(s)
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && lim.Fits(guard, ops[:n+1]) {
			n++
		}
		if _, err := kv.TxnRevision(ctx, s, guard, ops[:n]); err != nil {
			return err
		}
		*written += n
		ops = ops[n:]
	}
	return nil
}
