package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// onNode returns stdin with the harness's node name replaced.
func onNode(stdin []byte, node string) []byte {
	return []byte(strings.Replace(string(stdin), `"nodeName":"node-a"`, `"nodeName":"`+node+`"`, 1))
}

// TestGCOnlyOwnNodeAndNetwork: a GC listing no valid attachment (the empty
// list: nothing in use) releases every allocation of its network on its
// node and nothing of another node or another network on the same store.
func TestGCOnlyOwnNodeAndNetwork(t *testing.T) {
	for _, fam := range []struct{ name, ipam string }{{"IPv4", v4Ranges}, {"IPv6", v6Ranges}} {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", fam.ipam)
			for _, c := range []struct {
				id    string
				stdin []byte
			}{
				{"a1", stdin}, {"a2", stdin},
				{"b1", onNode(stdin, "node-b")}, {"b2", onNode(stdin, "node-b")},
				{"x1", []byte(strings.Replace(string(stdin), `"name":"net1"`, `"name":"net2"`, 1))},
			} {
				if _, err := h.add(c.id, c.stdin); err != nil {
					t.Fatalf("ADD %s: %v", c.id, err)
				}
			}
			gc := h.conf("1.1.0", fam.ipam, `"cni.dev/valid-attachments":[]`)
			if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
				t.Fatalf("GC: %v", err)
			}
			if got, want := strings.Join(h.handles(), " "), "net1.b1.eth0 net1.b2.eth0 net2.x1.eth0"; got != want {
				t.Fatalf("after node-a's GC of net1 with nothing in use: handles %q, want %q (node-b's and net2's untouched)", got, want)
			}
			// node-b's GC keeps what it lists.
			gc = onNode(h.conf("1.1.0", fam.ipam, `"cni.dev/valid-attachments":[{"containerID":"b2","ifname":"eth0"}]`), "node-b")
			if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
				t.Fatalf("GC: %v", err)
			}
			if got, want := strings.Join(h.handles(), " "), "net1.b2.eth0 net2.x1.eth0"; got != want {
				t.Fatalf("after node-b's GC: handles %q, want %q", got, want)
			}
		})
	}
}

// TestGCReadsLegacyKey: the tagged CNI 1.1.0 spec text named the list
// cni.dev/attachments; a runtime written from it must not lose its live
// allocations.
func TestGCReadsLegacyKey(t *testing.T) {
	h := newHarness(t)
	stdin := h.conf("1.1.0", dualRanges)
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, err := h.add(id, stdin); err != nil {
			t.Fatal(err)
		}
	}
	gc := h.conf("1.1.0", dualRanges, `"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c3","ifname":"eth0"}]`)
	if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got, want := strings.Join(h.handles(), " "), "net1.c1.eth0 net1.c3.eth0"; got != want {
		t.Fatalf("handles %q, want %q", got, want)
	}
}

// TestGCWithoutValidListReleasesNothing: a GC whose list is missing, null
// or malformed fails with code 7 naming the key and leaves every
// allocation in place (before the fix it released all of them).
func TestGCWithoutValidListReleasesNothing(t *testing.T) {
	for _, tc := range []struct {
		name, extra, key string
	}{
		{"no list", ``, "cni.dev/valid-attachments"},
		{"null", `"cni.dev/valid-attachments":null`, "cni.dev/valid-attachments"},
		{"legacy null", `"cni.dev/attachments":null`, "cni.dev/attachments"},
		{"entry without ifname", `"cni.dev/valid-attachments":[{"containerID":"c1"}]`, "cni.dev/valid-attachments[0].ifname"},
		{"entry with empty containerID", `"cni.dev/valid-attachments":[{"containerID":"","ifname":"eth0"}]`, "cni.dev/valid-attachments[0].containerID"},
		{"entry of the wrong type", `"cni.dev/valid-attachments":[{"containerID":7,"ifname":"eth0"}]`, "cni.dev/valid-attachments[0].containerID"},
		{"not a list", `"cni.dev/valid-attachments":"c1"`, "cni.dev/valid-attachments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", dualRanges)
			for _, id := range []string{"c1", "c2"} {
				if _, err := h.add(id, stdin); err != nil {
					t.Fatal(err)
				}
			}
			before := h.dump()
			var extra []string
			if tc.extra != "" {
				extra = append(extra, tc.extra)
			}
			err := h.p.GC(&skel.CmdArgs{StdinData: h.conf("1.1.0", dualRanges, extra...)})
			if err == nil || cniCode(t, err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("GC = %v, want code 7 naming %s", err, tc.key)
			}
			if h.dump() != before {
				t.Fatal("a GC without a valid list changed the store")
			}
		})
	}
}

// TestAddRejectsUnreadableStaticIP: runtimeConfig.ips or args.cni.ips that
// cannot be read fail with code 7 naming the key, instead of a random
// address, and create nothing.
func TestAddRejectsUnreadableStaticIP(t *testing.T) {
	for _, tc := range []struct{ name, extra, key string }{
		{"runtimeConfig.ips a string", `"runtimeConfig":{"ips":"10.20.0.50"}`, "runtimeConfig.ips"},
		{"runtimeConfig.ips [5]", `"runtimeConfig":{"ips":[5]}`, "runtimeConfig.ips[0]"},
		{"runtimeConfig.ips not an address v6", `"runtimeConfig":{"ips":["fd00:20::x"]}`, "runtimeConfig.ips[0]"},
		{"args.cni.ips a string", `"args":{"cni":{"ips":"fd00:20::50"}}`, "args.cni.ips"},
		{"args.cni.ips [true]", `"args":{"cni":{"ips":[true]}}`, "args.cni.ips[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			_, err := h.add("c1", h.conf("1.0.0", dualRanges, tc.extra))
			if err == nil || cniCode(t, err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("ADD = %v, want code 7 naming %s", err, tc.key)
			}
			if d := h.dump(); d != "" {
				t.Fatalf("a refused ADD created the store:\n%s", d)
			}
		})
	}
	// A readable request is honoured, IPv4 and IPv6.
	h := newHarness(t)
	res, err := h.add("c1", h.conf("1.0.0", dualRanges, `"runtimeConfig":{"ips":["10.21.0.50/24"]}`, `"args":{"cni":{"ips":["fd00:21::50"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(addrs(res)); got != "[10.21.0.50 fd00:21::50]" {
		t.Fatalf("ADD gave %s, want the requested 10.21.0.50 and fd00:21::50", got)
	}
}

// TestAddNetNSNeverBlocks: ADD with CNI_NETNS naming a FIFO, a regular
// file, a directory or a namespace of another kind fails at once with code
// 4 naming CNI_NETNS (a FIFO used to hang the plugin), the plugin's own
// namespace with code 8, and none of them creates the store.
func TestAddNetNSNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, netns string
		code        uint
	}{
		{"FIFO", fifo, types.ErrInvalidEnvironmentVariables},
		{"regular file", file, types.ErrInvalidEnvironmentVariables},
		{"directory", dir, types.ErrInvalidEnvironmentVariables},
		{"mount namespace", "/proc/self/ns/mnt", types.ErrInvalidEnvironmentVariables},
		{"the plugin's own", "/proc/self/ns/net", types.ErrInvalidNetNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			args := h.args("c1", h.conf("1.0.0", v4Ranges))
			args.Netns = tc.netns
			err := h.p.Add(args)
			if err == nil || cniCode(t, err) != tc.code || !strings.Contains(err.Error(), "CNI_NETNS") {
				t.Fatalf("ADD = %v, want code %d naming CNI_NETNS", err, tc.code)
			}
			if d := h.dump(); d != "" {
				t.Fatalf("a refused ADD created the store:\n%s", d)
			}
		})
	}
	// A namespace that does not exist (any more) passes, as with skel.
	h := newHarness(t)
	args := h.args("c1", h.conf("1.0.0", v4Ranges))
	args.Netns = filepath.Join(dir, "gone")
	if err := h.p.Add(args); err != nil {
		t.Fatalf("ADD with a netns path that does not exist: %v", err)
	}
}

// TestDelIgnoresNetNS: DEL releases whatever CNI_NETNS names (a FIFO, the
// plugin's own namespace, nothing).
func TestDelIgnoresNetNS(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, netns := range []string{fifo, "/proc/self/ns/net", ""} {
		h := newHarness(t)
		stdin := h.conf("1.0.0", dualRanges)
		if _, err := h.add("c1", stdin); err != nil {
			t.Fatal(err)
		}
		args := h.args("c1", stdin)
		args.Netns = netns
		if err := h.p.Del(args); err != nil {
			t.Fatalf("DEL with CNI_NETNS %q: %v", netns, err)
		}
		if hs := h.handles(); len(hs) != 0 {
			t.Fatalf("DEL with CNI_NETNS %q left %v", netns, hs)
		}
	}
}

// TestAddRejectsLongContainerID: a container ID over the limit is code 4
// naming CNI_CONTAINERID, before the store is created.
func TestAddRejectsLongContainerID(t *testing.T) {
	h := newHarness(t)
	_, err := h.add(strings.Repeat("c", 254), h.conf("1.0.0", v4Ranges))
	if err == nil || cniCode(t, err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "CNI_CONTAINERID") {
		t.Fatalf("ADD = %v, want code 4 naming CNI_CONTAINERID", err)
	}
	if d := h.dump(); d != "" {
		t.Fatalf("a refused ADD created the store:\n%s", d)
	}
	if _, err := h.add(strings.Repeat("c", 253), h.conf("1.0.0", v4Ranges)); err != nil {
		t.Fatalf("ADD with a 253-byte container ID: %v", err)
	}
}

// TestUnusableDatastorePath: a datastore path that is a regular file, or
// lies under one, is code 7 naming the path (it was the internal 999), and
// the file is left as it was.
func TestUnusableDatastorePath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, filepath.Join(file, "store")} {
		h := newHarness(t)
		h.dir = path
		_, err := h.add("c1", h.conf("1.0.0", v4Ranges))
		if err == nil || cniCode(t, err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "not-a-dir") {
			t.Fatalf("ADD with datastore path %s = %v, want code 7 naming it", path, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep\n" {
		t.Fatalf("the file is now %q, %v", b, err)
	}
}
