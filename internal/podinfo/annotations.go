package podinfo

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// Annotations a pod (or, for pools, its namespace) may carry.
const (
	// AnnotationPools names the pools of every address: a JSON list.
	AnnotationPools = "ipkeeper.io/pools"
	// AnnotationIPAddrs names static addresses: a JSON list.
	AnnotationIPAddrs = "ipkeeper.io/ip-addrs"
	// CalicoIPv4Pools and CalicoIPv6Pools name the pools (names or
	// CIDRs) of one family, as Calico IPAM reads them.
	CalicoIPv4Pools = "cni.projectcalico.org/ipv4pools"
	CalicoIPv6Pools = "cni.projectcalico.org/ipv6pools"
	// CalicoIPAddrs names static addresses, as Calico IPAM reads it.
	CalicoIPAddrs = "cni.projectcalico.org/ipAddrs"
)

// maxEntries bounds an annotation's list.
const maxEntries = 64

// Selection is what a pod asks for through annotations. A nil list was
// not asked for.
type Selection struct {
	// Pools replaces every range set of the config (ipkeeper.io/pools).
	Pools []string
	// V4Pools and V6Pools replace the config's IPv4 or IPv6 range sets
	// (Calico's ipv4pools / ipv6pools); entries are pool names or CIDRs.
	V4Pools, V6Pools []string
	// PoolsFrom says where the pools come from, for messages.
	PoolsFrom string
	// IPs are static addresses (ipkeeper.io/ip-addrs, else Calico's ipAddrs).
	IPs []netip.Addr
	// IPsFrom says where the addresses come from, for messages.
	IPsFrom string
}

// Selection reads the pod's annotations, then its namespace's: pools from
// the pod's ipkeeper.io/pools, else the pod's Calico ipv4pools/ipv6pools,
// else the same two on the namespace; static addresses from the pod's
// ipkeeper.io/ip-addrs, else its Calico ipAddrs. Errors wrap ErrAnnotation
// and name the object and the annotation.
func (i *Info) Selection() (Selection, error) {
	var sel Selection
	for _, o := range []struct {
		obj  *Object
		kind string
	}{{i.Pod, "pod"}, {i.Namespace, "namespace"}} {
		if o.obj == nil || sel.PoolsFrom != "" {
			continue
		}
		name := o.kind + " " + o.obj.Name
		if o.kind == "pod" {
			name = "pod " + o.obj.Namespace + "/" + o.obj.Name
		}
		if v, ok := o.obj.Annotations[AnnotationPools]; ok {
			l, err := poolList(v, name, AnnotationPools, false)
			if err != nil {
				return Selection{}, err
			}
			sel.Pools, sel.PoolsFrom = l, name+" annotation "+AnnotationPools
			continue
		}
		var from []string
		for _, a := range []struct {
			key string
			dst *[]string
		}{{CalicoIPv4Pools, &sel.V4Pools}, {CalicoIPv6Pools, &sel.V6Pools}} {
			v, ok := o.obj.Annotations[a.key]
			if !ok {
				continue
			}
			l, err := poolList(v, name, a.key, true)
			if err != nil {
				return Selection{}, err
			}
			*a.dst = l
			from = append(from, a.key)
		}
		if len(from) > 0 {
			sel.PoolsFrom = name + " annotation " + strings.Join(from, " and ")
		}
	}
	if i.Pod != nil {
		name := "pod " + i.Pod.Namespace + "/" + i.Pod.Name
		for _, key := range []string{AnnotationIPAddrs, CalicoIPAddrs} {
			v, ok := i.Pod.Annotations[key]
			if !ok {
				continue
			}
			ips, err := ipList(v, name, key)
			if err != nil {
				return Selection{}, err
			}
			sel.IPs, sel.IPsFrom = ips, name+" annotation "+key
			break
		}
	}
	return sel, nil
}

// stringList decodes an annotation's JSON list of strings.
func stringList(v, obj, key string) ([]string, error) {
	var l []string
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		return nil, fmt.Errorf("%w: %s annotation %s: %q is not a JSON list of strings", ErrAnnotation, obj, key, short(v))
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("%w: %s annotation %s is an empty list", ErrAnnotation, obj, key)
	}
	if len(l) > maxEntries {
		return nil, fmt.Errorf("%w: %s annotation %s has %d entries, more than the limit of %d", ErrAnnotation, obj, key, len(l), maxEntries)
	}
	return l, nil
}

// poolList decodes a list of pool names (or, with cidrs, CIDRs).
func poolList(v, obj, key string, cidrs bool) ([]string, error) {
	l, err := stringList(v, obj, key)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range l {
		if cidrs {
			if _, err := netip.ParsePrefix(n); err == nil {
				continue
			}
		}
		bad := n == "" || len(n) > config.MaxNameLength ||
			strings.ContainsFunc(n, func(r rune) bool { return r == '/' || r <= ' ' || r == 0x7f })
		if bad {
			return nil, fmt.Errorf("%w: %s annotation %s: %q is not a pool name", ErrAnnotation, obj, key, short(n))
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: %s annotation %s names %q twice", ErrAnnotation, obj, key, n)
		}
		seen[n] = true
	}
	return l, nil
}

// ipList decodes a list of addresses.
func ipList(v, obj, key string) ([]netip.Addr, error) {
	l, err := stringList(v, obj, key)
	if err != nil {
		return nil, err
	}
	if len(l) > config.MaxRangeSets {
		return nil, fmt.Errorf("%w: %s annotation %s has %d addresses, more than the limit of %d (one per range set)",
			ErrAnnotation, obj, key, len(l), config.MaxRangeSets)
	}
	out := make([]netip.Addr, 0, len(l))
	for _, s := range l {
		a, err := config.ParseRequestedIP(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s annotation %s: %q is not an IP address", ErrAnnotation, obj, key, short(s))
		}
		out = append(out, a)
	}
	return out, nil
}

// short cuts a value for a message.
func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
