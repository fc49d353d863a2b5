package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// Timeout bounds one plugin invocation, stdin and parsing included; the
// environment variable TimeoutEnv overrides it.
const Timeout = 60 * time.Second

// TimeoutEnv names the environment variable that overrides Timeout with a
// Go duration ("30s") between MinTimeout and MaxTimeout.
const TimeoutEnv = "IPKEEPER_TIMEOUT"

// Bounds of TimeoutEnv.
const (
	MinTimeout = time.Second
	MaxTimeout = 10 * time.Minute
)

// watchdogMargin is how long (at most a tenth of the timeout) before the
// invocation's deadline the verbs' context expires, so that an operation that honours its context reports
// its own error before the watchdog cuts the process off.
const watchdogMargin = 2 * time.Second

// watchdogGrace bounds how long the watchdog waits for a result being
// written to stdout before it exits without printing.
const watchdogGrace = 2 * time.Second

// Main runs the plugin as a CNI executable. The whole invocation, reading
// stdin included, runs under a watchdog: past the timeout the process
// prints a CNI "try again later" error (code 11) and exits, whatever it
// was blocked in. Stdin is bounded by config.MaxConfigBytes.
func Main(about string) {
	start := time.Now()
	shortLived()
	out := &gate{w: os.Stdout}
	timeout, terr := timeoutFromEnv(os.Getenv)
	if terr != nil {
		timeout = Timeout
	}
	// A verb handed over by the plugin ends by the plugin's deadline: the
	// runtime sees one call and one timeout.
	h, herr := handedOver(os.Getenv)
	end := start.Add(timeout)
	if !h.end.IsZero() && h.end.Before(end) {
		end = h.end
	}
	startWatchdog(end, timeout, out, os.Exit)

	p := New()
	p.Stdout = out
	p.end = end
	p.deadline = end.Add(-min(watchdogMargin, timeout/10))
	p.agentDown = h.agentErr
	if terr == nil {
		terr = herr
	}
	if terr != nil {
		exitWith(out, cniError(terr))
	}
	if e := p.run(about, end); e != nil {
		exitWith(out, e)
	}
	out.close()
}

// run runs the verb CNI_COMMAND names, as Main does once its watchdog is
// set: it reads stdin (boundStdin), parses the config once and hands the
// parsed config down to the hand-off check and the verb. It returns the
// CNI error Main prints.
func (p *Plugin) run(about string, end time.Time) *types.Error {
	if os.Getenv("CNI_COMMAND") != "VERSION" {
		stdin, err := boundStdin()
		if err == nil {
			conf, perr := parseConfig(stdin)
			p.parsed = &parsed{conf: conf, err: perr}
			err = handOff(conf, stdin, true, handover{end: end})
		}
		if err != nil && os.Getenv("CNI_COMMAND") == "STATUS" {
			return statusError(err)
		} else if err != nil {
			return cniError(err)
		}
	}
	if os.Getenv("CNI_COMMAND") == "DEL" {
		// DEL releases the attachment's addresses whatever CNI_NETNS
		// names (see Del); skel's own after-the-fact netns check would
		// fail it, or hang on a FIFO, after the release. This is the
		// variable skel reads to skip that check.
		_ = os.Setenv("CNI_NETNS_OVERRIDE", "1")
	}
	return skel.PluginMainFuncsWithError(skel.CNIFuncs{
		Add:    p.Add,
		Del:    p.Del,
		Check:  p.Check,
		GC:     p.GC,
		Status: p.Status,
	}, Versions, about)
}

// shortLivedHeap is the heap size past which a plugin process collects
// garbage (shortLived): well above what a call needs (decoding a node
// object of 500 pods takes a few MiB), well below what a node can spare.
const shortLivedHeap = 256 << 20

// shortLived tunes the Go runtime for a process that lives for one call
// and mostly waits on its datastore: one P instead of one per CPU (no
// idle Ps spinning for work while the call waits) and no garbage
// collection below shortLivedHeap: it takes CPU and wall time off every
// ADD process (measured in docs/BENCHMARKS.md). Long-running binaries
// (the agent) never call Main.
func shortLived() {
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(shortLivedHeap)
}

// exitWith prints err as a CNI error object, unless the watchdog already
// printed one, and exits 1.
func exitWith(out *gate, err *types.Error) {
	out.last(errorJSON(err))
	os.Exit(1)
}

// startWatchdog arranges that, when deadline passes before out is closed,
// a code-11 error is printed on out and exit(1) is called (see
// watchdogFire). The returned timer stops the watchdog.
func startWatchdog(deadline time.Time, timeout time.Duration, out *gate, exit func(int)) *time.Timer {
	return time.AfterFunc(time.Until(deadline), watchdogFire(timeout, out, exit))
}

// watchdogFire returns what the watchdog does when the deadline passed:
// print a code-11 error on out and exit(1), unless out was closed (the
// call finished). A write to out that blocks (a runtime that stopped
// reading) gets watchdogGrace more, then exit(1) without a message.
func watchdogFire(timeout time.Duration, out *gate, exit func(int)) func() {
	return func() {
		hard := time.AfterFunc(watchdogGrace, func() { exit(1) })
		e := cniError(fmt.Errorf("%w: ipkeeper did not finish within its timeout of %v (%s); "+
			"try again: an ADD that was cut off returns the same addresses when repeated, and DEL releases them", errTimeout, timeout, TimeoutEnv))
		if out.last(errorJSON(e)) {
			exit(1)
			return
		}
		hard.Stop()
	}
}

// errorJSON renders a CNI error object.
func errorJSON(e *types.Error) []byte {
	b, err := json.MarshalIndent(e, "", "    ")
	if err != nil {
		return []byte(fmt.Sprintf(`{"code": %d, "msg": %q}`, e.Code, e.Msg))
	}
	return b
}

// timeoutFromEnv returns the invocation's timeout: Timeout, or TimeoutEnv.
func timeoutFromEnv(getenv func(string) string) (time.Duration, error) {
	v := getenv(TimeoutEnv)
	if v == "" {
		return Timeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < MinTimeout || d > MaxTimeout {
		return Timeout, fmt.Errorf("%w: %s=%q is not a duration between %v and %v", errArgs, TimeoutEnv, v, MinTimeout, MaxTimeout)
	}
	return d, nil
}

// boundStdin reads stdin up to config.MaxConfigBytes and replaces os.Stdin
// by a pipe that yields what was read, so that skel, which reads stdin
// whole, never holds more than that. It returns what it read.
func boundStdin() ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(os.Stdin, config.MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the network config from stdin: %w", errIO, err)
	}
	if len(data) > config.MaxConfigBytes {
		return nil, &config.FieldError{Reason: fmt.Sprintf("the network config on stdin is more than the limit of %d bytes (%d MiB)",
			config.MaxConfigBytes, config.MaxConfigBytes>>20)}
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: stdin pipe: %w", errIO, err)
	}
	go func() {
		_, _ = io.Copy(pw, bytes.NewReader(data))
		_ = pw.Close()
	}()
	os.Stdin = r
	return data, nil
}

// gate is the plugin's stdout: it lets exactly one of the normal output
// and the watchdog's error through once the other has finished.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

// Write writes p unless the gate was closed.
func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errClosedOutput
	}
	return g.w.Write(p)
}

// last writes p, when the gate is still open, and closes it. It reports
// whether p was written.
func (g *gate) last(p []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	_, _ = g.w.Write(p)
	return true
}

// close closes the gate: nothing more is written.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

// errClosedOutput is returned by writes after the watchdog fired.
var errClosedOutput = errors.New("plugin output closed by the watchdog")
