package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Statuses of the objects of a Result.
const (
	// StatusCreated: Apply wrote it.
	StatusCreated = "created"
	// StatusPresent: ipkeeper already holds it as the import has it (an
	// earlier run of the same import); nothing was written.
	StatusPresent = "present"
	// StatusWouldCreate: a dry run found it missing.
	StatusWouldCreate = "would-create"
)

// Change is what Apply did with one object.
type Change struct {
	// Kind is "pool", "block" or "handle".
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Result is what Apply did.
type Result struct {
	Source  string   `json:"source"`
	DryRun  bool     `json:"dryRun"`
	Changes []Change `json:"changes"`
	// Addresses are every address the import holds taken.
	Addresses []netip.Addr `json:"addresses"`
	Warnings  []string     `json:"warnings"`
}

// newResult is the Result an apply of plan starts from: no changes yet,
// the plan's addresses and its warnings (never nil, for JSON output).
func newResult(plan *Plan, dryRun bool) Result {
	res := Result{Source: plan.Source, DryRun: dryRun, Changes: []Change{}, Addresses: plan.Addresses(), Warnings: slices.Clone(plan.Warnings)}
	if res.Warnings == nil {
		res.Warnings = []string{}
	}
	return res
}

// changeStatus says what an apply did with an object: found it present,
// would create it (dry run), or created it.
func changeStatus(present, dryRun bool) string {
	switch {
	case present:
		return StatusPresent
	case dryRun:
		return StatusWouldCreate
	}
	return StatusCreated
}

// handleChunk bounds how many handles one transaction writes, so that a
// large block stays within etcd's per-transaction operation limit.
const handleChunk = 50

// Apply writes plan into store. Objects ipkeeper already holds as the plan
// has them are left alone, so running an import again changes nothing.
// Anything that disagrees — a pool of the same name with another CIDR or
// block size, a pool of another name overlapping an imported one, a block
// that gives an imported address to someone else or is affine to another
// node, a handle with other addresses — fails the whole import with
// ErrConflict before anything is written.
//
// Blocks are written first, each in one transaction with its affinity
// record, then the handles, each chunk guarded by the versions of the
// blocks it names (after checking they still give the handles their
// addresses). An import cut short in between leaves addresses taken by
// handles that are not written yet — never free — and running it again
// completes it. With dryRun nothing is written.
func Apply(ctx context.Context, store kv.Store, plan *Plan, dryRun bool) (Result, error) {
	res := newResult(plan, dryRun)
	if err := plan.Validate(); err != nil {
		return res, err
	}
	st, err := readState(ctx, store, plan)
	if err != nil {
		return res, err
	}
	if len(st.conflicts) > 0 {
		return res, conflictError(st.conflicts)
	}
	status := func(present bool) string { return changeStatus(present, dryRun) }
	for _, p := range plan.Pools {
		res.Changes = append(res.Changes, Change{"pool", p.Name, status(st.poolPresent[p.Name])})
	}
	for _, b := range plan.Blocks {
		res.Changes = append(res.Changes, Change{"block", b.Pool + "/" + b.CIDR.String(), status(st.entries[allocator.BlockKey(b.Pool, b.CIDR)].Version != 0)})
	}
	for _, h := range plan.Handles {
		res.Changes = append(res.Changes, Change{"handle", h.ID, status(st.entries[allocator.HandleKey(h.ID)].Version != 0)})
	}
	if dryRun {
		return res, nil
	}
	if err := write(ctx, store, plan, st); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			return res, fmt.Errorf("%w: the datastore changed while importing; run the import again (it is idempotent): %w", ErrConflict, err)
		}
		return res, err
	}
	return res, nil
}

// state is what the datastore holds of the plan's keys.
type state struct {
	poolPresent map[string]bool
	entries     map[string]kv.KeyValue
	conflicts   []string
}

func readState(ctx context.Context, store kv.Store, plan *Plan) (*state, error) {
	st := &state{entries: map[string]kv.KeyValue{}}
	pools, err := allocator.New(store, nil).Pools(ctx)
	if err != nil {
		return nil, err
	}
	st.poolPresent, st.conflicts = comparePools(pools, plan.Pools)
	var keys []string
	for _, b := range plan.Blocks {
		keys = append(keys, allocator.BlockKey(b.Pool, b.CIDR))
		if b.Node != "" {
			keys = append(keys, allocator.AffinityKey(b.Node, b.Pool, b.CIDR))
		}
	}
	for _, h := range plan.Handles {
		keys = append(keys, allocator.HandleKey(h.ID))
	}
	es, err := store.Get(ctx, keys...)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		st.entries[e.Key] = e
	}
	for _, b := range plan.Blocks {
		e := st.entries[allocator.BlockKey(b.Pool, b.CIDR)]
		if e.Version != 0 {
			st.conflicts = append(st.conflicts, blockConflicts(e, b)...)
		}
	}
	for _, h := range plan.Handles {
		e := st.entries[allocator.HandleKey(h.ID)]
		if e.Version == 0 {
			continue
		}
		var have ipam.Handle
		if err := json.Unmarshal(e.Value, &have); err != nil || !sameIPs(have.IPs, h.IPs) {
			st.conflicts = append(st.conflicts, fmt.Sprintf("handle %s exists with addresses %s; the import gives it %s", h.ID, ipList(have.IPs), ipList(h.IPs)))
		}
	}
	return st, nil
}

// comparePools compares the stored pools with the imported ones: a pool of
// the same name, CIDR and block size is present; the same name otherwise,
// or another name overlapping, is a conflict.
func comparePools(stored, imported []ipam.Pool) (present map[string]bool, conflicts []string) {
	present = map[string]bool{}
	for _, p := range imported {
		for _, q := range stored {
			switch {
			case q.Name == p.Name && q.CIDR == p.CIDR && q.BlockSize == p.BlockSize:
				present[p.Name] = true
			case q.Name == p.Name:
				conflicts = append(conflicts, fmt.Sprintf("pool %s exists as %s with /%d blocks; the import needs %s with /%d blocks", p.Name, q.CIDR, q.BlockSize, p.CIDR, p.BlockSize))
			case q.CIDR.Overlaps(p.CIDR):
				conflicts = append(conflicts, fmt.Sprintf("pool %s (%s) overlaps the imported pool %s (%s): both could hand out the same address", q.Name, q.CIDR, p.Name, p.CIDR))
			}
		}
	}
	return present, conflicts
}

// blockConflicts compares a stored block with the imported one: the same
// node, and every imported allocation held by the same handle.
func blockConflicts(e kv.KeyValue, b ipam.Block) []string {
	var have ipam.Block
	if err := json.Unmarshal(e.Value, &have); err != nil {
		return []string{fmt.Sprintf("block %s of pool %s exists but cannot be decoded: %v", b.CIDR, b.Pool, err)}
	}
	var out []string
	if have.Node != b.Node {
		out = append(out, fmt.Sprintf("block %s of pool %s is affine to %q in ipkeeper, to %q in the import", b.CIDR, b.Pool, have.Node, b.Node))
	}
	for _, a := range b.Allocations() {
		if got := have.Owner(a.Addr); got != a.Handle {
			if got == "" {
				got = "nobody"
			}
			out = append(out, fmt.Sprintf("%s is held by %s in ipkeeper, by %s in the import", a.Addr, got, a.Handle))
		}
	}
	return out
}

func sameIPs(a, b []ipam.HandleIP) bool {
	key := func(ips []ipam.HandleIP) []string {
		var out []string
		for _, ip := range ips {
			out = append(out, ip.Pool+" "+ip.Addr.String())
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

func ipList(ips []ipam.HandleIP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.Addr.String())
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func conflictError(msgs []string) error {
	const show = 20
	s := strings.Join(msgs[:min(len(msgs), show)], "; ")
	if len(msgs) > show {
		s += fmt.Sprintf("; and %d more", len(msgs)-show)
	}
	return fmt.Errorf("%w: %s", ErrConflict, s)
}

// write stores what is missing: pools, then blocks with their affinity
// records, then handles.
func write(ctx context.Context, store kv.Store, plan *Plan, st *state) error {
	alloc := allocator.New(store, nil)
	for _, p := range plan.Pools {
		if st.poolPresent[p.Name] {
			continue
		}
		if err := alloc.CreatePool(ctx, p); err != nil {
			return err
		}
	}
	for _, b := range plan.Blocks {
		bk := allocator.BlockKey(b.Pool, b.CIDR)
		if st.entries[bk].Version != 0 {
			continue
		}
		conds := []kv.Cond{{Key: bk}}
		ops := []kv.Op{{Key: bk, Value: allocator.Encode(b)}}
		if b.Node != "" {
			ak := allocator.AffinityKey(b.Node, b.Pool, b.CIDR)
			conds = append(conds, kv.Cond{Key: ak, Version: st.entries[ak].Version})
			ops = append(ops, kv.Op{Key: ak, Value: []byte(bk)})
		}
		if err := store.Txn(ctx, conds, ops); err != nil {
			return fmt.Errorf("write block %s: %w", b.CIDR, err)
		}
	}
	var missing []ipam.Handle
	for _, h := range plan.Handles {
		if st.entries[allocator.HandleKey(h.ID)].Version == 0 {
			missing = append(missing, h)
		}
	}
	for chunk := range slices.Chunk(missing, handleChunk) {
		if err := writeHandles(ctx, store, chunk); err != nil {
			return err
		}
	}
	return nil
}

// writeHandles writes handles in one transaction guarded by the current
// versions of the blocks they name, after checking that those blocks give
// them their addresses.
func writeHandles(ctx context.Context, store kv.Store, hs []ipam.Handle) error {
	var bkeys []string
	for _, h := range hs {
		for _, ip := range h.IPs {
			if k := allocator.BlockKey(ip.Pool, ip.Block); !slices.Contains(bkeys, k) {
				bkeys = append(bkeys, k)
			}
		}
	}
	es, err := store.Get(ctx, bkeys...)
	if err != nil {
		return err
	}
	blocks := map[string]ipam.Block{}
	var conds []kv.Cond
	for _, e := range es {
		var b ipam.Block
		if e.Version == 0 || json.Unmarshal(e.Value, &b) != nil {
			return fmt.Errorf("%w: block %s is gone or unreadable", kv.ErrConflict, e.Key)
		}
		blocks[e.Key] = b
		conds = append(conds, kv.Cond{Key: e.Key, Version: e.Version})
	}
	var ops []kv.Op
	for _, h := range hs {
		for _, ip := range h.IPs {
			if got := blocks[allocator.BlockKey(ip.Pool, ip.Block)].Owner(ip.Addr); got != h.ID {
				return fmt.Errorf("%w: %s is now held by %q, not %q", kv.ErrConflict, ip.Addr, got, h.ID)
			}
		}
		conds = append(conds, kv.Cond{Key: allocator.HandleKey(h.ID)})
		ops = append(ops, kv.Op{Key: allocator.HandleKey(h.ID), Value: allocator.Encode(h)})
	}
	if err := store.Txn(ctx, conds, ops); err != nil {
		return fmt.Errorf("write handles: %w", err)
	}
	return nil
}
