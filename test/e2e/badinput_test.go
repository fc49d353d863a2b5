package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

const badNet = "ipk-e2e-bad"

// goodRanges is the dual-stack pool the "populated" store holds.
func goodRanges() [][]map[string]any {
	return [][]map[string]any{{{"subnet": "10.96.0.0/24"}}, {{"subnet": "fd96::/64"}}}
}

// netConf is a bridge config delegating to ipkeeper on store with extra
// ipam keys; ranges defaults to goodRanges.
func netConf(t *testing.T, store string, ipam map[string]any) []byte {
	t.Helper()
	i := localIPAM(store, map[string]any{"ranges": goodRanges()})
	for k, v := range ipam {
		i[k] = v
	}
	return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": badNet, "type": "bridge", "ipam": i})
}

// storeSnapshot is everything ipkeeperctl shows about the store in dir.
func storeSnapshot(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "good.conf")
	if err := os.WriteFile(f, netConf(t, dir, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(ctl(t, f, "pool", "list", "-o", "json"))
	b.Write(ctl(t, f, "show", "--blocks", "--nodes", "-o", "json"))
	for _, a := range allocated(t, f) {
		b.WriteString(a.String() + "\n")
	}
	return b.String()
}

// TestBadInput feeds invalid configurations and environments to the real
// binary: each exits non-zero with a CNI error object naming the offending
// key or value, and the datastore is left exactly as it was (a store that
// held allocations keeps them; a never-used store stays empty).
func TestBadInput(t *testing.T) {
	needIpkeeper(t)
	type badCase struct {
		name    string
		stdin   func(t *testing.T, store string) []byte
		noID    bool     // leave CNI_CONTAINERID unset
		netns   string   // CNI_NETNS if not anyNetNS
		code    uint     // expected CNI code
		mention []string // the message names at least one of these
	}
	ranges := func(r map[string]any) map[string]any { return map[string]any{"ranges": [][]map[string]any{{r}}} }
	withIPAM := func(ipam map[string]any) func(*testing.T, string) []byte {
		return func(t *testing.T, store string) []byte { return netConf(t, store, ipam) }
	}
	cases := []badCase{
		{name: "malformed JSON", code: types.ErrDecodingFailure, stdin: func(_ *testing.T, store string) []byte {
			return []byte(`{"cniVersion":"1.1.0","name":"` + badNet + `","type":"bridge","ipam":{"type":"ipkeeper","datastore":{"type":"local","path":"` + store + `"},`)
		}},
		{name: "ranges not a list", code: types.ErrInvalidNetworkConfig, mention: []string{"ranges"},
			stdin: withIPAM(map[string]any{"ranges": "10.96.0.0/24"})},
		{name: "unknown datastore type", code: types.ErrInvalidNetworkConfig, mention: []string{"mongo"},
			stdin: func(t *testing.T, store string) []byte {
				return netConf(t, store, map[string]any{"datastore": map[string]any{"type": "mongo", "path": store}})
			}},
		{name: "invalid CIDR/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"10.96.0.0/33"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/33"}))},
		{name: "invalid CIDR/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"fd96::/129"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "fd96::/129"}))},
		{name: "rangeStart outside subnet/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"10.96.1.5"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/24", "rangeStart": "10.96.1.5"}))},
		{name: "rangeStart outside subnet/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"fd97::5"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "fd96::/64", "rangeStart": "fd97::5"}))},
		{name: "gateway outside subnet/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"10.97.0.1"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/24", "gateway": "10.97.0.1"}))},
		{name: "gateway outside subnet/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"fd97::1"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "fd96::/64", "gateway": "fd97::1"}))},
		{name: "pool smaller than block/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"blockSize", "block size"},
			stdin: withIPAM(map[string]any{"blockSize": 24, "ranges": [][]map[string]any{{{"subnet": "10.96.0.0/26"}}}})},
		{name: "pool smaller than block/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"ipv6BlockSize", "block size"},
			stdin: withIPAM(map[string]any{"ipv6BlockSize": 120, "ranges": [][]map[string]any{{{"subnet": "fd96::/122"}}}})},
		{name: "missing CNI_CONTAINERID", code: types.ErrInvalidEnvironmentVariables, mention: []string{"CNI_CONTAINERID"},
			noID: true, stdin: withIPAM(nil)},
		// skel checks this only after the plugin's ADD returned; the
		// allocation must not survive the failed ADD.
		{name: "CNI_NETNS is the plugin's own namespace", code: types.ErrInvalidNetNS, mention: []string{"CNI_NETNS"},
			netns: "/proc/self/ns/net", stdin: withIPAM(nil)},
	}
	for _, tc := range cases {
		for _, populated := range []bool{false, true} {
			name := tc.name + "/never-used store"
			if populated {
				name = tc.name + "/store with allocations"
			}
			t.Run(name, func(t *testing.T) {
				store := t.TempDir()
				var before string
				if populated {
					ipamAdd(t, "bad-keep", netConf(t, store, nil))
					before = storeSnapshot(t, store)
				}
				id := "bad-victim"
				if tc.noID {
					id = ""
				}
				call := directCall("ADD", id, tc.stdin(t, store))
				if tc.netns != "" {
					call.NetNS = tc.netns
				}
				out, err := cnirun.Run(ctxT(t), ipkeeperBin, call)
				if err != nil {
					t.Fatal(err)
				}
				e := wantCNIError(t, "ADD", out, tc.code)
				if e.Msg == "" {
					t.Errorf("empty msg: %v", e)
				}
				if len(tc.mention) > 0 && !containsAny(e.Msg+" "+e.Details, tc.mention...) {
					t.Errorf("msg %q names none of %q", e.Msg, tc.mention)
				}
				t.Logf("code %d: %s", e.Code, e.Msg)

				if populated {
					if after := storeSnapshot(t, store); after != before {
						t.Errorf("bad input changed the datastore:\nbefore:\n%s\nafter:\n%s", before, after)
					}
					return
				}
				if ents, _ := os.ReadDir(store); len(ents) == 0 {
					return // nothing was even created
				}
				if got, want := storeSnapshot(t, store), storeSnapshot(t, t.TempDir()); got != want {
					t.Errorf("bad input left state in a never-used datastore:\n%s\nan untouched one shows:\n%s", got, want)
				}
			})
		}
	}
}
