//go:build unix

package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/kv/kvtest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// The multi-process tests re-execute this test binary; the environment
// tells the copy which child role to play.
const (
	envChild = "IPKEEPER_LOCAL_TEST_CHILD"
	envDir   = "IPKEEPER_LOCAL_TEST_DIR"
	envN     = "IPKEEPER_LOCAL_TEST_N"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		if err := runChild(role, os.Getenv(envDir), os.Getenv(envN)); err != nil {
			fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(role, dir, nStr string) error {
	ctx := context.Background()
	switch role {
	case "increment":
		n, err := strconv.Atoi(nStr)
		if err != nil {
			return err
		}
		return childIncrement(ctx, dir, n)
	case "crash":
		return childCrash(ctx, dir)
	}
	return fmt.Errorf("unknown role %q", role)
}

// childIncrement adds n to the counter, each increment through its own
// Open/Close. Odd increments read and write in two separate Opens, so the
// other process can commit in between and the CAS must catch it.
func childIncrement(ctx context.Context, dir string, n int) error {
	// Wait for the parent to start both children: it closes our stdin.
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return err
	}
	began := time.Now()
	conflicts := 0
	for i := range n {
		if i%2 == 0 {
			s, err := Open(ctx, dir, WithLockTimeout(time.Minute))
			if err != nil {
				return err
			}
			_, c, err := kvtest.Increment(ctx, s, "counter")
			conflicts += c
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			continue
		}
		for {
			err := splitIncrement(ctx, dir)
			if err == nil {
				break
			}
			if !errors.Is(err, store.ErrConflict) {
				return err
			}
			conflicts++
		}
	}
	fmt.Printf("%d %d %d\n", began.UnixNano(), time.Now().UnixNano(), conflicts)
	return nil
}

func splitIncrement(ctx context.Context, dir string) error {
	s, err := Open(ctx, dir, WithLockTimeout(time.Minute))
	if err != nil {
		return err
	}
	kvs, err := s.Get(ctx, "counter")
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	cur := kvs[0]
	v, _ := strconv.Atoi(string(cur.Value))
	s, err = Open(ctx, dir, WithLockTimeout(time.Minute))
	if err != nil {
		return err
	}
	err = s.Txn(ctx, []kv.Cond{{Key: "counter", Version: cur.Version}},
		[]kv.Op{{Key: "counter", Value: []byte(strconv.Itoa(v + 1))}})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// childCrash commits forever: each txn bumps the counter and writes
// log/<n> (about 1 KiB, so pages split and the file grows), then reports n
// on stdout before going on. Every 40 commits it closes and reopens, so
// kills also land in Open and Close.
func childCrash(ctx context.Context, dir string) error {
	var s *Store
	for i := 0; ; i++ {
		if i%40 == 0 {
			if s != nil {
				if err := s.Close(); err != nil {
					return err
				}
			}
			var err error
			if s, err = Open(ctx, dir); err != nil {
				return err
			}
		}
		kvs, err := s.Get(ctx, "counter")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(kvs[0].Value))
		n++
		ops := []kv.Op{
			{Key: "counter", Value: []byte(strconv.Itoa(n))},
			{Key: logKey(n), Value: logValue(n)},
		}
		if err := s.Txn(ctx, []kv.Cond{{Key: "counter", Version: kvs[0].Version}}, ops); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(os.Stdout, "%d\n", n); err != nil {
			return err
		}
	}
}

func logKey(n int) string { return fmt.Sprintf("log/%08d", n) }

func logValue(n int) []byte {
	return bytes.Repeat([]byte(strconv.Itoa(n)+";"), 1024/(len(strconv.Itoa(n))+1))
}

func child(t *testing.T, role, dir string, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+role, envDir+"="+dir, envN+"="+strconv.Itoa(n))
	return cmd
}

// Two real processes increment one counter through Open/Txn/Close loops;
// the file lock plus CAS must not lose a single increment.
func TestTwoProcessesIncrement(t *testing.T) {
	const perProcess = 200
	dir := t.TempDir()
	type result struct {
		out, errOut bytes.Buffer
		stdin       io.WriteCloser
		err         error
	}
	results := make([]*result, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		r := &result{}
		results[i] = r
		cmds[i] = child(t, "increment", dir, perProcess)
		cmds[i].Stdout = &r.out
		cmds[i].Stderr = &r.errOut
		var err error
		if r.stdin, err = cmds[i].StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, r := range results {
		r.stdin.Close() // go
	}
	for i, cmd := range cmds {
		results[i].err = cmd.Wait()
	}
	type span struct{ began, ended int64 }
	spans := make([]span, 2)
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("child %d (pid %d): %v\n%s", i, cmds[i].Process.Pid, r.err, r.errOut.String())
		}
		var conflicts int
		if _, err := fmt.Sscan(r.out.String(), &spans[i].began, &spans[i].ended, &conflicts); err != nil {
			t.Fatalf("child %d output %q: %v", i, r.out.String(), err)
		}
		t.Logf("child %d (pid %d): %d increments in %v, %d conflicts retried", i, cmds[i].Process.Pid,
			perProcess, time.Duration(spans[i].ended-spans[i].began), conflicts)
	}
	// The test only means something if the two loops ran at the same time.
	if spans[0].ended < spans[1].began || spans[1].ended < spans[0].began {
		t.Fatalf("the children ran one after the other (%v, %v): no concurrency was tested", spans[0], spans[1])
	}
	s := openT(t, dir)
	kvs, err := s.Get(t.Context(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(kvs[0].Value); got != strconv.Itoa(2*perProcess) {
		t.Fatalf("counter = %s after 2 processes x %d increments: lost updates", got, perProcess)
	}
	t.Logf("%d increments by 2 processes in %v", 2*perProcess, time.Since(start))
}

// A child committing in a loop is SIGKILLed at random moments; after each
// kill the store must open, pass bbolt's consistency check, and hold every
// txn the child reported committed, each one whole.
func TestCrashSafety(t *testing.T) {
	const rounds = 8
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	lastReported := 0
	total := 0
	for round := range rounds {
		cmd := child(t, "crash", dir, 0)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var (
			seen     atomic.Int64 // lines read this round
			last     atomic.Int64 // last committed n reported
			firstRow = make(chan struct{})
			readErr  = make(chan error, 1)
		)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				n, err := strconv.Atoi(sc.Text())
				if err != nil {
					readErr <- fmt.Errorf("bad line %q", sc.Text())
					return
				}
				last.Store(int64(n))
				if seen.Add(1) == 1 {
					close(firstRow)
				}
			}
			readErr <- sc.Err()
		}()

		// Round 0 may kill the child while it creates the file; later
		// rounds kill it after it has committed at least once.
		var delay time.Duration
		if round == 0 {
			delay = time.Duration(rng.IntN(30)) * time.Millisecond
		} else {
			select {
			case <-firstRow:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("round %d: child committed nothing in 30s: %s", round, stderr.String())
			}
			delay = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		time.Sleep(delay)
		if err := cmd.Process.Kill(); err != nil { // SIGKILL to this PID
			t.Fatal(err)
		}
		if err := <-readErr; err != nil {
			t.Fatalf("round %d: reading child output: %v", round, err)
		}
		err = cmd.Wait()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by the signal: %v\n%s", round, err, stderr.String())
		}
		if n := int(last.Load()); n > 0 {
			if n <= lastReported {
				t.Fatalf("round %d: child reported %d after %d", round, n, lastReported)
			}
			lastReported = n
		}
		total += int(seen.Load())
		t.Logf("round %d: killed pid %d after %v, %d commits reported (last %d)",
			round, cmd.Process.Pid, delay, seen.Load(), lastReported)
		verifyAfterCrash(t, dir, lastReported)
	}
	if total < rounds-1 {
		t.Fatalf("only %d commits over %d rounds: the kills did not interrupt real work", total, rounds)
	}
}

// verifyAfterCrash opens the store, checks the file, and checks that
// counter >= reported and log/1..counter all exist, with nothing beyond.
func verifyAfterCrash(t *testing.T, dir string, reported int) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, dir, WithLockTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("Open after kill: %v", err)
	}
	defer s.Close()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("consistency check after kill: %v", err)
	}
	kvs, err := s.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	counter := 0
	if kvs[0].Version != 0 {
		if counter, err = strconv.Atoi(string(kvs[0].Value)); err != nil {
			t.Fatalf("counter holds %q", kvs[0].Value)
		}
	}
	if counter < reported {
		t.Fatalf("counter is %d but the child reported %d committed: a committed txn was lost", counter, reported)
	}
	// The child may have committed one more than it reported, not two.
	if counter > reported+1 {
		t.Fatalf("counter is %d, child reported %d: more than one unreported commit", counter, reported)
	}
	logs, err := s.List(ctx, "log/")
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != counter {
		t.Fatalf("%d log entries for counter %d: a txn was applied in part", len(logs), counter)
	}
	for i, e := range logs {
		if e.Key != logKey(i+1) || !bytes.Equal(e.Value, logValue(i+1)) {
			t.Fatalf("log entry %d: %q (%d bytes), want %q", i, e.Key, len(e.Value), logKey(i+1))
		}
	}
}
