package ipam

import (
	"fmt"
	"strings"
)

// Kinds of sticky identity.
const (
	// StickyPod is a StatefulSet's pod: its namespace and name, which the
	// StatefulSet gives every pod of that ordinal again.
	StickyPod = "pod"
	// StickyVM is a KubeVirt virtual machine: its namespace and name,
	// which every virt-launcher pod of the machine carries.
	StickyVM = "vm"
)

// StickyID names whom sticky addresses are reserved for.
type StickyID struct {
	Kind      string // StickyPod or StickyVM
	Namespace string
	Name      string
}

// String is the form records store: "<kind>/<namespace>/<name>".
func (s StickyID) String() string {
	if s.Kind == "" {
		return ""
	}
	return s.Kind + "/" + s.Namespace + "/" + s.Name
}

// ParseStickyID reads what String writes.
func ParseStickyID(s string) (StickyID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] != StickyPod && parts[0] != StickyVM || parts[1] == "" || parts[2] == "" {
		return StickyID{}, fmt.Errorf("sticky identity %q: want pod/<namespace>/<name> or vm/<namespace>/<name>", s)
	}
	return StickyID{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, nil
}

// IsParked reports whether h is a sticky reservation held for no live
// container.
func (h Handle) IsParked() bool { return h.Sticky != "" && !h.Parked.IsZero() }

// SameSticky reports whether h holds the sticky addresses of identity id
// for the attachment of network and ifname: a pod's other networks and
// interfaces keep addresses of their own.
func (h Handle) SameSticky(id, network, ifname string) bool {
	return id != "" && h.Sticky == id && h.Network == network && h.IfName == ifname
}
