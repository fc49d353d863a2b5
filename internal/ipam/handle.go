package ipam

import (
	"net/netip"
	"time"
)

// Handle owns the addresses of one attachment (network, container,
// interface) and records who it belongs to.
type Handle struct {
	// ID is "<network>.<container ID>.<ifname>".
	ID string `json:"id"`
	// Network, ContainerID and IfName identify the attachment.
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
	// Node is the node the attachment was made on.
	Node string `json:"node"`
	// NetNS is the network namespace path the runtime gave.
	NetNS string `json:"netns,omitempty"`
	// Namespace, Pod and PodUID identify a Kubernetes pod, when known.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
	// Created is when the addresses were allocated.
	Created time.Time `json:"created"`
	// IPs are the handle's addresses, one per requested range set.
	IPs []HandleIP `json:"ips"`
}

// HandleIP is one address of a handle and where it lives.
type HandleIP struct {
	Addr  netip.Addr   `json:"addr"`
	Pool  string       `json:"pool"`
	Block netip.Prefix `json:"block"`
}

// HandleID builds the handle ID of an attachment.
func HandleID(network, containerID, ifname string) string {
	return network + "." + containerID + "." + ifname
}
