// Command calico-procbench measures ipkeeper's CNI plugin against Calico's
// CNI IPAM plugin, calico-ipam, as a container runtime runs them: each ADD
// and DEL a new process, both plugins on one embedded etcd, for pods of one
// node, each under its own keys (ipkeeper's prefix, Calico's /calico/).
//
// Calico's datastore first gets what calico-node and an operator would
// have made: the IP pool (a /12 of /26 blocks, as ipkeeper's) and the
// node's Node resource, created by calicoside (test/bench/calico/side)
// through Calico's library. calico-ipam is Calico's own binary
// (cni-plugin/cmd/calico, built by side/build-ipam.sh), configured as
// Calico's CNI plugin configures it for etcdv3; it takes its host-wide
// IPAM lock file as ipkeeper takes its node lock, so both run one ADD or
// DEL at a time on the node whatever the runtime starts at once.
//
// Runs, the plugins taking turns:
//
//	ADD, -n in a row   pod i of each plugin, then pod i+1 (the first alternating)
//	DEL, -n in a row   the same pods, the same way
//	ADD, -conc-n from 16 processes at once, in -rounds rounds (each
//	                   plugin's round in turn, the first alternating)
//	DEL, the same pods, the same way
//
// after -warmup ADD+DEL pairs per plugin (not measured). A call's time is
// its process's, start to exit. It prints each run's p50 and p99 per
// plugin, Calico's p50 over ipkeeper's, the rate of each (calls over the
// time they took) and ipkeeper's rate over Calico's, and the CPU time
// (user and system) of a call's process on average, which a loaded
// machine changes less than wall time. Numbers are printed, never
// asserted.
//
//	go run ./test/bench/calico/proc -ipkeeper bin/ipkeeper \
//		-calico-ipam $(side/build-ipam.sh CALICO_SRC) -calicoside $(side/build.sh CALICO_SRC)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

var (
	flagIpkeeper   = flag.String("ipkeeper", "bin/ipkeeper", "ipkeeper's plugin binary (make build)")
	flagCalicoIPAM = flag.String("calico-ipam", "", "Calico's calico-ipam binary (test/bench/calico/side/build-ipam.sh)")
	flagCalicoSide = flag.String("calicoside", "", "calicoside binary (test/bench/calico/side/build.sh), which creates Calico's pool and Node")
	flagN          = flag.Int("n", 200, "ADDs (then DELs) in a row per plugin")
	flagConcN      = flag.Int("conc-n", 320, "ADDs (then DELs) per plugin from concurrent processes")
	flagConc       = flag.Int("conc", 16, "processes at once in the concurrent runs")
	flagRounds     = flag.Int("rounds", 4, "rounds the concurrent runs are split into, the plugins taking turns")
	flagWarmup     = flag.Int("warmup", 5, "ADD+DEL pairs per plugin before measuring")
	flagPrefix     = flag.String("prefix", "/ipkeeper", "ipkeeper's etcd key prefix")
)

// errUsage means a flag names no usable binary.
var errUsage = errors.New("usage")

func main() {
	flag.Parse()
	log.SetFlags(0)
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatalf("calico-procbench: %v", err)
	}
}

func run(ctx context.Context, w io.Writer) error {
	if *flagCalicoIPAM == "" || *flagCalicoSide == "" {
		return fmt.Errorf("%w: -calico-ipam and -calicoside name Calico's binaries (make bench-calico CALICO_SRC=... builds them)", errUsage)
	}
	// The binary acts as calico-ipam only under that name.
	if filepath.Base(*flagCalicoIPAM) != "calico-ipam" {
		return fmt.Errorf("%w: -calico-ipam %s: the binary must be named calico-ipam", errUsage, *flagCalicoIPAM)
	}
	for _, b := range []string{*flagIpkeeper, *flagCalicoIPAM, *flagCalicoSide} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	ver, err := exec.Command(*flagCalicoIPAM, "-v").Output()
	if err != nil {
		return fmt.Errorf("%s -v: %w", *flagCalicoIPAM, err)
	}
	tmp, err := os.MkdirTemp("", "calico-procbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	defer calicoMarkCleanup()()

	es, err := etcdtest.StartWith("", etcdtest.Options{})
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	defer es.Close()
	if err := setupCalico(*flagCalicoSide, es.Endpoint); err != nil {
		return err
	}
	cal, err := calicoPlugin(*flagCalicoIPAM, es.Endpoint, filepath.Join(tmp, "calico-ipam.lock"))
	if err != nil {
		return err
	}
	ipk, err := ipkeeperPlugin(*flagIpkeeper, es.Endpoint, *flagPrefix, filepath.Join(tmp, "ipkeeper-lock"))
	if err != nil {
		return err
	}
	plugins := []*plugin{cal, ipk}

	fmt.Fprintf(w, "calico-procbench %s: embedded etcd %s at %s, one node, pool %s of /%d blocks\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), etcdVersion(ctx, es.Endpoint), es.Endpoint, poolCIDR, blockSize)
	fmt.Fprintf(w, "calico: calico-ipam %s (etcdv3); ipkeeper: %s (etcd); each call a new process\n",
		strings.TrimSpace(string(ver)), *flagIpkeeper)

	for i := range *flagWarmup {
		for _, p := range plugins {
			for _, cmd := range []string{"ADD", "DEL"} {
				if _, _, err := p.call(ctx, cmd, 900000+i); err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
			}
		}
	}

	seq := make([]int, *flagN)
	for i := range seq {
		seq[i] = 1 + i
	}
	conc := make([]int, *flagConcN)
	for i := range conc {
		conc[i] = 100000 + i
	}
	var rows []row
	for _, cmd := range []string{"ADD", "DEL"} {
		r := row{what: fmt.Sprintf("%s, %d in a row", cmd, len(seq)), by: map[string]*outcome{}}
		inRow(ctx, plugins, cmd, seq, r.by)
		rows = append(rows, r)
		logRow(r)
	}
	for _, cmd := range []string{"ADD", "DEL"} {
		r := row{what: fmt.Sprintf("%s, %d from %d at once", cmd, len(conc), *flagConc), by: map[string]*outcome{}}
		inRounds(ctx, plugins, cmd, conc, *flagConc, max(1, *flagRounds), r.by)
		rows = append(rows, r)
		logRow(r)
	}
	printTable(w, rows)
	return nil
}

// inRow runs cmd for pods one at a time, pod i of every plugin before pod
// i+1, the first plugin alternating; a plugin's wall time is the sum of
// its calls'.
func inRow(ctx context.Context, plugins []*plugin, cmd string, pods []int, by map[string]*outcome) {
	for _, p := range plugins {
		by[p.name] = &outcome{}
	}
	for i, k := range pods {
		for j := range plugins {
			p := plugins[(i+j)%len(plugins)]
			o := by[p.name]
			d, cpu, err := p.call(ctx, cmd, k)
			if err != nil {
				o.fail(err)
				continue
			}
			o.Lat = append(o.Lat, d)
			o.N++
			o.Wall += d
			o.CPU += cpu
		}
	}
}

// inRounds runs cmd for pods from conc processes at once, split into
// rounds; in each round every plugin runs its share in turn, the first
// alternating. A plugin's wall time is the sum of its rounds'.
func inRounds(ctx context.Context, plugins []*plugin, cmd string, pods []int, conc, rounds int, by map[string]*outcome) {
	for _, p := range plugins {
		by[p.name] = &outcome{}
	}
	for r, part := range split(pods, rounds) {
		for j := range plugins {
			p := plugins[(r+j)%len(plugins)]
			by[p.name].add(p.concurrently(ctx, cmd, part, conc))
		}
	}
}

// split cuts pods into rounds parts in order, as even as whole parts of
// ceil(len/rounds) allow; the last parts may be shorter or empty.
func split(pods []int, rounds int) [][]int {
	per := (len(pods) + rounds - 1) / rounds
	parts := make([][]int, rounds)
	for r := range parts {
		parts[r] = pods[min(r*per, len(pods)):min((r+1)*per, len(pods))]
	}
	return parts
}

func etcdVersion(ctx context.Context, ep string) string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		return "unknown"
	}
	defer cli.Close()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return "unknown"
	}
	return st.Version
}
