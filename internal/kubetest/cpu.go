package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrNoProcess: the server has no running kube-apiserver process.
var ErrNoProcess = errors.New("kubetest: no kube-apiserver process")

// CPU returns the user plus system CPU time the kube-apiserver process
// has used so far (benchmarks report its share per operation).
func (s *Server) CPU() (time.Duration, error) {
	if s.proc == nil {
		return 0, ErrNoProcess
	}
	return ProcessCPU(s.proc.cmd.Process.Pid)
}

// ProcessCPU returns the user plus system CPU time of process pid, from
// /proc/PID/stat (Linux).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command (which may hold spaces) in parentheses;
	// utime and stime are fields 14 and 15 of the whole line.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || end+2 > len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	const userHZ = 100 // the unit of /proc/PID/stat times on Linux
	return time.Duration(ut+st) * time.Second / userHZ, nil
}
