package podinfo

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func info(pod, ns map[string]string) *Info {
	i := &Info{}
	if pod != nil {
		i.Pod = &Object{Namespace: "ns1", Name: "web-0", Annotations: pod}
	}
	if ns != nil {
		i.Namespace = &Object{Name: "ns1", Annotations: ns}
	}
	return i
}

// TestSelection: the pod's annotations, then the namespace's, then none;
// ipkeeper's own before Calico's; IPv4 and IPv6 side by side.
func TestSelection(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		in      *Info
		want    Selection
		wantNil bool
	}{
		{"nothing", info(map[string]string{}, map[string]string{}), Selection{}, true},
		{"no pod named", &Info{}, Selection{}, true},
		{"pod ipkeeper pools", info(map[string]string{AnnotationPools: `["blue-v4", "blue-v6"]`}, map[string]string{AnnotationPools: `["ns-pool"]`}),
			Selection{Pools: []string{"blue-v4", "blue-v6"}, PoolsFrom: "pod ns1/web-0 annotation ipkeeper.io/pools"}, false},
		{"namespace ipkeeper pools", info(map[string]string{"other": "x"}, map[string]string{AnnotationPools: `["ns-pool"]`}),
			Selection{Pools: []string{"ns-pool"}, PoolsFrom: "namespace ns1 annotation ipkeeper.io/pools"}, false},
		{"ipkeeper before Calico on the pod", info(map[string]string{AnnotationPools: `["a"]`, CalicoIPv4Pools: `["b"]`}, nil),
			Selection{Pools: []string{"a"}, PoolsFrom: "pod ns1/web-0 annotation ipkeeper.io/pools"}, false},
		{"pod Calico v4 and v6, names and CIDRs", info(map[string]string{CalicoIPv4Pools: `["default-ipv4-ippool"]`, CalicoIPv6Pools: `["fd00:10::/64"]`}, map[string]string{AnnotationPools: `["x"]`}),
			Selection{V4Pools: []string{"default-ipv4-ippool"}, V6Pools: []string{"fd00:10::/64"},
				PoolsFrom: "pod ns1/web-0 annotation cni.projectcalico.org/ipv4pools and cni.projectcalico.org/ipv6pools"}, false},
		{"namespace Calico v6 only", info(map[string]string{}, map[string]string{CalicoIPv6Pools: `["v6-pool"]`}),
			Selection{V6Pools: []string{"v6-pool"}, PoolsFrom: "namespace ns1 annotation cni.projectcalico.org/ipv6pools"}, false},
		{"pod static addresses", info(map[string]string{AnnotationIPAddrs: `["10.0.0.5", "fd00::5"]`, CalicoIPAddrs: `["10.9.9.9"]`}, nil),
			Selection{IPs: addrs("10.0.0.5", "fd00::5"), IPsFrom: "pod ns1/web-0 annotation ipkeeper.io/ip-addrs"}, false},
		{"Calico static address", info(map[string]string{CalicoIPAddrs: `["fd00::7"]`}, map[string]string{AnnotationIPAddrs: `["10.9.9.9"]`}),
			Selection{IPs: addrs("fd00::7"), IPsFrom: "pod ns1/web-0 annotation cni.projectcalico.org/ipAddrs"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Selection()
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNil {
				if got.PoolsFrom != "" || got.IPs != nil {
					t.Fatalf("got %+v, want nothing", got)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestSelectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        *Info
		fragments []string
	}{
		{"pools not JSON", info(map[string]string{AnnotationPools: `blue`}, nil), []string{"pod ns1/web-0", AnnotationPools, "not a JSON list"}},
		{"pools empty", info(map[string]string{AnnotationPools: `[]`}, nil), []string{"empty list"}},
		{"pool name with a slash", info(nil, map[string]string{AnnotationPools: `["a/b"]`}), []string{"namespace ns1", `"a/b" is not a pool name`}},
		{"pool name twice", info(map[string]string{CalicoIPv4Pools: `["a", "a"]`}, nil), []string{CalicoIPv4Pools, "twice"}},
		{"CIDR in ipkeeper pools", info(map[string]string{AnnotationPools: `["10.0.0.0/24"]`}, nil), []string{"is not a pool name"}},
		{"address not an address v4", info(map[string]string{AnnotationIPAddrs: `["10.0.0.256"]`}, nil), []string{AnnotationIPAddrs, "not an IP address"}},
		{"address not an address v6", info(map[string]string{CalicoIPAddrs: `["fd00:::1"]`}, nil), []string{CalicoIPAddrs, "not an IP address"}},
		{"addresses a number", info(map[string]string{AnnotationIPAddrs: `5`}, nil), []string{"not a JSON list"}},
		{"too many addresses", info(map[string]string{AnnotationIPAddrs: `["10.0.0.1","10.0.0.2","10.0.0.3","10.0.0.4","10.0.0.5","10.0.0.6","10.0.0.7","10.0.0.8",
			"10.0.0.9","10.0.0.10","10.0.0.11","10.0.0.12","10.0.0.13","10.0.0.14","10.0.0.15","10.0.0.16","10.0.0.17"]`}, nil), []string{"17 addresses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.in.Selection()
			if !errors.Is(err, ErrAnnotation) {
				t.Fatalf("err = %v, want ErrAnnotation", err)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("%q does not name %s", err, f)
				}
			}
		})
	}
}

// FuzzSelection: annotations of any content never panic; an error is
// ErrAnnotation; accepted pool names and addresses are usable.
func FuzzSelection(f *testing.F) {
	f.Add(`["a", "b"]`, `["10.0.0.0/24"]`, `["10.0.0.5", "fd00::5"]`)
	f.Add(`[]`, `x`, `[5]`)
	f.Fuzz(func(t *testing.T, pools, calico, ips string) {
		sel, err := info(map[string]string{AnnotationPools: pools, CalicoIPv6Pools: calico, AnnotationIPAddrs: ips}, nil).Selection()
		if err != nil {
			if !errors.Is(err, ErrAnnotation) {
				t.Fatal(err)
			}
			return
		}
		for _, n := range sel.Pools {
			if n == "" || strings.ContainsAny(n, "/ ") {
				t.Fatalf("pool %q accepted", n)
			}
		}
		for _, a := range sel.IPs {
			if !a.IsValid() || a.Zone() != "" {
				t.Fatalf("address %v accepted", a)
			}
		}
	})
}
