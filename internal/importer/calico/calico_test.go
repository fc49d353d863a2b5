package calico

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

const realBlockFile = "../testdata/calico-block-100.112.209.128-26.json"

// realAddrs are the allocated addresses of the real block (its README).
var realAddrs = []string{"100.112.209.128", "100.112.209.130", "100.112.209.144", "100.112.209.150",
	"100.112.209.161", "100.112.209.169", "100.112.209.174", "100.112.209.183", "100.112.209.190"}

func readReal(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(realBlockFile)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

func strs[T fmt.Stringer](xs []T) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, x.String())
	}
	return out
}

func TestRealBlock(t *testing.T) {
	raw := readReal(t)
	kvs, err := ParseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(kvs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strs(plan.Addresses()); !slices.Equal(got, realAddrs) {
		t.Fatalf("addresses = %v, want %v", got, realAddrs)
	}
	if len(plan.Pools) != 1 || plan.Pools[0].Name != "calico-100.112.209.128-26" || plan.Pools[0].BlockSize != 26 || plan.Pools[0].Origin != importer.Origin {
		t.Fatalf("pools = %+v", plan.Pools)
	}
	b := plan.Blocks[0]
	if b.Node != "ip-10-200-205-203" {
		t.Errorf("node = %q", b.Node)
	}
	if got := b.Owner(netip.MustParseAddr("100.112.209.128")); got != "calico-import.unknown.100.112.209.128" {
		t.Errorf("owner of the null-handle address = %q", got)
	}
	var calico struct {
		Unallocated []int `json:"unallocated"`
	}
	if err := json.Unmarshal(raw, &calico); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Free, calico.Unallocated) {
		t.Errorf("free queue = %v, want Calico's order %v", b.Free, calico.Unallocated)
	}
	if len(plan.Handles) != 9 {
		t.Fatalf("%d handles, want 9", len(plan.Handles))
	}
	i := slices.IndexFunc(plan.Handles, func(h ipam.Handle) bool {
		return h.ID == "k8s-pod-network.884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510.eth0"
	})
	if i < 0 {
		t.Fatalf("no handle for attribute 1: %v", plan.Handles)
	}
	h := plan.Handles[i]
	if h.Network != "k8s-pod-network" || h.ContainerID != "884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510" ||
		h.IfName != "eth0" || h.Node != "ip-10-200-205-203" || len(h.IPs) != 1 || h.IPs[0].Addr != netip.MustParseAddr("100.112.209.130") {
		t.Errorf("handle = %+v", h)
	}
}

// etcdEntries renders entries the way `etcdctl get --prefix` prints them.
func etcdEntries(kvs ...KV) []byte {
	var b strings.Builder
	for _, e := range kvs {
		fmt.Fprintf(&b, "%s\n%s\n", e.Key, e.Value)
	}
	return []byte(b.String())
}

// v6Block is a small Calico IPv6 block: ordinals 0 and 3 allocated to
// one dual-stack pod's handle, with secondary attributes.
const v6Block = `{"cidr":"fd00:10:244::/124","affinity":null,"strictAffinity":false,
"allocations":[null,null,null,0,null,null,null,null,null,null,null,null,null,null,null,null],
"unallocated":[5,4,6,7,8,9,10,11,12,13,14,15,0,1,2],
"attributes":[{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"default","node":"n1","pod":"web-1","timestamp":"2024-03-01 10:20:30.123 +0000 UTC"}}]}`

func TestEtcdctlFormats(t *testing.T) {
	block4 := readReal(t)
	kvs := []KV{
		{Prefix + "assignment/ipv4/block/100.112.209.128-26", block4},
		{Prefix + "assignment/ipv6/block/fd00:10:244::-124", []byte(strings.ReplaceAll(v6Block, "\n", ""))},
		{Prefix + "handle/k8s-pod-network.abc", []byte(`{"handleID":"k8s-pod-network.abc","block":{"fd00:10:244::/124":1}}`)},
		{Prefix + "host/n1/ipv6/block/fd00:10:244::-124", []byte(`{"state":"confirmed","deleted":false}`)},
		{Prefix + "host/old/ipv4/block/10.0.0.0-26", nil},
		{Prefix + "config", []byte(`{"strict_affinity":false}`)},
	}
	var js struct {
		Header map[string]string `json:"header"`
		KVs    []map[string]string
	}
	js.Header = map[string]string{"revision": "7"}
	for _, e := range kvs {
		js.KVs = append(js.KVs, map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(e.Key)), "value": base64.StdEncoding.EncodeToString(e.Value)})
	}
	jsonOut, _ := json.Marshal(js)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"etcdctl get", etcdEntries(kvs...)},
		{"etcdctl get -w json", jsonOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFile(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(kvs) {
				t.Fatalf("parsed %d entries, want %d: %q", len(got), len(kvs), got)
			}
			for i := range kvs {
				if got[i].Key != kvs[i].Key || string(got[i].Value) != string(kvs[i].Value) {
					t.Errorf("entry %d = %q %q, want %q %q", i, got[i].Key, got[i].Value, kvs[i].Key, kvs[i].Value)
				}
			}
			plan, err := Plan(got, Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(realAddrs), "fd00:10:244::3")
			if got := strs(plan.Addresses()); !slices.Equal(got, want) {
				t.Fatalf("addresses = %v, want %v", got, want)
			}
			var v6 ipam.Block
			for _, b := range plan.Blocks {
				if b.CIDR.Addr().Is6() {
					v6 = b
				}
			}
			if v6.Node != "n1" || !slices.Equal(v6.Free, []int{5, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2}) {
				t.Errorf("v6 block = %+v (node from the host affinity, Calico's free order)", v6)
			}
			h := plan.Handles[slices.IndexFunc(plan.Handles, func(h ipam.Handle) bool { return h.ContainerID == "abc" })]
			if h.Namespace != "default" || h.Pod != "web-1" || h.Node != "n1" || h.Created.Format("2006-01-02T15:04:05") != "2024-03-01T10:20:30" {
				t.Errorf("handle attributes = %+v", h)
			}
			if len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "config") {
				t.Errorf("warnings = %q, want one about the config key", plan.Warnings)
			}
		})
	}
}

func TestPoolCIDR(t *testing.T) {
	kvs, err := ParseFile(readReal(t))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(kvs, Options{PoolCIDRs: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}, IfName: "net1"})
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Pools[0]
	if p.Name != "calico-100.64.0.0-10" || p.CIDR.String() != "100.64.0.0/10" || p.BlockSize != 26 {
		t.Fatalf("pool = %+v", p)
	}
	if !strings.HasSuffix(plan.Handles[0].ID, ".net1") && !strings.HasPrefix(plan.Handles[0].ID, UnknownHandlePrefix) {
		t.Errorf("handle %q does not end in the given ifname", plan.Handles[0].ID)
	}
}

func TestInvalidBlocks(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"wrong allocation count", `{"cidr":"10.0.0.0/30","allocations":[null,null],"unallocated":[0,1],"attributes":[]}`},
		{"attribute out of range", `{"cidr":"10.0.0.0/30","allocations":[3,null,null,null],"unallocated":[1,2,3],"attributes":[]}`},
		{"host bits set", `{"cidr":"10.0.0.1/30","allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[]}`},
		{"no block", `{"handleID":"x","block":{}}`},
		{"truncated", `{"cidr":"10.0.0.0/30","allocations":[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kvs, err := ParseFile([]byte(tc.value))
			if err == nil {
				_, err = Plan(kvs, Options{})
			}
			if !errors.Is(err, importer.ErrInvalidSource) {
				t.Fatalf("err = %v, want ErrInvalidSource", err)
			}
		})
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(v6Block))
	f.Add(etcdEntries(KV{Prefix + "handle/x", []byte(`{"handleID":"x"}`)}, KV{Prefix + "host/h/ipv4/block/10.0.0.0-26", nil}))
	f.Add([]byte(`{"header":{},"kvs":[{"key":"L2E=","value":"e30="}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		kvs, err := ParseFile(data)
		if err != nil {
			return
		}
		plan, err := Plan(kvs, Options{})
		if err == nil {
			if err := plan.Validate(); err != nil {
				t.Fatalf("Plan returned an invalid plan: %v", err)
			}
		}
	})
}
