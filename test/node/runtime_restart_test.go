package node

import (
	"fmt"
	"testing"
	"time"
)

// TestRuntimeKilledMidCreate kills containerd with SIGKILL while the
// kubelet is creating a dozen sandboxes, and starts it again: the pods
// all reach Running, every address ipkeeper holds comes to belong to a
// sandbox the runtime still knows (an ADD whose sandbox the runtime
// forgot is reclaimed as an older sandbox of its pod), each pod's
// status.podIPs is its one record, and deleting the pods leaves nothing.
func TestRuntimeKilledMidCreate(t *testing.T) {
	const grace = 10 * time.Second
	n := startNode(t, nodeOptions{leakGrace: grace, ranges: []any{
		[]any{map[string]any{"subnet": "10.85.0.0/24"}},
	}})
	ns := n.newNamespace(t, nil)
	names := n.createPods(t, ns, "k", 12, nil)
	n.waitFor(t, "the first sandboxes exist", podTimeout, func() (bool, string) {
		out, err := n.crictlOut("pods", "-q")
		return err == nil && len(out) > 0, out
	})
	n.containerd.kill()
	n.rememberIDs()
	n.startContainerd(t)

	n.waitRunning(t, ns, names)
	n.waitFor(t, "every address ipkeeper holds belongs to a sandbox the runtime knows", grace+time.Minute, func() (bool, string) {
		known := map[string]bool{}
		for _, sb := range n.sandboxes(t) {
			known[sb.ID] = true
		}
		var stray []string
		for _, h := range n.handles(t) {
			if !known[h.ContainerID] {
				stray = append(stray, fmt.Sprintf("%s/%s %s %v", h.Namespace, h.Pod, h.ContainerID, handleAddrs(h)))
			}
		}
		return len(stray) == 0, fmt.Sprint(stray)
	})
	checkPodsMatchRecords(t, n.pods(t, ns), n.handles(t))
	if t.Failed() {
		return
	}
	n.deletePods(t, ns, names)
	n.waitGone(t, ns)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		hs := n.handles(t)
		return len(hs) == 0, handleList(hs)
	})
	n.checkClean(t)
}
