package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// modeAgent runs the plugin with ipam.kubernetes.agentSocket: each node's
// ipkeeper-agent (one process per simulated node, as the DaemonSet runs
// them) serves its verbs on the kubernetes datastore.
const modeAgent = "ipkeeper agent"

// agents are the simulated nodes' ipkeeper-agent processes.
type agents struct {
	sockets []string
	procs   []*exec.Cmd
}

// startAgents creates the Node objects and starts one agent per node as
// the node ServiceAccount, and waits until each is ready.
func startAgents(ctx context.Context, srv *kubetest.Server, bin string, kubeconfigs []string, tmp string, nodes int) (*agents, error) {
	a := &agents{}
	for n := range nodes {
		name := nodeName(n)
		if _, err := srv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			a.stop()
			return nil, err
		}
		sock := filepath.Join(tmp, "agent", name, "agent.sock")
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			a.stop()
			return nil, err
		}
		cmd := exec.Command(bin, "--kubeconfig="+kubeconfigs[n], "--node-name="+name, "--socket="+sock, "--log-level=warn")
		if err := cmd.Start(); err != nil {
			a.stop()
			return nil, err
		}
		a.sockets = append(a.sockets, sock)
		a.procs = append(a.procs, cmd)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for n, sock := range a.sockets {
		c := podinfo.NewAgentClient(sock)
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.Ready(rctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || errors.Is(ctx.Err(), context.Canceled) {
				a.stop()
				return nil, fmt.Errorf("ipkeeper-agent of %s not ready: %w", nodeName(n), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return a, nil
}

// peakRSS returns the largest peak resident set (VmHWM) among the
// agents, in KiB (0 when none could be read).
func (a *agents) peakRSS() int {
	peak := 0
	for _, p := range a.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				peak = max(peak, kb)
			}
		}
	}
	return peak
}

// stop kills the agents by PID and waits for them.
func (a *agents) stop() {
	for _, p := range a.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// agentMode is the plugin on the kubernetes datastore through each node's
// agent. Its calls name no pod (CNI_ARGS without K8S_POD_*): the config
// is pod-aware (agentSocket), and a pod that does not exist would be
// refused; the node's lookup is answered from the agent's cache.
func agentMode(bin, tmp string, kubeconfigs []string, a *agents) *mode {
	m := ipkeeperMode(modeAgent, "ipkeeper on the kubernetes datastore through each node's ipkeeper-agent (ipam.kubernetes.agentSocket; 20 agent processes as kube-system/ipkeeper-node)",
		bin, tmp, func(cell, node int) map[string]any {
			return map[string]any{"type": "kubernetes", "kubeconfig": kubeconfigs[node], "prefix": fmt.Sprintf("ba-%d", cell)}
		})
	prepare := m.prepare
	m.prepare = func(ctx context.Context, cell int) (callFunc, error) {
		if _, err := prepare(ctx, cell); err != nil {
			return nil, err
		}
		confs := make([][]byte, len(a.sockets))
		for n := range confs {
			b, err := jsonConf(map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "bridge",
				"ipam": map[string]any{"type": "ipkeeper", "nodeName": nodeName(n),
					"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": kubeconfigs[n], "prefix": fmt.Sprintf("ba-%d", cell)},
					"kubernetes": map[string]any{"agentSocket": a.sockets[n], "kubeconfig": kubeconfigs[n]},
					"ranges":     []any{[]any{map[string]any{"subnet": "10.64.0.0/16"}}}}})
			if err != nil {
				return nil, err
			}
			confs[n] = b
		}
		return func(node int, id string) cnirun.Call {
			return cnirun.Call{ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0", Stdin: confs[node],
				Env: []string{"IPKEEPER_LOCK_DIR=" + filepath.Join(tmp, "lock", strings.ReplaceAll(modeAgent, " ", "-"), nodeName(node))}}
		}, nil
	}
	return m
}
