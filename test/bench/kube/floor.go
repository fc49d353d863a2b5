package main

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// floor measures what no design with one process exec and one API write
// per ADD can go below on this machine: the CPU of an exec of a process
// that does nothing (/bin/true), of the plugin answering VERSION (Go
// runtime start, its binary's pages; nothing read), and of the
// kube-apiserver and its etcd for one compare-and-swap update of an
// IPAMNode, small (one handle) and as large as the goal run's objects (50
// handles per node), sent from this process through the datastore's
// client. It prints them with the ADD/s they allow on this machine's
// CPUs and what whereabouts' rate times 20 would need.
func floor(ctx context.Context, srv *kubetest.Server, ipk string, waRate float64) error {
	execCPU := func(name string, env []string, args ...string) (time.Duration, error) {
		const n = 200
		before := meter()
		for range n {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = env
			if err := cmd.Run(); err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
		}
		return meter().sub(before).plugin / n, nil
	}
	trueCPU, err := execCPU("/bin/true", nil)
	if err != nil {
		return err
	}
	versionCPU, err := execCPU(ipk, []string{"CNI_COMMAND=VERSION"})
	if err != nil {
		return err
	}
	s, err := kube.NewForConfig(srv.Config, "floor")
	if err != nil {
		return err
	}
	defer s.Close()
	writeCPU := func(handles int) (time.Duration, error) {
		const n = 200
		pool := ipam.Pool{Name: "floor", CIDR: netip.MustParsePrefix("10.99.0.0/16"), BlockSize: 26}
		n0 := store.Node{Name: fmt.Sprintf("floor-%d", handles)}
		for i := range handles / 64 {
			n0.Blocks = append(n0.Blocks, ipam.NewBlock(pool, pool.BlockAt(uint64(i)), n0.Name))
		}
		if handles%64 != 0 || handles == 0 {
			n0.Blocks = append(n0.Blocks, ipam.NewBlock(pool, pool.BlockAt(uint64(len(n0.Blocks))), n0.Name))
		}
		add := func(n *store.Node, id string) error {
			for bi := range n.Blocks {
				if n.Blocks[bi].FreeCount(pool) == 0 {
					continue
				}
				nb, a, err := n.Blocks[bi].Assign(pool, id)
				if err != nil {
					return err
				}
				n.Blocks[bi] = nb
				n.Handles = append(n.Handles, ipam.Handle{ID: id, Network: "floor", ContainerID: id, IfName: "eth0", Node: n.Name,
					Namespace: "default", Pod: "pod-" + id, NetNS: "/var/run/netns/" + id, Created: time.Now().UTC().Truncate(time.Second),
					IPs: []ipam.HandleIP{{Addr: a, Pool: pool.Name, Block: nb.CIDR}}})
				return nil
			}
			return fmt.Errorf("no room")
		}
		for i := range handles {
			if err := add(&n0, fmt.Sprintf("resident%03d", i)); err != nil {
				return 0, err
			}
		}
		cur, err := s.CreateNode(ctx, n0)
		if err != nil {
			return 0, err
		}
		before := meter()
		for i := range n {
			next := cur
			next.Blocks = append([]ipam.Block(nil), cur.Blocks...)
			next.Handles = append([]ipam.Handle(nil), cur.Handles...)
			if i%2 == 0 {
				if err := add(&next, "floater"); err != nil {
					return 0, err
				}
			} else {
				h := next.Handles[len(next.Handles)-1]
				for bi := range next.Blocks {
					if next.Blocks[bi].CIDR == h.IPs[0].Block {
						if next.Blocks[bi], err = next.Blocks[bi].Release(h.IPs[0].Addr, h.ID); err != nil {
							return 0, err
						}
					}
				}
				next.Handles = next.Handles[:len(next.Handles)-1]
			}
			if cur, err = s.UpdateNode(ctx, next); err != nil {
				return 0, err
			}
		}
		c := meter().sub(before)
		return (c.apiserver + c.self) / n, nil
	}
	small, err := writeCPU(1)
	if err != nil {
		return err
	}
	large, err := writeCPU(50)
	if err != nil {
		return err
	}
	cpus := runtime.NumCPU()
	rate := func(d time.Duration) float64 { return float64(cpus) / d.Seconds() }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("\nFloor on this machine (%d CPUs), CPU per operation:\n", cpus)
	fmt.Printf("  exec of /bin/true %.1f ms; ipkeeper answering VERSION %.1f ms\n", ms(trueCPU), ms(versionCPU))
	fmt.Printf("  one IPAMNode update, kube-apiserver + its etcd + this client: 1 handle %.1f ms, 50 handles %.1f ms\n", ms(small), ms(large))
	minimum := versionCPU + small
	fmt.Printf("  one plugin exec and one small write, nothing else: %.1f ms -> at most %.0f ADD/s here", ms(minimum), rate(minimum))
	if waRate > 0 {
		fmt.Printf("; 20x whereabouts (%.1f ADD/s) needs %.0f ADD/s, %.1f ms of CPU per ADD", waRate, 20*waRate, ms(time.Duration(float64(cpus)/(20*waRate)*float64(time.Second))))
	}
	fmt.Println()
	return nil
}
