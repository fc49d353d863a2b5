// Package podinfo reads what a pod-aware allocation needs from the
// Kubernetes API: the pod's and its namespace's annotations and the node's
// labels and pod CIDRs, with the credentials of a kubeconfig file.
//
// It speaks plain HTTPS GETs with encoding/json instead of linking
// client-go: the plugin is a process started for every CNI call, and
// client-go's package initialisation alone costs more than the API round
// trip (see the package README section "Pod-aware allocation" for the
// numbers). The three GETs of a lookup run concurrently, so a pod-aware
// ADD pays one round trip.
package podinfo

import (
	"errors"
	"net/netip"
)

// Errors, wrapped with the object, path or key they concern.
var (
	// ErrKubeconfig: the kubeconfig cannot be read or used.
	ErrKubeconfig = errors.New("unusable kubeconfig")
	// ErrDenied: the API server refused the credentials (401) or the
	// request (403): the kubeconfig or RBAC is wrong.
	ErrDenied = errors.New("access to the Kubernetes API denied")
	// ErrUnavailable: the API server could not be reached or answered
	// with a server error; trying again later may work.
	ErrUnavailable = errors.New("the Kubernetes API is unavailable")
	// ErrPodNotFound: the pod does not exist (any more).
	ErrPodNotFound = errors.New("pod not found")
	// ErrNodeNotFound: no Node has the node name.
	ErrNodeNotFound = errors.New("node not found")
	// ErrAnnotation: an annotation ipkeeper reads cannot be read.
	ErrAnnotation = errors.New("invalid annotation")
)

// Object is the metadata of a Kubernetes object. The JSON form is what
// ipkeeper-agent answers (see AgentClient).
type Object struct {
	Namespace   string            `json:"namespace,omitempty"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Owner is the object's controlling owner (the ownerReference with
	// controller set), nil when it has none.
	Owner *Owner `json:"owner,omitempty"`
}

// Owner is an object's controlling owner.
type Owner struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// Node is a Node's metadata and pod CIDRs.
type Node struct {
	Object
	// PodCIDRs is spec.podCIDRs (or spec.podCIDR on old servers), masked.
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
}

// PodCIDR returns the node's pod CIDR of the family (4 or 6).
func (n *Node) PodCIDR(family int) (netip.Prefix, bool) {
	for _, p := range n.PodCIDRs {
		if p.Addr().Is4() == (family == 4) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Info is what one lookup found. Pod and Namespace are nil when no pod was
// named.
type Info struct {
	Pod       *Object `json:"pod,omitempty"`
	Namespace *Object `json:"namespace,omitempty"`
	Node      *Node   `json:"node"`
}
