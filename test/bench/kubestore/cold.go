package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// coldBench execs tiny binaries that each do one GET of a prototype
// object, n times each in a row, and prints the wall time per exec: the
// start-up a plugin process pays per ADD when it talks to the API itself
// (client-go clientset or dynamic client, or net/http with podinfo's
// kubeconfig reader) against asking a per-node agent over a unix socket
// (the agent, served by this process, keeps its client-go connection).
func coldBench(ctx context.Context, k *kubeStore, kubeconfig, name, root, tmp string, n int) error {
	bins := map[string]string{}
	for _, b := range []string{"clientset", "dynamic", "nethttp", "agent"} {
		out := filepath.Join(tmp, b)
		cmd := exec.Command("go", "build", "-o", out, "./test/bench/kubestore/cold/"+b)
		cmd.Dir = root
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b, err, o)
		}
		bins[b] = out
	}
	sock := filepath.Join(tmp, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer l.Close()
	go serveAgent(ctx, k, l)

	warm, err := latency.Times(n, func(int) error {
		_, err := k.rc.Get().Resource(resBlock).Name(name).Do(ctx).Raw()
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("%-52s %8s %9s %9s %9s\n", "", "binary", "p50", "p99", "mean")
	fmt.Printf("%-52s %8s %9s %9s %9s\n", "in-process GET, warm client-go connection", "-", latency.Ms(warm.Pct(50)), latency.Ms(warm.Pct(99)), latency.Ms(warm.Wall/time.Duration(n)))
	rows := []struct{ what, bin, arg string }{
		{"exec: client-go clientset from kubeconfig + GET", "clientset", kubeconfig},
		{"exec: client-go dynamic client from kubeconfig + GET", "dynamic", kubeconfig},
		{"exec: podinfo kubeconfig + net/http GET (new TLS)", "nethttp", kubeconfig},
		{"exec: unix socket to a warm agent (agent GETs)", "agent", sock},
	}
	for _, r := range rows {
		run := func(int) error {
			out, err := exec.Command(bins[r.bin], r.arg, name).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %v: %s", r.bin, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
		if err := run(0); err != nil { // page cache warm, not counted
			return err
		}
		res, err := latency.Times(n, run)
		if err != nil {
			return err
		}
		st, _ := os.Stat(bins[r.bin])
		fmt.Printf("%-52s %7.1fM %9s %9s %9s\n", r.what, float64(st.Size())/(1<<20), latency.Ms(res.Pct(50)), latency.Ms(res.Pct(99)), latency.Ms(res.Wall/time.Duration(n)))
	}
	return nil
}

// serveAgent answers each connection's one line (an object name) with the
// object as a warm client-go GET returns it.
func serveAgent(ctx context.Context, k *kubeStore, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			raw, err := k.rc.Get().Resource(resBlock).Name(strings.TrimSpace(line)).Do(ctx).Raw()
			if err != nil {
				return
			}
			_, _ = c.Write(raw)
		}()
	}
}
