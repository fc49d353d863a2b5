package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

const kube = `"kubernetes": {"kubeconfig": "/etc/cni/net.d/ipkeeper-kubeconfig"}`

// TestUsePodCidr: "usePodCidr" / "usePodCidrIPv6" subnets are placeholders
// until the node's pod CIDRs are known, then ordinary validated ranges with
// the first address as gateway; IPv4 and IPv6 side by side.
func TestUsePodCidr(t *testing.T) {
	in := conf(`{"type": "ipkeeper", ` + kube + `, "ranges": [[{"subnet": "usePodCidr"}], [{"subnet": "usePodCidrIPv6"}]],
		"exclude": ["10.244.1.0/28"]}`)
	got, err := parse(in, testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, got)
	if !got.NeedsPodCIDR(4) || !got.NeedsPodCIDR(6) || got.Kubeconfig != "/etc/cni/net.d/ipkeeper-kubeconfig" {
		t.Fatalf("placeholders not recorded: %+v", got)
	}
	if want := [][]Range{{{UsePodCIDR: 4}}, {{UsePodCIDR: 6}}}; !reflect.DeepEqual(got.RangeSets, want) {
		t.Fatalf("range sets %+v, want %+v", got.RangeSets, want)
	}
	env := testEnv(nil)
	env.podCIDRs = []netip.Prefix{pfx("fd00:244:1::/64"), pfx("10.244.1.0/24")}
	got, err = parse(in, env)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, got)
	want := [][]Range{
		{{Subnet: pfx("10.244.1.0/24"), Gateway: addr("10.244.1.1"), Exclude: pfxs("10.244.1.0/28")}},
		{{Subnet: pfx("fd00:244:1::/64"), Gateway: addr("fd00:244:1::1")}},
	}
	if got.NeedsPodCIDR(4) || got.NeedsPodCIDR(6) || !reflect.DeepEqual(got.RangeSets, want) {
		t.Fatalf("for the node: %+v, want %+v", got.RangeSets, want)
	}
	// The legacy single subnet too.
	env.podCIDRs = []netip.Prefix{pfx("10.244.2.0/24")}
	got, err = parse(conf(`{"type": "ipkeeper", `+kube+`, "subnet": "usePodCidr"}`), env)
	if err != nil || !reflect.DeepEqual(got.RangeSets, [][]Range{{{Subnet: pfx("10.244.2.0/24"), Gateway: addr("10.244.2.1")}}}) {
		t.Fatalf("legacy subnet: %+v, %v", got, err)
	}
}

func TestUsePodCidrErrors(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		cidrs      []string
		key        string
		fragments  []string
	}{
		{"without kubernetes v4", `{"ranges": [[{"subnet": "usePodCidr"}]]}`, nil, "ipam.ranges[0][0].subnet", []string{"needs ipam.kubernetes.kubeconfig"}},
		{"without kubernetes v6", `{"subnet": "usePodCidrIPv6"}`, nil, "ipam.subnet", []string{"needs ipam.kubernetes.kubeconfig"}},
		{"with rangeStart", `{` + kube + `, "ranges": [[{"subnet": "usePodCidr", "rangeStart": "10.0.0.5"}]]}`, nil,
			"ipam.ranges[0][0].rangeStart", []string{"cannot be combined with", "usePodCidr"}},
		{"mixed families in a set", `{` + kube + `, "ranges": [[{"subnet": "usePodCidr"}, {"subnet": "fd00::/64"}]]}`, nil,
			"ipam.ranges[0][1].subnet", []string{"fd00::/64 is IPv6 but ipam.ranges[0][0].subnet is IPv4"}},
		{"whereabouts range", `{` + kube + `, "range": "usePodCidr", "datastore": {"type": "local"}}`, nil, "ipam.range", []string{"is not a CIDR"}},
		{"node CIDR overlaps a configured range v4", `{` + kube + `, "ranges": [[{"subnet": "usePodCidr"}], [{"subnet": "10.244.0.0/16"}]]}`,
			[]string{"10.244.1.0/24"}, "ipam.ranges[1][0]", []string{"overlaps ipam.ranges[0][0]"}},
		{"node CIDR all excluded v6", `{` + kube + `, "ranges": [[{"subnet": "usePodCidrIPv6"}]], "exclude": ["fd00::/48"]}`,
			[]string{"fd00:0:0:1::/64"}, "ipam.ranges[0][0]", []string{"no address to hand out"}},
		{"node CIDR smaller than blockSize v4", `{` + kube + `, "ranges": [[{"subnet": "usePodCidr"}]], "blockSize": 24}`,
			[]string{"10.244.1.0/26"}, "ipam.blockSize", []string{"larger than subnet 10.244.1.0/26"}},
		{"kubernetes not an object", `{"kubernetes": "/k", "pools": ["p"]}`, nil, "ipam.kubernetes", []string{"must be an object"}},
		{"kubeconfig missing", `{"kubernetes": {}, "pools": ["p"]}`, nil, "ipam.kubernetes.kubeconfig", []string{"is missing"}},
		{"kubeconfig relative", `{"kubernetes": {"kubeconfig": "kc"}, "pools": ["p"]}`, nil, "ipam.kubernetes.kubeconfig", []string{"is not an absolute path"}},
		{"kubeconfig with NUL", `{"kubernetes": {"kubeconfig": "/k\u0000"}, "pools": ["p"]}`, nil, "ipam.kubernetes.kubeconfig", []string{"NUL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(nil)
			for _, c := range tc.cidrs {
				env.podCIDRs = append(env.podCIDRs, pfx(c))
			}
			got, err := parse(conf(tc.ipam), env)
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			checkErr(t, err, tc.key, tc.fragments...)
		})
	}
	// A node without the family is ErrNoPodCIDR (no pool for this node),
	// naming the key and the node.
	env := testEnv(map[string]string{"NODENAME": "node-a"})
	env.podCIDRs = []netip.Prefix{pfx("10.244.1.0/24")}
	_, err := parse(conf(`{`+kube+`, "ranges": [[{"subnet": "usePodCidr"}], [{"subnet": "usePodCidrIPv6"}]]}`), env)
	if !errors.Is(err, ErrNoPodCIDR) || errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrNoPodCIDR", err)
	}
	for _, f := range []string{"ipam.ranges[1][0].subnet", `"usePodCidrIPv6"`, `node "node-a"`, "no IPv6 pod CIDR"} {
		if !containsStr(err.Error(), f) {
			t.Errorf("%q does not name %s", err, f)
		}
	}
	env.podCIDRs = []netip.Prefix{}
	if _, err := parse(conf(`{`+kube+`, "subnet": "usePodCidr"}`), env); !errors.Is(err, ErrNoPodCIDR) {
		t.Fatalf("a node without pod CIDRs: %v, want ErrNoPodCIDR", err)
	}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }
