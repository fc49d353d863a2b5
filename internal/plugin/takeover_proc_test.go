//go:build linux

package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// zombie starts a process that exits at once and is reaped only when the
// test ends, and returns its PID: until then /proc lists it, with its ns
// directory, but its namespace links resolve to nothing.
func zombie(t *testing.T) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	// A bound, not a timing assertion: the process exits in milliseconds.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// "PID (comm) STATE ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not exit: %s", pid, b)
		}
	}
}

// TestNetnsGoneInContainerProcPath: in a container (the agent) a /proc/PID
// path is never judged, even where the container's /proc lists that PID
// with its ns directory: the PID was the host's, and the container's
// process of that number is another one. Here that other process is a
// zombie of the test's own pid namespace, whose ns/net resolves to
// nothing: on the host the path is gone, and an earlier sandbox recorded
// with it is taken over on a full pool; in a container it is never gone,
// and the new sandbox's ADD fails with 100, changing nothing.
func TestNetnsGoneInContainerProcPath(t *testing.T) {
	path := fmt.Sprintf("/proc/%d/ns/net", zombie(t))
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		t.Fatalf("setup: %s must be visible for the directory check to pass: %v", filepath.Dir(path), err)
	}
	if gone, why := netnsGone(path); !gone {
		t.Fatalf("setup: netnsGone(%s) = false (%s); want gone, a zombie's namespace link resolving to nothing", path, why)
	}
	if gone, why := (&Plugin{InContainer: true}).netnsGone(path); gone || !strings.Contains(why, "host process") {
		t.Errorf("in a container: netnsGone(%s) = %v, %q; want not gone, naming a host process", path, gone, why)
	}
	for _, r := range takeoverRanges {
		for _, inContainer := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/inContainer=%v", r.name, inContainer), func(t *testing.T) {
				h := newHarness(t)
				h.p.InContainer = inContainer
				stdin := h.conf("1.1.0", r.ipam)
				oldA, err := h.podAdd("old-a", "uid-a", path, true, stdin)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.podAdd("old-b", "uid-b", filepath.Join(t.TempDir(), "old-b"), true, stdin); err != nil {
					t.Fatal(err)
				}
				before := h.dump()
				got, err := h.podAdd("new-a", "uid-a", filepath.Join(t.TempDir(), "new-a"), false, stdin)
				if !inContainer {
					if err != nil || !slices.Equal(got, oldA) {
						t.Fatalf("on the host: ADD of pod A's new sandbox = %v, %v; want the old sandbox's %v taken over", got, err, oldA)
					}
					return
				}
				if err == nil || cniCode(t, err) != CodePoolExhausted {
					t.Fatalf("in a container: ADD of pod A's new sandbox = %v, %v; want code %d, the old sandbox's %s not judged", got, err, CodePoolExhausted, path)
				}
				if after := h.dump(); after != before {
					t.Fatalf("the refused ADD changed the store:\n%s\n->\n%s", before, after)
				}
			})
		}
	}
}
