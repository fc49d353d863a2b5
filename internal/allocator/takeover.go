package allocator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
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
// interface (Allocator.TakeoverCandidates, and again TakeOver, from
// what it reads);
// whether the old sandbox's network namespace is gone is for the caller
// to prove (the plugin does, on the node), since the datastore cannot.
// The plugin calls it only after Allocate failed with ErrExhausted.

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
