package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// lockProbe is a plugin's stdout that, when the result is written, tries
// to take every lock file matched by glob without waiting, as the node's
// next plugin process would.
type lockProbe struct {
	t      *testing.T
	glob   string
	out    bytes.Buffer
	held   []string
	probed int
}

func (w *lockProbe) Write(b []byte) (int, error) {
	paths, err := filepath.Glob(w.glob)
	if err != nil || len(paths) == 0 {
		w.t.Errorf("no lock file matches %s (%v)", w.glob, err)
	}
	for _, path := range paths {
		w.probed++
		f, err := os.Open(path)
		if err != nil {
			w.t.Error(err)
			continue
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			w.held = append(w.held, path)
		} else if err != nil {
			w.t.Error(err)
		}
		f.Close()
	}
	return w.out.Write(b)
}

// An ADD prints its result after it released the node's lock (etcd: the
// node lock file; local: the store file's own lock): the node's next
// plugin process does not wait for the result's output.
func TestADDPrintsAfterUnlock(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	locks := t.TempDir()
	t.Setenv("IPKEEPER_LOCK_DIR", locks)
	local := t.TempDir()
	for _, c := range []struct {
		name, datastore, glob string
	}{
		{"etcd", fmt.Sprintf(`{"type":"etcd","endpoints":[%q],"prefix":"/print"}`, srv.Endpoint), filepath.Join(locks, "*.lock")},
		{"local", fmt.Sprintf(`{"type":"local","path":%q}`, local), filepath.Join(local, "ipkeeper.db")},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			probe := &lockProbe{t: t, glob: c.glob}
			h.p.Stdout = probe
			conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge",
				"ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":%s,%s}}`, c.datastore, dualRanges)
			for _, id := range []string{"c1", "c2"} {
				if err := h.p.Add(h.args(id, conf)); err != nil {
					t.Fatal(err)
				}
			}
			if probe.probed == 0 || len(probe.held) > 0 {
				t.Fatalf("lock files held while the result was printed: %v (of %d probed)", probe.held, probe.probed)
			}
			if !bytes.Contains(probe.out.Bytes(), []byte(`"ips"`)) {
				t.Fatalf("no result printed: %s", probe.out.Bytes())
			}
		})
	}
}
