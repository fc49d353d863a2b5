package config

import (
	"reflect"
	"testing"
	"time"
)

func intp(v int) *int { return &v }

// TestParseAccepted parses every accepted form, IPv4 and IPv6 side by side,
// and compares the whole result.
func TestParseAccepted(t *testing.T) {
	base := func(syntax string, sets ...[]Range) IPAM {
		return IPAM{Network: "net1", CNIVersion: "1.0.0", IPAMType: "ipkeeper", Syntax: syntax,
			Datastore: defaultDatastore, NodeName: "host-a", RangeSets: sets}
	}
	tests := []struct {
		name string
		env  map[string]string
		in   []byte
		want func() IPAM
	}{
		{
			name: "native pools, dual-stack",
			in: conf(`{"type": "ipkeeper", "nodeName": "node-a", "pools": ["default-ipv4", "default-ipv6"],
				"blockSize": 26, "ipv6BlockSize": 122, "strictAffinity": true,
				"routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}], "exclude": ["10.22.7.0/24", "fd00:22:7::/64"]}`),
			want: func() IPAM {
				w := base(SyntaxNative)
				w.NodeName, w.Pools, w.BlockSize, w.BlockSizeV6, w.StrictAffinity = "node-a", []string{"default-ipv4", "default-ipv6"}, 26, 122, true
				w.Routes = []Route{{Dst: pfx("0.0.0.0/0")}, {Dst: pfx("::/0")}}
				w.Exclude = pfxs("10.22.7.0/24", "fd00:22:7::/64")
				return w
			},
		},
		{
			name: "native ranges IPv4 with exclude and block size",
			in: conf(`{"type": "ipkeeper", "datastore": {"type": "local", "path": "/var/lib/cni/ipkeeper"},
				"ranges": [[{"subnet": "10.22.0.0/16", "rangeStart": "10.22.0.10", "rangeEnd": "10.22.255.200", "gateway": "10.22.0.1"}]],
				"blockSize": 26, "routes": [{"dst": "0.0.0.0/0"}], "exclude": ["10.22.7.0/24", "10.99.0.0/16"]}`),
			want: func() IPAM {
				w := base(SyntaxNative, []Range{{Subnet: pfx("10.22.0.0/16"), RangeStart: addr("10.22.0.10"),
					RangeEnd: addr("10.22.255.200"), Gateway: addr("10.22.0.1"), Exclude: pfxs("10.22.7.0/24")}})
				w.BlockSize, w.Routes, w.Exclude = 26, []Route{{Dst: pfx("0.0.0.0/0")}}, pfxs("10.22.7.0/24", "10.99.0.0/16")
				return w
			},
		},
		{
			name: "native ranges IPv6 with exclude and block size",
			in: conf(`{"type": "ipkeeper", "datastore": {"type": "local"},
				"ranges": [[{"subnet": "fd00:22::/64", "rangeStart": "fd00:22::10", "rangeEnd": "fd00:22::ffff", "gateway": "fd00:22::1"}]],
				"ipv6BlockSize": 122, "routes": [{"dst": "::/0"}], "exclude": ["fd00:22::100/120", "fd00:99::/64"]}`),
			want: func() IPAM {
				w := base(SyntaxNative, []Range{{Subnet: pfx("fd00:22::/64"), RangeStart: addr("fd00:22::10"),
					RangeEnd: addr("fd00:22::ffff"), Gateway: addr("fd00:22::1"), Exclude: pfxs("fd00:22::100/120")}})
				w.BlockSizeV6, w.Routes, w.Exclude = 122, []Route{{Dst: pfx("::/0")}}, pfxs("fd00:22::100/120", "fd00:99::/64")
				return w
			},
		},
		{
			name: "host-local ranges, subnet masked, gateway defaulted IPv4 and IPv6",
			in:   conf(`{"type": "ipkeeper", "ranges": [[{"subnet": "10.1.2.3/24"}], [{"subnet": "2001:db8:1::5/64"}]], "dataDir": "/run/x"}`),
			want: func() IPAM {
				return base(SyntaxHostLocal,
					[]Range{{Subnet: pfx("10.1.2.0/24"), Gateway: addr("10.1.2.1")}},
					[]Range{{Subnet: pfx("2001:db8:1::/64"), Gateway: addr("2001:db8:1::1")}})
			},
		},
		{
			name: "host-local two ranges in one subnet, disjoint, IPv4 and IPv6",
			in: conf(`{"type": "ipkeeper", "ranges": [
				[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.19"}, {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20", "rangeEnd": "10.0.0.29"}],
				[{"subnet": "fd00::/64", "rangeStart": "fd00::10", "rangeEnd": "fd00::19"}, {"subnet": "fd00::/64", "rangeStart": "fd00::20", "rangeEnd": "fd00::29"}]]}`),
			want: func() IPAM {
				return base(SyntaxHostLocal,
					[]Range{{Subnet: pfx("10.0.0.0/24"), RangeStart: addr("10.0.0.10"), RangeEnd: addr("10.0.0.19"), Gateway: addr("10.0.0.1")},
						{Subnet: pfx("10.0.0.0/24"), RangeStart: addr("10.0.0.20"), RangeEnd: addr("10.0.0.29"), Gateway: addr("10.0.0.1")}},
					[]Range{{Subnet: pfx("fd00::/64"), RangeStart: addr("fd00::10"), RangeEnd: addr("fd00::19"), Gateway: addr("fd00::1")},
						{Subnet: pfx("fd00::/64"), RangeStart: addr("fd00::20"), RangeEnd: addr("fd00::29"), Gateway: addr("fd00::1")}})
			},
		},
		{
			name: "host-local legacy IPv4 range prepended to ranges (IPv6)",
			in: conf(`{"type": "ipkeeper", "subnet": "10.10.0.0/16", "rangeStart": "10.10.1.20", "rangeEnd": "10.10.3.50",
				"gateway": "10.10.0.254", "ranges": [[{"subnet": "fd00:10::/64"}]]}`),
			want: func() IPAM {
				return base(SyntaxHostLocal,
					[]Range{{Subnet: pfx("10.10.0.0/16"), RangeStart: addr("10.10.1.20"), RangeEnd: addr("10.10.3.50"), Gateway: addr("10.10.0.254")}},
					[]Range{{Subnet: pfx("fd00:10::/64"), Gateway: addr("fd00:10::1")}})
			},
		},
		{
			name: "IPv4-mapped addresses are IPv4, null values are absent",
			in:   conf(`{"type": "ipkeeper", "subnet": "10.0.0.0/24", "rangeStart": "::ffff:10.0.0.5", "gateway": null, "pools": null}`),
			want: func() IPAM {
				return base(SyntaxHostLocal, []Range{{Subnet: pfx("10.0.0.0/24"), RangeStart: addr("10.0.0.5"), Gateway: addr("10.0.0.1")}})
			},
		},
		{
			name: "whereabouts CIDR range ignores host bits, no gateway, IPv4 and IPv6",
			in:   conf(`{"type": "ipkeeper", "datastore": {"type": "local"}, "range": "192.168.2.225/28", "ipRanges": [{"range": "2001:db8::5/116"}]}`),
			want: func() IPAM {
				return base(SyntaxWhereabouts, []Range{{Subnet: pfx("192.168.2.224/28")}}, []Range{{Subnet: pfx("2001:db8::/116")}})
			},
		},
		{
			name: "whereabouts start-end/prefix form, IPv4 and IPv6",
			in: conf(`{"type": "ipkeeper", "datastore": {"type": "local"},
				"ipRanges": [{"range": "10.0.0.10-10.0.0.20/24"}, {"range": "2001:db8::10-2001:db8::20/64"}]}`),
			want: func() IPAM {
				return base(SyntaxWhereabouts,
					[]Range{{Subnet: pfx("10.0.0.0/24"), RangeStart: addr("10.0.0.10"), RangeEnd: addr("10.0.0.20")}},
					[]Range{{Subnet: pfx("2001:db8::/64"), RangeStart: addr("2001:db8::10"), RangeEnd: addr("2001:db8::20")}})
			},
		},
		{
			name: "whereabouts range_start/range_end, per-range exclude, gateway to its family only",
			in: conf(`{"type": "ipkeeper", "datastore": {"type": "local"}, "range": "10.0.0.0/24", "range_start": "10.0.0.5", "range_end": "10.0.0.50",
				"gateway": "10.0.0.1", "exclude": ["10.0.0.8/30", "10.0.0.40"],
				"ipRanges": [{"range": "fd00::/64", "range_start": "fd00::5", "range_end": "fd00::50", "exclude": ["fd00::8/126", "fd00::40", "10.0.0.9"]}],
				"network_name": "blue", "log_file": "/tmp/w.log", "log_level": "debug", "enable_overlapping_ranges": true,
				"sleep_for_race": 1, "leader_lease_duration": 1500, "reconciler_cron_expression": "30 4 * * *",
				"kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"}, "configuration_path": "/x"}`),
			want: func() IPAM {
				w := base(SyntaxWhereabouts,
					[]Range{{Subnet: pfx("10.0.0.0/24"), RangeStart: addr("10.0.0.5"), RangeEnd: addr("10.0.0.50"), Gateway: addr("10.0.0.1"),
						Exclude: pfxs("10.0.0.8/30", "10.0.0.40/32")}},
					[]Range{{Subnet: pfx("fd00::/64"), RangeStart: addr("fd00::5"), RangeEnd: addr("fd00::50"),
						Exclude: pfxs("fd00::8/126", "fd00::40/128")}})
				w.NetworkName, w.Exclude = "blue", pfxs("10.0.0.8/30", "10.0.0.40/32")
				// Whereabouts' kubernetes.kubeconfig turns pod-aware allocation on.
				w.Kubeconfig = "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"
				return w
			},
		},
		{
			name: "whereabouts legacy etcd datastore, plain and TLS",
			in: conf(`{"type": "ipkeeper", "range": "10.0.0.0/24", "datastore": "etcd",
				"etcd_host": "etcd-a:2379, https://etcd-b:2379", "etcd_username": "u", "etcd_password": "p"}`),
			want: func() IPAM {
				w := base(SyntaxWhereabouts, []Range{{Subnet: pfx("10.0.0.0/24")}})
				w.Datastore = etcdDatastore("http://etcd-a:2379", "https://etcd-b:2379")
				return w
			},
		},
		{
			name: "whereabouts etcd_host alone with TLS files selects etcd over https",
			in: conf(`{"type": "ipkeeper", "range": "fd00::/64", "etcd_host": "etcd-a:2379",
				"etcd_ca_cert_file": "/ca.pem", "etcd_cert_file": "/c.pem", "etcd_key_file": "/k.pem"}`),
			want: func() IPAM {
				w := base(SyntaxWhereabouts, []Range{{Subnet: pfx("fd00::/64")}})
				w.Datastore = etcdDatastore("https://etcd-a:2379")
				w.Datastore.CAFile, w.Datastore.CertFile, w.Datastore.KeyFile = "/ca.pem", "/c.pem", "/k.pem"
				return w
			},
		},
		{
			name: "whereabouts with a local datastore object",
			in:   conf(`{"type": "ipkeeper", "range": "fd00::/64", "datastore": {"type": "local", "path": "/run/ipk"}}`),
			want: func() IPAM {
				w := base(SyntaxWhereabouts, []Range{{Subnet: pfx("fd00::/64")}})
				w.Datastore.Path = "/run/ipk"
				return w
			},
		},
		{
			name: "native etcd datastore with timeouts as string and integer seconds",
			in: conf(`{"type": "ipkeeper", "pools": ["p"], "datastore": {"type": "etcd", "endpoints": ["https://127.0.0.1:2379", "[::1]:2379"],
				"caFile": "/ca", "certFile": "/cert", "keyFile": "/key", "prefix": "/ik/", "dialTimeout": "1500ms", "requestTimeout": 7}}`),
			want: func() IPAM {
				w := base(SyntaxNative)
				w.Pools = []string{"p"}
				w.Datastore = Datastore{Type: DatastoreEtcd, Endpoints: []string{"https://127.0.0.1:2379", "[::1]:2379"},
					CAFile: "/ca", CertFile: "/cert", KeyFile: "/key", Prefix: "/ik",
					DialTimeout: 1500 * time.Millisecond, RequestTimeout: 7 * time.Second}
				return w
			},
		},
		{
			name: "NODENAME wins over KUBERNETES_NODE_NAME and hostname",
			env:  map[string]string{"NODENAME": "n1", "KUBERNETES_NODE_NAME": "k1"},
			in:   conf(`{"type": "ipkeeper", "pools": ["p"]}`),
			want: func() IPAM { w := base(SyntaxNative); w.Pools, w.NodeName = []string{"p"}, "n1"; return w },
		},
		{
			name: "KUBERNETES_NODE_NAME wins over hostname",
			env:  map[string]string{"KUBERNETES_NODE_NAME": "k1"},
			in:   conf(`{"type": "ipkeeper", "pools": ["p"]}`),
			want: func() IPAM { w := base(SyntaxNative); w.Pools, w.NodeName = []string{"p"}, "k1"; return w },
		},
		{
			name: "ipam.nodeName wins over the environment",
			env:  map[string]string{"NODENAME": "n1"},
			in:   conf(`{"type": "ipkeeper", "pools": ["p"], "nodeName": "node-x"}`),
			want: func() IPAM { w := base(SyntaxNative); w.Pools, w.NodeName = []string{"p"}, "node-x"; return w },
		},
		{
			name: "routes with gw and CNI 1.1 attributes, dst masked",
			in: conf(`{"type": "ipkeeper", "subnet": "10.0.0.0/24", "routes": [
				{"dst": "192.168.0.0/16", "gw": "10.10.5.1", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 0},
				{"dst": "3ffe:ffff:0:01ff::1/64", "gw": "3ffe:ffff:0:01ff::fe"}]}`),
			want: func() IPAM {
				w := base(SyntaxHostLocal, []Range{{Subnet: pfx("10.0.0.0/24"), Gateway: addr("10.0.0.1")}})
				w.Routes = []Route{{Dst: pfx("192.168.0.0/16"), GW: addr("10.10.5.1"), MTU: 1400, AdvMSS: 1360, Priority: 10, Table: intp(100), Scope: intp(0)},
					{Dst: pfx("3ffe:ffff:0:1ff::/64"), GW: addr("3ffe:ffff:0:1ff::fe")}}
				return w
			},
		},
		{
			name: "top-level extras ignored, cniVersion may be empty",
			in: []byte(`{"cniVersion": "", "name": "net1", "type": "bridge", "bridge": "cni0", "isGateway": true,
				"runtimeConfig": {"ipRanges": [[{"subnet": "10.9.0.0/16"}]], "ips": ["10.0.0.7"]}, "args": {"cni": {"ips": ["10.0.0.7"]}},
				"prevResult": {"ips": [{"address": "10.0.0.7/24"}]},
				"ipam": {"type": "ipkeeper", "subnet": "10.0.0.0/24", "someFutureKey": {"x": 1}}}`),
			want: func() IPAM {
				w := base(SyntaxHostLocal, []Range{{Subnet: pfx("10.0.0.0/24"), Gateway: addr("10.0.0.1")}})
				w.CNIVersion = ""
				return w
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.in, testEnv(tt.env))
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

// TestParseDNS reads resolvConf like host-local and lets ipam.dns override it.
func TestParseDNS(t *testing.T) {
	rc := writeFile(t, "resolv.conf", "# comment\n; also comment\nnameserver 10.0.0.53\nnameserver fd00::53\n"+
		"domain example.com\nsearch a.example.com b.example.com\noptions ndots:5 timeout:2\nsortlist 10.0.0.0\nnameserver\n")
	tests := []struct {
		name string
		ipam string
		want DNS
	}{
		{"resolvConf only", `{"type": "ipkeeper", "subnet": "10.0.0.0/24", "resolvConf": "` + rc + `"}`,
			DNS{Nameservers: []string{"10.0.0.53", "fd00::53"}, Domain: "example.com",
				Search: []string{"a.example.com", "b.example.com"}, Options: []string{"ndots:5", "timeout:2"}}},
		{"dns overrides given fields", `{"type": "ipkeeper", "subnet": "fd00::/64", "resolvConf": "` + rc + `",
			"dns": {"nameservers": ["fd00::1", "10.0.0.1"], "search": ["c.example.com"]}}`,
			DNS{Nameservers: []string{"fd00::1", "10.0.0.1"}, Domain: "example.com",
				Search: []string{"c.example.com"}, Options: []string{"ndots:5", "timeout:2"}}},
		{"dns only", `{"type": "ipkeeper", "subnet": "10.0.0.0/24", "dns": {"nameservers": ["10.0.0.1"], "domain": "d", "options": ["rotate"]}}`,
			DNS{Nameservers: []string{"10.0.0.1"}, Domain: "d", Options: []string{"rotate"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(conf(tt.ipam), testEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, got)
			if !reflect.DeepEqual(got.DNS, tt.want) {
				t.Errorf("DNS = %+v, want %+v", got.DNS, tt.want)
			}
		})
	}
}

// TestParseHostname falls back to the hostname, and fails when there is none.
func TestParseHostname(t *testing.T) {
	got, err := parse(conf(`{"type": "ipkeeper", "pools": ["p"]}`), testEnv(nil))
	if err != nil || got.NodeName != "host-a" {
		t.Fatalf("got %v, %v; want node host-a", got, err)
	}
	env := testEnv(nil)
	env.hostname = func() (string, error) { return "", nil }
	_, err = parse(conf(`{"type": "ipkeeper", "pools": ["p"]}`), env)
	checkErr(t, err, "ipam.nodeName", "NODENAME")
}

// TestParseRealEnvironment runs Parse itself with the process environment.
func TestParseRealEnvironment(t *testing.T) {
	t.Setenv("NODENAME", "from-env")
	got, err := Parse(conf(`{"type": "ipkeeper", "pools": ["p"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "from-env" {
		t.Errorf("NodeName = %q, want from-env", got.NodeName)
	}
	_, err = Parse(conf(`{"type": "ipkeeper", "subnet": "10.0.0.0/24", "resolvConf": "/dev/null"}`))
	checkErr(t, err, "ipam.resolvConf", "/dev/null", "not a regular file")
}
