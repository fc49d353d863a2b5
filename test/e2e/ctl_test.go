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
func ctl(t testing.TB, confFile string, args ...string) []byte {
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

// allocations maps every allocated address in the datastore confFile names
// to its handle, read through `show --blocks` and `block show` per block.
func allocations(t *testing.T, confFile string) map[netip.Addr]string {
	t.Helper()
	var show struct {
		Blocks []struct {
			CIDR string `json:"cidr"`
		} `json:"blocks"`
	}
	decodeJSON(t, ctl(t, confFile, "show", "--blocks", "-o", "json"), &show)
	out := map[netip.Addr]string{}
	for _, b := range show.Blocks {
		var bs struct {
			Blocks []struct {
				CIDR        string `json:"cidr"`
				Allocations []struct {
					Addr   string `json:"addr"`
					Handle string `json:"handle"`
				} `json:"allocations"`
			} `json:"blocks"`
		}
		decodeJSON(t, ctl(t, confFile, "block", "show", b.CIDR, "-o", "json"), &bs)
		if len(bs.Blocks) != 1 || bs.Blocks[0].CIDR != b.CIDR {
			t.Fatalf("block show %s: got blocks %+v", b.CIDR, bs.Blocks)
		}
		for _, a := range bs.Blocks[0].Allocations {
			addr, err := netip.ParseAddr(a.Addr)
			if err != nil {
				t.Fatalf("block show %s: %v", b.CIDR, err)
			}
			if prev, dup := out[addr]; dup {
				t.Fatalf("%v listed twice: %s and %s", addr, prev, a.Handle)
			}
			out[addr] = a.Handle
		}
	}
	return out
}

// allocated lists every allocated address, sorted.
func allocated(t *testing.T, confFile string) []netip.Addr {
	t.Helper()
	var addrs []netip.Addr
	for a := range allocations(t, confFile) {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs
}

// ipState is the state `ip show ADDR` reports ("allocated", "free", ...)
// and the holding handle; an address outside every pool has no holdings.
func ipState(t *testing.T, confFile string, a netip.Addr) (state, handle string) {
	t.Helper()
	var ip struct {
		Holdings []struct {
			State    string `json:"state"`
			HandleID string `json:"handleID"`
		} `json:"holdings"`
	}
	decodeJSON(t, ctl(t, confFile, "ip", "show", a.String(), "-o", "json"), &ip)
	if len(ip.Holdings) != 1 {
		t.Fatalf("ip show %v: want one holding, got %+v", a, ip.Holdings)
	}
	return ip.Holdings[0].State, ip.Holdings[0].HandleID
}

func decodeJSON(t *testing.T, doc []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(doc, v); err != nil {
		t.Fatalf("ipkeeperctl -o json printed invalid JSON: %v\n%s", err, doc)
	}
}

// sortedAddrs returns a sorted copy.
func sortedAddrs(in []netip.Addr) []netip.Addr {
	out := slices.Clone(in)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
