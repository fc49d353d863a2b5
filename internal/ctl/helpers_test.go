package ctl

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var epoch = time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)

// harness runs the CLI against a real local store in a temp directory.
type harness struct {
	t       *testing.T
	dir     string // the store
	tmp     string // netns stand-ins and other files
	vars    map[string]string
	stdin   string
	exists  func(string) bool
	present map[string]bool
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), tmp: t.TempDir()}
	h.vars = map[string]string{"IPKEEPER_LOCAL_PATH": h.dir, "NODENAME": "node-a"}
	return h
}

// run runs ipkeeperctl and returns stdout, stderr and the exit status.
func (h *harness) run(args ...string) (string, string, int) {
	h.t.Helper()
	var out, errb bytes.Buffer
	env := Env{Stdin: strings.NewReader(h.stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return h.vars[k] }, Hostname: func() (string, error) { return "host-fallback", nil },
		Exists: h.exists}
	code := Run(context.Background(), args, env)
	return out.String(), errb.String(), code
}

// ok runs ipkeeperctl and fails the test unless it exits 0.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	out, errs, code := h.run(args...)
	if code != 0 {
		h.t.Fatalf("ipkeeperctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// fails runs ipkeeperctl, wants exit status code and stderr mentioning
// every one of mention, and returns stderr.
func (h *harness) fails(code int, mention []string, args ...string) string {
	h.t.Helper()
	out, errs, got := h.run(args...)
	if got != code {
		h.t.Fatalf("ipkeeperctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out, errs)
	}
	for _, m := range mention {
		if !strings.Contains(errs, m) {
			h.t.Errorf("ipkeeperctl %s: stderr does not mention %q:\n%s", strings.Join(args, " "), m, errs)
		}
	}
	return errs
}

// store opens the typed store directly, as the plugin would (the CLI
// must not hold it then).
func (h *harness) store(f func(a *allocator.Allocator)) {
	h.t.Helper()
	st, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: h.dir}, datastore.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	a.Now = func() time.Time { return epoch }
	f(a)
}

// netns makes path a live network namespace for the CLI: the unit tests
// fake path existence (Env.Exists) so that paths are stable in golden
// files; the binary's tests use real files.
func (h *harness) netns(path string) string {
	if h.present == nil {
		h.present = map[string]bool{"/var/run/netns": true}
		h.exists = func(p string) bool { return h.present[p] }
	}
	h.present[path] = true
	return path
}

// gone makes the namespace at path disappear.
func (h *harness) gone(path string) { delete(h.present, path) }

// allocate allocates for a handle, one address per set.
func (h *harness) allocate(a *allocator.Allocator, hd ipam.Handle, sets ...[]string) ipam.Handle {
	h.t.Helper()
	got, err := a.Allocate(context.Background(), allocator.Request{Handle: hd, Sets: sets})
	if err != nil {
		h.t.Fatalf("allocate %s: %v", hd.ID, err)
	}
	return got
}

// populate makes the standard scene: a dual-stack pool pair, two pods on
// node-a (c1 live, c2 whose netns is gone) and one on node-b.
func (h *harness) populate() (live, dead string) {
	h.t.Helper()
	h.ok(strings.Fields("pool add p4 --cidr 10.9.0.0/24 --block-size 28 --gateway 10.9.0.1 --exclude 10.9.0.200/29")...)
	h.ok("pool", "add", "p6", "--cidr", "fd00:9::/120", "--block-size", "124")
	live, dead = h.netns("/var/run/netns/cni-c1"), h.netns("/var/run/netns/cni-c2")
	h.store(func(a *allocator.Allocator) {
		h.allocate(a, ipam.Handle{ID: "net.c1.eth0", Network: "net", ContainerID: "c1", IfName: "eth0", Node: "node-a",
			NetNS: live, Namespace: "default", Pod: "web-1"}, []string{"p4"}, []string{"p6"})
		h.allocate(a, ipam.Handle{ID: "net.c2.eth0", Network: "net", ContainerID: "c2", IfName: "eth0", Node: "node-a",
			NetNS: dead, Namespace: "default", Pod: "web-2"}, []string{"p4"}, []string{"p6"})
		h.allocate(a, ipam.Handle{ID: "net.c3.eth0", Network: "net", ContainerID: "c3", IfName: "eth0", Node: "node-b",
			NetNS: h.netns("/var/run/netns/cni-c3"), Namespace: "kube-system", Pod: "dns-0"}, []string{"p4"})
	})
	h.gone(dead)
	return live, dead
}

// golden compares got with testdata/name.golden (rewritten with -update),
// after replacing the temp directory with $TMP.
func (h *harness) golden(name, got string) {
	h.t.Helper()
	got = strings.ReplaceAll(got, h.tmp, "$TMP")
	got = strings.ReplaceAll(got, h.dir, "$STORE")
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		h.t.Errorf("%s differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", name, path, got, want)
	}
}
