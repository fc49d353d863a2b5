package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// TestGCScopeAndLegacyKey runs CNI GC through the real binary on one store
// shared by two nodes and two networks, IPv4 and IPv6: node-a's GC of its
// network, listing only c1 under the tagged CNI 1.1.0 key
// cni.dev/attachments, releases node-a's other attachment of that network
// and nothing of node-b or of the other network.
func TestGCScopeAndLegacyKey(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	for _, tc := range []struct {
		name          string
		ranges, other [][]map[string]any // of badNet, of the other network
	}{
		{"v4", [][]map[string]any{{{"subnet": "10.96.0.0/24"}}}, [][]map[string]any{{{"subnet": "10.97.0.0/24"}}}},
		{"v6", [][]map[string]any{{{"subnet": "fd96::/64"}}}, [][]map[string]any{{{"subnet": "fd97::/64"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			conf := func(network, node string, top map[string]any) []byte {
				ranges := tc.ranges
				if network != badNet {
					ranges = tc.other
				}
				return netConfTop(t, store, map[string]any{"ranges": ranges, "nodeName": node},
					merge(map[string]any{"name": network}, top))
			}
			addr := map[string]netip.Addr{}
			for _, a := range []struct{ id, network, node string }{
				{"c1", badNet, "node-a"}, {"c2", badNet, "node-a"}, {"c3", badNet, "node-b"}, {"c4", badNet + "-other", "node-a"},
			} {
				res := ipamAdd(t, a.id, conf(a.network, a.node, nil))
				ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
				addr[a.id] = ip.Unmap()
			}
			gc := conf(badNet, "node-a", map[string]any{"cni.dev/attachments": []map[string]any{{"containerID": "c1", "ifname": "eth0"}}})
			out, err := cnirun.Run(ctxT(t), ipkeeperBin, cnirun.Call{Command: "GC", Path: toolsDir, Stdin: gc})
			if err != nil || out.ExitCode != 0 {
				t.Fatalf("GC: %v\n%v", err, out)
			}
			cf := filepath.Join(t.TempDir(), "any.conf")
			if err := os.WriteFile(cf, conf(badNet, "node-a", nil), 0o600); err != nil {
				t.Fatal(err)
			}
			got := allocated(t, cf) // every address of the store, all networks and nodes
			for id, want := range map[string]bool{"c1": true, "c2": false, "c3": true, "c4": true} {
				if slices.Contains(got, addr[id]) != want {
					t.Errorf("%s (%v): held after GC = %v, want %v (store holds %v)", id, addr[id], !want, want, got)
				}
			}
		})
	}
}

// merge returns a copy of a with b's keys set.
func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestDelWhateverNetNS: DEL through the real binary releases the
// attachment and succeeds whatever CNI_NETNS names: a FIFO (it used to
// release and then hang in skel's netns check), the plugin's own namespace
// (it used to release and then fail with code 8), or nothing. The CNI spec
// asks DEL to succeed as far as it can, and an IPAM plugin never enters
// the namespace.
func TestDelWhateverNetNS(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, netns string }{
		{"FIFO", fifo}, {"own namespace", "/proc/self/ns/net"}, {"unset", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			stdin := netConf(t, store, nil)
			res := ipamAdd(t, "del-me", stdin)
			keep := ipamAdd(t, "keep-me", stdin)
			call := directCall("DEL", "del-me", stdin)
			call.NetNS = tc.netns
			// A bound, not a timing assertion: a DEL that hangs fails here.
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			out, err := cnirun.Run(ctx, ipkeeperBin, call)
			if err != nil || out.ExitCode != 0 {
				t.Fatalf("DEL with CNI_NETNS %q: %v\n%v", tc.netns, err, out)
			}
			cf := filepath.Join(t.TempDir(), "c.conf")
			if err := os.WriteFile(cf, stdin, 0o600); err != nil {
				t.Fatal(err)
			}
			held := allocated(t, cf)
			for _, ip := range res.IPs {
				a, _ := netip.AddrFromSlice(ip.Address.IP)
				if slices.Contains(held, a.Unmap()) {
					t.Errorf("DEL succeeded but %v is still held", a)
				}
			}
			for _, ip := range keep.IPs {
				a, _ := netip.AddrFromSlice(ip.Address.IP)
				if !slices.Contains(held, a.Unmap()) {
					t.Errorf("DEL of del-me released keep-me's %v", a)
				}
			}
		})
	}
}
