package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

var cniVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// TestCNIVersions runs ADD, CHECK (from 0.4.0) and DEL through the binary
// for every supported cniVersion, IPv4 and IPv6: the result is in the
// requested format, ADD is idempotent, CHECK accepts the real prevResult
// and rejects a forged one, DEL releases and repeats cleanly.
func TestCNIVersions(t *testing.T) {
	needIpkeeper(t)
	store := t.TempDir()
	for _, fam := range []struct {
		name, subnet, forged string
	}{
		{"v4", "10.95.0.0/24", "10.95.0.250/24"},
		{"v6", "fd95::/64", "fd95::fff0/64"},
	} {
		for _, v := range cniVersions {
			t.Run(fam.name+"/"+v, func(t *testing.T) {
				conf := map[string]any{
					"cniVersion": v, "name": "ipk-e2e-ver-" + fam.name, "type": "bridge",
					"ipam": localIPAM(store, map[string]any{"ranges": [][]map[string]any{{{"subnet": fam.subnet}}}}),
				}
				stdin := mustJSON(t, conf)
				confFile := filepath.Join(t.TempDir(), "net.conf")
				if err := os.WriteFile(confFile, stdin, 0o600); err != nil {
					t.Fatal(err)
				}
				id := "ver-" + fam.name + "-" + v

				out := ipamRun(t, "ADD", id, stdin)
				if out.ExitCode != 0 {
					t.Fatalf("ADD: %v", out)
				}
				res := parseResult(t, v, out.Stdout)
				if len(res.IPs) != 1 || !mustPrefix(fam.subnet).Contains(addrOf(res.IPs[0].Address.IP)) {
					t.Fatalf("ADD: want one address in %s: %v", fam.subnet, res.IPs)
				}
				addr := addrOf(res.IPs[0].Address.IP)
				checkIPVersionField(t, v, out.Stdout, fam.name[1:])

				again := ipamAdd(t, id, stdin)
				if len(again.IPs) != 1 || addrOf(again.IPs[0].Address.IP) != addr {
					t.Fatalf("repeated ADD of the same handle: %v, first ADD gave %v", again.IPs, addr)
				}

				check := func(prev []byte) (int, []byte) {
					var m map[string]any
					if err := json.Unmarshal(prev, &m); err != nil {
						t.Fatal(err)
					}
					c := cloneMap(conf)
					c["prevResult"] = m
					o := ipamRun(t, "CHECK", id, mustJSON(t, c))
					return o.ExitCode, o.Stdout
				}
				if ok, _ := version.GreaterThanOrEqualTo(v, "0.4.0"); ok {
					if code, stdout := check(out.Stdout); code != 0 {
						t.Fatalf("CHECK with the ADD result: exit %d: %s", code, stdout)
					}
					forged := forgeResult(t, out.Stdout, fam.forged)
					if code, _ := check(forged); code == 0 {
						t.Errorf("CHECK with a prevResult claiming %s (not this handle's) succeeded", fam.forged)
					}
				} else {
					c := cloneMap(conf)
					wantCNIError(t, "CHECK with cniVersion "+v, ipamRun(t, "CHECK", id, mustJSON(t, c)), types.ErrIncompatibleCNIVersion)
				}

				if !slices.Contains(allocated(t, confFile), addr) {
					t.Fatalf("%v not allocated after ADD", addr)
				}
				for i := range 2 {
					if o := ipamRun(t, "DEL", id, stdin); o.ExitCode != 0 || len(o.Stdout) != 0 {
						t.Fatalf("DEL #%d: %v", i+1, o)
					}
				}
				if slices.Contains(allocated(t, confFile), addr) {
					t.Fatalf("%v still allocated after DEL", addr)
				}
				if ok, _ := version.GreaterThanOrEqualTo(v, "0.4.0"); ok {
					if code, _ := check(out.Stdout); code == 0 {
						t.Errorf("CHECK after DEL succeeded")
					}
				}
			})
		}
	}
}

// checkIPVersionField checks the per-address "version" key: present ("4" or
// "6") before 1.0.0, gone from 1.0.0 on.
func checkIPVersionField(t *testing.T, v string, stdout []byte, fam string) {
	t.Helper()
	var raw struct {
		IPs []map[string]any `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &raw); err != nil || len(raw.IPs) != 1 {
		t.Fatalf("result: %v: %s", err, stdout)
	}
	got, has := raw.IPs[0]["version"]
	if old, _ := version.GreaterThanOrEqualTo(v, "1.0.0"); old {
		if has {
			t.Errorf("cniVersion %s result has ips[].version %v, removed in 1.0.0: %s", v, got, stdout)
		}
	} else if got != fam {
		t.Errorf("cniVersion %s result: ips[].version %v, want %q: %s", v, got, fam, stdout)
	}
}

// forgeResult replaces the address of a result with forged.
func forgeResult(t *testing.T, stdout []byte, forged string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(stdout, &m); err != nil {
		t.Fatal(err)
	}
	m["ips"].([]any)[0].(map[string]any)["address"] = forged
	return mustJSON(t, m)
}

func cloneMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func addrOf(ip []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// TestVersionVerb checks VERSION lists every supported cniVersion, and that
// ADD with an unknown cniVersion fails with code 1.
func TestVersionVerb(t *testing.T) {
	needIpkeeper(t)
	for _, v := range cniVersions {
		out := ipamRun(t, "VERSION", "", mustJSON(t, map[string]any{"cniVersion": v}))
		if out.ExitCode != 0 {
			t.Fatalf("VERSION: %v", out)
		}
		var info struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal(out.Stdout, &info); err != nil {
			t.Fatalf("VERSION output: %v: %s", err, out.Stdout)
		}
		for _, want := range cniVersions {
			if !slices.Contains(info.SupportedVersions, want) {
				t.Errorf("VERSION (asked with %s) lists %v, missing %s", v, info.SupportedVersions, want)
			}
		}
	}
	stdin := mustJSON(t, map[string]any{
		"cniVersion": "9.9.9", "name": "ipk-e2e-ver", "type": "bridge",
		"ipam": localIPAM(t.TempDir(), map[string]any{"ranges": [][]map[string]any{{{"subnet": "10.95.1.0/24"}}}}),
	})
	wantCNIError(t, "ADD with cniVersion 9.9.9", ipamRun(t, "ADD", "ver-unknown", stdin), types.ErrIncompatibleCNIVersion)
}
