package whereabouts

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func addrs(p *importer.Plan) []string {
	out := []string{}
	for _, a := range p.Addresses() {
		out = append(out, a.String())
	}
	return out
}

var realAddrs = []string{"172.18.178.196", "172.18.178.197", "172.18.178.198", "172.18.178.199", "172.18.178.200"}

func TestRealPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		opts    Options
		network string
		warn    bool
	}{
		{"pools only", []string{"whereabouts-ippools.yaml"}, Options{}, DefaultNetwork, true},
		{"with the NetworkAttachmentDefinition", []string{"whereabouts-ippools.yaml", "network-attachment-definition.yaml"}, Options{}, "test", false},
		{"with --network", []string{"whereabouts-ippools.yaml", "network-attachment-definition.yaml"}, Options{Network: "other"}, "other", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files [][]byte
			for _, f := range tc.files {
				files = append(files, read(t, f))
			}
			plan, err := Plan(files, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := addrs(plan); !slices.Equal(got, realAddrs) {
				t.Fatalf("addresses = %v, want %v", got, realAddrs)
			}
			if len(plan.Pools) != 1 || plan.Pools[0].Name != "172.18.178.192-27" || plan.Pools[0].BlockSize != 27 || plan.Pools[0].Origin != importer.Origin {
				t.Fatalf("pools = %+v", plan.Pools)
			}
			if len(plan.Blocks) != 1 || plan.Blocks[0].Node != "" || plan.Blocks[0].CIDR.String() != "172.18.178.192/27" {
				t.Fatalf("blocks = %+v", plan.Blocks)
			}
			h := plan.Handles[slices.IndexFunc(plan.Handles, func(h ipam.Handle) bool { return h.Pod == "test-7d9f8c6b5-stale1" })]
			want := tc.network + ".7213d4c5b6a7988a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f07a7a16b0f67.net1"
			if h.ID != want || h.Namespace != "nstest" || h.IfName != "net1" || h.IPs[0].Addr.String() != "172.18.178.199" {
				t.Errorf("handle = %+v, want ID %s for 172.18.178.199", h, want)
			}
			if (len(plan.Warnings) > 0) != tc.warn {
				t.Errorf("warnings = %q", plan.Warnings)
			}
		})
	}
}

// TestPoolMatchesNetworkConfig: the imported pool is the pool the plugin
// resolves the NetworkAttachmentDefinition's ipam section to (name, CIDR,
// block size), so the config finds and adopts it.
func TestPoolMatchesNetworkConfig(t *testing.T) {
	var nad struct {
		Spec struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(read(t, "network-attachment-definition.yaml"), &nad); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatal(err)
	}
	conf["name"] = "test"
	conf["ipam"].(map[string]any)["type"] = "ipkeeper"
	conf["ipam"].(map[string]any)["datastore"] = map[string]any{"type": "local"} // whereabouts' default (Kubernetes) is refused
	netconf, _ := json.Marshal(conf)
	ipamConf, err := config.Parse(netconf)
	if err != nil {
		t.Fatal(err)
	}
	want := netpools.FromRange(ipamConf, ipamConf.RangeSets[0][0])
	plan, err := Plan([][]byte{read(t, "whereabouts-ippools.yaml")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := plan.Pools[0]
	if got.Name != want.Name || got.CIDR != want.CIDR || got.BlockSize != want.BlockSize {
		t.Fatalf("imported pool %s %s /%d, the config resolves to %s %s /%d", got.Name, got.CIDR, got.BlockSize, want.Name, want.CIDR, want.BlockSize)
	}
}

// pool renders an IPPool object.
func pool(name, rng string, allocs map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: whereabouts.cni.cncf.io/v1alpha1\nkind: IPPool\nmetadata:\n  name: %s\n  namespace: kube-system\nspec:\n  range: %s\n  allocations:\n", name, rng)
	for k, id := range allocs {
		fmt.Fprintf(&b, "    %q:\n      id: %s\n      podref: ns/pod-%s\n", k, id, id)
	}
	return b.String()
}

func TestFamiliesAndBlocks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		doc   string
		opts  Options
		want  []string
		pool  string
		nblk  int
		bsize int
	}{
		{"ipv4 /24 across blocks", pool("10.5.0.0-24", "10.5.0.0/24", map[string]string{"1": "a", "70": "b", "200": "c"}), Options{},
			[]string{"10.5.0.1", "10.5.0.70", "10.5.0.200"}, "10.5.0.0-24", 3, 26},
		{"ipv4 with network_name and block size", pool("blue-10.6.0.0-24", "10.6.0.0/24", map[string]string{"2": "a"}), Options{BlockSize: 28},
			[]string{"10.6.0.2"}, "blue-10.6.0.0-24", 1, 28},
		{"ipv6", pool("fd00-5---64", "fd00:5::/64", map[string]string{"1": "a", "18446744073709551614": "b"}), Options{},
			[]string{"fd00:5::1", "fd00:5::ffff:ffff:ffff:fffe"}, "fd00-5---64", 2, 122},
		{"range with start", pool("10.7.0.0-24", "10.7.0.10-10.7.0.20/24", map[string]string{"10": "a"}), Options{},
			[]string{"10.7.0.10"}, "10.7.0.0-24", 1, 26},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Plan([][]byte{[]byte(tc.doc)}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := addrs(plan); !slices.Equal(got, tc.want) {
				t.Fatalf("addresses = %v, want %v", got, tc.want)
			}
			if plan.Pools[0].Name != tc.pool || len(plan.Blocks) != tc.nblk || plan.Pools[0].BlockSize != tc.bsize {
				t.Fatalf("pool %+v with %d blocks", plan.Pools[0], len(plan.Blocks))
			}
			for _, b := range plan.Blocks {
				if len(b.Free)+len(b.Owners) != b.Size() {
					t.Errorf("block %s: %d free + %d allocated != %d", b.CIDR, len(b.Free), len(b.Owners), b.Size())
				}
			}
		})
	}
}

func TestMultipleDocumentsAndLists(t *testing.T) {
	doc := pool("10.5.0.0-24", "10.5.0.0/24", map[string]string{"1": "a"}) + "---\n" +
		pool("10.6.0.0-24", "10.6.0.0/24", map[string]string{"1": "b"}) + "\n---\n"
	plan, err := Plan([][]byte{[]byte(doc)}, Options{Network: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(plan); !slices.Equal(got, []string{"10.5.0.1", "10.6.0.1"}) {
		t.Fatalf("addresses = %v", got)
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"offset outside the range", pool("10.5.0.0-30", "10.5.0.0/30", map[string]string{"4": "a"})},
		{"negative offset", pool("10.5.0.0-30", "10.5.0.0/30", map[string]string{"-1": "a"})},
		{"huge offset", pool("10.5.0.0-30", "10.5.0.0/30", map[string]string{"99999999999999999999999999999999999999999999": "a"})},
		{"no id", pool("10.5.0.0-30", "10.5.0.0/30", map[string]string{"1": `""`})},
		{"bad range", pool("x", "10.5.0.0/33", nil)},
		{"no pool", "kind: ConfigMap\n"},
		{"twice", pool("10.5.0.0-30", "10.5.0.0/30", nil) + "---\n" + pool("10.5.0.0-30", "10.5.0.0/30", nil)},
		{"not yaml", "kind: [\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan([][]byte{[]byte(tc.doc)}, Options{Network: "n"})
			if !errors.Is(err, importer.ErrInvalidSource) {
				t.Fatalf("err = %v, want ErrInvalidSource", err)
			}
		})
	}
}

func TestAmbiguousNetwork(t *testing.T) {
	nad := func(name string) string {
		return fmt.Sprintf("kind: NetworkAttachmentDefinition\nmetadata:\n  name: %s\nspec:\n  config: '{\"cniVersion\":\"0.3.1\",\"plugins\":[{\"type\":\"macvlan\",\"ipam\":{\"type\":\"whereabouts\",\"range\":\"10.5.0.0/24\"}}]}'\n", name)
	}
	doc := pool("10.5.0.0-24", "10.5.0.0/24", map[string]string{"1": "a"}) + "---\n" + nad("one") + "---\n" + nad("two")
	if _, err := Plan([][]byte{[]byte(doc)}, Options{}); !errors.Is(err, importer.ErrInvalidSource) || !strings.Contains(err.Error(), "--network") {
		t.Fatalf("err = %v, want a request for --network", err)
	}
	plan, err := Plan([][]byte{[]byte(doc)}, Options{Network: "two"})
	if err != nil || !strings.HasPrefix(plan.Handles[0].ID, "two.") {
		t.Fatalf("with --network: %v, %v", plan, err)
	}
}

func FuzzPlan(f *testing.F) {
	f.Add([]byte(pool("10.5.0.0-24", "10.5.0.0/24", map[string]string{"1": "a"})))
	f.Add([]byte(pool("fd00-5---64", "fd00:5::/64", map[string]string{"1": "a"})))
	f.Fuzz(func(t *testing.T, data []byte) {
		plan, err := Plan([][]byte{data}, Options{})
		if err == nil {
			if err := plan.Validate(); err != nil {
				t.Fatalf("Plan returned an invalid plan: %v", err)
			}
		}
	})
}
