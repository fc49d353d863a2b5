package firstlayout

import (
	"context"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Handle IDs written by earlier versions.
//
// Earlier versions named a handle "<network>.<container ID>.<ifname>"
// without escaping, so attachments whose parts contain dots could share a
// handle (ipam.HandleID now escapes them; dot-free IDs are unchanged). A
// store written by them keeps such handles under their old ("legacy") IDs
// until they are touched, and they are migrated on first touch rather than
// by a store-wide pass when a store is opened:
//
//   - every lookup of an attachment whose ID differs from its legacy form
//     (a part contains '.' or '%') also looks at the legacy key, in the
//     same Get (ADD, DEL, CHECK), or guards its commit by the legacy key's
//     absence when it reads nothing (an ADD on a warm hint): no extra
//     round trip, and none at all for attachments without dots;
//   - a legacy handle counts as the attachment's only when the network,
//     container ID and interface name it records are the attachment's: of
//     two attachments that collided, the other one never takes it;
//   - ADD re-keys a legacy handle it finds (handle key and the owner names
//     in its blocks, one compare-and-swap transaction) and returns it; DEL
//     releases it where it is; GC, which lists every handle anyway,
//     re-keyed each legacy handle before it compared IDs with the runtime's
//     list of valid attachments (that path is not kept here).
//
// A store-wide pass when a store is opened would list every handle of the
// cluster in some plugin call (hundreds of thousands on a large cluster,
// more than one call's time budget), and would still miss the legacy
// handles that plugins of the earlier version keep writing on nodes not
// yet upgraded during a rolling upgrade; lookups that know the legacy form
// find both.

// legacyRef is the legacy form of a handle ID.
type legacyRef struct {
	id, key                    string
	network, container, ifname string
}

// legacyOf returns the legacy form of a handle ID made by ipam.HandleID,
// when it differs from the ID.
func legacyOf(id string) (legacyRef, bool) {
	n, c, i, ok := ipam.ParseHandleID(id)
	if !ok {
		return legacyRef{}, false
	}
	old := ipam.LegacyHandleID(n, c, i)
	if old == id {
		return legacyRef{}, false
	}
	return legacyRef{id: old, key: HandleKey(old), network: n, container: c, ifname: i}, true
}

// owns reports whether h, stored under the legacy key, is the handle of
// the attachment whose ID has this legacy form.
func (l legacyRef) owns(h ipam.Handle) bool {
	return h.ID == l.id && h.Network == l.network && h.ContainerID == l.container && h.IfName == l.ifname
}

// rekey moves handle h, stored at e under its legacy ID, to ID id: the
// handle key and the owner names in its blocks, in one transaction
// guarded by the versions of all of them and by id's absence. It returns
// the handle as now stored. When id is taken (another record of the
// attachment was written meanwhile) it changes nothing and returns h.
func (a *Allocator) rekey(ctx context.Context, e kv.KeyValue, h ipam.Handle, id string) (ipam.Handle, error) {
	keys := []string{HandleKey(id)}
	for _, ip := range h.IPs {
		if k := BlockKey(ip.Pool, ip.Block); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	es, err := a.store.Get(ctx, keys...)
	if err != nil {
		return ipam.Handle{}, err
	}
	if es[0].Version != 0 {
		a.log.Warn("handle stored under an earlier version's ID and under its own; left as they are", "legacy", h.ID, "handle", id)
		return h, nil
	}
	moved := h
	moved.ID = id
	conds := []kv.Cond{{Key: e.Key, Version: e.Version}, {Key: es[0].Key, Version: 0}}
	ops := []kv.Op{{Key: e.Key, Delete: true}, {Key: es[0].Key, Value: Encode(moved)}}
	for _, be := range es[1:] {
		if be.Version == 0 {
			continue
		}
		// Only owner names change: the block is renamed even when it
		// fails validation, which renaming neither causes nor hides.
		b, err := decode[ipam.Block](be)
		if err != nil {
			return ipam.Handle{}, err
		}
		renamed := false
		for ord, owner := range b.Owners {
			if owner == h.ID {
				b.Owners[ord], renamed = id, true
			}
		}
		if renamed {
			conds = append(conds, kv.Cond{Key: be.Key, Version: be.Version})
			ops = append(ops, kv.Op{Key: be.Key, Value: Encode(b)})
		}
	}
	if err := a.store.Txn(ctx, conds, ops); err != nil {
		return ipam.Handle{}, err
	}
	a.log.Info("handle moved from an earlier version's ID", "legacy", h.ID, "handle", id)
	return moved, nil
}
