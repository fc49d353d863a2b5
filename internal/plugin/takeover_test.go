//go:build linux

package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// TestNetnsGone: only a path that does not exist or is not a namespace
// file is gone; a namespace file of any kind, an empty or relative path
// never are. A FIFO is examined without blocking.
func TestNetnsGone(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		gone bool
	}{
		{filepath.Join(dir, "missing"), true},
		{filepath.Join(file, "below-a-file"), true},
		{file, true},
		{dir, true},
		{fifo, true},
		{"/proc/self/ns/net", false},
		{"/proc/self/ns/uts", false},
		{"", false},
		{"run/netns/relative", false},
	}
	for _, c := range cases {
		gone, why := netnsGone(c.path)
		if gone != c.gone || why == "" {
			t.Errorf("netnsGone(%q) = %v, %q; want %v", c.path, gone, why, c.gone)
		}
	}
}

// takeoverRanges are configs whose range sets hold exactly two addresses:
// IPv4 and IPv6 alone and side by side.
var takeoverRanges = []struct{ name, ipam string }{
	{"IPv4", `"ranges":[[{"subnet":"10.44.0.0/24","rangeStart":"10.44.0.2","rangeEnd":"10.44.0.3"}]]`},
	{"IPv6", `"ranges":[[{"subnet":"fd00:44::/64","rangeStart":"fd00:44::2","rangeEnd":"fd00:44::3"}]]`},
	{"dual-stack", `"ranges":[[{"subnet":"10.44.0.0/24","rangeStart":"10.44.0.2","rangeEnd":"10.44.0.3"}],[{"subnet":"fd00:44::/64","rangeStart":"fd00:44::2","rangeEnd":"fd00:44::3"}]]`},
}

// podAdd runs ADD for a sandbox of pod uid (no pod when uid is "") with
// CNI_NETNS netns, the runtime's netns check off when override is set.
func (h *harness) podAdd(container, uid, netns string, override bool, stdin []byte) ([]netip.Addr, error) {
	h.t.Helper()
	args := &skel.CmdArgs{ContainerID: container, IfName: "eth0", Netns: netns, Path: "/opt/cni/bin", StdinData: stdin}
	if uid != "" {
		args.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod-" + uid + ";K8S_POD_UID=" + uid
	}
	if override {
		args.NetnsOverride = "true"
	}
	h.out.Reset()
	if err := h.p.Add(args); err != nil {
		return nil, err
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(h.out.Bytes(), &res); err != nil {
		h.t.Fatalf("ADD %s printed %q: %v", container, h.out, err)
	}
	var out []netip.Addr
	for _, ip := range res.IPs {
		out = append(out, netip.MustParsePrefix(ip.Address).Addr())
	}
	return out, nil
}

// TestAddTakesOverOnFullPool: on a full pool, the new sandbox of a pod
// whose earlier sandbox's network namespace is gone (missing, or a plain
// file) gets that sandbox's addresses; one whose earlier sandbox's
// namespace still exists, and a sandbox of no named pod, get 100; the
// takeover is logged to the plugin's log, never to stdout; a late DEL of
// the old sandbox releases nothing of the new one's.
func TestAddTakesOverOnFullPool(t *testing.T) {
	for _, r := range takeoverRanges {
		for _, gone := range []string{"missing", "plain file"} {
			t.Run(r.name+"/"+gone, func(t *testing.T) {
				h := newHarness(t)
				var log bytes.Buffer
				h.p.Log = slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
				stdin := h.conf("1.1.0", r.ipam)
				oldNS := filepath.Join(t.TempDir(), "old-a")
				if gone == "plain file" {
					if err := os.WriteFile(oldNS, nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				oldA, err := h.podAdd("old-a", "uid-a", oldNS, true, stdin)
				if err != nil {
					t.Fatal(err)
				}
				// Pod B's sandbox lives: its namespace file is a namespace.
				if _, err := h.podAdd("old-b", "uid-b", "/proc/self/ns/net", true, stdin); err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct{ container, uid string }{{"new-b", "uid-b"}, {"nopod", ""}} {
					before := h.dump()
					_, err := h.podAdd(c.container, c.uid, filepath.Join(t.TempDir(), c.container), false, stdin)
					if err == nil || cniCode(t, err) != CodePoolExhausted {
						t.Fatalf("ADD %s: %v, want code %d", c.container, err, CodePoolExhausted)
					}
					if after := h.dump(); after != before {
						t.Fatalf("a failed ADD of %s changed the store:\n%s\n->\n%s", c.container, before, after)
					}
				}
				if log.Len() != 0 {
					t.Fatalf("log before the takeover: %s", log.String())
				}
				got, err := h.podAdd("new-a", "uid-a", filepath.Join(t.TempDir(), "new-a"), false, stdin)
				if err != nil {
					t.Fatalf("ADD of pod A's new sandbox: %v", err)
				}
				if !slices.Equal(got, oldA) {
					t.Fatalf("new sandbox got %v, want the old sandbox's %v", got, oldA)
				}
				if strings.Contains(h.out.String(), "took over") {
					t.Fatalf("the takeover was logged on stdout: %s", h.out)
				}
				for _, want := range append([]string{"took over", `"oldContainer":"old-a"`, `"newContainer":"new-a"`, `"podUID":"uid-a"`, oldNS}, addrStrings(oldA)...) {
					if !strings.Contains(log.String(), want) {
						t.Errorf("the log does not name %s: %s", want, log.String())
					}
				}
				if ids := strings.Join(h.handles(), " "); ids != "net1.new-a.eth0 net1.old-b.eth0" {
					t.Fatalf("handles %s", ids)
				}
				if err := h.p.Del(h.args("old-a", stdin)); err != nil {
					t.Fatalf("late DEL of the old sandbox: %v", err)
				}
				if ids := strings.Join(h.handles(), " "); ids != "net1.new-a.eth0 net1.old-b.eth0" {
					t.Fatalf("after the old sandbox's DEL: handles %s", ids)
				}
				// ADD again is idempotent, DEL of the new sandbox frees.
				if again, err := h.podAdd("new-a", "uid-a", filepath.Join(t.TempDir(), "new-a"), false, stdin); err != nil || !slices.Equal(again, oldA) {
					t.Fatalf("ADD again: %v, %v", again, err)
				}
				if err := h.p.Del(h.args("new-a", stdin)); err != nil {
					t.Fatal(err)
				}
				if ids := strings.Join(h.handles(), " "); ids != "net1.old-b.eth0" {
					t.Fatalf("after the new sandbox's DEL: handles %s", ids)
				}
			})
		}
	}
}

// TestAddNoTakeoverWithRoom: with a free address the new sandbox gets it,
// and the earlier sandbox's allocation stays (the controller reclaims it).
func TestAddNoTakeoverWithRoom(t *testing.T) {
	for _, r := range takeoverRanges {
		t.Run(r.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", r.ipam)
			oldA, err := h.podAdd("old-a", "uid-a", filepath.Join(t.TempDir(), "gone"), false, stdin)
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.podAdd("new-a", "uid-a", filepath.Join(t.TempDir(), "new"), false, stdin)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(got, oldA) {
				t.Fatalf("the new sandbox took %v over although the pool had room", got)
			}
			if ids := strings.Join(h.handles(), " "); ids != "net1.new-a.eth0 net1.old-a.eth0" {
				t.Fatalf("handles %s", ids)
			}
		})
	}
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprint(a))
	}
	return out
}
