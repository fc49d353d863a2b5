package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
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
// runtime named a pod) and the node, concurrently, into pa, and parses
// a usePodCidr config again for the node's pod CIDRs. withPod false skips
// the pod (STATUS).
func kubePrepare(stdin []byte, att attachmentArgs, withPod bool, pa *podAware) prepareFunc {
	return func(ctx context.Context, conf *config.IPAM) (*config.IPAM, error) {
		if conf.Kubeconfig == "" {
			return conf, nil
		}
		needCIDR := conf.NeedsPodCIDR(4) || conf.NeedsPodCIDR(6)
		if !withPod && !needCIDR {
			return conf, nil
		}
		c, err := podinfo.NewFromKubeconfig(conf.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("ipam.kubernetes.kubeconfig: %w", err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		pod := ""
		if withPod && att.Namespace != "" {
			pod = att.Pod
		}
		info, err := c.Lookup(ctx, att.Namespace, pod, conf.NodeName)
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
			return config.ParseForNode(stdin, info.Node.PodCIDRs)
		}
		return conf, nil
	}
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
func (pa *podAware) sets(ctx context.Context, a *allocator.Allocator, sets []netpools.Set) ([]netpools.Set, error) {
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
