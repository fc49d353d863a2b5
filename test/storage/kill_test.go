package storage_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// procBackend is a backend the kill test reaches from other processes.
type procBackend struct {
	name string
	// open returns the store and the flags that open it in addproc.
	open func(t *testing.T) (store.Store, []string)
	// procs is how many processes run at once (bbolt's file lock lets one
	// in at a time), kill the longest a process may run.
	procs int
	kill  time.Duration
	// count bounds each process's ADDs, so that rounds × procs × count
	// stays within the pools (killV4, killV6) however fast the backend:
	// an exhausted pool would fail ADDs for a reason the test is not
	// about.
	count int
}

var procBackends = []procBackend{
	{"local", func(t *testing.T) (store.Store, []string) {
		dir := t.TempDir()
		s, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// addproc needs the file lock: this test's handle is reopened
		// after each round.
		s.Close()
		return nil, []string{"-backend", "local", "-path", dir}
	}, 1, 150 * time.Millisecond, 1000},
	{"etcd", func(t *testing.T) (store.Store, []string) {
		prefix := fmt.Sprintf("/kill%d", instances.Add(1))
		s, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{etcdSrv.Endpoint}, Prefix: prefix}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, []string{"-backend", "etcd", "-endpoint", etcdSrv.Endpoint, "-prefix", prefix}
	}, 5, 300 * time.Millisecond, 250},
	{"kubernetes", func(t *testing.T) (store.Store, []string) {
		srv := kubetest.Require(t, apiserver)
		kc := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
		prefix := fmt.Sprint("k", instances.Add(1))
		s, err := kube.Open(kube.Config{Kubeconfig: kc, Prefix: prefix, QPS: 1000, Burst: 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, []string{"-backend", "kubernetes", "-kubeconfig", kc, "-prefix", prefix}
	}, 5, 1500 * time.Millisecond, 250},
}

var (
	killV4 = ipam.Pool{Name: "kill-v4", CIDR: netip.MustParsePrefix("10.120.0.0/19"), BlockSize: 28}
	killV6 = ipam.Pool{Name: "kill-v6", CIDR: netip.MustParsePrefix("fd00:120::/115"), BlockSize: 124}
)

// TestKill9 kills processes allocating on the typed store with SIGKILL at
// random points — between any two writes of an ADD: after a claim, after
// the node's own write with a loan, before the lender's — on every
// backend. Then: no address has two holders; every ADD whose result was
// printed still holds both its addresses; and one GC (release whatever
// is not a printed ADD, as CNI GC does with the runtime's valid
// attachments, and each node adopting the blocks it claimed before its
// ADD was killed) leaves exactly the printed ADDs, with no stray loan, and
// the checker (what `ipkeeperctl check` runs on this store) finds nothing.
func TestKill9(t *testing.T) {
	bin := t.TempDir()
	if err := testenv.Build(t.Context(), bin, "./test/storage/addproc"); err != nil {
		t.Fatal(err)
	}
	for _, b := range procBackends {
		t.Run(b.name, func(t *testing.T) {
			s, flags := b.open(t)
			reopen := func() store.Store {
				if s != nil {
					return s
				}
				l, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: flags[3]}, datastore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return l
			}
			setup := reopen()
			for _, p := range []ipam.Pool{killV4, killV6} {
				if _, err := allocator.New(setup, nil).EnsurePool(t.Context(), p); err != nil {
					t.Fatal(err)
				}
			}
			if s == nil {
				setup.Close()
			}
			printed := map[string]string{} // handle ID -> node
			killed := 0
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
			for round := range 6 {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for p := range b.procs {
					node := fmt.Sprint("node-", p%4) // two processes share node-0
					args := append(append([]string{}, flags...), "-node", node, "-tag", fmt.Sprintf("r%dp%d", round, p),
						"-v4", killV4.Name, "-v6", killV6.Name, "-count", fmt.Sprint(b.count))
					after := time.Duration(rng.Int64N(int64(b.kill)))
					wg.Go(func() {
						ok, wasKilled := runKilled(t, filepath.Join(bin, "addproc"), args, after)
						mu.Lock()
						defer mu.Unlock()
						for _, id := range ok {
							printed[id] = node
						}
						if wasKilled {
							killed++
						}
					})
				}
				wg.Wait()
			}
			st := reopen()
			t.Logf("%s: %d processes killed, %d printed ADDs", b.name, killed, len(printed))
			if killed == 0 || len(printed) == 0 {
				t.Fatalf("%d processes killed, %d ADDs printed: the test exercised nothing", killed, len(printed))
			}
			held := storetest.Holders(t, st)
			a := allocator.New(st, nil)
			for id, node := range printed {
				h, ok, err := a.Handle(t.Context(), node, id)
				if err != nil || !ok || len(h.IPs) != 2 {
					t.Fatalf("printed ADD %s on %s: %+v, %v, %v", id, node, h, ok, err)
				}
				for _, ip := range h.IPs {
					if held[ip.Addr] != id {
						t.Fatalf("%s of printed ADD %s is held by %q", ip.Addr, id, held[ip.Addr])
					}
				}
			}
			if _, err := a.ReleaseHandles(t.Context(), func(h ipam.Handle) bool { _, ok := printed[h.ID]; return !ok }); err != nil {
				t.Fatal(err)
			}
			for n := range 4 {
				if _, err := a.AdoptClaims(t.Context(), fmt.Sprint("node-", n)); err != nil {
					t.Fatal(err)
				}
			}
			if held := storetest.Holders(t, st); len(held) != 2*len(printed) {
				t.Fatalf("after GC %d addresses are held, the printed ADDs hold %d", len(held), 2*len(printed))
			}
			rep, err := consistency.CheckStore(t.Context(), st)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) > 0 {
				t.Fatalf("check after GC: %+v", rep.Problems)
			}
			nodes, err := st.ListNodes(t.Context(), store.NodeSelector{})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes {
				for _, l := range n.Loans {
					if _, ok := printed[l.Handle]; !ok {
						t.Fatalf("after GC node %s keeps the loan of %s", n.Name, l.Handle)
					}
				}
			}
		})
	}
}

// runKilled runs addproc, sends it SIGKILL after d (if it still runs) and
// returns the handle IDs it printed, and whether it was killed.
func runKilled(t *testing.T, bin string, args []string, d time.Duration) ([]string, bool) {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Error(err)
		return nil, false
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return nil, false
	}
	timer := time.AfterFunc(d, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	var ids []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "ok "); ok {
			ids = append(ids, id)
		}
	}
	err = cmd.Wait()
	timer.Stop()
	killed := false
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			killed = true
		} else {
			t.Errorf("addproc %v failed: %v: %s", args, err, stderr.String())
		}
	} else if err != nil {
		t.Error(err)
	}
	return ids, killed
}
