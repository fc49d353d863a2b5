// Package durability holds the tests of guarantee 2: the plugin prints an
// ADD's result only once the allocation is durable — fsynced to the local
// store's file, or acknowledged by etcd. They run the real plugin binary
// under strace and check the order of its system calls.
package durability

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Call is one system call from an strace -f -y log. Start and End are the
// indices of the lines where it began and where it returned (the same line
// unless another thread's call came between), so that A.End < B.Start
// means A returned before B began.
type Call struct {
	Pid        int
	Name       string
	FD         int    // first argument when it is a file descriptor, else -1
	Path       string // what strace -y printed for FD ("/x/ipkeeper.db", "pipe:[7]", "TCP:[...]")
	Args       string // the arguments as printed (strings truncated by -s)
	Ret        string // the return value as printed ("4096", "-1 EAGAIN (...)")
	Start, End int
}

// OK reports whether the call returned a non-negative value.
func (c Call) OK() bool {
	n, err := strconv.ParseInt(strings.Fields(c.Ret + " x")[0], 0, 64)
	return err == nil && n >= 0
}

var (
	lineRE    = regexp.MustCompile(`^(\d+)\s+(.*)$`)
	resumedRE = regexp.MustCompile(`^<\.\.\. (\w+) resumed>(.*)$`)
	callRE    = regexp.MustCompile(`^(\w+)\((.*)$`)
	fdRE      = regexp.MustCompile(`^(\d+)<(.*?)>(?:, |\)|$)`)
	retRE     = regexp.MustCompile(`\)\s+=\s+(.*)$`)
)

// ParseStrace reads an strace log written with -f (pid prefixes) and -y
// (file descriptors annotated with their paths). Signals, exits and lines
// it does not understand are skipped.
func ParseStrace(r io.Reader) ([]Call, error) {
	var calls []Call
	pending := map[int]int{} // pid -> index in calls of its unfinished call
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for i := 0; sc.Scan(); i++ {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		body := m[2]
		if rm := resumedRE.FindStringSubmatch(body); rm != nil {
			j, ok := pending[pid]
			if !ok || calls[j].Name != rm[1] {
				return nil, fmt.Errorf("line %d: %s resumed without its start", i+1, rm[1])
			}
			delete(pending, pid)
			calls[j].End = i
			calls[j].Args += rm[2]
			if rr := retRE.FindStringSubmatch(rm[2]); rr != nil {
				calls[j].Ret = rr[1]
			}
			continue
		}
		cm := callRE.FindStringSubmatch(body)
		if cm == nil {
			continue
		}
		c := Call{Pid: pid, Name: cm[1], FD: -1, Args: cm[2], Start: i, End: i}
		unfinished := strings.HasSuffix(body, " <unfinished ...>")
		if fm := fdRE.FindStringSubmatch(strings.TrimSuffix(cm[2], " <unfinished ...>")); fm != nil {
			c.FD, _ = strconv.Atoi(fm[1])
			c.Path = fm[2]
		}
		if unfinished {
			pending[pid] = len(calls)
			c.End = -1
		} else if rr := retRE.FindStringSubmatch(body); rr != nil {
			c.Ret = rr[1]
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// IsWrite reports whether the call writes data to its descriptor.
func (c Call) IsWrite() bool {
	switch c.Name {
	case "write", "writev", "pwrite64", "pwritev", "pwritev2", "sendto", "sendmsg":
		return true
	}
	return false
}

// IsRead reports whether the call reads data from its descriptor.
func (c Call) IsRead() bool {
	switch c.Name {
	case "read", "readv", "pread64", "recvfrom", "recvmsg":
		return true
	}
	return false
}

// IsSync reports whether the call flushes a file to disk.
func (c Call) IsSync() bool {
	return c.Name == "fdatasync" || c.Name == "fsync"
}
