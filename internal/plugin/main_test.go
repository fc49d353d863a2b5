package plugin

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// TestWatchdogPrintsCode11 lets the watchdog fire on an invocation that
// never finishes: it prints one code-11 error naming the timeout and exits 1.
func TestWatchdogPrintsCode11(t *testing.T) {
	var buf bytes.Buffer
	out := &gate{w: &buf}
	exited := make(chan int, 2)
	startWatchdog(time.Now(), 7*time.Second, out, func(code int) { exited <- code })
	select {
	case code := <-exited:
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("the watchdog never fired")
	}
	var e types.Error
	if err := json.Unmarshal(buf.Bytes(), &e); err != nil {
		t.Fatalf("stdout %q: %v", buf.String(), err)
	}
	if e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "7s") || !strings.Contains(e.Msg, TimeoutEnv) {
		t.Fatalf("watchdog printed %+v, want code 11 naming the 7s timeout and %s", e, TimeoutEnv)
	}
	if _, err := out.Write([]byte("late result")); err == nil || strings.Contains(buf.String(), "late") {
		t.Fatal("a result written after the watchdog's error went through")
	}
}

// TestWatchdogAfterResult: once the result is out (the gate closed), the
// watchdog prints nothing and does not exit.
func TestWatchdogAfterResult(t *testing.T) {
	var buf bytes.Buffer
	out := &gate{w: &buf}
	if _, err := out.Write([]byte(`{"result":1}`)); err != nil {
		t.Fatal(err)
	}
	out.close()
	exited := false
	watchdogFire(time.Second, out, func(int) { exited = true })()
	if buf.String() != `{"result":1}` || exited {
		t.Fatalf("after the result the watchdog wrote %q, exit called: %v", buf.String(), exited)
	}
}

func TestTimeoutFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{
		{"", Timeout, false}, {"30s", 30 * time.Second, false}, {"1s", time.Second, false}, {"10m", 10 * time.Minute, false},
		{"0.5s", 0, true}, {"11m", 0, true}, {"-5s", 0, true}, {"soon", 0, true}, {"30", 0, true},
	} {
		got, err := timeoutFromEnv(func(string) string { return tc.v })
		if tc.bad {
			if err == nil || cniError(err).Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), TimeoutEnv) {
				t.Errorf("%s=%q: %v, %v; want code 4 naming it", TimeoutEnv, tc.v, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s=%q: %v, %v; want %v", TimeoutEnv, tc.v, got, err, tc.want)
		}
	}
}

// TestBoundStdin: stdin up to the limit is passed on unchanged, one byte
// more is a code-7 error naming the limit.
func TestBoundStdin(t *testing.T) {
	saved := os.Stdin
	t.Cleanup(func() { os.Stdin = saved })
	for _, n := range []int{0, 100, config.MaxConfigBytes, config.MaxConfigBytes + 1} {
		data := bytes.Repeat([]byte("x"), n)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = w.Write(data); _ = w.Close() }()
		os.Stdin = r
		returned, err := boundStdin()
		if n > config.MaxConfigBytes {
			if err == nil || cniError(err).Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "1048576 bytes") {
				t.Fatalf("%d bytes: %v, want code 7 naming the limit", n, err)
			}
			_ = r.Close()
			continue
		}
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(os.Stdin)
		if err != nil || !bytes.Equal(got, data) || !bytes.Equal(returned, data) {
			t.Fatalf("%d bytes: read back %d bytes (returned %d), %v", n, len(got), len(returned), err)
		}
		_ = r.Close()
	}
}
