package ipam

import (
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Handle owns the addresses of one attachment (network, container,
// interface) and records who it belongs to.
type Handle struct {
	// ID is HandleID(Network, ContainerID, IfName) for handles the plugin
	// makes: the escaped parts joined by dots.
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
	// Sticky is the identity the addresses stay reserved for when its pod
	// goes away (StickyID.String: "<kind>/<namespace>/<name>"); "" for an
	// address freed on DEL.
	Sticky string `json:"sticky,omitempty"`
	// Created is when the addresses were allocated.
	Created time.Time `json:"created"`
	// Parked is when the DEL of a sticky handle's attachment (or the
	// controller, its pod gone) kept its addresses reserved for its
	// identity instead of freeing them: the record holds them for no live
	// container. Zero while an attachment uses them.
	Parked time.Time `json:"parked,omitzero"`
	// IPs are the handle's addresses, one per requested range set.
	IPs []HandleIP `json:"ips"`
}

// HandleIP is one address of a handle and where it lives.
type HandleIP struct {
	Addr  netip.Addr   `json:"addr"`
	Pool  string       `json:"pool"`
	Block netip.Prefix `json:"block"`
}

// HandleID builds the handle ID of an attachment:
// "<network>.<container ID>.<ifname>" with every '%' and '.' inside a part
// percent-encoded ("%25", "%2E"). Parts contain no '.' after escaping, so
// the ID splits back into exactly the parts it was made of: two different
// attachments never share an ID (container "a.b" with interface "eth0" and
// container "a" with interface "b.eth0" get "n.a%2Eb.eth0" and
// "n.a.b%2Eeth0"). Parts without '.' and '%' are unchanged, so the IDs of
// such attachments are what earlier versions stored (LegacyHandleID).
func HandleID(network, containerID, ifname string) string {
	return escapePart(network) + "." + escapePart(containerID) + "." + escapePart(ifname)
}

// LegacyHandleID is the handle ID earlier versions gave an attachment: the
// parts joined by dots, unescaped. It is ambiguous when a part contains a
// dot; it differs from HandleID exactly when a part contains '.' or '%'.
// Only migration of stores written by those versions uses it.
func LegacyHandleID(network, containerID, ifname string) string {
	return network + "." + containerID + "." + ifname
}

// CanonicalID returns the ID HandleID gives h's attachment when h is
// stored under the legacy form of that ID (LegacyHandleID), which earlier
// versions wrote for attachments with a '.' or '%' in a part. It reports
// false for any other handle, including one whose ID is already
// canonical or is not made of its attachment's parts at all.
func CanonicalID(h Handle) (string, bool) {
	want := HandleID(h.Network, h.ContainerID, h.IfName)
	if want == h.ID || h.ID != LegacyHandleID(h.Network, h.ContainerID, h.IfName) {
		return "", false
	}
	return want, true
}

// ParseHandleID splits an ID made by HandleID into its parts. It reports
// false for IDs HandleID does not make (not three dot-separated parts, or
// an escape other than "%25" and "%2E").
func ParseHandleID(id string) (network, containerID, ifname string, ok bool) {
	network, rest, cut1 := strings.Cut(id, ".")
	containerID, ifname, cut2 := strings.Cut(rest, ".")
	if !cut1 || !cut2 || strings.IndexByte(ifname, '.') >= 0 {
		return "", "", "", false
	}
	var ok1, ok2, ok3 bool
	network, ok1 = unescapePart(network)
	containerID, ok2 = unescapePart(containerID)
	ifname, ok3 = unescapePart(ifname)
	if !ok1 || !ok2 || !ok3 {
		return "", "", "", false
	}
	return network, containerID, ifname, true
}

func escapePart(s string) string {
	if !strings.ContainsAny(s, ".%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := range len(s) {
		switch s[i] {
		case '%':
			b.WriteString("%25")
		case '.':
			b.WriteString("%2E")
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func unescapePart(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%2E"):
			b.WriteByte('.')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// SameAddrs reports whether two lists of a handle's addresses hold the
// same addresses, in any order.
func SameAddrs(x, y []HandleIP) bool {
	if len(x) != len(y) {
		return false
	}
	sorted := func(ips []HandleIP) []netip.Addr {
		out := make([]netip.Addr, len(ips))
		for i, ip := range ips {
			out[i] = ip.Addr
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return out
	}
	return slices.Equal(sorted(x), sorted(y))
}
