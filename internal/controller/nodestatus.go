package controller

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// runtimeNetworkDown is the kubelet's mark of a node whose container
// runtime reports its network not ready, in the Node's Ready condition:
// "container runtime network not ready: NetworkReady=false reason:...
// message:...". A runtime that asks the CNI plugins' STATUS (containerd
// 2.x with cniVersion 1.1.0) reports so when STATUS fails, with the
// plugin's error as the message.
const runtimeNetworkDown = "NetworkReady=false"

// networkNotReady returns the Ready condition of a node that its kubelet
// marks not ready because the runtime's network is not, or nil.
func networkNotReady(n *corev1.Node) *corev1.NodeCondition {
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue && strings.Contains(c.Message, runtimeNetworkDown) {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// nodeNetworkCollector exports ipkeeper_node_network_not_ready for every
// node in the informer's cache, read at each scrape (every replica, not
// only the leader, watches the nodes).
type nodeNetworkCollector struct {
	desc *prometheus.Desc

	mu    sync.Mutex
	nodes cache.Store // nil until a controller is built
}

func newNodeNetworkCollector() *nodeNetworkCollector {
	return &nodeNetworkCollector{desc: prometheus.NewDesc("ipkeeper_node_network_not_ready",
		"1 while the node's kubelet reports it not Ready because the container runtime's network is not ready (NetworkReady=false: the CNI STATUS of the node's network failed), else 0.",
		[]string{"node"}, nil)}
}

func (n *nodeNetworkCollector) watch(nodes cache.Store) {
	n.mu.Lock()
	n.nodes = nodes
	n.mu.Unlock()
}

func (n *nodeNetworkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- n.desc }

func (n *nodeNetworkCollector) Collect(ch chan<- prometheus.Metric) {
	n.mu.Lock()
	nodes := n.nodes
	n.mu.Unlock()
	if nodes == nil {
		return
	}
	for _, obj := range nodes.List() {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		v := 0.0
		if networkNotReady(node) != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(n.desc, prometheus.GaugeValue, v, node.Name)
	}
}
