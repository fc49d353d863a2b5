package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// takeOver is ADD's answer to a full pool (whereabouts #291: after a node
// reboot, pods stuck in ContainerCreating on a full pool because their own
// old reservation blocks them). Add calls it only when Allocate failed
// with ErrExhausted (CNI 100), never otherwise; exhausted is that error.
// A static address the old sandbox still holds thus fails with 102 as
// before (the pool may have room): ipkeeper-controller frees it.
//
// When the runtime named the pod (K8S_POD_UID in CNI_ARGS, which the
// kubelet always passes; the kubernetes object of the config is not
// needed, the decision rests on the UID and the node, not on the API), an
// allocation of an earlier sandbox of the same pod UID, pod namespace and
// name, interface, network and node, with another container ID
// (allocator.TakeoverCandidates), is taken over by the new sandbox when
// the network namespace path it recorded is provably gone on this node
// (netnsGone: the path does not exist, or is not a namespace file any
// more). A path that still is a namespace may be a live sandbox's: never
// taken. Candidates are tried newest first; the first taken wins.
//
// The takeover itself (allocator.TakeOver) is one transaction guarded by
// the old handle's observed version, so a racing DEL, GC, controller
// release or another takeover cannot give an address to two owners; it
// takes all of the old handle's addresses or none, and only when they
// satisfy the request exactly (one per range set, the static addresses
// asked for among them). A candidate that changed meanwhile or does not
// fit is skipped; when none is taken the ADD fails with exhausted, as it
// would have without takeovers. Every takeover is logged at warn level to
// the plugin's log (never stdout), naming the pod, both containers and
// handles, the addresses and why the old sandbox is gone.
func (p *Plugin) takeOver(ctx context.Context, a *allocator.Allocator, req allocator.Request, exhausted error) (ipam.Handle, error) {
	if req.Handle.PodUID == "" {
		return ipam.Handle{}, exhausted
	}
	cands, err := a.TakeoverCandidates(ctx, req.Handle)
	if err != nil {
		return ipam.Handle{}, err
	}
	for _, c := range cands {
		gone, why := p.netnsGone(c.Handle.NetNS)
		if !gone {
			p.Log.Info("not taking over an earlier sandbox's addresses", "handle", c.Handle.ID,
				"oldContainer", c.Handle.ContainerID, "newContainer", req.Handle.ContainerID, "reason", why)
			continue
		}
		h, err := a.TakeOver(ctx, req, c)
		switch {
		case err == nil:
			p.Log.Warn("took over an earlier sandbox's addresses on a full pool",
				"pod", req.Handle.Namespace+"/"+req.Handle.Pod, "podUID", req.Handle.PodUID, "node", req.Handle.Node,
				"oldContainer", c.Handle.ContainerID, "newContainer", req.Handle.ContainerID,
				"oldHandle", c.Handle.ID, "handle", h.ID, "ips", fmt.Sprint(handleAddrs(h)), "reason", why)
			return h, nil
		case errors.Is(err, allocator.ErrHandleChanged), errors.Is(err, allocator.ErrTakeoverRefused):
			p.Log.Info("not taking over an earlier sandbox's addresses", "handle", c.Handle.ID,
				"oldContainer", c.Handle.ContainerID, "newContainer", req.Handle.ContainerID, "reason", err.Error())
		default:
			return ipam.Handle{}, err
		}
	}
	return ipam.Handle{}, exhausted
}

// netnsGone is netnsGone as seen from where the verbs run: in a
// container (InContainer), a path counts as gone only when its directory
// is visible there, and a /proc/PID path never does (the PID is the
// host's; the container's /proc does not show it).
func (p *Plugin) netnsGone(path string) (bool, string) {
	if p.InContainer {
		if strings.HasPrefix(path, "/proc/") {
			return false, fmt.Sprintf("network namespace %s names a host process, which cannot be checked from the agent's container", path)
		}
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			return false, fmt.Sprintf("network namespace %s cannot be checked from the agent's container (%s is not visible: %v)", path, filepath.Dir(path), err)
		}
	}
	return netnsGone(path)
}

// handleAddrs lists a handle's addresses.
func handleAddrs(h ipam.Handle) []netip.Addr {
	out := make([]netip.Addr, 0, len(h.IPs))
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	return out
}
