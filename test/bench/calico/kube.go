package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// The Kubernetes datastore mode's pools: one of each family, so every ADD
// is dual-stack on both sides (ipkeeper: two range sets; Calico: one
// AutoAssign with Num4 and Num6 of 1).
var (
	kubePool4 = ipam.Pool{Name: "bench4", CIDR: netip.MustParsePrefix("10.64.0.0/16"), BlockSize: 26}
	kubePool6 = ipam.Pool{Name: "bench6", CIDR: netip.MustParsePrefix("fd00:64::/64"), BlockSize: 122}
)

// kubeSide is one side of the Kubernetes datastore mode.
type kubeSide interface {
	name() string
	add(ctx context.Context, s addSpec) (outcome, error)
	close()
}

// kubeCell is one side's measurement at one density: the latency of each
// ADD, what the side sent and what the API server stored.
type kubeCell struct {
	outcome
	// sent is the bytes of the write requests' bodies; writes and reads
	// count the requests.
	sent, writes, reads int64
}

// runKube starts a kube-apiserver (its etcd in this process) with the
// project's CRDs and RBAC and Calico's CRDs (crdDir), and measures ADDs at
// each density on each side in turn, the first alternating.
func runKube(ctx context.Context, calicoBin, crdDir string, pods []int, window int, warm bool) error {
	load, _ := os.ReadFile("/proc/loadavg")
	srv, err := kubetest.StartMain()
	if err != nil {
		return fmt.Errorf("start kube-apiserver (set IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh)): %w", err)
	}
	defer srv.Stop()
	fmt.Printf("calico-bench -kube %s: kube-apiserver %s (its etcd embedded in this process), pools %s /%d and %s /%d, dual-stack ADDs, one node\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), srv.URL, kubePool4.CIDR, kubePool4.BlockSize, kubePool6.CIDR, kubePool6.BlockSize)
	fmt.Printf("machine: %d CPUs, load average at start %s", runtime.NumCPU(), load)
	hc, err := rest.HTTPClientFor(srv.Config)
	if err != nil {
		return err
	}

	ipkMeter, err := startMeter(srv.Config)
	if err != nil {
		return err
	}
	defer ipkMeter.close()
	st, err := kube.NewForConfig(ipkMeter.restConfig(), "")
	if err != nil {
		return err
	}
	ipk, err := ipkeeperOn(ctx, st, kubePool4, kubePool6)
	if err != nil {
		return err
	}
	defer ipk.close()
	ipk.fresh = !warm
	if warm {
		fmt.Println("ipkeeper: one allocator for every ADD (-kube-warm)")
	} else {
		fmt.Println("ipkeeper: a new allocator per ADD, as a plugin process")
	}
	sides := []kubeSide{ipk}
	meters := map[string]*meter{"ipkeeper": ipkMeter}

	if calicoBin == "" {
		fmt.Println("calico: not run (no -calico binary; `make bench-calico CALICO_SRC=...` builds one)")
	} else {
		cal, calMeter, err := startKubeCalico(ctx, srv, calicoBin, crdDir)
		if err != nil {
			return err
		}
		defer calMeter.close()
		defer cal.close()
		fmt.Printf("calico: libcalico-go IPAM %s (Kubernetes datastore, CRDs of %s, its own process)\n", cal.version, crdDir)
		sides = []kubeSide{cal, ipk}
		meters["calico"] = calMeter
	}

	var rows []kubeRow
	for i, d := range pods {
		r := kubeRow{pods: d, by: map[string]*kubeCell{}}
		for j := range sides {
			sd := sides[(i+j)%len(sides)]
			c, err := kubeDensityStep(ctx, sd, meters[sd.name()], hc, srv.Config.Host, pods, d, window)
			if err != nil {
				return fmt.Errorf("%d pods, %s: %w", d, sd.name(), err)
			}
			r.by[sd.name()] = c
			log.Printf("%5d pods %-8s p50 %s stored %s/ADD sent %s/ADD %d errors", d, sd.name(), p50(&c.outcome),
				fmtBytes(perOp(c.Bytes, c.N)), fmtBytes(perOp(c.sent, c.N)), c.Errors)
			if c.FirstErr != "" {
				log.Printf("%5d pods %-8s first error: %s", d, sd.name(), c.FirstErr)
			}
		}
		rows = append(rows, r)
	}
	load, _ = os.ReadFile("/proc/loadavg")
	printKube(os.Stdout, rows, window)
	fmt.Printf("load average at end %s", load)
	return nil
}

// startKubeCalico applies Calico's CRDs and starts the Calico side on the
// Kubernetes datastore through a meter of its own.
func startKubeCalico(ctx context.Context, srv *kubetest.Server, bin, crdDir string) (*calicoSide, *meter, error) {
	objs, err := kubetest.Manifests(crdDir)
	if err != nil {
		return nil, nil, fmt.Errorf("calico CRDs: %w", err)
	}
	if len(objs) == 0 {
		return nil, nil, fmt.Errorf("calico CRDs: no manifests in %s", crdDir)
	}
	if err := srv.Apply(ctx, false, objs...); err != nil {
		return nil, nil, fmt.Errorf("apply calico CRDs: %w", err)
	}
	m, err := startMeter(srv.Config)
	if err != nil {
		return nil, nil, err
	}
	kc, err := m.writeKubeconfig(srv.Dir)
	if err != nil {
		m.close()
		return nil, nil, err
	}
	cal, err := startCalicoWith(bin, map[string]any{"op": "setup", "kubeconfig": kc,
		"cidr": kubePool4.CIDR.String(), "blockSize": kubePool4.BlockSize,
		"cidr6": kubePool6.CIDR.String(), "blockSize6": kubePool6.BlockSize})
	if err != nil {
		m.close()
		return nil, nil, err
	}
	return cal, m, nil
}

// kubeDensityStep fills the side's density node up to pods addresses (not
// measured), then makes window ADDs in a row there, one at a time, and
// after each GETs back whole every object it wrote.
func kubeDensityStep(ctx context.Context, sd kubeSide, m *meter, hc *http.Client, host string, all []int, pods, window int) (*kubeCell, error) {
	node := []string{"density-node"}
	have := 0
	for _, d := range all {
		if d >= pods {
			break
		}
		have = d + window
	}
	if pods > have {
		o, err := sd.add(ctx, addSpec{Nodes: node, Conc: 1, N: pods - have, NS: "fill"})
		if err != nil {
			return nil, err
		}
		if o.Errors > 0 {
			return nil, fmt.Errorf("fill: %d errors, the first: %s", o.Errors, o.FirstErr)
		}
	}
	c := &kubeCell{}
	start := time.Now()
	for range window {
		m.take()
		o, err := sd.add(ctx, addSpec{Nodes: node, Conc: 1, N: 1, NS: "density"})
		if err != nil {
			return nil, err
		}
		t := m.take()
		if o.Errors > 0 {
			c.fail(fmt.Errorf("%s", o.FirstErr))
			continue
		}
		stored, err := storedBytes(ctx, hc, host, t.paths)
		if err != nil {
			return nil, err
		}
		c.Lat = append(c.Lat, o.Lat...)
		c.Bytes += stored
		c.Puts += int64(len(t.paths))
		c.sent += t.sent
		c.writes += t.writes
		c.reads += t.reads
	}
	c.Wall, c.N = time.Since(start), len(c.Lat)
	return c, nil
}

// kubeRow is one density, measured on each side by name.
type kubeRow struct {
	pods int
	by   map[string]*kubeCell
}

// printKube writes the table as Markdown: per density, calico / ipkeeper
// cells and ipkeeper's over Calico's.
func printKube(w *os.File, rows []kubeRow, window int) {
	fmt.Fprintf(w, "\nKubernetes datastore, %d dual-stack ADDs in a row per cell; cells read calico / ipkeeper; ratio = ipkeeper / calico\n\n", window)
	fmt.Fprintln(w, "| pods on the node | ADD p50 | ratio | stored bytes per ADD | ratio | request bytes per ADD | ratio | writes / reads per ADD | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		c, i := r.by["calico"], r.by["ipkeeper"]
		cell := func(f func(*kubeCell) string) string {
			s := func(x *kubeCell) string {
				if x == nil {
					return "-"
				}
				return f(x)
			}
			return s(c) + " / " + s(i)
		}
		num := func(f func(*kubeCell) float64) string {
			if c == nil || i == nil {
				return "-"
			}
			return fmtRatio(ratio(f(i), f(c)))
		}
		lat := func(x *kubeCell) float64 { return float64(x.Pct(50)) }
		stored := func(x *kubeCell) float64 { return perOp(x.Bytes, x.N) }
		sent := func(x *kubeCell) float64 { return perOp(x.sent, x.N) }
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.pods,
			cell(func(x *kubeCell) string { return p50(&x.outcome) }), num(lat),
			cell(func(x *kubeCell) string { return fmtBytes(stored(x)) }), num(stored),
			cell(func(x *kubeCell) string { return fmtBytes(sent(x)) }), num(sent),
			cell(func(x *kubeCell) string {
				return fmt.Sprintf("%.1f/%.1f", perOp(x.writes, x.N), perOp(x.reads, x.N))
			}),
			cell(func(x *kubeCell) string { return fmt.Sprint(x.Errors) }))
	}
	if n := len(rows); n > 1 {
		for _, name := range []string{"calico", "ipkeeper"} {
			a, b := rows[0].by[name], rows[n-1].by[name]
			if a == nil || b == nil {
				continue
			}
			fmt.Fprintf(w, "\n%s, %d pods over %d: ADD p50 %s, stored bytes per ADD %s", name, rows[n-1].pods, rows[0].pods,
				fmtRatio(ratio(float64(b.Pct(50)), float64(a.Pct(50)))),
				fmtRatio(ratio(perOp(b.Bytes, b.N), perOp(a.Bytes, a.N))))
		}
		fmt.Fprintln(w)
	}
}

// parseDensities reads a comma-separated list of pod counts.
func parseDensities(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
			return nil, fmt.Errorf("bad density %q", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("densities must grow: %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// defaultCRDDir is Calico's CRDs in the source tree build.sh extracts
// beside the calicoside binary.
func defaultCRDDir(bin string) string {
	return filepath.Join(filepath.Dir(bin), "src", "libcalico-go", "config", "crd")
}
