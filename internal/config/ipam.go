package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// rawIPAM holds every ipam key Parse understands; unknown keys are ignored.
// encoding/json matches keys case-insensitively, as host-local does.
type rawIPAM struct {
	Type json.RawMessage `json:"type"`

	// ipkeeper's own keys.
	Datastore      json.RawMessage `json:"datastore"`
	NodeName       json.RawMessage `json:"nodeName"`
	Pools          json.RawMessage `json:"pools"`
	BlockSize      json.RawMessage `json:"blockSize"`
	IPv6BlockSize  json.RawMessage `json:"ipv6BlockSize"`
	Exclude        json.RawMessage `json:"exclude"`
	StrictAffinity json.RawMessage `json:"strictAffinity"`
	Sticky         json.RawMessage `json:"sticky"`
	DNS            json.RawMessage `json:"dns"`
	Kubernetes     json.RawMessage `json:"kubernetes"`

	// host-local's keys (ranges also belongs to ipkeeper's syntax).
	Ranges     json.RawMessage `json:"ranges"`
	Subnet     json.RawMessage `json:"subnet"`
	RangeStart json.RawMessage `json:"rangeStart"`
	RangeEnd   json.RawMessage `json:"rangeEnd"`
	Gateway    json.RawMessage `json:"gateway"`
	Routes     json.RawMessage `json:"routes"`
	ResolvConf json.RawMessage `json:"resolvConf"`

	// whereabouts' keys.
	Range          json.RawMessage `json:"range"`
	RangeStartW    json.RawMessage `json:"range_start"`
	RangeEndW      json.RawMessage `json:"range_end"`
	IPRanges       json.RawMessage `json:"ipRanges"`
	NetworkName    json.RawMessage `json:"network_name"`
	EtcdHost       json.RawMessage `json:"etcd_host"`
	EtcdCACertFile json.RawMessage `json:"etcd_ca_cert_file"`
	EtcdCertFile   json.RawMessage `json:"etcd_cert_file"`
	EtcdKeyFile    json.RawMessage `json:"etcd_key_file"`
}

// keyed is a raw value with the key path it came from.
type keyed struct {
	key string
	raw json.RawMessage
}

// firstPresent returns the key of the first given value, or "".
func firstPresent(ks ...keyed) string {
	for _, k := range ks {
		if present(k.raw) {
			return k.key
		}
	}
	return ""
}

// parseIPAM fills out from the ipam object.
func parseIPAM(raw json.RawMessage, out *IPAM, env environment) error {
	var ri rawIPAM
	if err := object(raw, "ipam", &ri); err != nil {
		return err
	}
	if present(ri.Type) {
		var err error
		if out.IPAMType, err = str(ri.Type, "ipam.type"); err != nil {
			return err
		}
	}
	hostLocalKey, whereaboutsKey, err := ipamSyntax(&ri, out)
	if err != nil {
		return err
	}
	if err := ipamStore(&ri, out, env); err != nil {
		return err
	}
	if err := ipamAddresses(&ri, out, env, hostLocalKey, whereaboutsKey); err != nil {
		return err
	}
	if err := ipamOptions(&ri, out, env); err != nil {
		return err
	}
	// Last, so that a config's own mistakes are reported first.
	return whereaboutsDatastore(&ri, out)
}

// ipamSyntax refuses ways of giving addresses that do not go together and
// sets out.Syntax. It returns the first key given in host-local syntax
// and in whereabouts syntax, "" for none.
func ipamSyntax(ri *rawIPAM, out *IPAM) (hostLocalKey, whereaboutsKey string, err error) {
	hostLocalKey = firstPresent(keyed{"ipam.ranges", ri.Ranges}, keyed{"ipam.subnet", ri.Subnet},
		keyed{"ipam.rangeStart", ri.RangeStart}, keyed{"ipam.rangeEnd", ri.RangeEnd})
	whereaboutsKey = firstPresent(keyed{"ipam.range", ri.Range}, keyed{"ipam.ipRanges", ri.IPRanges},
		keyed{"ipam.range_start", ri.RangeStartW}, keyed{"ipam.range_end", ri.RangeEndW})
	switch {
	case present(ri.Pools) && hostLocalKey != "":
		return "", "", invalid("ipam.pools", "cannot be combined with %s: name pools or give ranges, not both", hostLocalKey)
	case present(ri.Pools) && whereaboutsKey != "":
		return "", "", invalid("ipam.pools", "cannot be combined with %s: name pools or give ranges, not both", whereaboutsKey)
	case present(ri.Pools) && present(ri.Gateway):
		return "", "", invalid("ipam.gateway", "cannot be combined with ipam.pools")
	case hostLocalKey != "" && whereaboutsKey != "":
		return "", "", invalid(hostLocalKey, "(host-local syntax) cannot be combined with %s (whereabouts syntax)", whereaboutsKey)
	case !present(ri.Pools) && hostLocalKey == "" && whereaboutsKey == "":
		return "", "", invalid("ipam", "has no addresses to hand out: set ipam.pools, ipam.ranges, ipam.subnet or ipam.range")
	}
	nativeKey := firstPresent(keyed{"ipam.pools", ri.Pools}, keyed{"ipam.nodeName", ri.NodeName},
		keyed{"ipam.blockSize", ri.BlockSize}, keyed{"ipam.ipv6BlockSize", ri.IPv6BlockSize},
		keyed{"ipam.exclude", ri.Exclude}, keyed{"ipam.strictAffinity", ri.StrictAffinity}, keyed{"ipam.dns", ri.DNS})
	switch {
	case whereaboutsKey != "":
		out.Syntax = SyntaxWhereabouts
	case nativeKey != "" || kindOf(ri.Datastore) == "an object":
		out.Syntax = SyntaxNative
	default:
		out.Syntax = SyntaxHostLocal
	}
	return hostLocalKey, whereaboutsKey, nil
}

// ipamStore sets where the addresses are kept and for which node:
// out.Datastore, NodeName, Kubeconfig and AgentSocket.
func ipamStore(ri *rawIPAM, out *IPAM, env environment) error {
	var err error
	if out.Datastore, err = ipamDatastore(ri); err != nil {
		return err
	}
	if out.NodeName, err = nodeName(ri.NodeName, env); err != nil {
		return err
	}
	if present(ri.Kubernetes) {
		if out.Kubeconfig, out.AgentSocket, err = kubernetes(ri.Kubernetes); err != nil {
			return err
		}
	}
	return nil
}

// ipamAddresses sets the addresses to hand out: out.Pools, Exclude, the
// block sizes and RangeSets, from the ranges in the syntax of the key
// given (hostLocalKey or whereaboutsKey, see ipamSyntax).
func ipamAddresses(ri *rawIPAM, out *IPAM, env environment, hostLocalKey, whereaboutsKey string) error {
	var err error
	if present(ri.Pools) {
		if out.Pools, err = pools(ri.Pools); err != nil {
			return err
		}
	}
	if present(ri.Exclude) {
		if out.Exclude, err = excludes(ri.Exclude, "ipam.exclude"); err != nil {
			return err
		}
	}
	var specs []*rangeSpec
	if whereaboutsKey != "" {
		specs, err = whereaboutsRanges(ri)
	} else if hostLocalKey != "" {
		specs, err = hostLocalRanges(ri)
	}
	if err != nil {
		return err
	}
	if err := podCIDRRanges(specs, out, env); err != nil {
		return err
	}
	if err := checkRanges(specs); err != nil {
		return err
	}
	if err := blockSizes(ri, out, specs); err != nil {
		return err
	}
	if out.RangeSets, err = assemble(specs, out.Exclude, out.BlockSize, out.BlockSizeV6); err != nil {
		return err
	}
	if out.NeedsPodCIDR(4) || out.NeedsPodCIDR(6) {
		out.podCIDRSpecs = specs
	}
	return nil
}

// ipamOptions sets what the result carries besides addresses (routes,
// DNS) and the options of the allocation (strictAffinity, network_name).
func ipamOptions(ri *rawIPAM, out *IPAM, env environment) error {
	var err error
	if present(ri.Routes) {
		if out.Routes, err = routes(ri.Routes, "ipam.routes"); err != nil {
			return err
		}
	}
	if out.DNS, err = dns(ri, env); err != nil {
		return err
	}
	if present(ri.StrictAffinity) {
		if out.StrictAffinity, err = boolean(ri.StrictAffinity, "ipam.strictAffinity"); err != nil {
			return err
		}
	}
	if present(ri.Sticky) {
		if out.Sticky, err = boolean(ri.Sticky, "ipam.sticky"); err != nil {
			return err
		}
		if out.Sticky && !out.PodAware() {
			return invalid("ipam.sticky", "needs ipam.kubernetes: whether a pod is a StatefulSet's or a virtual machine's is read from the Kubernetes API")
		}
	}
	if present(ri.NetworkName) {
		if out.NetworkName, err = str(ri.NetworkName, "ipam.network_name"); err != nil {
			return err
		}
		if err := checkNameLength("ipam.network_name", out.NetworkName, MaxNameLength); err != nil {
			return err
		}
	}
	return nil
}

// nodeName resolves ipam.nodeName, $NODENAME, $KUBERNETES_NODE_NAME or the hostname.
func nodeName(raw json.RawMessage, env environment) (string, error) {
	key, name := "ipam.nodeName", ""
	if present(raw) {
		var err error
		if name, err = str(raw, key); err != nil {
			return "", err
		}
	} else if v := env.getenv("NODENAME"); v != "" {
		key, name = "$NODENAME", v
	} else if v := env.getenv("KUBERNETES_NODE_NAME"); v != "" {
		key, name = "$KUBERNETES_NODE_NAME", v
	} else {
		h, err := env.hostname()
		if err != nil || h == "" {
			return "", invalid("ipam.nodeName", "is not set and the hostname is unknown; set ipam.nodeName or $NODENAME")
		}
		key, name = "hostname", h
	}
	if strings.TrimSpace(name) == "" {
		return "", invalid(key, "is empty")
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r <= ' ' || r == 0x7f }) {
		return "", invalid(key, "%s must not contain '/', spaces or control characters", quote(name))
	}
	if err := checkNameLength(key, name, MaxNameLength); err != nil {
		return "", err
	}
	return name, nil
}

// pools decodes ipam.pools: a non-empty list of distinct, non-empty names.
func pools(raw json.RawMessage) ([]string, error) {
	names, err := boundedStrList(raw, "ipam.pools", MaxPools)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, invalid("ipam.pools", "is empty: name at least one pool")
	}
	index := make(map[string]int, len(names))
	for i, n := range names {
		key := fmt.Sprintf("ipam.pools[%d]", i)
		if strings.TrimSpace(n) == "" {
			return nil, invalid(key, "is empty")
		}
		if strings.ContainsFunc(n, func(r rune) bool { return r == '/' || r <= ' ' || r == 0x7f }) {
			return nil, invalid(key, "%s must not contain '/', spaces or control characters", quote(n))
		}
		if err := checkNameLength(key, n, MaxNameLength); err != nil {
			return nil, err
		}
		if j, dup := index[n]; dup {
			return nil, invalid(key, "%s repeats ipam.pools[%d]", quote(n), j)
		}
		index[n] = i
	}
	return names, nil
}

// excludes decodes a list of exclude CIDRs (or single addresses).
func excludes(raw json.RawMessage, key string) ([]netip.Prefix, error) {
	l, err := boundedStrList(raw, key, MaxExcludes)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(l))
	for i, s := range l {
		p, err := parseExclude(s, fmt.Sprintf("%s[%d]", key, i))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// blockSizes decodes ipam.blockSize and ipam.ipv6BlockSize and checks that an
// explicit block fits every range subnet of its family.
func blockSizes(ri *rawIPAM, out *IPAM, specs []*rangeSpec) error {
	var err error
	if present(ri.BlockSize) {
		if out.BlockSize, err = integer(ri.BlockSize, "ipam.blockSize"); err != nil {
			return err
		}
		if out.BlockSize < 1 || out.BlockSize > 32 {
			return invalid("ipam.blockSize", "%d is not an IPv4 prefix length in 1..32", out.BlockSize)
		}
		if out.BlockSize < 32-ipam.MaxBlockHostBits {
			return invalid("ipam.blockSize", "%d is too large a block: a block holds at most %d addresses (/%d or longer)",
				out.BlockSize, 1<<ipam.MaxBlockHostBits, 32-ipam.MaxBlockHostBits)
		}
	}
	if present(ri.IPv6BlockSize) {
		if out.BlockSizeV6, err = integer(ri.IPv6BlockSize, "ipam.ipv6BlockSize"); err != nil {
			return err
		}
		if out.BlockSizeV6 < 1 || out.BlockSizeV6 > 128 {
			return invalid("ipam.ipv6BlockSize", "%d is not an IPv6 prefix length in 1..128", out.BlockSizeV6)
		}
		if out.BlockSizeV6 < 128-ipam.MaxBlockHostBits {
			return invalid("ipam.ipv6BlockSize", "%d is too large a block: a block holds at most %d addresses (/%d or longer)",
				out.BlockSizeV6, 1<<ipam.MaxBlockHostBits, 128-ipam.MaxBlockHostBits)
		}
	}
	return checkBlockSizes(out, specs)
}

// checkBlockSizes checks that an explicit block fits every range subnet
// of its family (usePodCidr placeholders are checked once filled in).
func checkBlockSizes(out *IPAM, specs []*rangeSpec) error {
	for _, s := range specs {
		if s.r.UsePodCIDR != 0 {
			continue
		}
		key, size := "ipam.blockSize", out.BlockSize
		if s.r.Subnet.Addr().Is6() {
			key, size = "ipam.ipv6BlockSize", out.BlockSizeV6
		}
		if size != 0 && size < s.r.Subnet.Bits() {
			return invalid(key, "%d (a /%d block) is larger than subnet %s of %s: a pool cannot be smaller than its block size",
				size, size, s.r.Subnet, s.subnetKey)
		}
	}
	return nil
}

// MaxSocketPath bounds ipam.kubernetes.agentSocket: a unix socket's path
// must fit sun_path (108 bytes with the terminating NUL on Linux).
const MaxSocketPath = 107

// kubernetes decodes ipam.kubernetes: {"kubeconfig": "/absolute/path",
// "agentSocket": "/absolute/path"}, at least one of the two.
func kubernetes(raw json.RawMessage) (kubeconfig, socket string, err error) {
	var rk struct {
		Kubeconfig  json.RawMessage `json:"kubeconfig"`
		AgentSocket json.RawMessage `json:"agentSocket"`
	}
	if err := object(raw, "ipam.kubernetes", &rk); err != nil {
		return "", "", err
	}
	const kcKey, sockKey = "ipam.kubernetes.kubeconfig", "ipam.kubernetes.agentSocket"
	if !present(rk.Kubeconfig) && !present(rk.AgentSocket) {
		return "", "", invalid(kcKey, "is missing: pod-aware allocation reads the Kubernetes API with the kubeconfig it names "+
			"(or asks the node's ipkeeper-agent at %s)", sockKey)
	}
	if present(rk.Kubeconfig) {
		if kubeconfig, err = absPath(rk.Kubeconfig, kcKey, MaxPathLength); err != nil {
			return "", "", err
		}
	}
	if present(rk.AgentSocket) {
		if socket, err = absPath(rk.AgentSocket, sockKey, MaxSocketPath); err != nil {
			return "", "", err
		}
	}
	return kubeconfig, socket, nil
}

// absPath decodes an absolute path of at most limit bytes.
func absPath(raw json.RawMessage, key string, limit int) (string, error) {
	p, err := str(raw, key)
	if err != nil {
		return "", err
	}
	switch {
	case p == "":
		return "", invalid(key, "is empty")
	case strings.ContainsRune(p, 0):
		return "", invalid(key, "%s contains a NUL byte", quote(p))
	case !filepath.IsAbs(p):
		return "", invalid(key, "%s is not an absolute path", quote(p))
	}
	p = filepath.Clean(p)
	if len(p) > limit {
		return "", invalid(key, "is %d bytes long, more than the limit of %d", len(p), limit)
	}
	return p, nil
}
