// Package webuitest runs what the address map's browser tests and its
// page-load benchmark need: Debian's chromium, headless, driven by
// chromedp with a fresh profile, and `ipkeeperctl ui` as a process.
package webuitest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium returns the path of the chromium binary on PATH.
func Chromium() (string, error) {
	return exec.LookPath("chromium")
}

// Browser starts a headless chromium at execPath with a fresh profile in
// profileDir and a 1400x1000 window, and returns a chromedp context for one
// tab. cancel closes the browser.
func Browser(ctx context.Context, execPath, profileDir string) (context.Context, context.CancelFunc) {
	// Chromium's temporary files (with disable-dev-shm-usage, its shared
	// memory too; its singleton socket, whose path must stay short) go to
	// a directory of their own that cancel removes, not into /tmp itself.
	tmp, err := os.MkdirTemp("", "chromium-")
	if err != nil {
		tmp = profileDir
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profileDir),
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("force-device-scale-factor", "1"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	return bctx, func() {
		bcancel()
		acancel()
		if tmp != profileDir {
			_ = os.RemoveAll(tmp)
		}
	}
}

// UI is a running `ipkeeperctl ui`.
type UI struct {
	// URL is the page's address (http://127.0.0.1:PORT/).
	URL  string
	cmd  *exec.Cmd
	done chan error
	// Stderr collects the process's standard error.
	Stderr *strings.Builder
}

// StartUI runs ctl with args (the datastore flags) followed by
// `ui --listen 127.0.0.1:0` and extra (more ui flags), and waits for the
// line that names its address.
func StartUI(ctx context.Context, ctl string, args []string, extra ...string) (*UI, error) {
	all := append(append(append([]string{}, args...), "ui", "--listen", "127.0.0.1:0"), extra...)
	cmd := exec.Command(ctl, all...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	u := &UI{cmd: cmd, done: make(chan error, 1), Stderr: &strings.Builder{}}
	cmd.Stderr = u.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { u.done <- cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		i := strings.Index(l, "http://")
		if !ok || i < 0 {
			u.Stop()
			return nil, fmt.Errorf("ipkeeperctl ui printed %q, not its address; stderr: %s", l, u.Stderr)
		}
		u.URL = l[i:]
		return u, nil
	case <-ctx.Done():
		u.Stop()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		u.Stop()
		return nil, errors.New("ipkeeperctl ui did not print its address within 30 s")
	}
}

// Stop interrupts the process (by its PID), waits for it, and kills it
// when it does not end within 10 s.
func (u *UI) Stop() {
	if u.cmd.Process == nil {
		return
	}
	_ = u.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		_ = u.cmd.Process.Kill()
		<-u.done
	}
	u.done <- nil // later Stops return at once
}

// ArtifactsDir is where a test keeps its screenshots: under
// $IPKEEPER_ARTIFACTS when set (kept), else in fallback (a temporary
// directory the caller removes).
func ArtifactsDir(name, fallback string) (string, error) {
	base := os.Getenv("IPKEEPER_ARTIFACTS")
	if base == "" {
		return fallback, nil
	}
	dir := base + string(os.PathSeparator) + name
	return dir, os.MkdirAll(dir, 0o755)
}
