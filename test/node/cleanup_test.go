package node

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sysctls the kubelet sets at start (its kernel defaults); the node
// saves them before and writes them back after.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

func saveSysctls(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}

func restoreSysctls(t *testing.T, saved map[string]string) {
	t.Helper()
	for k, v := range saved {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			t.Errorf("restore sysctl %s=%s: %v", k, v, err)
		}
	}
}

// reapRuntime removes what the node's containerd made and may have left
// behind when it or its shims were killed: shim processes (by their
// executable and the containerd address on their command line), the
// processes and cgroups of the node's sandboxes and containers (keyed by
// their IDs), the shims' sockets, every mount under the node's directory
// (sandbox network namespaces, root file systems, the kubelet's own bind
// mount), and the kubelet's log links pointing into the node's directory.
func (n *node) reapRuntime(t *testing.T) {
	t.Helper()
	ids := n.containerIDs()
	for _, pid := range n.shimPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, id := range ids {
		n.removeCgroups(t, id)
	}
	for _, id := range ids {
		for _, debug := range []bool{false, true} {
			p := filepath.Join(n.criSocket, "k8s.io", id)
			if debug {
				p = filepath.Join(p, "debug")
			}
			_ = os.Remove(fmt.Sprintf("/run/containerd/s/%x", sha256.Sum256([]byte(p))))
		}
	}
	unmountUnder(t, n.dir)
	n.removeLogLinks()
	n.removeHostDirs()
}

// hostDirs are the directories outside the node's own that its runtime
// and kubelet create at paths one cannot configure: the shims' socket
// directory, the kubelet's device-plugin socket directory and log-link
// directory, and the parent cgroup of the sandboxes in every hierarchy.
// Children come before their parents.
func hostDirs() []string {
	dirs := []string{"/run/containerd/s", "/run/containerd", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/var/log/containers"}
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", h.Name(), "k8s.io"))
	}
	return dirs
}

// noteHostDirs records which of hostDirs exist before the node starts.
func (n *node) noteHostDirs() {
	n.hadDirs = map[string]bool{}
	for _, d := range hostDirs() {
		if _, err := os.Lstat(d); err == nil {
			n.hadDirs[d] = true
		}
	}
}

// removeHostDirs removes those of hostDirs the node made, when empty
// (rmdir: a cgroup or directory still in use stays) — except the
// device-plugin directory, which holds only the kubelet's socket and
// checkpoint when the node made it, and goes with its content.
func (n *node) removeHostDirs() {
	if n.hadDirs == nil {
		return
	}
	for _, d := range hostDirs() {
		if n.hadDirs[d] {
			continue
		}
		if d == "/var/lib/kubelet/device-plugins" {
			_ = os.RemoveAll(d)
			continue
		}
		_ = os.Remove(d)
	}
}

// shimPIDs are the node's shim processes.
func (n *node) shimPIDs() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != n.tools.shim {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte(n.criSocket)) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// removeCgroups kills the processes of the cgroup containerd made for id
// (k8s.io/<id> in every v1 hierarchy: the kubelet runs without QoS
// cgroups, so the runtime's default parent is used) and removes it.
func (n *node) removeCgroups(t *testing.T, id string) {
	t.Helper()
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		dir := filepath.Join("/sys/fs/cgroup", h.Name(), "k8s.io", id)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cgroup %s not removed: %v", dir, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	for range 5 {
		mounts := mountsUnder(t, dir)
		if len(mounts) == 0 {
			return
		}
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				t.Logf("unmount %s: %v", m, err)
			}
		}
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Errorf("mounts left under %s: %v", dir, m)
	}
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeLogLinks removes the links the kubelet keeps in
// /var/log/containers (a path it does not let one configure) that point
// into the node's directory; nothing else there is touched.
func (n *node) removeLogLinks() {
	const dir = "/var/log/containers"
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.dir+"/") {
			_ = os.Remove(p)
		}
	}
}
