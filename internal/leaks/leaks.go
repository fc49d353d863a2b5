// Package leaks decides which allocations are leaked: held by a
// Kubernetes pod that is gone, finished, replaced by another pod of the
// same name, or running on a node that is gone, or by an older sandbox of
// a pod that lives on. It is pure: the caller gives it the handles it read
// from the datastore and a view of the API (Cluster), and it says which
// handles are leaked and why. ipkeeper-controller and `ipkeeperctl leaks`
// / `check` share it, so they release exactly the same things.
//
// The rules, safety first (an address wrongly kept costs an address; one
// wrongly released gives a live pod's address to another pod):
//
//   - A handle that records no pod (no namespace or no pod name) is not a
//     pod's: the pod rules never touch it. It is leaked only when the node
//     it was allocated on was seen as a Node in the API and is gone now
//     (Cluster.NodeWasKnown): a host that was never a Kubernetes node, or a
//     node name that differs from its Node object's, is never taken for a
//     gone node.
//   - A pod's handle is matched by namespace, name and the pod UID the
//     plugin recorded at ADD. No pod of that namespace and name: leaked
//     (PodGone). A pod of that name with another UID (a StatefulSet pod
//     deleted and created again): leaked (PodReplaced) — the new pod's
//     own handle records the new UID and is never touched by this rule.
//   - The pod has finished (phase Succeeded or Failed): leaked
//     (PodFinished).
//   - The pod is bound to a node that is gone from the API: leaked
//     (NodeGone). The node is the pod's spec.nodeName, not the name the
//     CNI config gave the handle, which need not be the Node's name.
//   - A handle that recorded no pod UID (an earlier plugin, an import) is
//     kept while a running pod of its name exists: it cannot tell whether
//     it is that pod's.
//   - Older sandbox: among the handles of one pod UID, network and
//     interface, each one that a strictly newer handle (by Created)
//     follows is leaked (OldSandbox), unless one of its addresses is in
//     the pod's status.podIPs. The newest handle is never leaked by this
//     rule.
//   - A parked sticky reservation (ipam.Handle.IsParked) is nobody's
//     leak: it is kept for its identity until the controller frees it
//     (the StatefulSet or virtual machine is gone, or its TTL passed).
//   - While the API lists no Node at all, no handle is leaked for its node
//     being gone (an empty list is more likely a broken view than a
//     cluster without nodes).
//
// Find decides on one observation. Releasing needs two observations at
// least a grace period apart (Tracker) and a release guarded by the
// handle's version (allocator.ReleaseObserved).
package leaks

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Reason says why an allocation is leaked. The values are stable: metrics
// labels and scripts use them.
type Reason string

// The reasons.
const (
	// PodGone: no pod of the handle's namespace and name exists.
	PodGone Reason = "pod-gone"
	// PodReplaced: a pod of that name exists with another UID.
	PodReplaced Reason = "pod-replaced"
	// PodFinished: the pod's phase is Succeeded or Failed.
	PodFinished Reason = "pod-finished"
	// NodeGone: the node of the pod (or of a handle without a pod) is gone.
	NodeGone Reason = "node-gone"
	// OldSandbox: a newer sandbox of the same pod and interface exists.
	OldSandbox Reason = "old-sandbox"
)

// Reasons lists every reason, in a stable order.
var Reasons = []Reason{PodGone, PodReplaced, PodFinished, NodeGone, OldSandbox}

// Pod is what the rules need to know of a pod.
type Pod struct {
	Namespace, Name, UID string
	// Node is spec.nodeName, "" when unscheduled.
	Node string
	// Phase is status.phase ("Pending", "Running", "Succeeded", ...).
	Phase string
	// IPs are status.podIPs.
	IPs []netip.Addr
}

// Finished reports whether the pod's phase is Succeeded or Failed: its
// containers are done and will not run again.
func (p Pod) Finished() bool { return p.Phase == "Succeeded" || p.Phase == "Failed" }

// Cluster is a view of the Kubernetes API.
type Cluster interface {
	// Pod returns the pod namespace/name, if it exists.
	Pod(namespace, name string) (Pod, bool)
	// NodeExists reports whether a Node of that name exists.
	NodeExists(name string) bool
	// NodeWasKnown reports whether this view ever saw a Node of that name
	// (it may be gone now).
	NodeWasKnown(name string) bool
	// NodeCount is how many Nodes exist.
	NodeCount() int
}

// Leak is one leaked allocation.
type Leak struct {
	Handle ipam.Handle
	Reason Reason
	// Node is the node the allocation is on: the pod's node when the pod
	// is known, else the handle's.
	Node string
	// Detail says what was found, for logs and people.
	Detail string
}

// Find returns the leaked handles among hs, in the order of hs. Read the
// handles before building the view c: a handle is then never older than
// the view, so a pod created after the view was taken cannot own a handle
// Find looks at (except through a lagging cache, which the grace period
// of Tracker covers).
func Find(hs []ipam.Handle, c Cluster) []Leak {
	newest := newestSandboxes(hs)
	nodes := c.NodeCount()
	var out []Leak
	for _, h := range hs {
		if h.IsParked() {
			// A sticky reservation: held for its identity, not for a pod;
			// the controller's sticky lifecycle frees it.
			continue
		}
		if l, ok := check(h, c, nodes, newest); ok {
			out = append(out, l)
		}
	}
	return out
}

// Check decides about one handle alone. It cannot apply the older-sandbox
// rule (that needs the pod's other handles): use Find for that.
func Check(h ipam.Handle, c Cluster) (Leak, bool) {
	return check(h, c, c.NodeCount(), nil)
}

// sandboxKey groups the handles of one pod's interface on one network.
type sandboxKey struct{ uid, network, ifname string }

// newestSandboxes returns, per pod UID, network and interface, the latest
// Created among its handles.
func newestSandboxes(hs []ipam.Handle) map[sandboxKey]ipam.Handle {
	out := map[sandboxKey]ipam.Handle{}
	for _, h := range hs {
		if h.PodUID == "" || h.Created.IsZero() {
			continue
		}
		k := sandboxKey{h.PodUID, h.Network, h.IfName}
		if cur, ok := out[k]; !ok || h.Created.After(cur.Created) {
			out[k] = h
		}
	}
	return out
}

func check(h ipam.Handle, c Cluster, nodes int, newest map[sandboxKey]ipam.Handle) (Leak, bool) {
	leak := func(r Reason, node, format string, args ...any) (Leak, bool) {
		return Leak{Handle: h, Reason: r, Node: node, Detail: fmt.Sprintf(format, args...)}, true
	}
	if h.Namespace == "" || h.Pod == "" {
		if h.Node != "" && nodes > 0 && !c.NodeExists(h.Node) && c.NodeWasKnown(h.Node) {
			return leak(NodeGone, h.Node, "node %s was deleted (the allocation records no pod)", h.Node)
		}
		return Leak{}, false
	}
	who := h.Namespace + "/" + h.Pod
	pod, ok := c.Pod(h.Namespace, h.Pod)
	switch {
	case !ok:
		return leak(PodGone, h.Node, "pod %s (UID %s) no longer exists", who, orNone(h.PodUID))
	case h.PodUID != "" && pod.UID != h.PodUID:
		return leak(PodReplaced, h.Node, "pod %s was recreated: UID %s, the allocation is of UID %s", who, pod.UID, h.PodUID)
	case pod.Finished():
		return leak(PodFinished, nodeOf(pod, h), "pod %s has finished (phase %s)", who, pod.Phase)
	case pod.Node != "" && nodes > 0 && !c.NodeExists(pod.Node):
		return leak(NodeGone, pod.Node, "node %s of pod %s was deleted", pod.Node, who)
	case h.PodUID == "":
		return Leak{}, false
	}
	n, ok := newest[sandboxKey{h.PodUID, h.Network, h.IfName}]
	if !ok || n.ID == h.ID || h.Created.IsZero() || !n.Created.After(h.Created) {
		return Leak{}, false
	}
	for _, ip := range h.IPs {
		if slices.Contains(pod.IPs, ip.Addr) {
			return Leak{}, false // the pod still reports it: the newer sandbox may have failed
		}
	}
	return leak(OldSandbox, nodeOf(pod, h), "pod %s has a newer sandbox on %s/%s (container %s, created %s); this one (container %s) is not in its status.podIPs",
		who, h.Network, h.IfName, n.ContainerID, n.Created.UTC().Format("2006-01-02T15:04:05.000Z"), h.ContainerID)
}

func nodeOf(p Pod, h ipam.Handle) string { return cmp.Or(p.Node, h.Node) }

func orNone(s string) string { return cmp.Or(s, "not recorded") }
