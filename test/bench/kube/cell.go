package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// callFunc builds the CNI call (everything but CNI_COMMAND) of attachment
// id on node, for one cell.
type callFunc func(node int, id string) cnirun.Call

// mode is one row group of the table: a plugin binary and the way it is
// configured. Another way to run ipkeeper (the agent mode, say) is one
// more mode in main's list.
type mode struct {
	name  string // the row's label
	about string // what it runs, printed before the table
	bin   string // the plugin binary, exec'd per call
	// prepare readies a fresh, empty partition (or range) for cell and
	// returns how to call the plugin in it.
	prepare func(ctx context.Context, cell int) (callFunc, error)
	// cleanup, when set, removes what the cell's DELs leave behind.
	cleanup func(ctx context.Context, cell int) error
}

// phase is one verb over a cell's attachments.
type phase struct {
	res      latency.Result // the successful calls
	attempts int            // calls wanted
	failed   int            // calls that ran and failed (exit code, no address)
	timedOut bool           // the cell's time ran out first
	firstErr string         // the first failure, for the printout
	cost     costs          // what the phase's calls cost (zero without a meter)
}

// cellResult is the ADDs of a cell, then the DELs of what they allocated.
type cellResult struct {
	mode  string
	conc  int
	add   phase
	del   phase
	dups  int // addresses handed out twice within the cell
	clean string
	// unsettled names the phases that started before the machine was
	// idle (settle gave up).
	unsettled []string
}

// nodeName is the node of the n-th of the -nodes nodes.
func nodeName(n int) string { return fmt.Sprintf("node-%02d", n) }

// podArgs is the CNI_ARGS a runtime passes: the pod of attachment id.
func podArgs(id string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-" + id + ";K8S_POD_INFRA_CONTAINER_ID=" + id
}

// runCell runs n ADD processes of m, conc at a time, attachment i on node
// i mod nodes, bounded by timeout; then (with del) DELs every attachment
// whose ADD succeeded, at the same concurrency and bound, and runs m's
// cleanup. With warm, one ADD and DEL per node go first, unmeasured: the
// pool exists and each node holds its block, as in a cluster that has
// run pods before (without, the cell's first ADD on each node claims its
// block and the first ones create the pool).
func runCell(ctx context.Context, m *mode, cell, conc, n, nodes int, timeout time.Duration, del, warm bool) (cellResult, error) {
	r := cellResult{mode: m.name, conc: conc}
	call, err := m.prepare(ctx, cell)
	if err != nil {
		return r, fmt.Errorf("%s: prepare cell %d: %w", m.name, cell, err)
	}
	if warm {
		if err := warmNodes(ctx, m, call, cell, nodes, timeout); err != nil {
			return r, err
		}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d-%05d", cell, i)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var added []int
	if !settle(ctx) {
		r.unsettled = append(r.unsettled, "ADD")
	}
	r.add = runPhase(ctx, m.bin, "ADD", conc, timeout, len(ids), func(i int) cnirun.Call {
		return call(i%nodes, ids[i])
	}, func(i int, out cnirun.Output) error {
		ips, err := resultIPs(out.Stdout)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ip := range ips {
			seen[ip]++
			if seen[ip] == 2 {
				r.dups++
			}
		}
		added = append(added, i)
		return nil
	})
	if !del {
		return r, nil
	}
	if !settle(ctx) {
		r.unsettled = append(r.unsettled, "DEL")
	}
	r.del = runPhase(ctx, m.bin, "DEL", conc, timeout, len(added), func(j int) cnirun.Call {
		i := added[j]
		return call(i%nodes, ids[i])
	}, func(int, cnirun.Output) error { return nil })
	if m.cleanup != nil {
		if err := m.cleanup(ctx, cell); err != nil {
			r.clean = err.Error()
		}
	}
	return r, nil
}

// warmNodes runs one ADD on each of the cell's nodes, then its DEL,
// unmeasured; any failure is an error.
func warmNodes(ctx context.Context, m *mode, call callFunc, cell, nodes int, timeout time.Duration) error {
	id := func(node int) string { return fmt.Sprintf("c%d-warm%02d", cell, node) }
	each := func(i int) cnirun.Call { return call(i, id(i)) }
	ok := func(int, cnirun.Output) error { return nil }
	for _, verb := range []string{"ADD", "DEL"} {
		p := runPhase(ctx, m.bin, verb, min(nodes, 8), timeout, nodes, each, ok)
		if p.res.N != nodes {
			return fmt.Errorf("%s: cell %d: warm-up %s on %d nodes: %d succeeded, first error: %s", m.name, cell, verb, nodes, p.res.N, p.firstErr)
		}
	}
	return nil
}

// runPhase runs count calls of verb, conc processes at a time, until all
// are done or timeout passes (running processes are killed then, and
// calls not started are not counted as attempted failures). ok checks a
// call that exited 0.
func runPhase(ctx context.Context, bin, verb string, conc int, timeout time.Duration, count int,
	call func(i int) cnirun.Call, ok func(i int, out cnirun.Output) error) phase {
	p := phase{attempts: count}
	if count == 0 {
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	work := make(chan int)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		lats []time.Duration
	)
	fail := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		p.failed++
		if p.firstErr == "" {
			p.firstErr = msg
		}
	}
	var before costs
	if meter != nil {
		before = meter()
	}
	start := time.Now()
	for range min(conc, count) {
		wg.Go(func() {
			for i := range work {
				c := call(i)
				c.Command = verb
				if c.Path == "" {
					c.Path = "/opt/cni/bin" // required by the CNI skeleton; nothing is exec'd from it
				}
				out, err := cnirun.Run(ctx, bin, c)
				switch {
				case ctx.Err() != nil:
					continue // cut off by the time limit: neither done nor failed
				case err != nil:
					fail(err.Error())
				case out.ExitCode != 0:
					fail(fmt.Sprintf("%s %s exit %d: %s %s", verb, c.ContainerID, out.ExitCode, strings.Join(strings.Fields(string(out.Stdout)), " "), lastLine(out.Stderr)))
				default:
					if err := ok(i, out); err != nil {
						fail(fmt.Sprintf("%s %s: %v", verb, c.ContainerID, err))
						continue
					}
					mu.Lock()
					lats = append(lats, out.Duration)
					mu.Unlock()
				}
			}
		})
	}
feed:
	for i := range count {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	p.timedOut = ctx.Err() != nil
	p.res = latency.Result{N: len(lats), Wall: time.Since(start), Lat: lats}
	if meter != nil {
		p.cost = meter().sub(before)
	}
	return p
}

// resultIPs returns the addresses of a CNI result; none is an error.
func resultIPs(stdout []byte) ([]string, error) {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		return nil, fmt.Errorf("result %q: %w", stdout, err)
	}
	if len(res.IPs) == 0 {
		return nil, fmt.Errorf("result without addresses: %s", stdout)
	}
	ips := make([]string, len(res.IPs))
	for i, ip := range res.IPs {
		ips[i] = ip.Address
	}
	return ips, nil
}

// lastLine is the last non-empty line of a process's stderr, shortened.
func lastLine(b []byte) string {
	end := len(b)
	for end > 0 && (b[end-1] == '\n' || b[end-1] == ' ') {
		end--
	}
	start := end
	for start > 0 && b[start-1] != '\n' {
		start--
	}
	s := string(b[start:end])
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
