package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerdConfig is containerd's configuration: every path under the
// node's directory, the CRI plugin's CNI dirs the test's own, netns
// mounts under its state dir (not the machine's /var/run/netns), and
// restrict_oom_score_adj (root here lacks CAP_SYS_RESOURCE: runc could
// not lower a sandbox's oom_score_adj). The opt plugin (/opt/containerd)
// and NRI (/var/run/nri) are off: they would write outside the node's
// directory.
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[grpc]
  address = %[3]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[5]q]
    conf_dir = %[6]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = %[7]q
      Root = %[8]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`

// writeContainerdConfig writes the node's containerd configuration.
func (n *node) writeContainerdConfig(t *testing.T) {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(containerdConfig, n.path("containerd/root"), n.path("containerd/state"), n.criSocket,
		pauseImage, n.cniBin, n.cniConf, runc, n.path("containerd/runc"))
	if err := os.WriteFile(n.path("containerd.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startContainerd runs containerd inside the node's network namespace
// (nsenter joins only that namespace: mounts stay the machine's, so the
// kubelet and the agent see the sandboxes' namespaces) and waits until
// its CRI plugin answers. The shim is found next to containerd (PATH).
func (n *node) startContainerd(t *testing.T) {
	t.Helper()
	env := []string{"PATH=" + filepath.Dir(n.tools.containerd) + ":" + os.Getenv("PATH"),
		// The plugin's node locks go to the node's directory.
		"IPKEEPER_LOCK_DIR=" + n.lockDir}
	n.containerd = startProc(t, "containerd", n.path("containerd.log"), env,
		"nsenter", "--net="+n.netns, "--", n.tools.containerd, "--config", n.path("containerd.toml"))
	n.waitFor(t, "containerd's CRI plugin answers", 2*time.Minute, func() (bool, string) {
		if !n.containerd.running() {
			t.Fatalf("containerd exited:\n%s", n.containerd.tail(40))
		}
		out, err := n.crictlOut("info")
		return err == nil, out
	})
}

// importPause imports the pause image into containerd's k8s.io
// namespace (the CRI plugin's).
func (n *node) importPause(t *testing.T) {
	t.Helper()
	run(t, n.tools.ctr, "--address", n.criSocket, "-n", "k8s.io", "images", "import", bin("pause.tar"))
}

// crictlOut runs crictl against the node's containerd and returns its
// standard output (and, on failure, its standard error too).
func (n *node) crictlOut(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--runtime-endpoint", "unix://" + n.criSocket, "--image-endpoint", "unix://" + n.criSocket, "--timeout", "60s"}, args...)
	cmd := exec.CommandContext(ctx, n.tools.crictl, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// criSandbox is what crictl pods -o json tells of one sandbox.
type criSandbox struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Metadata struct {
		Name      string `json:"name"`
		UID       string `json:"uid"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// sandboxes lists every sandbox the runtime knows, ready or not.
func (n *node) sandboxes(t *testing.T) []criSandbox {
	t.Helper()
	out, err := n.crictlOut("pods", "-o", "json")
	if err != nil {
		t.Fatalf("crictl pods: %v\n%s", err, out)
	}
	var v struct {
		Items []criSandbox `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("crictl pods: %v\n%s", err, out)
	}
	return v.Items
}

// networkReady is the runtime's NetworkReady condition (crictl info) and
// its message.
func (n *node) networkReady(t *testing.T) (bool, string) {
	t.Helper()
	out, err := n.crictlOut("info")
	if err != nil {
		return false, "crictl info: " + err.Error() + " " + out
	}
	var v struct {
		Status struct {
			Conditions []struct {
				Type    string `json:"type"`
				Status  bool   `json:"status"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return false, "crictl info: " + err.Error()
	}
	for _, c := range v.Status.Conditions {
		if c.Type == "NetworkReady" {
			return c.Status, c.Reason + ": " + c.Message
		}
	}
	return false, "no NetworkReady condition in crictl info"
}

// containerIDs are the IDs of every sandbox and container the node's
// containerd ever made, from its directories (what a SIGKILL leaves is
// still listed there).
func (n *node) containerIDs() []string {
	seen := map[string]bool{}
	for _, d := range []string{
		n.path("containerd/state/io.containerd.runtime.v2.task/k8s.io"),
		n.path("containerd/root/io.containerd.grpc.v1.cri/sandboxes"),
		n.path("containerd/root/io.containerd.grpc.v1.cri/containers"),
	} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			seen[e.Name()] = true
		}
	}
	for id := range n.knownIDs {
		seen[id] = true
	}
	var out []string
	for id := range seen {
		if isHexID(id) {
			out = append(out, id)
		}
	}
	return out
}

// rememberIDs records the IDs seen so far: containerd removes a deleted
// sandbox's directories, but its shim socket name and cgroup are keyed by
// the ID.
func (n *node) rememberIDs() {
	for _, id := range n.containerIDs() {
		n.knownIDs[id] = true
	}
}

func isHexID(s string) bool {
	if len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
