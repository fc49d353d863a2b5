package config

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// asIPKeeper rewrites a published example the way a user switching to
// ipkeeper would: ipam.type becomes "ipkeeper"; a missing top-level name is
// filled in (host-local's README shows bare ipam snippets, and Multus injects
// the NetworkAttachmentDefinition's name).
func asIPKeeper(t *testing.T, example, name string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(example), &m); err != nil {
		t.Fatalf("example is not JSON: %v", err)
	}
	m["ipam"].(map[string]any)["type"] = "ipkeeper"
	if _, ok := m["name"]; !ok {
		m["name"] = name
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withLocalDatastore adds "datastore": {"type": "local"} to the ipam section
// of a network config: what a whereabouts user switching to ipkeeper adds,
// since whereabouts' default datastore (the Kubernetes API) is refused.
func withLocalDatastore(t *testing.T, netconf []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(netconf, &m); err != nil {
		t.Fatal(err)
	}
	m["ipam"].(map[string]any)["datastore"] = map[string]any{"type": "local"}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Verbatim from containernetworking/plugins plugins/ipam/host-local/README.md.
const (
	hostLocalREADME1 = `{
	"ipam": {
		"type": "host-local",
		"ranges": [
			[
				{
					"subnet": "10.10.0.0/16",
					"rangeStart": "10.10.1.20",
					"rangeEnd": "10.10.3.50",
					"gateway": "10.10.0.254"
				},
				{
					"subnet": "172.16.5.0/24"
				}
			],
			[
				{
					"subnet": "3ffe:ffff:0:01ff::/64",
					"rangeStart": "3ffe:ffff:0:01ff::0010",
					"rangeEnd": "3ffe:ffff:0:01ff::0020"
				}
			]
		],
		"routes": [
			{ "dst": "0.0.0.0/0" },
			{ "dst": "192.168.0.0/16", "gw": "10.10.5.1" },
			{ "dst": "3ffe:ffff:0:01ff::1/64" }
		],
		"dataDir": "/run/my-orchestrator/container-ipam-state"
	}
}`
	hostLocalREADME2 = `{
  "ipam": {
		"type": "host-local",
		"subnet": "3ffe:ffff:0:01ff::/64",
		"rangeStart": "3ffe:ffff:0:01ff::0010",
		"rangeEnd": "3ffe:ffff:0:01ff::0020",
		"routes": [
			{ "dst": "3ffe:ffff:0:01ff::1/64" }
		],
		"resolvConf": "/etc/resolv.conf"
	}
}`
	hostLocalREADME3 = `{ "cniVersion": "0.3.1", "name": "examplenet", "ipam": { "type": "host-local", "ranges": [ [{"subnet": "203.0.113.0/24"}], [{"subnet": "2001:db8:1::/64"}]], "dataDir": "/tmp/cni-example"  } }`
)

// Verbatim from k8snetworkplumbingwg/whereabouts README.md and
// doc/extended-configuration.md.
const (
	whereaboutsREADMEExclude = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "range": "192.168.2.225/28",
        "exclude": [
           "192.168.2.229/30",
           "192.168.2.236/32"
        ]
      }
}`
	whereaboutsREADMEIPv6 = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "range": "2001::0/116",
        "gateway": "2001::f:1"
      }
}`
	whereaboutsREADMEIPRanges = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "ipRanges": [{
            "range": "192.168.10.1/24"
          }, {
            "range": "176.168.10.1/16"
        }]
      }
}`
	whereaboutsREADMEIPRangesAndRange = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "ipRanges": [{
            "range": "192.168.10.1/24"
          }, {
            "range": "176.168.10.1/16"
        }],
        "range": "abcd::1/64"
      }
}`
	whereaboutsREADMEDualStack = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "ipRanges": [{
            "range": "192.168.10.1/24"
          }, {
            "range": "abcd::1/64"
        }]
      }
}`
	whereaboutsNADYAML = `apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: whereabouts-conf
spec:
  config: '{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "range": "192.168.2.225/28"
      }
    }'
`
	whereaboutsExtendedEtcd = `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "whereabouts",
        "etcd_host": "example-etcd-cluster-client.cluster.local:2379",
        "range": "192.168.2.225/28",
        "exclude": [
           "192.168.2.229/30",
           "192.168.2.236/32"
        ],
        "log_file" : "/tmp/whereabouts.log",
        "log_level" : "debug",
        "gateway": "192.168.2.1"
      }
}`
)

// nadConfig returns spec.config of a NetworkAttachmentDefinition with the
// object's name injected when the config has none, as Multus does.
func nadConfig(t *testing.T, doc []byte) string {
	t.Helper()
	var nad struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(doc, &nad); err != nil {
		t.Fatalf("NAD YAML: %v", err)
	}
	if nad.Spec.Config == "" || nad.Metadata.Name == "" {
		t.Fatal("NAD has no spec.config or metadata.name")
	}
	return string(asIPKeeper(t, nad.Spec.Config, nad.Metadata.Name))
}

// TestPublishedExamples parses the host-local and whereabouts README
// examples and the production NetworkAttachmentDefinition with the ipam type
// swapped for "ipkeeper".
func TestPublishedExamples(t *testing.T) {
	resolv := []byte("nameserver 192.0.2.53\nsearch example.org\n")
	// The production data (internal/importer/testdata).
	prod, err := os.ReadFile("../importer/testdata/network-attachment-definition.yaml")
	if err != nil {
		t.Fatalf("production test data: %v", err)
	}
	hl := func(sets ...[]Range) IPAM {
		return IPAM{Network: "examplenet", IPAMType: "ipkeeper", Syntax: SyntaxHostLocal,
			Datastore: defaultDatastore, NodeName: "host-a", RangeSets: sets}
	}
	wa := func(sets ...[]Range) IPAM {
		return IPAM{Network: "whereaboutsexample", CNIVersion: "0.3.0", IPAMType: "ipkeeper", Syntax: SyntaxWhereabouts,
			Datastore: defaultDatastore, NodeName: "host-a", RangeSets: sets}
	}
	tests := []struct {
		name string
		in   []byte
		want func() IPAM
	}{
		{"host-local README: ranges and routes", asIPKeeper(t, hostLocalREADME1, "examplenet"), func() IPAM {
			w := hl([]Range{
				{Subnet: pfx("10.10.0.0/16"), RangeStart: addr("10.10.1.20"), RangeEnd: addr("10.10.3.50"), Gateway: addr("10.10.0.254")},
				{Subnet: pfx("172.16.5.0/24"), Gateway: addr("172.16.5.1")},
			}, []Range{
				{Subnet: pfx("3ffe:ffff:0:1ff::/64"), RangeStart: addr("3ffe:ffff:0:1ff::10"), RangeEnd: addr("3ffe:ffff:0:1ff::20"), Gateway: addr("3ffe:ffff:0:1ff::1")},
			})
			w.Routes = []Route{{Dst: pfx("0.0.0.0/0")}, {Dst: pfx("192.168.0.0/16"), GW: addr("10.10.5.1")}, {Dst: pfx("3ffe:ffff:0:1ff::/64")}}
			return w
		}},
		{"host-local README: legacy single range with resolvConf", asIPKeeper(t, hostLocalREADME2, "examplenet"), func() IPAM {
			w := hl([]Range{{Subnet: pfx("3ffe:ffff:0:1ff::/64"), RangeStart: addr("3ffe:ffff:0:1ff::10"),
				RangeEnd: addr("3ffe:ffff:0:1ff::20"), Gateway: addr("3ffe:ffff:0:1ff::1")}})
			w.Routes = []Route{{Dst: pfx("3ffe:ffff:0:1ff::/64")}}
			w.DNS = DNS{Nameservers: []string{"192.0.2.53"}, Search: []string{"example.org"}}
			return w
		}},
		{"host-local README: command-line dual-stack", asIPKeeper(t, hostLocalREADME3, "unused"), func() IPAM {
			// The README's output shows gateways 203.0.113.1 and 2001:db8:1::1.
			w := hl([]Range{{Subnet: pfx("203.0.113.0/24"), Gateway: addr("203.0.113.1")}},
				[]Range{{Subnet: pfx("2001:db8:1::/64"), Gateway: addr("2001:db8:1::1")}})
			w.CNIVersion = "0.3.1"
			return w
		}},
		{"whereabouts README: range with exclude", withLocalDatastore(t, asIPKeeper(t, whereaboutsREADMEExclude, "")), func() IPAM {
			w := wa([]Range{{Subnet: pfx("192.168.2.224/28"), Exclude: pfxs("192.168.2.228/30", "192.168.2.236/32")}})
			w.Exclude = pfxs("192.168.2.228/30", "192.168.2.236/32")
			return w
		}},
		{"whereabouts README: NetworkAttachmentDefinition", withLocalDatastore(t, []byte(nadConfig(t, []byte(whereaboutsNADYAML)))), func() IPAM {
			return wa([]Range{{Subnet: pfx("192.168.2.224/28")}})
		}},
		{"whereabouts README: ipRanges", withLocalDatastore(t, asIPKeeper(t, whereaboutsREADMEIPRanges, "")), func() IPAM {
			return wa([]Range{{Subnet: pfx("192.168.10.0/24")}}, []Range{{Subnet: pfx("176.168.0.0/16")}})
		}},
		{"whereabouts README: ipRanges with range (range first)", withLocalDatastore(t, asIPKeeper(t, whereaboutsREADMEIPRangesAndRange, "")), func() IPAM {
			return wa([]Range{{Subnet: pfx("abcd::/64")}}, []Range{{Subnet: pfx("192.168.10.0/24")}}, []Range{{Subnet: pfx("176.168.0.0/16")}})
		}},
		{"whereabouts README: dual-stack", withLocalDatastore(t, asIPKeeper(t, whereaboutsREADMEDualStack, "")), func() IPAM {
			return wa([]Range{{Subnet: pfx("192.168.10.0/24")}}, []Range{{Subnet: pfx("abcd::/64")}})
		}},
		{"production NetworkAttachmentDefinition", withLocalDatastore(t, []byte(nadConfig(t, prod))), func() IPAM {
			w := wa([]Range{{Subnet: pfx("172.18.178.192/27"), RangeStart: addr("172.18.178.196"), RangeEnd: addr("172.18.178.200")}})
			w.Network, w.CNIVersion = "test", "0.3.1"
			for _, dst := range []string{"172.18.178.110/32", "10.10.10.235/32", "172.18.178.200/32", "172.18.178.40/32", "172.18.178.88/32", "172.18.178.80/32"} {
				w.Routes = append(w.Routes, Route{Dst: pfx(dst), GW: addr("172.18.178.194")})
			}
			return w
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(nil)
			env.readFile = func(p string) ([]byte, error) {
				if p != "/etc/resolv.conf" {
					t.Errorf("read %q, want /etc/resolv.conf", p)
				}
				return resolv, nil
			}
			got, err := parse(tt.in, env)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			checkInvariants(t, got)
			if want := tt.want(); !reflect.DeepEqual(*got, want) {
				t.Errorf("parse mismatch\n got: %+v\nwant: %+v", *got, want)
			}
		})
	}
}

// TestPublishedExamplesRejected: whereabouts documents two examples whose
// gateway lies outside the range's subnet; ipkeeper refuses them and says why.
func TestPublishedExamplesRejected(t *testing.T) {
	tests := []struct {
		name, example, fragment string
	}{
		{"whereabouts README: IPv6", whereaboutsREADMEIPv6, `"2001::f:1" is outside every range's subnet (2001::/116)`},
		{"whereabouts extended configuration: etcd", whereaboutsExtendedEtcd, `"192.168.2.1" is outside every range's subnet (192.168.2.224/28)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(asIPKeeper(t, tt.example, ""), testEnv(nil))
			checkErr(t, err, "ipam.gateway", tt.fragment)
		})
	}
	// Without the off-subnet gateway the etcd example selects etcd over http.
	var m map[string]any
	if err := json.Unmarshal([]byte(whereaboutsExtendedEtcd), &m); err != nil {
		t.Fatal(err)
	}
	delete(m["ipam"].(map[string]any), "gateway")
	b, _ := json.Marshal(m)
	got, err := parse(asIPKeeper(t, string(b), ""), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := etcdDatastore("http://example-etcd-cluster-client.cluster.local:2379"); !reflect.DeepEqual(got.Datastore, want) {
		t.Errorf("datastore = %+v, want %+v", got.Datastore, want)
	}
}

// TestWhereaboutsDefaultDatastore: every published whereabouts example
// with only the type swapped names no datastore, or whereabouts'
// "kubernetes"; ipkeeper then keeps the state in the Kubernetes API with
// the kubeconfig whereabouts' ipam.kubernetes.kubeconfig names, and
// refuses the config when that key is missing (a node-local fallback
// would give every node of a cluster the same addresses), while
// host-local examples keep the local default.
func TestWhereaboutsDefaultDatastore(t *testing.T) {
	prod, err := os.ReadFile("../importer/testdata/network-attachment-definition.yaml")
	if err != nil {
		t.Fatalf("production test data: %v", err)
	}
	set := func(netconf []byte, key string, v any) []byte {
		var m map[string]any
		if err := json.Unmarshal(netconf, &m); err != nil {
			t.Fatal(err)
		}
		m["ipam"].(map[string]any)[key] = v
		b, _ := json.Marshal(m)
		return b
	}
	const kc = "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"
	withKubeconfig := func(netconf []byte) []byte { return set(netconf, "kubernetes", map[string]any{"kubeconfig": kc}) }
	explicit := func(netconf []byte) []byte { return set(netconf, "datastore", "kubernetes") }
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"README: range with exclude", asIPKeeper(t, whereaboutsREADMEExclude, "")},
		{"README: NetworkAttachmentDefinition", []byte(nadConfig(t, []byte(whereaboutsNADYAML)))},
		{"README: ipRanges (IPv4)", asIPKeeper(t, whereaboutsREADMEIPRanges, "")},
		{"README: dual-stack", asIPKeeper(t, whereaboutsREADMEDualStack, "")},
		{"production NetworkAttachmentDefinition", []byte(nadConfig(t, prod))},
		{"explicit kubernetes, IPv4", explicit(asIPKeeper(t, whereaboutsREADMEExclude, ""))},
		{"explicit kubernetes, IPv6", explicit(conf(`{"type": "ipkeeper", "range": "fd00::/64"}`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if !bytes.Contains(in, []byte(`"kubeconfig"`)) {
				_, err := parse(in, testEnv(nil))
				checkErr(t, err, "ipam.kubernetes.kubeconfig", "is missing", "Kubernetes API", "ipam.datastore")
				in = withKubeconfig(in)
			}
			got, err := parse(in, testEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			want := Datastore{Type: DatastoreKubernetes, Kubeconfig: got.Kubeconfig,
				DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}
			if got.Kubeconfig == "" || !reflect.DeepEqual(got.Datastore, want) {
				t.Errorf("datastore = %+v, want %+v", got.Datastore, want)
			}
		})
	}
	_, err = parse(conf(`{"type": "ipkeeper", "range": "10.0.0.0/24", "datastore": "kubernetes", "etcd_host": "e:2379"}`), testEnv(nil))
	checkErr(t, err, "ipam.etcd_host", `ipam.datastore is "kubernetes"`)
	// Host-local syntax, IPv4 and IPv6, without a datastore: the local default.
	for _, in := range [][]byte{asIPKeeper(t, hostLocalREADME1, "n"), conf(`{"type": "ipkeeper", "subnet": "fd00::/64"}`)} {
		got, err := parse(in, testEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Datastore, defaultDatastore) {
			t.Errorf("host-local config without datastore got %+v, want the local default", got.Datastore)
		}
	}
}
