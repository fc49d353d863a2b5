package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// apiTimeout bounds the Kubernetes API lookups of one call.
const apiTimeout = 20 * time.Second

// podAware is what a pod-aware call learned from the Kubernetes API; the
// zero value (pod-awareness off) changes nothing.
type podAware struct {
	info *podinfo.Info
	sel  podinfo.Selection
}

// kubePrepare returns the prepare step of a pod-aware call: with
// ipam.kubernetes set it reads the pod and its namespace (when the
// runtime named a pod) and the node into pa — from the node's
// ipkeeper-agent when ipam.kubernetes.agentSocket is set, else (or when
// the agent cannot be reached and a kubeconfig is given) from the API
// server — and fills the node's pod CIDRs into a usePodCidr config
// (config.IPAM.ForNode). withPod false is STATUS: no pod, and the agent
// must be ready unless a kubeconfig can stand in for it.
func (p *Plugin) kubePrepare(att attachmentArgs, withPod bool, pa *podAware) prepareFunc {
	return func(ctx context.Context, conf *config.IPAM) (*config.IPAM, error) {
		if !conf.PodAware() {
			return conf, nil
		}
		ctx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		needCIDR := conf.NeedsPodCIDR(4) || conf.NeedsPodCIDR(6)
		if !withPod {
			if err := p.agentStatus(ctx, conf); err != nil {
				return nil, err
			}
			if !needCIDR {
				return conf, nil
			}
		}
		pod, uid := "", ""
		if withPod && att.Namespace != "" {
			pod, uid = att.Pod, att.PodUID
		}
		info, err := p.lookup(ctx, conf, att.Namespace, pod, uid)
		if errors.Is(err, podinfo.ErrNodeNotFound) {
			return nil, fmt.Errorf("%w (the node name, from ipam.nodeName, $NODENAME, $KUBERNETES_NODE_NAME or the hostname, must be the Node's name)", err)
		}
		if err != nil {
			return nil, err
		}
		pa.info = info
		if pa.sel, err = info.Selection(); err != nil {
			return nil, err
		}
		if needCIDR {
			return conf.ForNode(info.Node.PodCIDRs)
		}
		return conf, nil
	}
}

// lookup reads the pod (when pod is not empty), its namespace and the
// node: from the agent when one is configured (in process, p.Pods, when
// this is the agent) and answers within its share of the call
// (agentContext), else directly from the API server with the kubeconfig.
// An agent the plugin already found unreachable before it handed the verb
// over (p.agentDown) is not asked again.
func (p *Plugin) lookup(ctx context.Context, conf *config.IPAM, namespace, pod, uid string) (*podinfo.Info, error) {
	if conf.AgentSocket != "" && p.Pods != nil {
		return p.Pods.Lookup(ctx, namespace, pod, uid, conf.NodeName)
	}
	if conf.AgentSocket != "" {
		err := p.agentDown
		if err == nil {
			actx, cancel := agentContext(ctx)
			c := podinfo.NewAgentClient(conf.AgentSocket)
			var info *podinfo.Info
			info, err = c.Lookup(actx, namespace, pod, uid, conf.NodeName)
			c.Close()
			cancel()
			if !errors.Is(err, podinfo.ErrAgentUnreachable) {
				return info, err
			}
		}
		if conf.Kubeconfig == "" {
			return nil, fmt.Errorf("ipam.kubernetes.agentSocket: %w (no ipam.kubernetes.kubeconfig to read the API server directly)", err)
		}
		p.Log.Warn("ipkeeper agent unreachable, reading the API server directly", "socket", conf.AgentSocket, "kubeconfig", conf.Kubeconfig, "err", err)
	}
	c, err := podinfo.NewFromKubeconfig(conf.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("ipam.kubernetes.kubeconfig: %w", err)
	}
	defer c.Close()
	return c.Lookup(ctx, namespace, pod, conf.NodeName)
}

// agentStatus is STATUS's check of the agent: nil when none is
// configured, when it is ready, or when it is not but a kubeconfig lets
// ADD read the API server directly.
func (p *Plugin) agentStatus(ctx context.Context, conf *config.IPAM) error {
	if conf.AgentSocket == "" {
		return nil
	}
	err := p.agentDown
	switch {
	case err != nil:
	case p.Pods != nil:
		// This is the agent: its own caches, not a round trip to itself.
		if !p.Pods.Ready() {
			err = fmt.Errorf("%w: its caches are not synced", podinfo.ErrAgentNotReady)
		}
	default:
		actx, cancel := agentContext(ctx)
		defer cancel()
		c := podinfo.NewAgentClient(conf.AgentSocket)
		defer c.Close()
		err = c.Ready(actx)
	}
	if err == nil {
		return nil
	}
	if conf.Kubeconfig == "" {
		return fmt.Errorf("ipam.kubernetes.agentSocket: %w (no ipam.kubernetes.kubeconfig to read the API server directly)", err)
	}
	p.Log.Warn("ipkeeper agent not ready; ADD would read the API server directly", "socket", conf.AgentSocket, "kubeconfig", conf.Kubeconfig, "err", err)
	return nil
}

// labels are the node labels pool node selectors are matched against: the
// Node's, when known, and kubernetes.io/hostname.
func (pa *podAware) labels(node string) map[string]string {
	out := map[string]string{}
	if pa.info != nil && pa.info.Node != nil {
		maps.Copy(out, pa.info.Node.Labels)
	}
	if _, ok := out["kubernetes.io/hostname"]; !ok {
		out["kubernetes.io/hostname"] = node
	}
	return out
}

// sets applies the pod's pool annotations to the config's range sets.
func (pa *podAware) sets(ctx context.Context, a netpools.Pools, sets []netpools.Set) ([]netpools.Set, error) {
	if pa.sel.PoolsFrom == "" {
		return sets, nil
	}
	return netpools.Override(ctx, a, sets, pa.sel.Pools, pa.sel.V4Pools, pa.sel.V6Pools, pa.sel.PoolsFrom)
}

// want adds the pod's static addresses to those the runtime asked for.
func (pa *podAware) want(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	for _, a := range pa.sel.IPs {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
