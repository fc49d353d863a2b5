package config

import (
	"strings"
	"testing"
)

// TestParseErrors checks every rejected form, IPv4 and IPv6 side by side:
// the error wraps ErrInvalid, names the key and says what is wrong.
func TestParseErrors(t *testing.T) {
	tests := []rejectCase{
		// The document.
		{"malformed JSON names line and column", []byte("{\n  \"name\": \"x\",\n  \"ipam\": {,}\n}"), "", []string{"malformed JSON at line 3, column 12"}},
		{"truncated JSON", []byte(`{"name": "x"`), "", []string{"malformed JSON", "unexpected end"}},
		{"trailing garbage", []byte(`{"name": "x"} x`), "", []string{"malformed JSON at line 1, column 15"}},
		{"not an object", []byte(`["x"]`), "", []string{"must be a JSON object, not an array"}},
		{"name missing", []byte(`{"ipam": {"type": "ipkeeper", "pools": ["p"]}}`), "name", []string{"is missing"}},
		{"name not a string", []byte(`{"name": 7, "ipam": {"pools": ["p"]}}`), "name", []string{"must be a string, not a number"}},
		{"name with slash", []byte(`{"name": "a/b", "ipam": {"pools": ["p"]}}`), "name", []string{`"a/b" is not a valid network name`}},
		{"cniVersion not a string", []byte(`{"name": "n", "cniVersion": 1, "ipam": {"pools": ["p"]}}`), "cniVersion", []string{"must be a string"}},
		{"ipam missing", []byte(`{"name": "n"}`), "ipam", []string{"is missing"}},
		{"ipam not an object", []byte(`{"name": "n", "ipam": "x"}`), "ipam", []string{"must be an object, not a string"}},
		{"ipam.type not a string", conf(`{"type": 1, "pools": ["p"]}`), "ipam.type", []string{"must be a string"}},
		{"nothing to hand out", conf(`{"type": "ipkeeper", "dataDir": "/x"}`), "ipam", []string{"no addresses", "ipam.pools", "ipam.ranges", "ipam.range"}},

		// Mixing syntaxes.
		{"pools with ranges", conf(`{"pools": ["p"], "ranges": [[{"subnet": "10.0.0.0/24"}]]}`), "ipam.pools", []string{"ipam.ranges"}},
		{"pools with legacy subnet v6", conf(`{"pools": ["p"], "subnet": "fd00::/64"}`), "ipam.pools", []string{"ipam.subnet"}},
		{"pools with whereabouts range", conf(`{"pools": ["p"], "range": "10.0.0.0/24"}`), "ipam.pools", []string{"ipam.range"}},
		{"pools with rangeStart", conf(`{"pools": ["p"], "rangeStart": "10.0.0.5"}`), "ipam.pools", []string{"ipam.rangeStart"}},
		{"pools with gateway", conf(`{"pools": ["p"], "gateway": "10.0.0.1"}`), "ipam.gateway", []string{"ipam.pools"}},
		{"host-local ranges with whereabouts range", conf(`{"ranges": [[{"subnet": "10.0.0.0/24"}]], "range": "10.1.0.0/24"}`),
			"ipam.ranges", []string{"host-local", "ipam.range", "whereabouts"}},
		{"host-local subnet with whereabouts ipRanges v6", conf(`{"subnet": "fd00::/64", "ipRanges": [{"range": "fd01::/64"}]}`),
			"ipam.subnet", []string{"ipam.ipRanges"}},
		{"legacy gateway without subnet", conf(`{"ranges": [[{"subnet": "10.0.0.0/24"}]], "gateway": "10.0.0.1"}`),
			"ipam.gateway", []string{"ipam.subnet is missing"}},

		// Pools.
		{"pools empty", conf(`{"pools": []}`), "ipam.pools", []string{"is empty"}},
		{"pools not an array", conf(`{"pools": "p"}`), "ipam.pools", []string{"must be an array, not a string"}},
		{"pool name not a string", conf(`{"pools": ["p", 3]}`), "ipam.pools[1]", []string{"must be a string"}},
		{"pool name empty", conf(`{"pools": [""]}`), "ipam.pools[0]", []string{"is empty"}},
		{"pool name with space", conf(`{"pools": ["a b"]}`), "ipam.pools[0]", []string{`"a b"`}},
		{"pool repeated", conf(`{"pools": ["p", "p"]}`), "ipam.pools[1]", []string{"repeats ipam.pools[0]"}},

		// Host-local ranges.
		{"ranges not an array", conf(`{"ranges": {}}`), "ipam.ranges", []string{"must be an array, not an object"}},
		{"ranges empty", conf(`{"ranges": []}`), "ipam.ranges", []string{"is empty"}},
		{"range set empty", conf(`{"ranges": [[{"subnet": "10.0.0.0/24"}], []]}`), "ipam.ranges[1]", []string{"empty range set"}},
		{"range set not an array", conf(`{"ranges": [{"subnet": "10.0.0.0/24"}]}`), "ipam.ranges[0]", []string{"must be an array, not an object"}},
		{"range not an object", conf(`{"ranges": [["10.0.0.0/24"]]}`), "ipam.ranges[0][0]", []string{"must be an object, not a string"}},
		{"subnet missing", conf(`{"ranges": [[{"rangeStart": "10.0.0.5"}]]}`), "ipam.ranges[0][0].subnet", []string{"is missing"}},
		{"subnet not a CIDR v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/33"}]]}`), "ipam.ranges[0][0].subnet", []string{`"10.0.0.0/33" is not a CIDR`}},
		{"subnet not a CIDR v6", conf(`{"ranges": [[{"subnet": "fd00::/129"}]]}`), "ipam.ranges[0][0].subnet", []string{`"fd00::/129" is not a CIDR`}},
		{"subnet bare address", conf(`{"subnet": "10.0.0.0"}`), "ipam.subnet", []string{`"10.0.0.0" is not a CIDR`}},
		{"subnet not a string", conf(`{"subnet": 10}`), "ipam.subnet", []string{"must be a string, not a number"}},
		{"subnet IPv4-mapped", conf(`{"subnet": "::ffff:10.0.0.0/120"}`), "ipam.subnet", []string{"IPv4-mapped", "write it as an IPv4 CIDR"}},
		{"subnet /31", conf(`{"ranges": [[{"subnet": "10.0.0.0/31"}]]}`), "ipam.ranges[0][0].subnet", []string{"10.0.0.0/31 is too small", "want /30 or shorter"}},
		{"subnet /32", conf(`{"ranges": [[{"subnet": "10.0.0.7/32"}]]}`), "ipam.ranges[0][0].subnet", []string{"10.0.0.7/32 is too small"}},
		{"subnet /127", conf(`{"ranges": [[{"subnet": "fd00::/127"}]]}`), "ipam.ranges[0][0].subnet", []string{"fd00::/127 is too small", "want /126 or shorter"}},
		{"subnet /128", conf(`{"subnet": "fd00::1/128"}`), "ipam.subnet", []string{"fd00::1/128 is too small"}},
		{"rangeStart not an address v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.x"}]]}`),
			"ipam.ranges[0][0].rangeStart", []string{`"10.0.0.x" is not an IP address`}},
		{"rangeStart not an address v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "rangeStart": "fd00::g"}]]}`),
			"ipam.ranges[0][0].rangeStart", []string{`"fd00::g" is not an IP address`}},
		{"rangeStart with zone", conf(`{"ranges": [[{"subnet": "fe80::/64", "rangeStart": "fe80::1%eth0"}]]}`),
			"ipam.ranges[0][0].rangeStart", []string{"zone"}},
		{"rangeStart outside subnet v4 (the brief's example)", conf(`{"ranges": [[{"subnet": "10.1.0.0/16"}, {"subnet": "10.2.0.0/16", "rangeStart": "10.3.0.5"}]]}`),
			"ipam.ranges[0][1].rangeStart", []string{`ipam.ranges[0][1].rangeStart "10.3.0.5" is outside subnet 10.2.0.0/16`}},
		{"rangeStart outside subnet v6", conf(`{"ranges": [[{"subnet": "fd00:1::/64"}, {"subnet": "fd00:2::/64", "rangeStart": "fd00:3::5"}]]}`),
			"ipam.ranges[0][1].rangeStart", []string{`"fd00:3::5" is outside subnet fd00:2::/64`}},
		{"rangeEnd outside subnet v4", conf(`{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.1.0"}`), "ipam.rangeEnd", []string{`"10.0.1.0" is outside subnet 10.0.0.0/24`}},
		{"rangeEnd outside subnet v6", conf(`{"subnet": "fd00::/120", "rangeEnd": "fd00::100"}`), "ipam.rangeEnd", []string{`"fd00::100" is outside subnet fd00::/120`}},
		{"rangeStart wrong family", conf(`{"subnet": "10.0.0.0/24", "rangeStart": "fd00::5"}`), "ipam.rangeStart", []string{"is IPv6 but subnet 10.0.0.0/24 is IPv4"}},
		{"gateway outside subnet v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"}]]}`),
			"ipam.ranges[0][0].gateway", []string{`"10.0.1.1" is outside subnet 10.0.0.0/24`}},
		{"gateway outside subnet v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "gateway": "fd01::1"}]]}`),
			"ipam.ranges[0][0].gateway", []string{`"fd01::1" is outside subnet fd00::/64`}},
		{"gateway not an address", conf(`{"subnet": "10.0.0.0/24", "gateway": "router"}`), "ipam.gateway", []string{`"router" is not an IP address`}},
		{"rangeStart after rangeEnd v4", conf(`{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.8"}`),
			"ipam.rangeStart", []string{`"10.0.0.9" is after ipam.rangeEnd "10.0.0.8"`}},
		{"rangeStart after rangeEnd v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "rangeStart": "fd00::9", "rangeEnd": "fd00::8"}]]}`),
			"ipam.ranges[0][0].rangeStart", []string{`"fd00::9" is after ipam.ranges[0][0].rangeEnd "fd00::8"`}},
		{"mixed families in a range set", conf(`{"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]}`),
			"ipam.ranges[0][1].subnet", []string{"fd00::/64 is IPv6 but ipam.ranges[0][0].subnet is IPv4", "one IP family"}},
		{"overlap across range sets v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/16"}], [{"subnet": "10.0.5.0/24"}]]}`),
			"ipam.ranges[1][0]", []string{"overlaps ipam.ranges[0][0]"}},
		{"overlap within a range set v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "rangeStart": "fd00::10", "rangeEnd": "fd00::20"},
			{"subnet": "fd00::/64", "rangeStart": "fd00::20", "rangeEnd": "fd00::30"}]]}`),
			"ipam.ranges[0][1]", []string{"(fd00::20-fd00::30) overlaps ipam.ranges[0][0] (fd00::10-fd00::20)"}},
		{"legacy subnet overlaps ranges", conf(`{"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.0.0.0/24"}]]}`),
			"ipam.ranges[0][0]", []string{"overlaps ipam.subnet"}},

		// Whereabouts ranges.
		{"whereabouts range not a CIDR", conf(`{"range": "10.0.0.0/24x"}`), "ipam.range", []string{`"10.0.0.0/24x" is not a CIDR`}},
		{"whereabouts dash start not an address", conf(`{"range": "10.0.0.x-10.0.0.20/24"}`), "ipam.range", []string{`"10.0.0.x" is not an IP address`}},
		{"whereabouts dash end without prefix", conf(`{"range": "10.0.0.10-10.0.0.20"}`), "ipam.range", []string{"start-end/prefixlen", `"10.0.0.20"`}},
		{"whereabouts dash start outside v4", conf(`{"range": "10.0.1.10-10.0.0.20/24"}`), "ipam.range", []string{`start "10.0.1.10" is outside 10.0.0.0/24`}},
		{"whereabouts dash start outside v6", conf(`{"ipRanges": [{"range": "fd01::10-fd00::20/64"}]}`), "ipam.ipRanges[0].range", []string{`start "fd01::10" is outside fd00::/64`}},
		{"whereabouts dash start after end", conf(`{"range": "10.0.0.30-10.0.0.20/24"}`), "ipam.range", []string{`"10.0.0.30" is after ipam.range "10.0.0.20"`}},
		{"whereabouts range_start outside v4", conf(`{"range": "10.0.0.0/24", "range_start": "10.0.1.5"}`), "ipam.range_start", []string{`"10.0.1.5" is outside subnet 10.0.0.0/24`}},
		{"whereabouts range_end outside v6", conf(`{"ipRanges": [{"range": "fd00::/120", "range_end": "fd00::1:0"}]}`),
			"ipam.ipRanges[0].range_end", []string{`"fd00::1:0" is outside subnet fd00::/120`}},
		{"whereabouts range_start after range_end", conf(`{"range": "fd00::/64", "range_start": "fd00::9", "range_end": "fd00::8"}`),
			"ipam.range_start", []string{"is after ipam.range_end"}},
		{"whereabouts range_start conflicts with dash start", conf(`{"range": "10.0.0.10-10.0.0.20/24", "range_start": "10.0.0.11"}`),
			"ipam.range_start", []string{`"10.0.0.11" conflicts with the start "10.0.0.10" given in ipam.range`}},
		{"whereabouts range_start without range", conf(`{"range_start": "10.0.0.5", "ipRanges": [{"range": "10.0.0.0/24"}]}`),
			"ipam.range_start", []string{"ipam.range is missing"}},
		{"whereabouts ipRanges entry without range", conf(`{"ipRanges": [{"range_start": "10.0.0.5"}]}`), "ipam.ipRanges[0].range", []string{"is missing"}},
		{"whereabouts ipRanges empty", conf(`{"ipRanges": []}`), "ipam.ipRanges", []string{"is empty"}},
		{"whereabouts ipRanges entry not an object", conf(`{"ipRanges": ["10.0.0.0/24"]}`), "ipam.ipRanges[0]", []string{"must be an object"}},
		{"whereabouts range too small", conf(`{"range": "10.0.0.0/32"}`), "ipam.range", []string{"too small"}},
		{"whereabouts ranges overlap", conf(`{"range": "fd00::/64", "ipRanges": [{"range": "fd00::/96"}]}`),
			"ipam.ipRanges[0]", []string{"overlaps ipam.range"}},
		{"whereabouts gateway outside every range v4", conf(`{"ipRanges": [{"range": "10.0.0.0/24"}, {"range": "fd00::/64"}], "gateway": "10.0.1.1"}`),
			"ipam.gateway", []string{`"10.0.1.1" is outside every range's subnet (10.0.0.0/24, fd00::/64)`}},
		{"whereabouts gateway not an address", conf(`{"range": "10.0.0.0/24", "gateway": "10.0.0.256"}`), "ipam.gateway", []string{"is not an IP address"}},

		// Excludes.
		{"native exclude not a CIDR v4", conf(`{"pools": ["p"], "exclude": ["10.0.0.0/24", "10.0.0.0/40"]}`), "ipam.exclude[1]", []string{`"10.0.0.0/40" is not a CIDR`}},
		{"native exclude not a CIDR v6", conf(`{"subnet": "fd00::/64", "exclude": ["fd00::/64/1"]}`), "ipam.exclude[0]", []string{"is not a CIDR"}},
		{"exclude not a list", conf(`{"subnet": "fd00::/64", "exclude": "fd00::/120"}`), "ipam.exclude", []string{"must be an array"}},
		{"whereabouts per-range exclude not a CIDR", conf(`{"ipRanges": [{"range": "10.0.0.0/24", "exclude": ["nope"]}]}`),
			"ipam.ipRanges[0].exclude[0]", []string{`"nope" is not a CIDR`}},

		// Routes.
		{"routes not a list", conf(`{"subnet": "10.0.0.0/24", "routes": {"dst": "0.0.0.0/0"}}`), "ipam.routes", []string{"must be an array"}},
		{"route dst missing", conf(`{"subnet": "10.0.0.0/24", "routes": [{"gw": "10.0.0.1"}]}`), "ipam.routes[0].dst", []string{"is missing"}},
		{"route dst not a CIDR v4", conf(`{"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "default"}]}`),
			"ipam.routes[1].dst", []string{`"default" is not a CIDR`}},
		{"route dst not a CIDR v6", conf(`{"subnet": "fd00::/64", "routes": [{"dst": "::"}]}`), "ipam.routes[0].dst", []string{`"::" is not a CIDR`}},
		{"route gw not an address v4", conf(`{"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1/24"}]}`),
			"ipam.routes[0].gw", []string{`"10.0.0.1/24" is not an IP address`}},
		{"route gw not an address v6", conf(`{"subnet": "fd00::/64", "routes": [{"dst": "::/0", "gw": "fd00:::1"}]}`),
			"ipam.routes[0].gw", []string{`"fd00:::1" is not an IP address`}},
		{"route gw wrong family", conf(`{"subnet": "fd00::/64", "routes": [{"dst": "::/0", "gw": "10.0.0.1"}]}`),
			"ipam.routes[0].gw", []string{`"10.0.0.1" is IPv4 but dst ::/0 is IPv6`}},
		{"route mtu negative", conf(`{"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "mtu": -1}]}`), "ipam.routes[0].mtu", []string{"-1 must not be negative"}},
		{"route table not an integer", conf(`{"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "table": 1.5}]}`), "ipam.routes[0].table", []string{`"1.5" is not an integer`}},

		// Block sizes.
		{"blockSize 0", conf(`{"pools": ["p"], "blockSize": 0}`), "ipam.blockSize", []string{"0 is not an IPv4 prefix length in 1..32"}},
		{"blockSize 33", conf(`{"pools": ["p"], "blockSize": 33}`), "ipam.blockSize", []string{"33 is not an IPv4 prefix length"}},
		{"blockSize string", conf(`{"pools": ["p"], "blockSize": "26"}`), "ipam.blockSize", []string{"must be an integer, not a string"}},
		{"blockSize fraction", conf(`{"pools": ["p"], "blockSize": 26.5}`), "ipam.blockSize", []string{`"26.5" is not an integer`}},
		{"blockSize huge", conf(`{"pools": ["p"], "blockSize": 1e99}`), "ipam.blockSize", []string{"is not an integer"}},
		{"ipv6BlockSize 0", conf(`{"pools": ["p"], "ipv6BlockSize": 0}`), "ipam.ipv6BlockSize", []string{"0 is not an IPv6 prefix length in 1..128"}},
		{"ipv6BlockSize 129", conf(`{"pools": ["p"], "ipv6BlockSize": 129}`), "ipam.ipv6BlockSize", []string{"129 is not an IPv6 prefix length"}},
		{"blockSize larger than subnet v4", conf(`{"range": "192.168.2.225/28", "blockSize": 26}`), "ipam.blockSize",
			[]string{"26 (a /26 block) is larger than subnet 192.168.2.224/28 of ipam.range"}},
		{"blockSize larger than subnet v6", conf(`{"ranges": [[{"subnet": "fd00::/124"}]], "ipv6BlockSize": 122}`), "ipam.ipv6BlockSize",
			[]string{"122 (a /122 block) is larger than subnet fd00::/124 of ipam.ranges[0][0].subnet"}},

		// Other ipam keys.
		{"strictAffinity not a boolean", conf(`{"pools": ["p"], "strictAffinity": "yes"}`), "ipam.strictAffinity", []string{"must be a boolean, not a string"}},
		{"nodeName empty", conf(`{"pools": ["p"], "nodeName": ""}`), "ipam.nodeName", []string{"is empty"}},
		{"nodeName with space", conf(`{"pools": ["p"], "nodeName": "node a"}`), "ipam.nodeName", []string{`"node a" must not contain`}},
		{"network_name not a string", conf(`{"range": "10.0.0.0/24", "network_name": 5}`), "ipam.network_name", []string{"must be a string"}},
		{"resolvConf missing file", conf(`{"subnet": "10.0.0.0/24", "resolvConf": "/nonexistent/resolv.conf"}`), "ipam.resolvConf",
			[]string{`"/nonexistent/resolv.conf" cannot be read`}},
		{"resolvConf empty", conf(`{"subnet": "10.0.0.0/24", "resolvConf": ""}`), "ipam.resolvConf", []string{"is empty"}},
		{"dns not an object", conf(`{"subnet": "10.0.0.0/24", "dns": ["10.0.0.53"]}`), "ipam.dns", []string{"must be an object"}},
		{"dns nameserver not an address", conf(`{"subnet": "10.0.0.0/24", "dns": {"nameservers": ["10.0.0.53", "ns1"]}}`),
			"ipam.dns.nameservers[1]", []string{`"ns1" is not an IP address`}},

		// Datastores inside ipam.
		{"datastore type unknown", conf(`{"pools": ["p"], "datastore": {"type": "foo"}}`), "ipam.datastore.type",
			[]string{`ipam.datastore.type "foo" is not supported (want local, etcd or kubernetes)`}},
		{"datastore not an object", conf(`{"pools": ["p"], "datastore": ["local"]}`), "ipam.datastore", []string{"must be an object, not an array"}},
		{"etcd without endpoints", conf(`{"pools": ["p"], "datastore": {"type": "etcd"}}`), "ipam.datastore.endpoints", []string{"is missing"}},
		{"etcd timeout unparsable", conf(`{"pools": ["p"], "datastore": {"type": "etcd", "endpoints": ["h:1"], "dialTimeout": "5 parsecs"}}`),
			"ipam.datastore.dialTimeout", []string{`"5 parsecs" is not a duration`}},
		{"whereabouts legacy datastore unknown", conf(`{"range": "10.0.0.0/24", "datastore": "consul"}`), "ipam.datastore",
			[]string{`"consul" is not supported`}},
		{"whereabouts legacy etcd without etcd_host", conf(`{"range": "10.0.0.0/24", "datastore": "etcd"}`), "ipam.etcd_host", []string{"is missing"}},
		{"whereabouts etcd_host bad", conf(`{"range": "10.0.0.0/24", "etcd_host": "etcd-a:2379,etcd b:2379"}`), "ipam.etcd_host item 2", []string{"is not a valid URL"}},
		{"etcd_host with datastore object", conf(`{"range": "10.0.0.0/24", "etcd_host": "e:2379", "datastore": {"type": "etcd", "endpoints": ["e:2379"]}}`),
			"ipam.etcd_host", []string{"cannot be combined"}},
	}
	checkRejects(t, tests)
}

// TestParseErrorsHideCredentials: etcd endpoints with credentials are
// refused without repeating them.
func TestParseErrorsHideCredentials(t *testing.T) {
	for _, ep := range []string{"https://admin:s3cret@127.0.0.1:2379", "admin:s3cret@127.0.0.1:2379", "http://admin:s3cret@[::1]:2379"} {
		_, err := parse(conf(`{"pools": ["p"], "datastore": {"type": "etcd", "endpoints": ["`+ep+`"]}}`), testEnv(nil))
		checkErr(t, err, "ipam.datastore.endpoints[0]", "credentials")
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "admin") {
			t.Errorf("error %q repeats credentials", err)
		}
	}
	_, err := parse(conf(`{"range": "10.0.0.0/24", "datastore": "etcd", "etcd_host": "http://u:s3cret@e:2379"}`), testEnv(nil))
	checkErr(t, err, "ipam.etcd_host item 1", "credentials")
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q repeats credentials", err)
	}
}
