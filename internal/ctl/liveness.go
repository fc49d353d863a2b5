package ctl

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// netnsGone reports whether the network namespace at path is provably gone
// as seen from this process. Absence only counts where the place it would
// be is visible: the namespace's directory (/var/run/netns, say) must
// exist, or for /proc/<pid>/ns/net, /proc itself. Otherwise — ipkeeperctl
// running in a container without the host's netns mount — the owner
// counts as live, so that nothing live is ever released (SPEC guarantee 3).
//
// A /proc/<pid>/... path whose process is gone counts as gone; run
// ipkeeperctl in the host's PID namespace for that to be true.
func (c *cli) netnsGone(path string) (bool, string) {
	if c.env.Exists(path) {
		return false, "network namespace " + path + " still exists"
	}
	dir := filepath.Dir(path)
	if rest, ok := strings.CutPrefix(path, "/proc/"); ok {
		pid, _, _ := strings.Cut(rest, "/")
		dir = "/proc"
		if pid == "self" || pid == "thread-self" {
			return false, "network namespace " + path + " is relative to the reader"
		}
	}
	if !c.env.Exists(dir) {
		return false, fmt.Sprintf("network namespace %s cannot be checked from here (%s is not visible)", path, dir)
	}
	return true, "network namespace " + path + " is gone"
}

// ownerGone reports whether handle h is provably dead when checked on
// node: it is on this node and its network namespace is gone. why says
// what was found.
func (c *cli) ownerGone(h ipam.Handle, node string) (bool, string) {
	switch {
	case h.Node == "":
		return false, "the handle records no node, so its network namespace cannot be checked"
	case h.Node != node:
		return false, fmt.Sprintf("its network namespace cannot be checked from node %s: the handle is on node %s", node, h.Node)
	case h.NetNS == "":
		return false, "the handle recorded no network namespace to check"
	}
	return c.netnsGone(h.NetNS)
}
