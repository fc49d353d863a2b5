package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var nsSeq atomic.Int64

// netnsName returns a fresh namespace name unique to this test process.
func netnsName(role string) string {
	return fmt.Sprintf("ipk-e2e-%d-%s%d", os.Getpid(), role, nsSeq.Add(1))
}

// addNetns creates a named network namespace and deletes it when the test
// ends, pass or fail. It returns the name and the path plugins open.
func addNetns(t *testing.T, role string) (name, path string) {
	t.Helper()
	name = netnsName(role)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	// Loopback up, so a namespace behaves like a container's.
	nsExec(t, name, "ip", "link", "set", "lo", "up")
	return name, filepath.Join("/var/run/netns", name)
}

// nsExec runs a command inside a namespace and fails the test on error.
func nsExec(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := nsRun(ns, args...)
	if err != nil {
		t.Fatalf("ip netns exec %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// nsRun runs a command inside a namespace.
func nsRun(ns string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// ping sends one echo request from namespace ns to addr, retrying for a few
// seconds (IPv6 duplicate address detection, bridge ports still learning).
func ping(t *testing.T, ns, addr string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := nsRun(ns, "ping", "-c1", "-W2", addr)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %s from %s: %v: %s", addr, ns, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// host is a network namespace standing in for a node: the main plugin runs
// inside it, so bridges and veths never touch the machine's own network.
type host struct {
	ns      string
	cniPath string // dir with a bridge wrapper that enters ns, plus the IPAM plugins
}

// newHost creates the node namespace and a CNI_PATH whose `bridge` runs the
// upstream bridge plugin inside it. ipamBins are linked in by base name.
func newHost(t *testing.T, ipamBins ...string) *host {
	t.Helper()
	ns, _ := addNetns(t, "host")
	dir := t.TempDir()
	for _, main := range []string{"bridge"} {
		script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", ns, tool(main))
		if err := os.WriteFile(filepath.Join(dir, main), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, bin := range append([]string{tool("loopback")}, ipamBins...) {
		if err := os.Symlink(bin, filepath.Join(dir, filepath.Base(bin))); err != nil {
			t.Fatal(err)
		}
	}
	return &host{ns: ns, cniPath: dir}
}
