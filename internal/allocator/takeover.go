package allocator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Takeover of an earlier sandbox's allocation.
//
// When a node reboots or its runtime restarts, the kubelet recreates a
// pod's sandbox under the same pod UID with a new container ID, and the
// old sandbox's DEL may never come. On a full pool the new sandbox's ADD
// then fails (no free address) although the pod itself holds one: that of
// its own old sandbox (whereabouts #291, pods stuck in ContainerCreating
// after a reboot). The old allocation is released by ipkeeper-controller
// after its grace period; a takeover lets the new sandbox start at once.
//
// The allocator decides what is an earlier sandbox of the same pod and
// interface (TakeoverCandidates, and again TakeOver, from what it reads);
// whether the old sandbox's network namespace is gone is for the caller
// to prove (the plugin does, on the node), since the datastore cannot.
// The plugin calls it only after Allocate failed with ErrExhausted.

// ErrTakeoverRefused means the observed handle may not be taken over by
// the request: it is not an earlier sandbox of the same pod and interface
// on the same node, or its addresses do not satisfy the request exactly.
// Nothing was changed.
var ErrTakeoverRefused = errors.New("allocation may not be taken over")

// takeoverIdentity checks that old is an earlier sandbox's attachment of
// the pod and interface of h: same network, interface, node, pod UID (not
// empty), pod namespace and name, another container ID and another handle,
// and a network namespace path recorded that is not the new sandbox's (a
// path that now names the new sandbox's namespace proves nothing about the
// old one).
func takeoverIdentity(h, old ipam.Handle) error {
	var why string
	switch {
	case h.PodUID == "":
		why = "the request names no pod UID"
	case old.PodUID != h.PodUID:
		why = fmt.Sprintf("it belongs to pod UID %q, not %q", old.PodUID, h.PodUID)
	case old.Namespace != h.Namespace || old.Pod != h.Pod:
		why = fmt.Sprintf("it names pod %s/%s, not %s/%s", old.Namespace, old.Pod, h.Namespace, h.Pod)
	case old.Network != h.Network:
		why = fmt.Sprintf("it is of network %q, not %q", old.Network, h.Network)
	case old.IfName != h.IfName:
		why = fmt.Sprintf("it is of interface %q, not %q", old.IfName, h.IfName)
	case old.Node != h.Node:
		why = fmt.Sprintf("it was made on node %q, not %q", old.Node, h.Node)
	case old.ContainerID == h.ContainerID || old.ID == h.ID:
		why = "it is the requesting attachment's own"
	case old.NetNS == "":
		why = "it records no network namespace"
	case old.NetNS == h.NetNS:
		why = fmt.Sprintf("its network namespace %q is the new sandbox's", old.NetNS)
	case len(old.IPs) == 0:
		why = "it holds no address"
	default:
		return nil
	}
	return fmt.Errorf("%w: handle %s: %s", ErrTakeoverRefused, old.ID, why)
}

// TakeoverCandidates lists the handles the attachment h may take over:
// those of earlier sandboxes of the same pod (same non-empty pod UID,
// namespace and name) and interface, on the same node and network, with
// another container ID and a recorded network namespace path other than
// h's. They are sorted newest first (then by key), each with the key and
// version it was read at, for TakeOver. A record that cannot be decoded
// is no candidate (it is logged and skipped: nothing about it can be
// proven).
//
// It reads the handles of h's network (one List; two when the network's
// name has a '.' or '%', for handles earlier versions stored under
// unescaped IDs): a cost paid only on the exhausted path.
func (a *Allocator) TakeoverCandidates(ctx context.Context, h ipam.Handle) ([]Observed, error) {
	if h.PodUID == "" {
		return nil, nil
	}
	prefixes := []string{HandlePrefix + strings.TrimSuffix(ipam.HandleID(h.Network, "", ""), ".")}
	if legacy := HandlePrefix + h.Network + "."; legacy != prefixes[0] {
		prefixes = append(prefixes, legacy)
	}
	var out []Observed
	for _, prefix := range prefixes {
		es, err := a.store.List(ctx, prefix)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if slices.ContainsFunc(out, func(o Observed) bool { return o.Key == e.Key }) {
				continue
			}
			old, err := decode[ipam.Handle](e)
			if err != nil {
				a.log.Warn("takeover: skipping an undecodable handle", "key", e.Key, "err", err)
				continue
			}
			if takeoverIdentity(h, old) == nil {
				out = append(out, Observed{Handle: old, Key: e.Key, Version: e.Version})
			}
		}
	}
	slices.SortFunc(out, func(x, y Observed) int {
		if c := y.Handle.Created.Compare(x.Handle.Created); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	return out, nil
}

// TakeOver gives the attachment of req the addresses of the observed
// handle old — an earlier sandbox's allocation of the same pod and
// interface (see takeoverIdentity) — and deletes old, in one transaction
// guarded by old's observed version, the absence of req's handle, the
// versions of the request's pools and of every block it changes (a pool
// the request defines is checked, or an imported one adopted, as Allocate
// does). Each address changes owner in its block in place (no free queue
// changes), and the new handle records req's attachment, pod and network
// namespace with the addresses in the order of req.Sets.
//
// Old's addresses are taken all or none, and only when they satisfy the
// request exactly: one address per range set, each in a usable pool of
// that set (not disabled or being deleted, node selector matching
// req.Labels) that still permits it, none left over, and every address in
// req.Want among them. Otherwise it fails with ErrTakeoverRefused and
// changes nothing. When old is gone or not at the observed version any
// more (released, reallocated, taken over by another sandbox) or its
// blocks do not give it its addresses, it fails with ErrHandleChanged and
// changes nothing: a racing release or takeover never leaves an address
// with two owners. Conflicts are retried from a fresh read, still
// guarded by the observed version.
//
// The caller must have proven that old's network namespace is gone: the
// datastore cannot tell. The plugin calls it only after Allocate failed
// with ErrExhausted.
func (a *Allocator) TakeOver(ctx context.Context, req Request, old Observed) (ipam.Handle, error) {
	if req.Handle.ID == "" || req.Handle.Node == "" || strings.Contains(req.Handle.Node, "/") {
		return ipam.Handle{}, fmt.Errorf("take over: handle ID and a node name without '/' are required (node %q)", req.Handle.Node)
	}
	if !strings.HasPrefix(old.Key, HandlePrefix) || old.Version == 0 {
		return ipam.Handle{}, fmt.Errorf("take over handle %q: not an observed handle (key %q, version %d)", old.Handle.ID, old.Key, old.Version)
	}
	if err := takeoverIdentity(req.Handle, old.Handle); err != nil {
		return ipam.Handle{}, err
	}
	defer a.lockNode(req.Handle.Node)()
	var out ipam.Handle
	err := a.retry(ctx, "take over "+old.Handle.ID, func() error {
		var err error
		out, err = a.takeOverOnce(ctx, req, old)
		return err
	})
	return out, err
}

func (a *Allocator) takeOverOnce(ctx context.Context, req Request, o Observed) (ipam.Handle, error) {
	names := req.poolNames()
	hk := HandleKey(req.Handle.ID)
	keys := []string{o.Key, hk}
	for _, n := range names {
		keys = append(keys, PoolKey(n))
	}
	legacy, hasLegacy := legacyOf(req.Handle.ID)
	if hasLegacy {
		keys = append(keys, legacy.key)
	}
	es, err := a.store.Get(ctx, keys...)
	if err != nil {
		return ipam.Handle{}, err
	}
	oe := es[0]
	switch {
	case oe.Version == 0:
		return ipam.Handle{}, fmt.Errorf("%w: handle %s was released meanwhile", ErrHandleChanged, o.Handle.ID)
	case oe.Version != o.Version:
		return ipam.Handle{}, fmt.Errorf("%w: handle %s was written again since it was observed (version %d, observed %d)", ErrHandleChanged, o.Handle.ID, oe.Version, o.Version)
	}
	old, err := decode[ipam.Handle](oe)
	if err != nil {
		return ipam.Handle{}, err
	}
	if !sameAllocation(old, o.Handle) {
		return ipam.Handle{}, fmt.Errorf("%w: handle %s holds another allocation than observed", ErrHandleChanged, o.Handle.ID)
	}
	if es[1].Version != 0 {
		return ipam.Handle{}, fmt.Errorf("%w: attachment %s holds an allocation already", ErrTakeoverRefused, req.Handle.ID)
	}
	conds := []kv.Cond{{Key: o.Key, Version: o.Version}, {Key: hk, Version: 0}}
	ops := []kv.Op{{Key: o.Key, Delete: true}}
	if hasLegacy {
		le := es[len(es)-1]
		if le.Version != 0 {
			if lh, err := decode[ipam.Handle](le); err != nil || legacy.owns(lh) {
				return ipam.Handle{}, fmt.Errorf("%w: attachment %s holds an allocation under its earlier ID %s", ErrTakeoverRefused, req.Handle.ID, legacy.id)
			}
		}
		conds = append(conds, kv.Cond{Key: le.Key, Version: le.Version})
	}
	pools := map[string]ipam.Pool{}
	for i, n := range names {
		e := es[2+i]
		conds = append(conds, kv.Cond{Key: e.Key, Version: e.Version})
		if e.Version == 0 {
			return ipam.Handle{}, fmt.Errorf("%w: pool %q does not exist", ErrTakeoverRefused, n)
		}
		if def, ok := findPool(req.Define, n); ok {
			// As Allocate: the config's definition must match the stored
			// one, or adopts an imported pool (the allocations that would
			// have adopted it all failed: the pool was full).
			pool, put, err := reconcilePool(e, def)
			if err != nil {
				return ipam.Handle{}, err
			}
			pools[n] = pool
			if put != nil {
				ops = append(ops, *put)
			}
			continue
		}
		pool, err := decode[ipam.Pool](e)
		if err != nil {
			return ipam.Handle{}, err
		}
		pools[n] = pool
	}
	ips, err := matchSets(req, old, pools)
	if err != nil {
		return ipam.Handle{}, err
	}
	// Blocks name the old handle by the ID it is stored under.
	owner := strings.TrimPrefix(o.Key, HandlePrefix)
	p := a.newPlan()
	for _, ip := range ips {
		pb, err := p.block(ctx, ip.Pool, ip.Block)
		if err != nil {
			return ipam.Handle{}, err
		}
		if !pb.exists {
			return ipam.Handle{}, fmt.Errorf("%w: handle %s names %s in block %s, which does not exist", ErrHandleChanged, o.Handle.ID, ip.Addr, ip.Block)
		}
		b, err := pb.block.Release(ip.Addr, owner)
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("%w: handle %s: %w", ErrHandleChanged, o.Handle.ID, err)
		}
		if b, err = b.AssignAddr(pools[ip.Pool], ip.Addr, req.Handle.ID); err != nil {
			return ipam.Handle{}, fmt.Errorf("%w: %w", ErrTakeoverRefused, err)
		}
		p.update(BlockKey(ip.Pool, ip.Block), b)
	}
	h := req.Handle
	h.IPs = ips
	h.Created = a.Now().UTC()
	ops = append(ops, kv.Op{Key: hk, Value: Encode(h)})
	if _, err := p.commit(ctx, conds, ops); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			a.hints.Forget(req.Handle.Node)
		}
		return ipam.Handle{}, err
	}
	a.refreshHint(p)
	return h, nil
}

// matchSets orders old's addresses by the request's range sets: one per
// set, in a usable pool of the set that contains it; none left over; the
// wanted addresses among them. Anything else is ErrTakeoverRefused.
func matchSets(req Request, old ipam.Handle, pools map[string]ipam.Pool) ([]ipam.HandleIP, error) {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: handle %s: %s", ErrTakeoverRefused, old.ID, fmt.Sprintf(format, args...))
	}
	if len(old.IPs) != len(req.Sets) {
		return nil, refuse("it holds %d addresses, the request has %d range sets", len(old.IPs), len(req.Sets))
	}
	used := make([]bool, len(old.IPs))
	out := make([]ipam.HandleIP, 0, len(req.Sets))
	for i, set := range req.Sets {
		usable, err := usablePools(set, pools, req.Labels)
		if err != nil {
			return nil, refuse("range set %d: %v", i, err)
		}
		j := -1
		for k, ip := range old.IPs {
			if !used[k] && slices.ContainsFunc(usable, func(p ipam.Pool) bool { return p.Name == ip.Pool && p.CIDR.Contains(ip.Addr) }) {
				j = k
				break
			}
		}
		if j < 0 {
			return nil, refuse("it holds no address of range set %d (pools %s)", i, strings.Join(set, ", "))
		}
		used[j] = true
		out = append(out, old.IPs[j])
	}
	for _, w := range req.Want {
		if !slices.ContainsFunc(out, func(ip ipam.HandleIP) bool { return ip.Addr == w }) {
			return nil, refuse("the request asks for %s, which it does not hold", w)
		}
	}
	return out, nil
}
