package config

import (
	"encoding/json"
	"errors"
	"testing"
)

// fuzzSeeds are the documented and tabled configs FuzzParse starts from.
func fuzzSeeds() [][]byte {
	seeds := [][]byte{
		[]byte(hostLocalREADME1), []byte(hostLocalREADME2), []byte(hostLocalREADME3),
		[]byte(whereaboutsREADMEExclude), []byte(whereaboutsREADMEIPv6), []byte(whereaboutsREADMEIPRanges),
		[]byte(whereaboutsREADMEIPRangesAndRange), []byte(whereaboutsREADMEDualStack), []byte(whereaboutsExtendedEtcd),
		conf(`{"type": "ipkeeper", "datastore": {"type": "local", "path": "/var/lib/cni/ipkeeper"}, "nodeName": "node-a",
			"ranges": [[{"subnet": "10.22.0.0/16", "rangeStart": "10.22.0.10", "rangeEnd": "10.22.255.200", "gateway": "10.22.0.1"}]],
			"blockSize": 26, "routes": [{"dst": "0.0.0.0/0"}], "exclude": ["10.22.7.0/24"]}`),
		conf(`{"type": "ipkeeper", "pools": ["default-ipv4", "default-ipv6"], "ipv6BlockSize": 122, "strictAffinity": true,
			"datastore": {"type": "etcd", "endpoints": ["https://127.0.0.1:2379"], "caFile": "/ca", "certFile": "/c", "keyFile": "/k",
			"prefix": "/ipkeeper", "dialTimeout": "5s", "requestTimeout": 10}}`),
		conf(`{"type": "ipkeeper", "subnet": "fd00::/64", "rangeStart": "fd00::10", "rangeEnd": "fd00::20", "gateway": "fd00::1",
			"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.1.0/24"}]], "dns": {"nameservers": ["10.0.0.53"]}}`),
		conf(`{"type": "ipkeeper", "range": "10.0.0.10-10.0.0.20/24", "gateway": "10.0.0.1", "exclude": ["10.0.0.12", "fd00::5"],
			"ipRanges": [{"range": "fd00::10-fd00::20/64", "range_start": "fd00::10", "exclude": ["fd00::18/126"]}],
			"datastore": "etcd", "etcd_host": "e1:2379,e2:2379", "network_name": "n"}`),
		conf(`{"type": "ipkeeper", "ranges": [[{"subnet": "10.0.0.0/31"}]]}`),
		conf(`{"type": "ipkeeper", "kubernetes": {"kubeconfig": "/k"}, "ranges": [[{"subnet": "usePodCidr"}], [{"subnet": "usePodCidrIPv6"}]]}`),
		conf(`{"type": "ipkeeper", "kubernetes": {"agentSocket": "/run/ipkeeper/agent.sock"}, "ranges": [[{"subnet": "usePodCidr"}]]}`),
		conf(`{"type": "ipkeeper", "kubernetes": {"kubeconfig": "/k", "agentSocket": "/s"}, "subnet": "fd00::/64"}`),
		[]byte(`{"name": "x", "ipam": {,}}`),
	}
	return seeds
}

// FuzzParse: Parse never panics; an error always wraps ErrInvalid; a success
// satisfies the invariants (subnets masked, start <= end inside the subnet,
// gateway inside the subnet, no overlaps, valid datastore, ...).
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
		// The published examples lack a name or have another type: add the
		// ipkeeper form too.
		var m map[string]any
		if json.Unmarshal(s, &m) == nil {
			if ipam, ok := m["ipam"].(map[string]any); ok {
				ipam["type"] = "ipkeeper"
			}
			if _, ok := m["name"]; !ok {
				m["name"] = "seed"
			}
			if b, err := json.Marshal(m); err == nil {
				f.Add(b)
			}
			// Whereabouts examples name no datastore, which is refused:
			// add the local one a user switching would add.
			if ipam, ok := m["ipam"].(map[string]any); ok && ipam["datastore"] == nil {
				ipam["datastore"] = map[string]any{"type": "local"}
				if b, err := json.Marshal(m); err == nil {
					f.Add(b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parse(data, noFilesEnv())
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %q is not a *FieldError", err)
			}
			return
		}
		checkInvariants(t, got)
	})
}

// FuzzParseDatastore: ParseDatastore never panics and returns a usable
// datastore or an ErrInvalid error.
func FuzzParseDatastore(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"type": "local", "path": "/x"}`, `{"type": "etcd", "endpoints": ["https://[::1]:2379"], "dialTimeout": 3}`,
		`{"type": "etcd", "endpoints": "a:1,b:2", "certFile": "/c", "keyFile": "/k", "prefix": "/p/", "requestTimeout": "1m"}`,
		`{"type": "etcd", "endpoints": ["unix:///s"]}`, `{"type": "foo"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) && len(data) != 0 {
			return // ParseDatastore receives an already-decoded json.RawMessage
		}
		d, err := ParseDatastore(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		checkInvariants(t, &IPAM{Network: "n", NodeName: "n", Syntax: SyntaxNative, Pools: []string{"p"}, Datastore: d})
	})
}
