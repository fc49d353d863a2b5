package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// TestKill9LocalStore kills ipkeeper processes with SIGKILL at random
// moments of ADD and DEL on the local store: after every round the store
// opens, bbolt's own check passes, the invariant checker finds nothing, and
// every ADD that printed a result is in the store (durable before printed).
func TestKill9LocalStore(t *testing.T) {
	needIpkeeper(t)
	dir := t.TempDir()
	stdin := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"kill","type":"bridge","ipam":{"type":"ipkeeper",
		"nodeName":"node-a","datastore":{"type":"local","path":%q},
		"ranges":[[{"subnet":"10.66.0.0/22"}],[{"subnet":"fd66::/118"}]]}}`, dir)
	const rounds, perRound = 12, 10
	var mu sync.Mutex
	killed, printed := 0, map[string]bool{}
	for r := range rounds {
		var wg sync.WaitGroup
		for i := range perRound {
			verb, id := "ADD", fmt.Sprintf("r%02dc%d", r, i)
			if r > 0 && i%3 == 2 {
				verb, id = "DEL", fmt.Sprintf("r%02dc%d", r-1, i)
			}
			wg.Go(func() {
				cmd := exec.Command(ipkeeperBin)
				cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+id,
					"CNI_NETNS="+anyNetNS, "CNI_IFNAME=eth0", "CNI_PATH="+toolsDir)
				cmd.Stdin = bytes.NewReader(stdin)
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Start(); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rand.N(40000)) * time.Microsecond)
				sigErr := cmd.Process.Signal(syscall.SIGKILL)
				werr := cmd.Wait()
				mu.Lock()
				defer mu.Unlock()
				if ee, ok := werr.(*exec.ExitError); ok && sigErr == nil && ee.Sys().(syscall.WaitStatus).Signaled() {
					killed++
				}
				var res struct {
					IPs []json.RawMessage `json:"ips"`
				}
				switch {
				case verb == "DEL":
					// Done or killed, the handle may be gone: not checked.
					delete(printed, "kill."+id+".eth0")
				case verb == "ADD" && json.Unmarshal(out.Bytes(), &res) == nil && len(res.IPs) == 2:
					printed["kill."+id+".eth0"] = true
				}
			})
		}
		wg.Wait()
		checkLocal(t, dir, printed)
	}
	t.Logf("%d of %d plugin processes killed mid-run; %d printed ADD results checked durable", killed, rounds*perRound, len(printed))
	if killed == 0 {
		t.Fatal("no process was killed mid-run: the test tested nothing")
	}
}

// checkLocal verifies the local store in dir after a round of kills.
func checkLocal(t *testing.T, dir string, printed map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := local.Open(ctx, dir)
	if err != nil {
		t.Fatalf("store does not open after kill -9: %v", err)
	}
	defer s.Close()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("bbolt consistency check: %v", err)
	}
	rep, err := consistency.Check(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	a := allocator.New(s, nil)
	for id := range printed {
		if h, ok, err := a.Handle(ctx, id); err != nil || !ok || len(h.IPs) != 2 {
			t.Fatalf("ADD %s printed a result, but the store has %+v (found %v, %v)", id, h, ok, err)
		}
	}
}
