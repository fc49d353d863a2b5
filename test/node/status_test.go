package node

import (
	"strings"
	"testing"
	"time"
)

// TestStatusDrivesNetworkReady has containerd 2.x ask the plugin's CNI
// STATUS (the config list says cniVersion 1.1.0): NetworkReady is true
// while ipkeeper's datastore answers; when the API server cannot be
// reached from the node (the agent's and the plugin's ways to it cut)
// the runtime reports NetworkReady false with ipkeeper's error and the
// kubelet marks the Node not Ready; once the API server is reachable
// again both are true again.
func TestStatusDrivesNetworkReady(t *testing.T) {
	n := startNode(t, nodeOptions{leakGrace: 10 * time.Minute, ranges: []any{
		[]any{map[string]any{"subnet": "10.86.0.0/24"}},
	}})
	if ok, msg := n.networkReady(t); !ok {
		t.Fatalf("NetworkReady is false on a working node: %s", msg)
	}

	n.agentProxy.Cut()
	n.nodeProxy.Cut()
	var reason string
	n.waitFor(t, "the runtime reports NetworkReady false", podTimeout, func() (bool, string) {
		ok, msg := n.networkReady(t)
		reason = msg
		return !ok, msg
	})
	if !strings.Contains(reason, "ipkeeper") && !strings.Contains(reason, "plugin") {
		t.Errorf("NetworkReady false for %q, want the plugin's STATUS error", reason)
	}
	n.waitFor(t, "the kubelet marks the Node not Ready", podTimeout, func() (bool, string) {
		ok, msg := n.nodeReady()
		return !ok, msg
	})

	n.agentProxy.Restore(t)
	n.nodeProxy.Restore(t)
	n.waitFor(t, "the runtime reports NetworkReady true again", podTimeout, func() (bool, string) {
		ok, msg := n.networkReady(t)
		return ok, msg
	})
	n.waitNodeReady(t, podTimeout)
}
