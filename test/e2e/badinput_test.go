package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/config"
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
	return netConfTop(t, store, ipam, nil)
}

// netConfTop is netConf with extra top-level keys (runtimeConfig, args,
// cni.dev/valid-attachments, name...).
func netConfTop(t *testing.T, store string, ipam, top map[string]any) []byte {
	t.Helper()
	i := localIPAM(store, map[string]any{"ranges": goodRanges()})
	for k, v := range ipam {
		i[k] = v
	}
	conf := map[string]any{"cniVersion": "1.1.0", "name": badNet, "type": "bridge", "ipam": i}
	for k, v := range top {
		conf[k] = v
	}
	return mustJSON(t, conf)
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

// badCase is one call that must fail, change nothing and say why.
type badCase struct {
	name    string
	command string // CNI_COMMAND; ADD when empty
	stdin   func(t *testing.T, store string) []byte
	id      string                         // CNI_CONTAINERID; "bad-victim" when empty, unset when "-"
	netns   func(t *testing.T) string      // CNI_NETNS; anyNetNS when nil
	env     []string                       // extra environment
	open    bool                           // stdin never reaches end of file
	code    uint                           // expected CNI code
	mention []string                       // the message names at least one of these
	check   func(t *testing.T, msg string) // more checks on the message
}

// badCases are bad inputs a hostile or broken runtime can send, each
// through the real binary.
func badCases() []badCase {
	ranges := func(r map[string]any) map[string]any { return map[string]any{"ranges": [][]map[string]any{{r}}} }
	withIPAM := func(ipam map[string]any) func(*testing.T, string) []byte {
		return func(t *testing.T, store string) []byte { return netConf(t, store, ipam) }
	}
	withTop := func(top map[string]any) func(*testing.T, string) []byte {
		return func(t *testing.T, store string) []byte { return netConfTop(t, store, nil, top) }
	}
	withDatastore := func(ds any) func(*testing.T, string) []byte {
		return func(t *testing.T, _ string) []byte { return netConf(t, "", map[string]any{"datastore": ds}) }
	}
	// whereabouts returns the config of a testdata file with only the ipam
	// type swapped (and ds as its datastore, when not nil).
	whereabouts := func(read func(t *testing.T) map[string]any, ds any) func(*testing.T, string) []byte {
		return func(t *testing.T, _ string) []byte {
			conf := read(t)
			ipam := conf["ipam"].(map[string]any)
			ipam["type"] = "ipkeeper"
			if ds != nil {
				ipam["datastore"] = ds
			}
			return mustJSON(t, conf)
		}
	}
	readmeConf := func(t *testing.T) map[string]any { return readJSON(t, "whereabouts-readme.json") }
	tempFile := func(t *testing.T) string {
		f := filepath.Join(t.TempDir(), "not-a-dir")
		if err := os.WriteFile(f, []byte("keep me\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	fifo := func(t *testing.T) string {
		f := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gc := func(top map[string]any) func(*testing.T, string) []byte {
		return func(t *testing.T, store string) []byte {
			conf := map[string]any{"cniVersion": "1.1.0", "name": badNet, "type": "bridge",
				"ipam": localIPAM(store, map[string]any{"ranges": goodRanges()})}
			for k, v := range top {
				conf[k] = v
			}
			return mustJSON(t, conf)
		}
	}
	long := strings.Repeat("n", config.MaxNameLength+1)
	sayDatastore := func(t *testing.T, msg string) {
		for _, want := range []string{"ipam.kubernetes.kubeconfig", "ipam.datastore", `"type": "local"`, `"type": "etcd"`} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q does not say how to choose a datastore (%s)", msg, want)
			}
		}
	}
	return []badCase{
		// The first audit's cases.
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
			id: "-", stdin: withIPAM(nil)},
		// skel checks this only after the plugin's ADD returned; the
		// allocation must not survive the failed ADD.
		{name: "CNI_NETNS is the plugin's own namespace", code: types.ErrInvalidNetNS, mention: []string{"CNI_NETNS"},
			netns: func(*testing.T) string { return "/proc/self/ns/net" }, stdin: withIPAM(nil)},

		// Item 2: a GC that cannot tell what is in use releases nothing.
		{name: "GC without a valid-attachments list", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/valid-attachments"}, stdin: gc(nil)},
		{name: "GC with a null list", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/valid-attachments"}, stdin: gc(map[string]any{"cni.dev/valid-attachments": nil})},
		{name: "GC with a null tagged-1.1.0 list", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/attachments"}, stdin: gc(map[string]any{"cni.dev/attachments": nil})},
		{name: "GC entry without ifname", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/valid-attachments[0].ifname"},
			stdin:   gc(map[string]any{"cni.dev/valid-attachments": []any{map[string]any{"containerID": "bad-keep"}}})},
		{name: "GC entry with empty strings", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/attachments[0].containerID"},
			stdin:   gc(map[string]any{"cni.dev/attachments": []any{map[string]any{"containerID": "", "ifname": ""}}})},
		{name: "GC entry of the wrong types", command: "GC", code: types.ErrInvalidNetworkConfig,
			mention: []string{"cni.dev/valid-attachments[1].containerID"},
			stdin: gc(map[string]any{"cni.dev/valid-attachments": []any{map[string]any{"containerID": "bad-keep", "ifname": "eth0"},
				map[string]any{"containerID": 42, "ifname": true}}})},

		// Item 3: whereabouts' default datastore (the Kubernetes API)
		// without the kubeconfig whereabouts names it with is refused,
		// with how to choose another.
		{name: "whereabouts README config without datastore/v4", code: types.ErrInvalidNetworkConfig, check: sayDatastore,
			stdin: whereabouts(readmeConf, nil)},
		{name: "production NetworkAttachmentDefinition without datastore/v4", code: types.ErrInvalidNetworkConfig, check: sayDatastore,
			stdin: whereabouts(nadConfig, nil)},
		{name: "NetworkAttachmentDefinition with datastore kubernetes/v4", code: types.ErrInvalidNetworkConfig, check: sayDatastore,
			stdin: whereabouts(nadConfig, "kubernetes")},
		{name: "whereabouts IPv6 range with datastore kubernetes/v6", code: types.ErrInvalidNetworkConfig, check: sayDatastore,
			stdin: func(t *testing.T, _ string) []byte {
				return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": badNet,
					"ipam": map[string]any{"type": "ipkeeper", "range": "fd96::/64", "datastore": "kubernetes"}})
			}},
		// The kubernetes datastore without a kubeconfig means in-cluster,
		// which a plugin on the host does not have.
		{name: "datastore type kubernetes without kubeconfig", code: types.ErrInvalidNetworkConfig, mention: []string{`"kubeconfig"`, "in-cluster"},
			stdin: withDatastore(map[string]any{"type": "kubernetes"})},

		// Item 5: bounded input, nothing blocks, the whole call is bounded.
		{name: "config larger than 1 MiB", code: types.ErrInvalidNetworkConfig, mention: []string{"1048576 bytes"},
			stdin: withTop(map[string]any{"padding": strings.Repeat("x", config.MaxConfigBytes)})},
		{name: "100 000 ranges", code: types.ErrInvalidNetworkConfig, mention: []string{"1048576 bytes"},
			stdin: func(t *testing.T, store string) []byte {
				return netConf(t, store, map[string]any{"ranges": manySubnets(100000, 1)})
			}},
		{name: "20 000 range sets/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.ranges has 20000 range sets, more than the limit of 16"},
			stdin: func(t *testing.T, store string) []byte {
				return netConf(t, store, map[string]any{"ranges": manySubnets(20000, 20000)})
			}},
		{name: "1000 ranges in one set/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"more than the limit of 256"},
			stdin: func(t *testing.T, store string) []byte {
				return netConf(t, store, map[string]any{"ranges": manySubnets6(1000)})
			}},
		{name: "5000 routes", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.routes has 5000 routes"},
			stdin: func(t *testing.T, store string) []byte {
				rs := make([]map[string]any, 5000)
				for i := range rs {
					rs[i] = map[string]any{"dst": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)}
				}
				return netConf(t, store, map[string]any{"routes": rs})
			}},
		{name: "5000 excludes/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.exclude has 5000 entries"},
			stdin: func(t *testing.T, store string) []byte {
				xs := make([]string, 5000)
				for i := range xs {
					xs[i] = fmt.Sprintf("fd96::%x", i+2)
				}
				return netConf(t, store, map[string]any{"exclude": xs})
			}},
		{name: "CNI_NETNS is a FIFO", code: types.ErrInvalidEnvironmentVariables, mention: []string{"CNI_NETNS"},
			netns: fifo, stdin: withIPAM(nil)},
		{name: "CNI_NETNS is a regular file", code: types.ErrInvalidEnvironmentVariables, mention: []string{"CNI_NETNS"},
			netns: tempFile, stdin: withIPAM(nil)},
		{name: "stdin never closed", code: types.ErrTryAgainLater, mention: []string{"timeout", "IPKEEPER_TIMEOUT"},
			open: true, env: []string{"IPKEEPER_TIMEOUT=2s"}, stdin: withIPAM(nil)},
		{name: "IPKEEPER_TIMEOUT unreadable", code: types.ErrInvalidEnvironmentVariables, mention: []string{"IPKEEPER_TIMEOUT"},
			env: []string{"IPKEEPER_TIMEOUT=forever"}, stdin: withIPAM(nil)},

		// Item 8: a static-IP request that cannot be read.
		{name: "runtimeConfig.ips a string", code: types.ErrInvalidNetworkConfig, mention: []string{"runtimeConfig.ips"},
			stdin: withTop(map[string]any{"runtimeConfig": map[string]any{"ips": "10.96.0.50"}})},
		{name: "runtimeConfig.ips [5]", code: types.ErrInvalidNetworkConfig, mention: []string{"runtimeConfig.ips[0]"},
			stdin: withTop(map[string]any{"runtimeConfig": map[string]any{"ips": []any{5}}})},
		{name: "args.cni.ips not an address/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"args.cni.ips[0]"},
			stdin: withTop(map[string]any{"args": map[string]any{"cni": map[string]any{"ips": []any{"fd96::zz"}}}})},

		// Item 9: each names the key and leaves no trace.
		{name: "gateway is the network address/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"gateway"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/24", "gateway": "10.96.0.0"}))},
		{name: "gateway is the network address/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"gateway"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "fd96::/64", "gateway": "fd96::"}))},
		{name: "gateway is the broadcast address/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"gateway"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/24", "gateway": "10.96.0.255"}))},
		{name: "empty datastore.path", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.datastore.path"},
			stdin: withDatastore(map[string]any{"type": "local", "path": ""})},
		{name: "datastore.path with NUL", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.datastore.path"},
			stdin: func(t *testing.T, store string) []byte {
				return netConf(t, "", map[string]any{"datastore": map[string]any{"type": "local", "path": store + "/x\x00y"}})
			}},
		{name: "datastore.path is a regular file", code: types.ErrInvalidNetworkConfig, mention: []string{"not-a-dir"},
			stdin: func(t *testing.T, _ string) []byte { return netConf(t, tempFile(t), nil) }},
		{name: "datastore.path under a regular file", code: types.ErrInvalidNetworkConfig, mention: []string{"not-a-dir"},
			stdin: func(t *testing.T, _ string) []byte { return netConf(t, filepath.Join(tempFile(t), "store"), nil) }},
		{name: "network name of 254 bytes", code: types.ErrInvalidNetworkConfig, mention: []string{"name", "253"},
			stdin: withTop(map[string]any{"name": long})},
		{name: "node name of 254 bytes", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.nodeName"},
			stdin: withIPAM(map[string]any{"nodeName": long})},
		{name: "$NODENAME of 254 bytes", code: types.ErrInvalidNetworkConfig, mention: []string{"$NODENAME"},
			env: []string{"NODENAME=" + long}, stdin: withIPAM(nil)},
		{name: "container ID of 254 bytes", code: types.ErrInvalidEnvironmentVariables, mention: []string{"CNI_CONTAINERID"},
			id: long, stdin: withIPAM(nil)},
		{name: "range of the network address only/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.ranges[0][0]"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "10.96.0.0/24", "rangeStart": "10.96.0.0", "rangeEnd": "10.96.0.0"}))},
		{name: "network and broadcast only/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"no address to hand out"},
			stdin: withIPAM(map[string]any{"ranges": [][]map[string]any{{{"subnet": "10.96.0.0/30", "gateway": "10.96.0.1"}}},
				"exclude": []string{"10.96.0.2/32"}})},
		{name: "rangeStart = rangeEnd = gateway/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"no address to hand out"},
			stdin: withIPAM(ranges(map[string]any{"subnet": "fd96::/64", "rangeStart": "fd96::1", "rangeEnd": "fd96::1"}))},
		{name: "exclude covering all/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"no address to hand out"},
			stdin: withIPAM(map[string]any{"exclude": []string{"10.96.0.0/24"}})},
		{name: "block larger than a /9/v4", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.blockSize"},
			stdin: withIPAM(map[string]any{"blockSize": 9, "ranges": [][]map[string]any{{{"subnet": "10.0.0.0/8"}}}})},
		{name: "block larger than a /64/v6", code: types.ErrInvalidNetworkConfig, mention: []string{"ipam.ipv6BlockSize"},
			stdin: withIPAM(map[string]any{"ipv6BlockSize": 64, "ranges": [][]map[string]any{{{"subnet": "fd96::/48"}}}})},
	}
}

// manySubnets is n IPv4 /24 ranges spread over the given number of range
// sets, as an ipam.ranges list.
func manySubnets(n, sets int) [][]map[string]any {
	out := make([][]map[string]any, 0, sets)
	for i := range n {
		r := map[string]any{"subnet": fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256)}
		if len(out) < sets {
			out = append(out, []map[string]any{r})
		} else {
			out[i%sets] = append(out[i%sets], r)
		}
	}
	return out
}

// manySubnets6 is n IPv6 /64 ranges in one set.
func manySubnets6(n int) [][]map[string]any {
	set := make([]map[string]any, n)
	for i := range set {
		set[i] = map[string]any{"subnet": fmt.Sprintf("fd96:0:%x::/64", i)}
	}
	return [][]map[string]any{set}
}

// TestBadInput feeds invalid configurations and environments to the real
// binary: each exits non-zero with a CNI error object naming the offending
// key or value, and the datastore is left exactly as it was: a store that
// held allocations keeps them, a never-used store is not even created, and
// the default store path is not created either.
func TestBadInput(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	_, errDefault := os.Stat(config.DefaultLocalPath)
	for _, tc := range badCases() {
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
				call := directCall(tc.command, tc.id, tc.stdin(t, store))
				switch tc.id {
				case "":
					call.ContainerID = "bad-victim"
				case "-":
					call.ContainerID = ""
				}
				if call.Command == "" {
					call.Command = "ADD"
				}
				if tc.netns != nil {
					call.NetNS = tc.netns(t)
				}
				call.Env, call.KeepStdinOpen = tc.env, tc.open
				// A bound, not a timing assertion: the calls that hung
				// (a FIFO, stdin never closed) fail here instead of
				// holding the test for its whole timeout.
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				out, err := cnirun.Run(ctx, ipkeeperBin, call)
				if err != nil {
					t.Fatalf("%v\n%v", err, out)
				}
				e := wantCNIError(t, call.Command, out, tc.code)
				if e.Msg == "" {
					t.Errorf("empty msg: %v", e)
				}
				if len(tc.mention) > 0 && !containsAny(e.Msg+" "+e.Details, tc.mention...) {
					t.Errorf("msg %q names none of %q", e.Msg, tc.mention)
				}
				if tc.check != nil {
					tc.check(t, e.Msg)
				}
				t.Logf("code %d: %.300s", e.Code, e.Msg)

				if _, err := os.Stat(config.DefaultLocalPath); err == nil && errDefault != nil {
					t.Errorf("bad input created the default store %s", config.DefaultLocalPath)
				}
				if populated {
					if after := storeSnapshot(t, store); after != before {
						t.Errorf("bad input changed the datastore:\nbefore:\n%s\nafter:\n%s", before, after)
					}
					return
				}
				if ents, err := os.ReadDir(store); err != nil || len(ents) != 0 {
					t.Errorf("bad input touched a never-used datastore directory: %v %v", ents, err)
				}
			})
		}
	}
}
