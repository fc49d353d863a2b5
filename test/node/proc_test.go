package node

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a process the test started; it is stopped by its PID only.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// startProc starts argv with env added to the test's environment, its
// output appended to logPath, in a process group of its own (so that a
// signal to the test's group does not reach it).
func startProc(t *testing.T, name, logPath string, env []string, argv ...string) *proc {
	t.Helper()
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(p.exited)
	}()
	return p
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILL. Safe on a nil
// or exited process.
func (p *proc) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tail is the end of the process's log, for failure messages.
func (p *proc) tail(n int) string {
	if p == nil {
		return ""
	}
	return fileTail(p.log, n)
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs argv to completion and returns its combined output; failure
// is fatal, with the output.
func run(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// runErr runs argv to completion and returns its combined output and
// error.
func runErr(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}
