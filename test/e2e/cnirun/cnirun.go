// Package cnirun runs CNI plugin binaries as separate processes, the way a
// container runtime does: configuration on stdin, parameters in CNI_*
// environment variables, a result or an error object on stdout. The
// end-to-end tests and the process benchmark share it.
package cnirun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ErrNoCNIError is returned by Output.CNIError when stdout does not hold a
// CNI error object.
var ErrNoCNIError = errors.New("cnirun: stdout is not a CNI error object")

// Call is one plugin invocation.
type Call struct {
	Command     string   // CNI_COMMAND: ADD, DEL, CHECK, GC, STATUS, VERSION
	ContainerID string   // CNI_CONTAINERID; omitted from the environment when empty
	NetNS       string   // CNI_NETNS; omitted when empty
	IfName      string   // CNI_IFNAME; omitted when empty
	Args        string   // CNI_ARGS; omitted when empty
	Path        string   // CNI_PATH; omitted when empty
	Env         []string // extra KEY=VALUE entries, appended last
	Stdin       []byte   // the network configuration
	// KeepStdinOpen gives the process Stdin (at most 64 KiB) on a pipe
	// that never reaches end of file while the process runs: a runtime
	// that does not close the plugin's stdin.
	KeepStdinOpen bool
}

// Output is what a finished plugin process left behind.
type Output struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
	Duration time.Duration
}

// Error is the CNI error object a failing plugin prints on stdout.
type Error struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

// Error renders the error object for test messages.
func (e *Error) Error() string {
	return fmt.Sprintf("CNI error code %d: %s (details %q)", e.Code, e.Msg, e.Details)
}

// Run executes bin with the call's environment and stdin and waits for it.
// The process inherits the caller's environment minus any CNI_* variable.
// A non-zero exit is reported in Output.ExitCode, not as an error; the
// error is for a process that could not be run at all or was cut off by
// ctx.
func Run(ctx context.Context, bin string, c Call) (Output, error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = c.environ()
	cmd.Stdin = bytes.NewReader(c.Stdin)
	if c.KeepStdinOpen {
		if len(c.Stdin) >= 64<<10 {
			return Output{}, fmt.Errorf("cnirun: %d bytes do not fit a pipe's buffer", len(c.Stdin))
		}
		r, w, err := os.Pipe()
		if err != nil {
			return Output{}, err
		}
		defer r.Close()
		defer w.Close()
		if _, err := w.Write(c.Stdin); err != nil {
			return Output{}, err
		}
		cmd.Stdin = r
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	out := Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Duration: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return out, fmt.Errorf("cnirun: %s %s: %w", bin, c.Command, ctx.Err())
	case errors.As(err, &exitErr) && exitErr.ExitCode() > 0:
		out.ExitCode = exitErr.ExitCode()
	default:
		return out, fmt.Errorf("cnirun: %s %s: %w", bin, c.Command, err)
	}
	return out, nil
}

func (c Call) environ() []string {
	env := make([]string, 0, len(os.Environ())+len(c.Env)+6)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	add := func(k, v string) {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	add("CNI_COMMAND", c.Command)
	add("CNI_CONTAINERID", c.ContainerID)
	add("CNI_NETNS", c.NetNS)
	add("CNI_IFNAME", c.IfName)
	add("CNI_ARGS", c.Args)
	add("CNI_PATH", c.Path)
	return append(env, c.Env...)
}

// CNIError parses stdout as a CNI error object. It fails when stdout is not
// one (not JSON, or no non-zero code).
func (o Output) CNIError() (*Error, error) {
	var e Error
	if err := json.Unmarshal(o.Stdout, &e); err != nil {
		return nil, fmt.Errorf("%w: %v: %q", ErrNoCNIError, err, o.Stdout)
	}
	if e.Code == 0 {
		return nil, fmt.Errorf("%w: no code: %q", ErrNoCNIError, o.Stdout)
	}
	return &e, nil
}

// String summarises the output for test failure messages.
func (o Output) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout: %s\nstderr: %s", o.ExitCode, o.Duration.Round(time.Millisecond), o.Stdout, o.Stderr)
}
