package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// ctl runs ipkeeperctl --config confFile args... and returns stdout; it
// fails the test when the command fails.
func ctl(t *testing.T, confFile string, args ...string) []byte {
	t.Helper()
	needCtl(t)
	out, stderr, err := ctlRun(confFile, args...)
	if err != nil {
		t.Fatalf("ipkeeperctl %v: %v\nstdout: %s\nstderr: %s", args, err, out, stderr)
	}
	return out
}

func ctlRun(confFile string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, append([]string{"--config", confFile}, args...)...)
	var se bytes.Buffer
	cmd.Stderr = &se
	out, err := cmd.Output()
	return out, se.Bytes(), err
}

// allocated lists every allocated address in the datastore confFile names,
// read through `show --blocks` and `block show` for each block.
func allocated(t *testing.T, confFile string) []netip.Addr {
	t.Helper()
	var blocks []netip.Prefix
	walkStrings(t, ctl(t, confFile, "show", "--blocks", "-o", "json"), func(s string) {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() && !slices.Contains(blocks, p) {
			blocks = append(blocks, p)
		}
	})
	var addrs []netip.Addr
	for _, b := range blocks {
		walkStrings(t, ctl(t, confFile, "block", "show", b.String(), "-o", "json"), func(s string) {
			if a, err := netip.ParseAddr(s); err == nil && b.Contains(a) && !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		})
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs
}

// walkStrings calls f for every string (value or key) in a JSON document.
func walkStrings(t *testing.T, doc []byte, f func(string)) {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("ipkeeperctl -o json printed invalid JSON: %v\n%s", err, doc)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			f(v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				f(k)
				walk(e)
			}
		}
	}
	walk(v)
}

// sortedAddrs returns a sorted copy.
func sortedAddrs(in []netip.Addr) []netip.Addr {
	out := slices.Clone(in)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
