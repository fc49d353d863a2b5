package node

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestNetnsGoneOnFullPool fills a range of four addresses with four pods
// and stops containerd; one pod's processes die and its network namespace
// is removed (as a reboot ends them and empties /run), then containerd
// starts again.
//
// containerd 2.x recovers the sandbox as not ready. The range is full,
// but ipkeeper's CNI STATUS does not fail for that (a full pool fails
// ADDs, not the node's network), so the kubelet goes on syncing the pod:
// it kills the dead sandbox — containerd sends the DEL with an empty
// CNI_NETNS, the namespace being gone — and creates a new one, whose ADD
// gets an address on the full range: the one that DEL released, or the
// old sandbox's record taken over when the DEL did not release it. The
// pod runs again with status.podIP the address ipkeeper holds for its
// UID under the sandbox the runtime reports ready, the other pods keep
// theirs, and no address has two holders.
func TestNetnsGoneOnFullPool(t *testing.T) {
	n := startNode(t, nodeOptions{leakGrace: 10 * time.Minute, ranges: fourAddresses})
	ns := n.newNamespace(t, nil)
	names := n.createPods(t, ns, "f", 4, nil)
	before := n.waitRunning(t, ns, names)
	hs := n.handles(t)
	checkPodsMatchRecords(t, before, hs)
	if t.Failed() {
		return
	}
	recs := byPodUID(hs)
	firstSandbox := map[string]string{}
	for u, h := range recs {
		firstSandbox[u] = h[0].ContainerID
	}
	victim, kept := before[names[0]], names[1:]
	uid := string(victim.UID)
	old := recs[uid][0]
	t.Logf("pod %s (uid %s): sandbox %s, %v, network namespace %s", victim.Name, uid, short(old.ContainerID), handleAddrs(old), old.NetNS)
	victimIDs := n.podContainerIDs(t, old.ContainerID)
	if ok, msg := n.networkReady(t); !ok {
		t.Fatalf("the runtime reports NetworkReady false on the full range (%s): STATUS must not fail for a full pool", msg)
	}

	n.containerd.stop(30 * time.Second)
	n.rememberIDs()
	for _, id := range victimIDs {
		n.killCgroupProcs(t, id)
	}
	n.removeNetns(t, old.NetNS)
	n.startContainerd(t)

	var now ipam.Handle
	n.waitFor(t, "pod "+victim.Name+"'s recreated sandbox holds an address and is the one the runtime reports ready", podTimeout, func() (bool, string) {
		mine := byPodUID(n.handles(t))[uid]
		if len(mine) != 1 || mine[0].ContainerID == old.ContainerID {
			return false, "ipkeeper holds for the pod: " + handleList(mine)
		}
		ready := n.sandboxesOf(t, map[string]bool{uid: true}, "SANDBOX_READY")
		if len(ready) != 1 || ready[0].ID != mine[0].ContainerID {
			return false, fmt.Sprintf("runtime's ready sandboxes of the pod %v, ipkeeper's record under %s", ready, short(mine[0].ContainerID))
		}
		now = mine[0]
		return true, ""
	})
	n.waitFor(t, "pod "+victim.Name+" runs again in its recreated sandbox", podTimeout, func() (bool, string) {
		p := n.pods(t, ns)[victim.Name]
		cs := p.Status.ContainerStatuses
		restarted := len(cs) == 1 && cs[0].RestartCount > 0 && cs[0].State.Running != nil
		return restarted && len(p.Status.PodIPs) > 0, podState(p)
	})
	left := append([]string{victim.Name}, kept...)
	after := n.waitRunning(t, ns, left)
	hs = n.handles(t)
	checkPodsMatchRecords(t, after, hs)
	checkOneHolder(t, hs)
	if len(hs) != len(left) {
		t.Errorf("ipkeeper holds %d handles, want the %d running pods': %s", len(hs), len(left), handleList(hs))
	}
	recs = byPodUID(hs)
	for _, name := range kept {
		p := before[name]
		if h := recs[string(p.UID)]; len(h) != 1 || h[0].ContainerID != firstSandbox[string(p.UID)] {
			t.Errorf("pod %s: ipkeeper holds %s, want its first sandbox's record untouched", name, handleList(h))
		}
		if !slices.Equal(podAddrs(after[name]), podAddrs(p)) {
			t.Errorf("pod %s: podIPs %v after the restart, %v before", name, podAddrs(after[name]), podAddrs(p))
		}
	}
	if !n.podHasEvent(t, ns, victim.Name, "SandboxChanged") {
		t.Errorf("pod %s: no SandboxChanged event from the kubelet; events: %v", victim.Name, n.podEvents(t, ns, victim.Name))
	}
	t.Logf("recreated sandbox %s holds %v: the old record was %s", short(now.ContainerID), handleAddrs(now), n.howRecovered(old))
	if t.Failed() {
		return
	}
	n.deletePods(t, ns, left)
	n.waitGone(t, ns)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		left := n.handles(t)
		return len(left) == 0, handleList(left)
	})
	n.checkClean(t)
}

// removeNetns removes a sandbox's network namespace as a reboot would:
// the bind mount containerd made under the node's directory is detached
// and its file removed. A path outside the node's directory, or anything
// but a regular file there, is refused.
func (n *node) removeNetns(t *testing.T, path string) {
	t.Helper()
	clean := filepath.Clean(path)
	if !strings.HasPrefix(clean, n.dir+"/") {
		t.Fatalf("network namespace %s is not under the node's directory %s", path, n.dir)
	}
	fi, err := os.Lstat(clean)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("network namespace %s: %v, want a regular file (a bind mount of a namespace)", clean, fi.Mode())
	}
	if err := unix.Unmount(clean, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
		t.Fatalf("unmount %s: %v", clean, err)
	}
	if err := os.Remove(clean); err != nil {
		t.Fatal(err)
	}
}

// checkOneHolder fails t when an address is in two handles.
func checkOneHolder(t *testing.T, hs []ipam.Handle) {
	t.Helper()
	holder := map[netip.Addr]string{}
	for _, h := range hs {
		for _, a := range handleAddrs(h) {
			if other, ok := holder[a]; ok {
				t.Errorf("%s is held by %s and by %s", a, other, h.ID)
			}
			holder[a] = h.ID
		}
	}
}

// podHasEvent reports whether an event about the pod has the reason.
func (n *node) podHasEvent(t *testing.T, namespace, pod, reason string) bool {
	t.Helper()
	for _, m := range n.podEvents(t, namespace, pod) {
		if strings.HasPrefix(m, reason+":") {
			return true
		}
	}
	return false
}

// howRecovered says, from the agent's log (where the node's CNI verbs
// run), what became of the old sandbox's record: released by a DEL, or
// taken over by the new sandbox's ADD.
func (n *node) howRecovered(old ipam.Handle) string {
	b, _ := os.ReadFile(n.agent.log)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, old.ID) {
			continue
		}
		switch {
		case strings.Contains(line, `"msg":"released"`):
			out = append(out, "released by the runtime's DEL, then allocated again")
		case strings.Contains(line, `"msg":"took over`):
			out = append(out, "taken over by the new sandbox's ADD")
		}
	}
	if len(out) == 0 {
		return "the agent's log says nothing of the old record"
	}
	return strings.Join(out, "; ")
}

// short is a container ID's first 12 characters, for messages.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// podContainerIDs are the sandbox's ID and those of its containers.
func (n *node) podContainerIDs(t *testing.T, sandbox string) []string {
	t.Helper()
	out, err := n.crictlOut("ps", "-a", "-q", "--pod", sandbox)
	if err != nil {
		t.Fatalf("crictl ps --pod %s: %v\n%s", sandbox, err, out)
	}
	return append([]string{sandbox}, strings.Fields(out)...)
}

// killCgroupProcs kills the processes of the cgroup containerd made for
// id (k8s.io/<id> in every hierarchy), as a reboot ends them; the
// cgroups stay for the runtime to clean up.
func (n *node) killCgroupProcs(t *testing.T, id string) {
	t.Helper()
	if !isHexID(id) {
		t.Fatalf("%q is not a container ID", id)
	}
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", h.Name(), "k8s.io", id, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
