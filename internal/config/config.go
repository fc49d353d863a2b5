// Package config parses and validates the CNI network configuration given to
// the ipkeeper IPAM plugin, and the datastore settings shared with the admin
// tools. It accepts ipkeeper's own keys as well as host-local's and
// whereabouts' so that swapping the ipam type for "ipkeeper" keeps working.
//
// The package does no datastore I/O. It reads only files the configuration
// names (resolvConf) and the environment for defaults.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// ErrInvalid is wrapped by every validation error of this package, so callers
// can map it to CNI error code 7 (invalid network config).
var ErrInvalid = errors.New("invalid network config")

// ErrNoPodCIDR is wrapped by ParseForNode's error when the node has no pod
// CIDR of a family a usePodCidr range needs (no pool for this node).
var ErrNoPodCIDR = errors.New("node has no pod CIDR")

// FieldError is a validation error that names the offending key.
// It wraps ErrInvalid.
type FieldError struct {
	// Key is the path of the offending key, e.g. "ipam.ranges[0][1].rangeStart",
	// or an environment variable name. Empty for whole-document errors.
	Key string
	// Reason says what is wrong, usually quoting the offending value.
	Reason string
}

// Error returns the key followed by the reason.
func (e *FieldError) Error() string {
	if e.Key == "" {
		return e.Reason
	}
	return e.Key + " " + e.Reason
}

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// invalid returns a *FieldError for key.
func invalid(key, format string, args ...any) error {
	return &FieldError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// Syntax names which family of keys an ipam section uses.
const (
	SyntaxNative      = "native"
	SyntaxHostLocal   = "host-local"
	SyntaxWhereabouts = "whereabouts"
)

// Range is one contiguous range of addresses inside a subnet.
type Range struct {
	// Subnet is masked: "10.1.2.3/24" becomes 10.1.2.0/24.
	Subnet netip.Prefix
	// RangeStart and RangeEnd bound the range inclusively; zero when unset,
	// meaning the start or end of Subnet.
	RangeStart, RangeEnd netip.Addr
	// Gateway is the gateway reported with addresses of this range; zero when none.
	Gateway netip.Addr
	// Exclude lists masked CIDRs, each overlapping Subnet, never handed out.
	Exclude []netip.Prefix
	// UsePodCIDR is 4 or 6 for a range whose subnet is "usePodCidr" or
	// "usePodCidrIPv6": the node's pod CIDR of that family. Parse leaves
	// Subnet zero; IPAM.ForNode fills it in and sets UsePodCIDR to 0.
	UsePodCIDR int
}

// Bounds returns the first and last address the range spans: RangeStart and
// RangeEnd, or the subnet's first and last address where those are unset.
// The network and broadcast addresses and the gateway are included; the
// allocator skips them.
func (r Range) Bounds() (first, last netip.Addr) {
	first, last = r.Subnet.Addr(), ipam.LastAddr(r.Subnet)
	if r.RangeStart.IsValid() {
		first = r.RangeStart
	}
	if r.RangeEnd.IsValid() {
		last = r.RangeEnd
	}
	return first, last
}

// Route is a route returned with the result. Dst is masked.
type Route struct {
	Dst netip.Prefix
	// GW is zero when the route uses the interface's gateway.
	GW netip.Addr
	// MTU, AdvMSS and Priority are the CNI 1.1 route attributes, 0 when unset.
	MTU, AdvMSS, Priority int
	// Table and Scope are the CNI 1.1 route attributes, nil when unset.
	Table, Scope *int
}

// DNS is the DNS configuration returned with the result.
type DNS struct {
	Nameservers []string
	Domain      string
	Search      []string
	Options     []string
}

// IPAM is a parsed and validated network configuration.
type IPAM struct {
	// Network is the top-level "name" of the network config.
	Network string
	// CNIVersion is the top-level "cniVersion", unvalidated.
	CNIVersion string
	// IPAMType is ipam.type as given (normally "ipkeeper").
	IPAMType string
	// Syntax is SyntaxNative, SyntaxHostLocal or SyntaxWhereabouts.
	Syntax    string
	Datastore Datastore
	NodeName  string
	// Pools names pools created with ipkeeperctl; exclusive with RangeSets.
	Pools []string
	// RangeSets lists range sets; each yields one address. Every range in a
	// set has the same IP family.
	RangeSets [][]Range
	// BlockSize is the IPv4 block prefix length, 0 for the allocator's default.
	BlockSize int
	// BlockSizeV6 is the IPv6 block prefix length, 0 for the allocator's default.
	BlockSizeV6 int
	Routes      []Route
	DNS         DNS
	// StrictAffinity forbids borrowing addresses from other nodes' blocks.
	StrictAffinity bool
	// Sticky is ipam.sticky: the addresses of a StatefulSet's pod or a
	// virtual machine's launcher pod stay reserved for it when the pod
	// goes away (the annotation ipkeeper.io/sticky on the pod or its
	// namespace decides before it).
	Sticky bool
	// NetworkName is whereabouts' "network_name" (pool namespace), may be empty.
	NetworkName string
	// Exclude is ipam.exclude as given (masked). With ranges each entry is also
	// copied into every Range it overlaps; with pools the allocator applies it.
	Exclude []netip.Prefix
	// podCIDRSpecs are the ranges as parsed, with the key paths their
	// messages name, while a range still stands for the node's pod CIDR
	// (usePodCidr): ForNode fills them in. nil otherwise.
	podCIDRSpecs []*rangeSpec
	// Kubeconfig is ipam.kubernetes.kubeconfig: pod-aware allocation reads
	// the pod, its namespace and the node with it; "" when not given.
	Kubeconfig string
	// AgentSocket is ipam.kubernetes.agentSocket: pod-aware allocation
	// asks the node's ipkeeper-agent at this unix socket, falling back to
	// Kubeconfig when the agent cannot be reached; "" when not given.
	AgentSocket string
}

// PodAware reports whether ipam.kubernetes turns pod-aware allocation on
// (a kubeconfig, an agent socket or both).
func (c *IPAM) PodAware() bool { return c.Kubeconfig != "" || c.AgentSocket != "" }

// NeedsPodCIDR reports whether a range uses the node's pod CIDR of the
// family (4 or 6): IPAM.ForNode then fills in the node's pod CIDR.
func (c *IPAM) NeedsPodCIDR(family int) bool {
	for _, set := range c.RangeSets {
		for _, r := range set {
			if r.UsePodCIDR == family {
				return true
			}
		}
	}
	return false
}

// environment is what parsing may consult besides the config itself.
type environment struct {
	getenv   func(string) string
	hostname func() (string, error)
	// readFile reads a file named by the config (resolvConf).
	readFile func(path string) ([]byte, error)
	// podCIDRs, when not nil, are the node's pod CIDRs that "usePodCidr"
	// and "usePodCidrIPv6" ranges stand for.
	podCIDRs []netip.Prefix
}

// osEnvironment is the environment of the running process.
func osEnvironment() environment {
	return environment{getenv: os.Getenv, hostname: os.Hostname, readFile: readSmallRegularFile}
}

// maxNamedFile bounds files the config names, so a config naming a device
// cannot hang or exhaust the plugin.
const maxNamedFile = 1 << 20

// readSmallRegularFile reads path if it is a regular file of at most maxNamedFile bytes.
func readSmallRegularFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxNamedFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxNamedFile)
	}
	return os.ReadFile(path)
}

// networkNameRE is the CNI spec's rule for network names.
var networkNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Parse parses and validates a whole CNI network config as the plugin reads
// it from stdin. runtimeConfig, args and prevResult are ignored. The node
// name defaults to $NODENAME, then $KUBERNETES_NODE_NAME, then the hostname.
// Every validation error wraps ErrInvalid.
func Parse(netconf []byte) (*IPAM, error) {
	return parse(netconf, osEnvironment())
}

// ParseForNode is Parse with the node's pod CIDRs (its Node's
// spec.podCIDRs) in place of "usePodCidr" (IPv4) and "usePodCidrIPv6"
// subnets; the resulting ranges are validated like any other. A family
// the node has no pod CIDR of is an error wrapping ErrNoPodCIDR.
func ParseForNode(netconf []byte, podCIDRs []netip.Prefix) (*IPAM, error) {
	c, err := Parse(netconf)
	if err != nil {
		return nil, err
	}
	return c.ForNode(podCIDRs)
}

// ForNode returns a copy of c with the node's pod CIDRs (its Node's
// spec.podCIDRs) in place of "usePodCidr" (IPv4) and "usePodCidrIPv6"
// subnets, validated like any other range; c itself is not changed. A
// config without such ranges is returned as it is. A family the node has
// no pod CIDR of is an error wrapping ErrNoPodCIDR.
func (c *IPAM) ForNode(podCIDRs []netip.Prefix) (*IPAM, error) {
	if c.podCIDRSpecs == nil {
		return c, nil
	}
	specs := make([]*rangeSpec, len(c.podCIDRSpecs))
	for i, s := range c.podCIDRSpecs {
		cp := *s
		specs[i] = &cp
	}
	out := *c
	out.podCIDRSpecs = nil
	if err := podCIDRRanges(specs, &out, environment{podCIDRs: append([]netip.Prefix{}, podCIDRs...)}); err != nil {
		return nil, err
	}
	if err := checkRanges(specs); err != nil {
		return nil, err
	}
	if err := checkBlockSizes(&out, specs); err != nil {
		return nil, err
	}
	var err error
	if out.RangeSets, err = assemble(specs, out.Exclude, out.BlockSize, out.BlockSizeV6); err != nil {
		return nil, err
	}
	return &out, nil
}

// rawNetconf holds the top-level keys Parse looks at.
type rawNetconf struct {
	CNIVersion json.RawMessage `json:"cniVersion"`
	Name       json.RawMessage `json:"name"`
	IPAM       json.RawMessage `json:"ipam"`
}

func parse(netconf []byte, env environment) (*IPAM, error) {
	if err := checkSize(netconf); err != nil {
		return nil, err
	}
	var top rawNetconf
	if err := unmarshalDocument(netconf, &top); err != nil {
		return nil, err
	}
	out := &IPAM{}
	if !present(top.Name) {
		return nil, invalid("name", "is missing: the network config needs a network name")
	}
	name, err := str(top.Name, "name")
	if err != nil {
		return nil, err
	}
	if !networkNameRE.MatchString(name) {
		return nil, invalid("name", "%s is not a valid network name (want a letter or digit, then letters, digits, '_', '.' or '-')", quote(name))
	}
	if err := checkNameLength("name", name, MaxNameLength); err != nil {
		return nil, err
	}
	out.Network = name
	if present(top.CNIVersion) {
		if out.CNIVersion, err = str(top.CNIVersion, "cniVersion"); err != nil {
			return nil, err
		}
	}
	if !present(top.IPAM) {
		return nil, invalid("ipam", "is missing")
	}
	if err := parseIPAM(top.IPAM, out, env); err != nil {
		return nil, err
	}
	return out, nil
}
