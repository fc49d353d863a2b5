package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// TestConcurrentAdds starts 200 ipkeeper ADD processes at once on one pool
// of 150 usable addresses (a /24 or /120 cut down by rangeStart/rangeEnd):
// exactly 150 succeed with distinct addresses inside the range, the other
// 50 exit non-zero with CNI error code 100, and after one DEL a new ADD gets
// the one free address.
func TestConcurrentAdds(t *testing.T) {
	for _, tc := range []struct{ name, subnet, lo, hi string }{
		{"v4", "10.98.0.0/24", "10.98.0.10", "10.98.0.159"},
		{"v6", "fd98::/120", "fd98::10", "fd98::a5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			concurrentAdds(t, tc.subnet, mustAddr(tc.lo), mustAddr(tc.hi))
		})
	}
}

func concurrentAdds(t *testing.T, subnet string, lo, hi netip.Addr) {
	needIpkeeper(t)
	const procs, usable = 200, 150
	stdin := mustJSON(t, map[string]any{
		"cniVersion": "1.1.0",
		"name":       "ipk-e2e-concurrent",
		"type":       "bridge",
		"ipam": localIPAM(t.TempDir(), map[string]any{
			"ranges": [][]map[string]any{{{"subnet": subnet, "rangeStart": lo.String(), "rangeEnd": hi.String()}}},
		}),
	})

	outs := make([]cnirun.Output, procs)
	errs := make([]error, procs)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = cnirun.Run(ctxT(t), ipkeeperBin, directCall("ADD", idf("conc-%03d", i), stdin))
		})
	}
	close(start)
	wg.Wait()

	owner := map[netip.Addr]int{}
	failCodes := map[uint]int{}
	var firstOK int = -1
	for i, out := range outs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v", i, errs[i])
		}
		if out.ExitCode != 0 {
			e, err := out.CNIError()
			if err != nil {
				t.Fatalf("process %d failed without a CNI error object: %v\n%v", i, err, out)
			}
			failCodes[e.Code]++
			if e.Code != codePoolExhausted {
				t.Errorf("process %d: code %d, want %d: %v", i, e.Code, codePoolExhausted, e)
			}
			continue
		}
		res := parseResult(t, "1.1.0", out.Stdout)
		if len(res.IPs) != 1 {
			t.Fatalf("process %d: want one address: %v", i, res.IPs)
		}
		a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
		a = a.Unmap()
		if !inRange(a, lo, hi) {
			t.Errorf("process %d got %v outside %v-%v", i, a, lo, hi)
		}
		if prev, dup := owner[a]; dup {
			t.Errorf("DUPLICATE: processes %d and %d both got %v", prev, i, a)
		}
		owner[a] = i
		if firstOK < 0 {
			firstOK = i
		}
	}
	t.Logf("%d succeeded, failures by code: %v", len(owner), failCodes)
	if len(owner) != usable {
		t.Fatalf("%d ADDs succeeded, want exactly %d (failures by code: %v)", len(owner), usable, failCodes)
	}

	// The datastore holds exactly what was printed: failed ADDs left nothing.
	confFile := filepath.Join(t.TempDir(), "net.conf")
	if err := os.WriteFile(confFile, stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	held := allocations(t, confFile)
	if len(held) != len(owner) {
		t.Errorf("datastore holds %d addresses, %d ADDs succeeded", len(held), len(owner))
	}
	for a, i := range owner {
		if want := "ipk-e2e-concurrent." + idf("conc-%03d", i) + ".eth0"; held[a] != want {
			t.Errorf("%v: datastore handle %q, ADD printed it for %q", a, held[a], want)
		}
	}

	var freed netip.Addr
	for a, i := range owner {
		if i == firstOK {
			freed = a
		}
	}
	if out := ipamRun(t, "DEL", idf("conc-%03d", firstOK), stdin); out.ExitCode != 0 {
		t.Fatalf("DEL: %v", out)
	}
	res := ipamAdd(t, "conc-after-del", stdin)
	if a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP); a.Unmap() != freed {
		t.Fatalf("ADD after DEL got %v, want the only free address %v", a.Unmap(), freed)
	}
	wantCNIError(t, "ADD on the full pool", ipamRun(t, "ADD", "conc-one-too-many", stdin), codePoolExhausted)
}
