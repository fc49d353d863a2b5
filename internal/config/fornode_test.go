package config

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// TestForNode: filling the node's pod CIDRs into a parsed config gives
// what parsing with them gives (ranges, excludes, gateways, errors) and
// leaves the parsed config as it was, placeholders and all.
func TestForNode(t *testing.T) {
	in := conf(`{"type": "ipkeeper", ` + kube + `, "ranges": [[{"subnet": "usePodCidr"}], [{"subnet": "usePodCidrIPv6"}]],
		"exclude": ["10.244.1.0/28"], "blockSize": 28}`)
	parsed, err := parse(in, testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	cidrs := []netip.Prefix{pfx("fd00:244:1::/64"), pfx("10.244.1.0/24")}
	got, err := parsed.ForNode(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(nil)
	env.podCIDRs = cidrs
	want, err := parse(in, env)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ForNode: %+v\nparsed with the pod CIDRs: %+v", got, want)
	}
	if !parsed.NeedsPodCIDR(4) || !parsed.NeedsPodCIDR(6) || parsed.RangeSets[0][0].Subnet.IsValid() {
		t.Fatalf("ForNode changed the parsed config: %+v", parsed.RangeSets)
	}
	// A family the node has no pod CIDR of, and a pod CIDR smaller than
	// the block: the errors parsing with the pod CIDRs gives.
	for _, cidrs := range [][]netip.Prefix{{pfx("10.244.1.0/24")}, {pfx("10.244.1.0/30"), pfx("fd00:244:1::/64")}} {
		env.podCIDRs = cidrs
		_, werr := parse(in, env)
		_, gerr := parsed.ForNode(cidrs)
		if werr == nil || gerr == nil || gerr.Error() != werr.Error() || errors.Is(werr, ErrNoPodCIDR) != errors.Is(gerr, ErrNoPodCIDR) {
			t.Errorf("pod CIDRs %v: ForNode %v, parsing %v", cidrs, gerr, werr)
		}
	}
	// A config without placeholders is returned as it is.
	plain, err := parse(conf(`{"type": "ipkeeper", "ranges": [[{"subnet": "10.9.0.0/24"}]]}`), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if same, err := plain.ForNode(cidrs); err != nil || same != plain {
		t.Errorf("ForNode of a config without usePodCidr: %p %v, want %p", same, err, plain)
	}
}
