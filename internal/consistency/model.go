package consistency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// model is the state a repair builds on top of a snapshot: working copies
// of the values it changes. Every primitive is idempotent, so fixes of
// related problems that reach the same state may both run.
type model struct {
	s       *snapshot
	blocks  map[string]*ipam.Block  // by key
	handles map[string]*ipam.Handle // by ID; nil means delete
	affs    map[string]*string      // by key; nil means delete
	dirty   map[string]bool         // keys to write
}

func newModel(s *snapshot) *model {
	return &model{s: s, blocks: map[string]*ipam.Block{}, handles: map[string]*ipam.Handle{},
		affs: map[string]*string{}, dirty: map[string]bool{}}
}

// block returns the working copy of the block at key, nil when there is
// none.
func (m *model) block(key string) *ipam.Block {
	if b, ok := m.blocks[key]; ok {
		return b
	}
	r := m.s.blockOf(key)
	if r == nil {
		return nil
	}
	b := r.block
	b.Owners = maps.Clone(b.Owners)
	if b.Owners == nil {
		b.Owners = map[int]string{}
	}
	b.Free = slices.Clone(b.Free)
	m.blocks[key] = &b
	return &b
}

// ensureBlock returns the block at key, creating an empty one of pool
// affine to node when it does not exist.
func (m *model) ensureBlock(key string, pool ipam.Pool, cidr netip.Prefix, node string) *ipam.Block {
	if b := m.block(key); b != nil {
		return b
	}
	b := ipam.NewBlock(pool, cidr, node)
	b.Owners = map[int]string{}
	m.blocks[key] = &b
	m.dirty[key] = true
	if node != "" {
		m.putAff(allocator.AffinityKey(node, pool.Name, cidr), key)
	}
	return &b
}

// take gives ordinal ord of the block to handle and removes it from the
// free queue.
func (m *model) take(key string, ord int, handle string) {
	b := m.block(key)
	b.Free = slices.DeleteFunc(b.Free, func(o int) bool { return o == ord })
	b.Owners[ord] = handle
	m.dirty[key] = true
}

// normalizeFree removes from the free queue every ordinal that is out of
// range, allocated, or a repeat of an earlier one.
func (m *model) normalizeFree(key string) {
	b := m.block(key)
	seen := map[int]bool{}
	b.Free = slices.DeleteFunc(b.Free, func(o int) bool {
		_, held := b.Owners[o]
		drop := o < 0 || o >= b.Size() || seen[o] || held
		seen[o] = true
		return drop
	})
	m.dirty[key] = true
}

// appendFree puts ord at the back of the free queue unless it is there.
func (m *model) appendFree(key string, ord int) {
	b := m.block(key)
	if !slices.Contains(b.Free, ord) {
		b.Free = append(b.Free, ord)
	}
	m.dirty[key] = true
}

// dropOwner removes the allocation entry of ord.
func (m *model) dropOwner(key string, ord int) {
	delete(m.block(key).Owners, ord)
	m.dirty[key] = true
}

// handle returns the working copy of a handle, nil when there is none.
func (m *model) handle(id string) *ipam.Handle {
	if h, ok := m.handles[id]; ok {
		return h
	}
	r := m.s.handleOf(id)
	if r == nil {
		return nil
	}
	h := r.h
	h.IPs = slices.Clone(h.IPs)
	m.handles[id] = &h
	return &h
}

// handleAdd makes handle id list ip, creating the handle (on node) when it
// does not exist.
func (m *model) handleAdd(id string, ip ipam.HandleIP, node string) {
	h := m.handle(id)
	if h == nil {
		h = recoveredHandle(id, node)
		m.handles[id] = h
	}
	if !slices.ContainsFunc(h.IPs, func(x ipam.HandleIP) bool { return x.Addr == ip.Addr && x.Pool == ip.Pool }) {
		h.IPs = append(h.IPs, ip)
	}
	m.dirty[allocator.HandleKey(id)] = true
}

// handleDrop removes addr of pool from handle id. A handle left without
// addresses is deleted when the repair commits.
func (m *model) handleDrop(id string, pool string, addr netip.Addr) {
	h := m.handle(id)
	if h == nil {
		return
	}
	h.IPs = slices.DeleteFunc(h.IPs, func(x ipam.HandleIP) bool { return x.Addr == addr && x.Pool == pool })
	m.dirty[allocator.HandleKey(id)] = true
}

// deleteHandle deletes handle id.
func (m *model) deleteHandle(id string) {
	m.handles[id] = nil
	m.dirty[allocator.HandleKey(id)] = true
}

func (m *model) putAff(key, value string) {
	m.affs[key] = &value
	m.dirty[key] = true
}

func (m *model) deleteAff(key string) {
	m.affs[key] = nil
	m.dirty[key] = true
}

// recoveredHandle rebuilds the record of a handle known only by its ID
// (ipam.HandleID's "<network>.<container ID>.<ifname>" when the plugin
// made it). An ID that does not split into exactly those parts (a name
// earlier versions gave an attachment with a dot in a part, which could be
// either of several attachments) gets no attachment: guessing one could
// let another attachment's DEL or GC release the address.
func recoveredHandle(id, node string) *ipam.Handle {
	h := &ipam.Handle{ID: id, Node: node}
	if n, c, i, ok := ipam.ParseHandleID(id); ok {
		h.Network, h.ContainerID, h.IfName = n, c, i
	}
	return h
}

// value returns the encoded working value of a dirty key, or nil to delete.
func (m *model) value(key string) []byte {
	switch {
	case strings.HasPrefix(key, allocator.BlockPrefix):
		return allocator.Encode(m.blocks[key])
	case strings.HasPrefix(key, allocator.HandlePrefix):
		h := m.handles[strings.TrimPrefix(key, allocator.HandlePrefix)]
		if h == nil || len(h.IPs) == 0 {
			return nil
		}
		return allocator.Encode(h)
	case strings.HasPrefix(key, allocator.AffinityPrefix):
		if v := m.affs[key]; v != nil {
			return []byte(*v)
		}
	}
	return nil
}

// commit writes the model's changes. Fixes that share a key (read or
// written) go into one transaction, guarded by the snapshot version of
// every key of every fix in it; unrelated fixes commit separately, so one
// conflict does not hold back the rest. It returns the actions of the
// transactions that committed and whether any hit a conflict.
func (m *model) commit(ctx context.Context, store kv.Store, fixes []planned) ([]Action, bool, error) {
	parent := map[string]string{}
	var find func(string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok || p == k {
			parent[k] = k
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	for _, f := range fixes {
		for _, k := range f.keys[1:] {
			parent[find(k)] = find(f.keys[0])
		}
		find(f.keys[0])
	}
	groups := map[string][]int{}
	var roots []string
	for i, f := range fixes {
		r := find(f.keys[0])
		if _, ok := groups[r]; !ok {
			roots = append(roots, r)
		}
		groups[r] = append(groups[r], i)
	}
	var done []Action
	conflict := false
	for _, r := range roots {
		keys := map[string]bool{}
		for _, i := range groups[r] {
			for _, k := range fixes[i].keys {
				keys[k] = true
			}
		}
		var conds []kv.Cond
		var ops []kv.Op
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			conds = append(conds, kv.Cond{Key: k, Version: m.s.versions[k]})
			if !m.dirty[k] {
				continue
			}
			if v := m.value(k); v != nil {
				ops = append(ops, kv.Op{Key: k, Value: v})
			} else if m.s.versions[k] != 0 {
				ops = append(ops, kv.Op{Key: k, Delete: true})
			}
		}
		if len(ops) == 0 {
			continue
		}
		err := store.Txn(ctx, conds, ops)
		if errors.Is(err, kv.ErrConflict) {
			conflict = true
			continue
		}
		if err != nil {
			return done, conflict, fmt.Errorf("consistency: repair: %w", err)
		}
		for _, i := range groups[r] {
			done = append(done, fixes[i].actions...)
		}
	}
	return done, conflict, nil
}
