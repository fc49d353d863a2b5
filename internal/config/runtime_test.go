package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// gcConf is a GC netconf with the given top-level extras.
func gcConf(extra string) []byte {
	return []byte(`{"cniVersion": "1.1.0", "name": "net1", "type": "bridge", "ipam": {"type": "ipkeeper", "subnet": "10.0.0.0/24"}` + extra + `}`)
}

func TestGCAttachments(t *testing.T) {
	a := func(id, ifname string) Attachment { return Attachment{ContainerID: id, IfName: ifname} }
	ok := []struct {
		name string
		in   []byte
		want []Attachment
	}{
		{"spec key", gcConf(`, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c2", "ifname": "eth0.100"}]`),
			[]Attachment{a("c1", "eth0"), a("c2", "eth0.100")}},
		{"tagged CNI 1.1.0 key", gcConf(`, "cni.dev/attachments": [{"containerID": "c1", "ifname": "net1"}]`), []Attachment{a("c1", "net1")}},
		{"both keys, as libcni >= 1.2.3 sends them: the union", gcConf(`, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}],
			"cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c3", "ifname": "eth1"}]`),
			[]Attachment{a("c1", "eth0"), a("c3", "eth1")}},
		{"empty list: nothing is in use", gcConf(`, "cni.dev/valid-attachments": []`), []Attachment{}},
		{"empty spec list beside a legacy list", gcConf(`, "cni.dev/valid-attachments": [], "cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]`),
			[]Attachment{a("c1", "eth0")}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GCAttachments(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	bad := []struct {
		name, extra, key string
		fragments        []string
	}{
		{"neither key", ``, ValidAttachmentsKey, []string{"is missing (and so is cni.dev/attachments)", "would release every allocation"}},
		{"null", `, "cni.dev/valid-attachments": null`, ValidAttachmentsKey, []string{"is null"}},
		{"legacy null", `, "cni.dev/attachments": null`, LegacyValidAttachmentsKey, []string{"is null"}},
		{"null beside a good legacy list", `, "cni.dev/valid-attachments": null, "cni.dev/attachments": []`, ValidAttachmentsKey, []string{"is null"}},
		{"not a list", `, "cni.dev/valid-attachments": {"containerID": "c1", "ifname": "eth0"}`, ValidAttachmentsKey, []string{"must be an array, not an object"}},
		{"entry not an object", `, "cni.dev/valid-attachments": ["c1"]`, ValidAttachmentsKey + "[0]", []string{"must be an object, not a string"}},
		{"entry without ifname", `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c2"}]`,
			ValidAttachmentsKey + "[1].ifname", []string{"is missing"}},
		{"entry without containerID", `, "cni.dev/attachments": [{"ifname": "eth0"}]`, LegacyValidAttachmentsKey + "[0].containerID", []string{"is missing"}},
		{"empty containerID", `, "cni.dev/valid-attachments": [{"containerID": "", "ifname": "eth0"}]`, ValidAttachmentsKey + "[0].containerID", []string{"is empty"}},
		{"empty ifname", `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": ""}]`, ValidAttachmentsKey + "[0].ifname", []string{"is empty"}},
		{"containerID a number", `, "cni.dev/valid-attachments": [{"containerID": 5, "ifname": "eth0"}]`, ValidAttachmentsKey + "[0].containerID", []string{"must be a string, not a number"}},
		{"ifname null", `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": null}]`, ValidAttachmentsKey + "[0].ifname", []string{"is missing"}},
		{"ifname with a slash", `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "a/b"}]`, ValidAttachmentsKey + "[0].ifname", []string{"must not contain"}},
		{"ifname too long", `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "abcdefghijklmnop"}]`, ValidAttachmentsKey + "[0].ifname", []string{"more than an interface name's 15"}},
		{"containerID too long", `, "cni.dev/valid-attachments": [{"containerID": "` + strings.Repeat("c", 254) + `", "ifname": "eth0"}]`,
			ValidAttachmentsKey + "[0].containerID", []string{"more than the limit of 253"}},
		{"containerID with a space", `, "cni.dev/valid-attachments": [{"containerID": "c 1", "ifname": "eth0"}]`,
			ValidAttachmentsKey + "[0].containerID", []string{"is not a valid container ID"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GCAttachments(gcConf(tc.extra))
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			checkErr(t, err, tc.key, tc.fragments...)
		})
	}
}

func TestRequestedIPs(t *testing.T) {
	ok := []struct {
		name, extra string
		want        []string
	}{
		{"none", ``, nil},
		{"null runtimeConfig and ips", `, "runtimeConfig": null, "args": {"cni": {"ips": null}}`, nil},
		{"runtimeConfig.ips v4 and v6", `, "runtimeConfig": {"ips": ["10.0.0.5", "fd00::5/64"]}`, []string{"10.0.0.5", "fd00::5"}},
		{"args.cni.ips", `, "args": {"cni": {"ips": ["10.0.0.6/24"]}}`, []string{"10.0.0.6"}},
		{"both, runtimeConfig first", `, "args": {"cni": {"ips": ["fd00::6"]}}, "runtimeConfig": {"ips": ["::ffff:10.0.0.5"], "portMappings": []}`,
			[]string{"10.0.0.5", "fd00::6"}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestedIPs(gcConf(tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Addr
			for _, s := range tc.want {
				want = append(want, addr(s))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
	bad := []struct {
		name, extra, key string
		fragments        []string
	}{
		{"runtimeConfig.ips a string (the report's case)", `, "runtimeConfig": {"ips": "10.77.0.50"}`, "runtimeConfig.ips", []string{"must be a list of IP addresses, not a string"}},
		{"runtimeConfig.ips a number in the list (the report's case)", `, "runtimeConfig": {"ips": [5]}`, "runtimeConfig.ips[0]", []string{"must be an IP address string, not a number"}},
		{"runtimeConfig.ips not an address v4", `, "runtimeConfig": {"ips": ["10.0.0.256"]}`, "runtimeConfig.ips[0]", []string{`"10.0.0.256" is not an IP address`}},
		{"runtimeConfig.ips not an address v6", `, "runtimeConfig": {"ips": ["fd00::5", "fd00:::6"]}`, "runtimeConfig.ips[1]", []string{`"fd00:::6" is not an IP address`}},
		{"runtimeConfig.ips with zone", `, "runtimeConfig": {"ips": ["fe80::1%eth0"]}`, "runtimeConfig.ips[0]", []string{"is not an IP address"}},
		{"runtimeConfig not an object", `, "runtimeConfig": ["10.0.0.5"]`, "runtimeConfig", []string{"must be an object"}},
		{"args.cni.ips a string", `, "args": {"cni": {"ips": "fd00::5"}}`, "args.cni.ips", []string{"must be a list of IP addresses, not a string"}},
		{"args.cni.ips an object in the list", `, "args": {"cni": {"ips": [{"ip": "10.0.0.5"}]}}`, "args.cni.ips[0]", []string{"not an object"}},
		{"args.cni not an object", `, "args": {"cni": "ips=10.0.0.5"}`, "args.cni", []string{"must be an object"}},
		{"too many", `, "runtimeConfig": {"ips": [` + repeatJSON(17, func(int) string { return `"10.0.0.5"` }) + `]}`, "runtimeConfig.ips", []string{"has 17 addresses"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestedIPs(gcConf(tc.extra))
			if err == nil {
				t.Fatalf("accepted: %v", got)
			}
			checkErr(t, err, tc.key, tc.fragments...)
		})
	}
}

// FuzzGCAttachments: never panics; an error wraps ErrInvalid; every
// attachment returned has a valid container ID and interface name.
func FuzzGCAttachments(f *testing.F) {
	for _, s := range []string{``, `, "cni.dev/valid-attachments": []`, `, "cni.dev/valid-attachments": null`,
		`, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}], "cni.dev/attachments": [{"containerID": "c2", "ifname": "net1"}]`,
		`, "cni.dev/attachments": [{"containerID": "", "ifname": 5}]`} {
		f.Add(gcConf(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := GCAttachments(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		for _, a := range got {
			if CheckContainerID("c", a.ContainerID) != nil || CheckIfName("i", a.IfName) != nil {
				t.Fatalf("invalid attachment %+v returned", a)
			}
		}
	})
}

// FuzzRequestedIPs: never panics; an error wraps ErrInvalid; addresses are
// valid, unmapped and without zone.
func FuzzRequestedIPs(f *testing.F) {
	for _, s := range []string{``, `, "runtimeConfig": {"ips": ["10.0.0.5", "fd00::5/64"]}`, `, "runtimeConfig": {"ips": "10.77.0.50"}`,
		`, "args": {"cni": {"ips": [5]}}`, `, "runtimeConfig": {"ips": ["::ffff:10.0.0.5"]}`} {
		f.Add(gcConf(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := RequestedIPs(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		for _, a := range got {
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("address %v returned", a)
			}
		}
	})
}
