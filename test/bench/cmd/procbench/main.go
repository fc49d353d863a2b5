// Command procbench measures the latency of CNI ADD and DEL as a container
// runtime sees it: each call is a new plugin process. It runs N sequential
// ADD+DEL pairs of ipkeeper (local datastore) and of upstream host-local,
// interleaved so both see the same machine noise, and prints percentiles
// and the ipkeeper/host-local ratio of median ADD latency.
//
// It builds nothing: `make bench` passes the binaries.
//
//	procbench -ipkeeper bin/ipkeeper -host-local .tools/bin/host-local [-n 300]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

func main() {
	ipk := flag.String("ipkeeper", "bin/ipkeeper", "path of the ipkeeper plugin binary")
	hl := flag.String("host-local", ".tools/bin/host-local", "path of the upstream host-local binary")
	n := flag.Int("n", 300, "measured ADD+DEL pairs per plugin")
	warmup := flag.Int("warmup", 10, "unmeasured ADD+DEL pairs per plugin first")
	flag.Parse()
	if err := run(os.Stdout, *ipk, *hl, *n, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "procbench:", err)
		os.Exit(1)
	}
}

// plugin is one IPAM binary under test with its configuration.
type plugin struct {
	name     string
	bin      string
	conf     []byte
	add, del []time.Duration
}

func run(w io.Writer, ipkBin, hlBin string, n, warmup int) error {
	for _, b := range []string{ipkBin, hlBin} {
		if _, err := os.Stat(b); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "ipk-procbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ranges := [][]map[string]any{{{"subnet": "10.94.0.0/16"}}}
	ipk, err := newPlugin("ipkeeper", ipkBin, map[string]any{
		"type": "ipkeeper", "datastore": map[string]any{"type": "local", "path": filepath.Join(tmp, "ipkeeper")}, "ranges": ranges,
	})
	if err != nil {
		return err
	}
	hl, err := newPlugin("host-local", hlBin, map[string]any{
		"type": "host-local", "dataDir": filepath.Join(tmp, "host-local"), "ranges": ranges,
	})
	if err != nil {
		return err
	}

	ctx := context.Background()
	for i := range warmup + n {
		order := []*plugin{ipk, hl}
		if i%2 == 1 {
			order = []*plugin{hl, ipk}
		}
		for _, p := range order {
			if err := p.pair(ctx, fmt.Sprintf("procbench-%d", i), i >= warmup); err != nil {
				return err
			}
		}
	}
	report(w, n, warmup, ipk, hl)
	return nil
}

func newPlugin(name, bin string, ipam map[string]any) (*plugin, error) {
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "procbench", "type": "bridge", "ipam": ipam})
	return &plugin{name: name, bin: bin, conf: conf}, err
}

// pair runs one ADD and one DEL of containerID, recording their wall-clock
// time (process start to exit) when measure is set.
func (p *plugin) pair(ctx context.Context, containerID string, measure bool) error {
	for _, cmd := range []string{"ADD", "DEL"} {
		out, err := cnirun.Run(ctx, p.bin, cnirun.Call{
			Command: cmd, ContainerID: containerID, IfName: "eth0",
			// Not a namespace: an IPAM plugin never enters it, and skel
			// rejects the plugin's own namespace.
			NetNS: "/run/netns/procbench-never-entered",
			Path:  filepath.Dir(p.bin), Stdin: p.conf,
		})
		if err != nil {
			return fmt.Errorf("%s %s %s: %w", p.name, cmd, containerID, err)
		}
		if out.ExitCode != 0 {
			return fmt.Errorf("%s %s %s failed: %v", p.name, cmd, containerID, out)
		}
		if !measure {
			continue
		}
		if cmd == "ADD" {
			p.add = append(p.add, out.Duration)
		} else {
			p.del = append(p.del, out.Duration)
		}
	}
	return nil
}

func report(w io.Writer, n, warmup int, ipk, hl *plugin) {
	fmt.Fprintf(w, "procbench: %d sequential ADD+DEL pairs per plugin as separate processes, interleaved (alternating order), after %d warm-up pairs\n\n", n, warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plugin\top\tmedian\tp90\tp99\tmin\tmax\t")
	for _, p := range []*plugin{ipk, hl} {
		for _, op := range []struct {
			name    string
			samples []time.Duration
		}{{"ADD", p.add}, {"DEL", p.del}} {
			s := summarize(op.samples)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.name, op.name, ms(s.median), ms(s.p90), ms(s.p99), ms(s.fastest), ms(s.slowest))
		}
	}
	tw.Flush()
	ia, ha := summarize(ipk.add).median, summarize(hl.add).median
	ratio := float64(ia) / float64(ha)
	verdict := "within"
	if ratio > 1.2 {
		verdict = "ABOVE"
	}
	fmt.Fprintf(w, "\nratio ipkeeper/host-local, median ADD: %.2f (%s the goal of <= 1.20)\n", ratio, verdict)
	fmt.Fprintln(w, "\nwhat each does per ADD:")
	fmt.Fprintln(w, "  ipkeeper:   opens the bbolt file (flock), commits the allocation in one transaction and fsyncs it before printing the result (durable)")
	fmt.Fprintln(w, "  host-local: takes a lock file, writes one file per address (no fsync) and prints the result")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
