package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// procBench runs the plugin binaries as processes, the way a runtime does.
func procBench(ctx context.Context, ep string) {
	tmp := mustTemp()
	defer os.RemoveAll(tmp)
	ipk := *flagIpkeeper
	if ipk == "" {
		ipk = filepath.Join(tmp, "ipkeeper")
		cmd := exec.Command("go", "build", "-o", ipk, "./cmd/ipkeeper")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			log.Fatalf("go build ./cmd/ipkeeper: %v\n%s", err, out)
		}
	}
	hl := hostLocal(tmp)
	lockDir := filepath.Join(tmp, "lock")
	type plugin struct {
		name, bin string
		conf      func(run string) []byte
	}
	local := func(bin, name string) plugin {
		return plugin{name, bin, func(run string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"ipl","type":"bridge","ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"local","path":%q},"ranges":[[{"subnet":"10.129.0.0/16"}]]}}`,
				filepath.Join(tmp, strings.ReplaceAll(name, " ", "-")+"-"+run))
		}}
	}
	etcd := func(bin, name string) plugin {
		return plugin{name, bin, func(run string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"ipe","type":"bridge","ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"etcd","endpoints":[%q],"prefix":"/proc-%s-%s"},"ranges":[[{"subnet":"10.130.0.0/16"}]]}}`,
				ep, strings.ReplaceAll(name, " ", "-"), run)
		}}
	}
	plugins := []plugin{
		{"host-local (local disk)", hl, func(run string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"hl","type":"bridge","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.128.0.0/16"}]]}}`,
				filepath.Join(tmp, "hl-"+run))
		}},
	}
	// With a baseline, each of its concurrent runs comes right before the
	// current plugin's of the same datastore, so that both see the machine
	// alike.
	if *flagBaseline != "" {
		plugins = append(plugins, local(*flagBaseline, "baseline local"))
	}
	plugins = append(plugins, local(ipk, "ipkeeper local"))
	if *flagBaseline != "" {
		plugins = append(plugins, etcd(*flagBaseline, "baseline etcd"))
	}
	plugins = append(plugins, etcd(ipk, "ipkeeper etcd"))
	run := func(bin string, conf []byte, id string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS=/var/run/netns/"+id,
			"CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "IPKEEPER_LOCK_DIR="+lockDir)
		cmd.Stdin = bytes.NewReader(conf)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if err != nil {
			return d, fmt.Errorf("%v: %s", err, out.String())
		}
		return d, nil
	}
	fmt.Printf("\n4. plugin binaries as processes, one node: %d sequential ADDs; %d ADDs from 16 concurrent processes\n", *flagSeq, *flagConc)
	fmt.Printf("%-24s %9s %9s %9s %14s %12s\n", "", "p50", "p90", "p99", "seq ADD/s", "16-conc ADD/s")
	rates := map[string]float64{}
	p50s, seqs := map[string]time.Duration{}, map[string]float64{}
	// The sequential ADDs of all plugins take turns (ADD i of each, then
	// ADD i+1), so that a change in the machine's speed meets them all
	// alike; a plugin's rate is its ADDs over the time they took.
	seqLats := make([][]time.Duration, len(plugins))
	seqConfs := make([][]byte, len(plugins))
	for j, p := range plugins {
		seqConfs[j] = p.conf("seq")
	}
	for i := range *flagSeq {
		for j, p := range plugins {
			d, err := run(p.bin, seqConfs[j], fmt.Sprintf("seq%04d", i))
			if err != nil {
				log.Fatalf("%s ADD: %v", p.name, err)
			}
			seqLats[j] = append(seqLats[j], d)
		}
	}
	for j, p := range plugins {
		var took time.Duration
		for _, d := range seqLats[j] {
			took += d
		}
		seq := latency.Result{N: len(seqLats[j]), Wall: took, Lat: seqLats[j]}
		conf := p.conf("conc")
		var wg sync.WaitGroup
		next := make(chan int, *flagConc)
		for i := range *flagConc {
			next <- i
		}
		close(next)
		t0 := time.Now()
		for range 16 {
			wg.Go(func() {
				for i := range next {
					if _, err := run(p.bin, conf, fmt.Sprintf("conc%04d", i)); err != nil {
						log.Fatalf("%s concurrent ADD: %v", p.name, err)
					}
				}
			})
		}
		wg.Wait()
		conc := float64(*flagConc) / time.Since(t0).Seconds()
		rates[p.name] = conc
		p50s[p.name], seqs[p.name] = seq.Pct(50), seq.Rate()
		fmt.Printf("%-24s %9s %9s %9s %14.0f %12.0f\n", p.name, latency.Ms(seq.Pct(50)), latency.Ms(seq.Pct(90)), latency.Ms(seq.Pct(99)), seq.Rate(), conc)
	}
	fmt.Printf("16-concurrent rate, ipkeeper etcd / host-local: %.2f\n", rates["ipkeeper etcd"]/rates["host-local (local disk)"])
	if *flagBaseline != "" {
		fmt.Printf("current / baseline (%s), %d ADDs on one node:\n", *flagBaseline, *flagSeq)
		for _, ds := range []string{"local", "etcd"} {
			cur, base := "ipkeeper "+ds, "baseline "+ds
			fmt.Printf("  %-6s p50 %.2fx   seq ADD/s %.2fx   16-conc ADD/s %.2fx\n", ds,
				float64(p50s[cur])/float64(p50s[base]), seqs[cur]/seqs[base], rates[cur]/rates[base])
		}
	}
}

// hostLocal finds or builds the upstream host-local plugin.
func hostLocal(tmp string) string {
	if *flagHostLocal != "" {
		return *flagHostLocal
	}
	if p := filepath.Join(moduleRoot(), ".tools", "bin", "host-local"); fileExists(p) {
		return p
	}
	cmd := exec.Command("go", "install", "github.com/containernetworking/plugins/plugins/ipam/host-local@v1.9.1")
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("go install host-local: %v\n%s", err, out)
	}
	return filepath.Join(tmp, "host-local")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
