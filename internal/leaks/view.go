package leaks

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// PodFromAPI takes what the rules need from an API pod.
func PodFromAPI(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName, Phase: string(p.Status.Phase)}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	if len(out.IPs) == 0 && p.Status.PodIP != "" {
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	return out
}

// Snapshot is a Cluster made of lists read at one time (ipkeeperctl's
// view, and tests'). The nodes it knows are the nodes it lists: it never
// takes a node for gone that it did not see, so handles without a pod are
// never leaked through it (a controller that saw a node deleted does
// release them).
type Snapshot struct {
	pods  map[string]Pod
	nodes map[string]bool
}

// NewSnapshot builds a view of pods and node names.
func NewSnapshot(pods []Pod, nodes []string) *Snapshot {
	s := &Snapshot{pods: make(map[string]Pod, len(pods)), nodes: make(map[string]bool, len(nodes))}
	for _, p := range pods {
		s.pods[p.Namespace+"/"+p.Name] = p
	}
	for _, n := range nodes {
		s.nodes[n] = true
	}
	return s
}

// Pod implements Cluster.
func (s *Snapshot) Pod(namespace, name string) (Pod, bool) {
	p, ok := s.pods[namespace+"/"+name]
	return p, ok
}

// NodeExists implements Cluster.
func (s *Snapshot) NodeExists(name string) bool { return s.nodes[name] }

// NodeWasKnown implements Cluster: a snapshot knows only the nodes it
// lists.
func (s *Snapshot) NodeWasKnown(name string) bool { return s.nodes[name] }

// NodeCount implements Cluster.
func (s *Snapshot) NodeCount() int { return len(s.nodes) }
