// Package agenttest runs real ipkeeper-agent processes for tests: built
// with go build, started against a (test) API server, stopped by PID.
package agenttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// startTimeout bounds how long Start waits for the agent to answer.
const startTimeout = 90 * time.Second

// Build builds ./cmd/ipkeeper-agent of the module into dir and returns
// the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	if err := testenv.Build(ctx, dir, "./cmd/ipkeeper-agent"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "ipkeeper-agent"), nil
}

// Process is a running agent.
type Process struct {
	// Socket is the unix socket it serves.
	Socket string
	// Node is the node it serves.
	Node string

	cmd  *exec.Cmd
	log  *testenv.SyncBuffer
	done chan struct{}
	once sync.Once
}

// Start runs bin for node with kubeconfig, on a socket in a new private
// directory, and waits until the socket answers — and, with ready, until
// the agent's caches are synced. t.Cleanup kills it and removes the
// directory.
func Start(t testing.TB, bin, kubeconfig, node string, ready bool) *Process {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipk-agent-") // short: a socket path fits 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return StartAt(t, bin, kubeconfig, node, filepath.Join(dir, "run", "agent.sock"), ready)
}

// StartAt is Start on the given socket path.
func StartAt(t testing.TB, bin, kubeconfig, node, socket string, ready bool) *Process {
	t.Helper()
	p := &Process{Socket: socket, Node: node, log: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--kubeconfig="+kubeconfig, "--node-name="+node, "--socket="+socket, "--log-level=debug")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Kill)
	if err := p.wait(ready); err != nil {
		p.Kill()
		t.Fatalf("ipkeeper-agent for %s: %v\n%s", node, err, p.Log())
	}
	return p
}

// wait polls the socket until it answers (and is ready, with ready), the
// process exits or startTimeout passes.
func (p *Process) wait(ready bool) error {
	c := podinfo.NewAgentClient(p.Socket)
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil || !ready && !errors.Is(err, podinfo.ErrAgentUnreachable) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill kills the agent by its PID (SIGKILL, as a crash) and waits for it.
func (p *Process) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
}

// Stop stops the agent with SIGTERM and waits for it to exit.
func (p *Process) Stop() error {
	var err error
	p.once.Do(func() {
		err = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			err = errors.New("did not exit within 30 s of SIGTERM")
		}
	})
	return err
}

// Exited reports the exit status once the process ended.
func (p *Process) Exited() (*os.ProcessState, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState, true
	default:
		return nil, false
	}
}

// Log is what the agent wrote so far.
func (p *Process) Log() string { return p.log.String() }
